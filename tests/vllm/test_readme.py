"""The README's "Pointing a real vLLM fleet at it" is what this suite ran.

The README's environment variables and ``vllm serve`` flags must be those the session's real vLLM was
started with (the harness adds only test-machine flags: the model directory, host/port, the CPU
build's dummy weights, small limits); its ``--scrape`` and ``--upstream`` arguments must parse with
the product's own parsers into what the suite used.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
HARNESS_ONLY = {"--served-model-name", "--host", "--port", "--max-model-len", "--max-num-seqs",
                "--max-num-batched-tokens", "--load-format", "--dtype"}


def section() -> str:
    text = README.read_text()
    start = text.index("## Pointing a real vLLM fleet at it")
    return text[start:text.index("\n## ", start + 5)]


def serve_command() -> tuple[dict, list[str]]:
    block = re.search(r"```bash\n(.*?)```", section(), re.S).group(1)
    words = shlex.split(block.replace("\\\n", " "))
    env = {}
    while "=" in words[0] and not words[0].startswith("-"):
        k, v = words.pop(0).split("=", 1)
        env[k] = v
    assert words[:2] == ["vllm", "serve"], words
    return env, words[3:]


def flags(argv: list[str]) -> dict:
    out, i = {}, 0
    while i < len(argv):
        if argv[i].startswith("--"):
            val = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else None
            out[argv[i]] = val
            i += 2 if val is not None else 1
        else:
            i += 1
    return out


def test_readme_vllm_flags_and_environment_are_the_ones_tested(vllm):
    env, argv = serve_command()
    ran_env, ran = vllm.settings.env(), flags(vllm.settings.argv())
    assert set(env) <= set(ran_env)
    assert env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == ran_env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"]
    assert env["OTEL_SERVICE_NAME"] == ran_env["OTEL_SERVICE_NAME"]
    keys = lambda s: [kv.split("=", 1)[0] for kv in s.split(",")]  # noqa: E731
    assert keys(env["OTEL_RESOURCE_ATTRIBUTES"]) == keys(ran_env["OTEL_RESOURCE_ATTRIBUTES"])
    readme = flags(argv)
    assert set(readme) <= set(ran), set(readme) - set(ran)
    assert set(ran) - set(readme) <= HARNESS_ONLY, set(ran) - set(readme) - HARNESS_ONLY
    assert readme["--otlp-traces-endpoint"].endswith("/v1/traces") and ran["--otlp-traces-endpoint"].endswith("/v1/traces")


def test_readme_scrape_and_upstream_arguments_parse(stack):
    from infercost.commands.collector import parse_scrape
    from serving.gateway import parse_upstream

    text = section()
    scrape = re.search(r"--scrape (\S+?)`", text).group(1)
    target = parse_scrape(scrape)
    assert (target.url, target.replica, target.gpu_type, target.gpu_count) == \
        ("http://replica-0:8000/metrics", "replica-0", "H100", 1)
    # the suite's scraper target has the same shape (replica id = service.instance.id)
    used = stack.scraper.targets[0]
    assert used.replica == dict(kv.split("=") for kv in stack.vllm.settings.resource_attributes().split(","))[
        "service.instance.id"]
    upstream = re.search(r"--upstream (\S+)", text).group(1)
    up = parse_upstream(upstream)
    assert (up.replica_id, up.url) == ("replica-0", "http://replica-0:8000")
