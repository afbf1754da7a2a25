"""Real public serving traces, loaded once: arrivals (seconds), prompt and output lengths, prefix blocks.

Position: serving (workloads). The files ship inside this package, in ``data/`` (license and
citation: ``data/README.md``), so an installed ``infercost`` finds them from any directory:

* ``azure_llm_inference_2023_conv.csv`` — Azure LLM inference trace 2023, conversation service
  (Splitwise, ISCA 2024; CC-BY 4.0): ``TIMESTAMP`` (wall clock), ``ContextTokens``, ``GeneratedTokens``.
* ``mooncake_conversation_trace.jsonl`` — Mooncake FAST'25 conversation trace (Apache-2.0):
  ``timestamp`` (ms from start), ``input_length``, ``output_length``, ``hash_ids`` (512-token blocks).

Both become a :class:`Trace`: numpy arrays sorted by arrival, arrivals in seconds from the first.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

TRACE_FILES = {"azure": "azure_llm_inference_2023_conv.csv", "mooncake": "mooncake_conversation_trace.jsonl"}
MOONCAKE_BLOCK_TOKENS = 512  # Mooncake trace release: each hash id covers 512 prompt tokens


def default_data_dir() -> Path:
    """The traces shipped with the package: ``serving/workloads/data``."""
    return Path(__file__).resolve().parent / "data"


@dataclass(frozen=True)
class Trace:
    """One trace. arrival_s: float64 seconds from the first request, ascending. prompt_tokens,
    output_tokens: int64 tokens. hash_ids: per request a tuple of block ids (Mooncake) or None
    (Azure has none). span_s: the trace's length, seconds (last arrival + mean gap, so a looped
    replay keeps the average rate)."""

    name: str
    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    hash_ids: tuple | None
    span_s: float

    def __len__(self) -> int:
        return len(self.arrival_s)


def _span(arrival: np.ndarray) -> float:
    if len(arrival) < 2:
        return 1.0
    return float(arrival[-1] + (arrival[-1] - arrival[0]) / (len(arrival) - 1))


@functools.lru_cache(maxsize=8)
def load_trace(name: str, data_dir: str | Path | None = None) -> Trace:
    """Load trace ``name`` ("azure" | "mooncake") from ``data_dir`` (default :func:`default_data_dir`).

    Cached per (name, dir). Rows with a non-positive prompt length are dropped; output lengths are
    clipped to >= 1 (a 0-token response is a failure in BurstGPT's sense, not a workload).
    Raises ValueError for an unknown name, FileNotFoundError naming the path when the file is absent.
    """
    if name not in TRACE_FILES:
        raise ValueError(f"unknown trace {name!r}: expected one of {', '.join(TRACE_FILES)}")
    path = Path(data_dir) if data_dir is not None else default_data_dir()
    path = path / TRACE_FILES[name]
    if not path.is_file():
        hint = ("the installed package is missing its data files: reinstall infercost" if data_dir is None
                else f"--traces-dir must be a folder holding {TRACE_FILES[name]}")
        raise FileNotFoundError(f"trace file not found: {path} ({hint})")
    if name == "azure":
        df = pd.read_csv(path)
        ts = pd.to_datetime(df["TIMESTAMP"], format="mixed")
        arrival = (ts - ts.min()).dt.total_seconds().to_numpy()
        prompt = df["ContextTokens"].to_numpy(dtype=np.int64)
        output = df["GeneratedTokens"].to_numpy(dtype=np.int64)
        hashes = None
    else:
        with path.open() as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
        arrival = np.array([r["timestamp"] for r in rows], dtype=np.float64) / 1000.0
        prompt = np.array([r["input_length"] for r in rows], dtype=np.int64)
        output = np.array([r["output_length"] for r in rows], dtype=np.int64)
        hashes = [tuple(r.get("hash_ids") or ()) for r in rows]
    order = np.argsort(arrival, kind="stable")
    keep = prompt[order] > 0
    order = order[keep]
    arrival = arrival[order] - arrival[order][0]
    hash_ids = tuple(hashes[i] for i in order) if hashes is not None else None
    return Trace(name, arrival, prompt[order], np.maximum(output[order], 1), hash_ids, _span(arrival))
