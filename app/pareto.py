"""The Pareto frontier of the latency-cost-throughput triangle (pure function, no I/O)."""

from __future__ import annotations

import pandas as pd


def frontier(df: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """Rows of ``df`` on the Pareto frontier for "more ``x`` is better, less ``y`` is better".

    A point is on the frontier when no other point has ``x`` >= and ``y`` <= with one strictly
    better. Rows with a missing ``x`` or ``y`` are ignored. Returned sorted by ``x`` ascending
    (so a line through them is the frontier). Ties (same x and y) are all kept.
    """
    pts = df.dropna(subset=[x, y])
    if not len(pts):
        return pts
    # Sweep from the highest throughput down, keeping points whose latency beats every point with
    # more throughput: O(n log n).
    ordered = pts.sort_values([x, y], ascending=[False, True])
    keep, best_y, last = [], float("inf"), None
    for idx, row in ordered.iterrows():
        key = (row[x], row[y])
        if row[y] < best_y or (last is not None and key == last):
            keep.append(idx)
            best_y = min(best_y, row[y])
            last = key
    return pts.loc[keep].sort_values([x, y])
