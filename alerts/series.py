"""Per-replica and fleet time series the rules share, and step detection on them.

One evaluation reads two named queries (``schema.queries.alerts.replica_series`` and
``retry_series``): per replica and bucket (default 1 min, the last 24) the engine's speed on its own
work (inter-token latency, prefill seconds per prompt token), the gateway's attempts on it and how
they ended (``llm_calls.error_class``), the scraped gauges and ``up``; per bucket the fleet's retries.

Speed relative to a replica's own request shape: ``speed_ratio`` divides a replica's per-token
latencies by a reference and takes the smaller of the decode and prefill ratios. The reference: with
at least ``min_same_type_peers`` same-type peers, the median of its GPU type in the same bucket (itself
included, so one slow member cannot drag the reference up); with fewer (a lone A100 among H100s, a
pair of A100s), its own baseline (the median of its older buckets) times the fleet's change in that
bucket (the median of every other replica's latency over its own baseline: a surge that slows
everyone is no degradation, and which replicas happen to have calls in a sparse bucket does not
matter). Per-token figures do not grow with prompt or output length; the smaller
of the two ratios discounts what only one of them shows: a bigger batch (load) slows decode steps
but not prefill per token, prefix-cache hits speed prefill but not decode. A slower GPU (thermal
throttling, a bad link) slows every step, so both ratios rise together (emulator step-time model,
serving/emulator/profiles.py; vLLM V1 runs prefill chunks and decodes in one step).

Steps (:func:`step_onset`): the earliest bucket from which a series sits at a higher level, judged
on the median before and the sustained level after, so the chain of a cascade comes from changes in the signals, not from
when other alerts started.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from statistics import median
from typing import Any

from schema.queries import alerts as q

ENGINE_FIELDS = ("requests", "itl_p50_s", "itl_samples", "prefill_tok_p50_s", "prefill_samples", "queue_p95_s",
                 "engine_errors")
GATEWAY_FIELDS = ("attempts", "gw_ok", "gw_failed", "gw_errors", "gw_conn_errors", "gw_abandoned")
GAUGE_FIELDS = ("waiting_mean", "waiting_min", "running_mean", "kv_mean", "gauge_points", "up_ok", "up_failed")
FIELDS = ENGINE_FIELDS + GATEWAY_FIELDS + GAUGE_FIELDS
FLEET_FIELDS = ("client_attempts", "client_retries", "client_timeouts", "gateway_attempts", "gateway_requests")


def _num(value) -> float | None:
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


@dataclass
class ReplicaSeries:
    """One replica's buckets: ``values[field][b]`` for bucket b (0 = newest); None = no data."""

    replica: str
    gpu_type: str
    n: int
    values: dict[str, list[float | None]] = field(default_factory=dict)

    def get(self, name: str, b: int) -> float | None:
        return self.values[name][b]

    def total(self, name: str, buckets: range) -> float:
        return float(sum(self.values[name][b] or 0.0 for b in buckets))

    def seen(self, b: int) -> bool:
        """Any telemetry about this replica in bucket b (engine, gateway, gauges or up)."""
        return any((self.values[f][b] or 0) > 0 for f in ("requests", "attempts", "gauge_points", "up_ok", "up_failed"))


@dataclass
class FleetSeries:
    """Every replica's series and the fleet's retry series at ``now`` (bucket 0 = the newest)."""

    now: datetime
    bucket_s: int
    n: int
    replicas: dict[str, ReplicaSeries]
    fleet: dict[str, list[float]]
    ratios: dict[str, list[float | None]] = field(default_factory=dict)  # speed_ratio per replica
    # the same, also where the replica has 1 .. min_samples - 1 calls of its own in the bucket (the
    # reference as strict): pooled over buckets by the degradation rule when its window has too few calls
    thin_ratios: dict[str, list[float | None]] = field(default_factory=dict)
    peers: dict[str, str] = field(default_factory=dict)  # replica -> "same_gpu_type" | "own_baseline"
    baselines: dict[str, dict[str, float]] = field(default_factory=dict)  # replica -> metric -> own baseline

    def window(self, seconds: float) -> range:
        """Buckets covering the newest ``seconds`` (at least one)."""
        return range(0, max(1, int(round(seconds / self.bucket_s))))

    def bucket_start(self, b: int) -> datetime:
        """When bucket ``b`` begins (it holds what ended in (start, start + bucket_s])."""
        return self.now - timedelta(seconds=(b + 1) * self.bucket_s)


def load(store, now: datetime, bucket_s: int, buckets: int, lookback_s: int, min_samples: int,
         min_same_type_peers: int, frozen: dict[str, dict[str, float]] | None = None) -> FleetSeries:
    """Read both series at ``now`` and compute the speed ratios. Raises StoreError."""
    rows = q.replica_series(store, now, bucket_s, buckets, lookback_s)
    fleet_rows = q.retry_series(store, now, bucket_s, buckets, lookback_s)
    return build(now, bucket_s, buckets, rows, fleet_rows, min_samples, min_same_type_peers, frozen)


def build(now: datetime, bucket_s: int, buckets: int, rows: list[dict[str, Any]], fleet_rows: list[dict[str, Any]],
          min_samples: int = 5, min_same_type_peers: int = 2,
          frozen: dict[str, dict[str, float]] | None = None) -> FleetSeries:
    """A :class:`FleetSeries` from query rows (pure: unit-testable with hand-made rows). ``frozen``:
    replica -> metric -> own baseline to use instead of its recent history (an active alert's, so an
    incident never becomes its own baseline)."""
    replicas: dict[str, ReplicaSeries] = {}
    for r in rows:
        b = int(r["bucket"])
        if not 0 <= b < buckets:
            continue
        rep = replicas.get(r["replica"])
        if rep is None:
            rep = replicas[r["replica"]] = ReplicaSeries(r["replica"], "", buckets,
                                                          {f: [None] * buckets for f in FIELDS})
        if r.get("gpu_type"):
            rep.gpu_type = str(r["gpu_type"])
        for f in FIELDS:
            rep.values[f][b] = _num(r.get(f))
    fleet = {f: [0.0] * buckets for f in FLEET_FIELDS}
    for r in fleet_rows:
        b = int(r["bucket"])
        if 0 <= b < buckets:
            for f in FLEET_FIELDS:
                fleet[f][b] = float(r.get(f) or 0)
    out = FleetSeries(now, bucket_s, buckets, replicas, fleet)
    _speed_ratios(out, min_samples, min_same_type_peers, frozen or {})
    return out


METRICS = (("itl_p50_s", "itl_samples"), ("prefill_tok_p50_s", "prefill_samples"))
BASELINE_FROM = 3  # a replica's own baseline: its buckets from 3 min ago back (the newest are the ones judged)
BASELINE_MIN = 4  # ... at least this many of them


def own_baselines(s: FleetSeries, name: str, min_samples: int) -> dict[str, float]:
    """Median of ``name``'s per-token latencies over its buckets from ``BASELINE_FROM`` on (those with
    ``min_samples``); a metric with fewer than ``BASELINE_MIN`` such buckets has none."""
    rep = s.replicas[name]
    out = {}
    for metric, samples in METRICS:
        vals = [rep.get(metric, b) for b in range(BASELINE_FROM, s.n)
                if rep.get(metric, b) and (rep.get(samples, b) or 0) >= min_samples]
        if len(vals) >= BASELINE_MIN:
            out[metric] = median(vals)
    return out


def _speed_ratios(s: FleetSeries, min_samples: int, min_same_type_peers: int,
                  frozen: dict[str, dict[str, float]]) -> None:
    names = sorted(s.replicas)
    for name in names:
        s.baselines[name] = dict(frozen.get(name) or {}) or own_baselines(s, name, min_samples)
    for name in names:
        rep = s.replicas[name]
        same = [o for o in names if o != name and rep.gpu_type and s.replicas[o].gpu_type == rep.gpu_type]
        by_type = len(same) >= min_same_type_peers
        s.peers[name] = "same_gpu_type" if by_type else "own_baseline"
        s.ratios[name] = [_bucket_ratio(s, name, b, min_samples, min_samples, same if by_type else None)
                          for b in range(s.n)]
        s.thin_ratios[name] = [r if r is not None else _bucket_ratio(s, name, b, 1, min_samples,
                                                                     same if by_type else None)
                               for b, r in enumerate(s.ratios[name])]


def _bucket_ratio(s: FleetSeries, name: str, b: int, min_own: int, min_samples: int,
                  same: list[str] | None) -> float | None:
    """``name``'s speed ratio in bucket ``b`` (module doc), its own figure from >= ``min_own`` calls, the
    reference's from peers with >= ``min_samples``; ``same``: its same-type peers (None: own baseline).
    A thin figure (``min_own`` < ``min_samples``) against its own baseline needs the fleet's change
    measured in that bucket (without it an overloaded fleet's few calls would read as a slow replica)."""
    rep = s.replicas[name]
    parts = []
    for metric, samples in METRICS:
        mine = rep.get(metric, b)
        if not mine or (rep.get(samples, b) or 0) < min_own:
            continue
        if same is not None:  # against the median of its GPU type in this bucket, itself included
            ref = [s.replicas[o].get(metric, b) for o in [name] + same
                   if (s.replicas[o].get(samples, b) or 0) >= min_samples and s.replicas[o].get(metric, b)]
            if ref and median(ref) > 0:
                parts.append(mine / median(ref))
            continue
        # against its own baseline, discounting what moved the whole fleet in this bucket: the
        # median of the other replicas' own changes (each against its own baseline, so which
        # replicas happen to have calls in a sparse bucket does not matter)
        base = s.baselines[name].get(metric)
        if not base:
            continue
        changes = [s.replicas[o].get(metric, b) / s.baselines[o][metric] for o in sorted(s.replicas)
                   if o != name and s.baselines[o].get(metric) and s.replicas[o].get(metric, b)
                   and (s.replicas[o].get(samples, b) or 0) >= min_samples]
        if not changes and min_own < min_samples:
            continue
        parts.append(mine / base / (median(changes) if changes else 1.0))
    return min(parts) if parts else None


def weighted_median(values: list[float | None], weights: list[float | None], buckets: range) -> float | None:
    """The median of ``values`` over ``buckets``, each value counted ``weights`` times (the lower middle
    value at an even total; None values and zero weights skipped); None without any."""
    pairs = sorted((values[b], weights[b]) for b in buckets if values[b] is not None and (weights[b] or 0) > 0)
    total = sum(w for _, w in pairs)
    seen = 0.0
    for v, w in pairs:
        seen += w
        if seen >= total / 2:
            return v
    return None


def weighted(values: list[float | None], weights: list[float | None], buckets: range) -> float | None:
    """Mean of ``values`` over ``buckets`` weighted by ``weights`` (None values skipped)."""
    num = den = 0.0
    for b in buckets:
        v, w = values[b], weights[b] or 0.0
        if v is not None and w > 0:
            num += v * w
            den += w
    return num / den if den > 0 else None


@dataclass(frozen=True)
class Step:
    """A step up found in a series: ``onset`` bucket (0 = newest), medians before and after."""

    onset: int
    before: float
    after: float


def step_onset(newest_first: list[float | None], *, ratio: float, min_delta: float, min_level: float = 0.0,
               min_before: int = 3, min_after: int = 2, max_onset: int | None = None) -> Step | None:
    """The earliest step up in a series given newest first (bucket 0 = now), or None.

    A step at bucket k: ``before`` = the median of the (non-None) values older than k; ``after`` = the
    smallest of the ``min_after`` buckets from k on (k and newer: the new level is sustained, a lone
    spike is no step), at the threshold ``max(min_level, ratio x before, before + min_delta)``; at
    least ``min_before`` values before. Earliest = the oldest onset (where the change began). ``max_onset``:
    ignore onsets older than that bucket.
    """
    values = list(reversed(newest_first))  # oldest first
    n = len(values)
    start = 0 if max_onset is None else max(0, n - 1 - max_onset)
    for k in range(start, n - min_after + 1):
        if values[k] is None:
            continue
        before = [v for v in values[:k] if v is not None]
        after = [v for v in values[k:k + min_after] if v is not None]
        if len(before) < min_before or len(after) < min_after:
            continue
        b, a = median(before), min(after)
        threshold = max(min_level, ratio * b, b + min_delta)
        if a >= threshold:
            return Step(onset=n - 1 - k, before=b, after=a)
    return None


def rate_series(num: list[float | None], den: list[float | None], min_den: float) -> list[float | None]:
    """num / den per bucket, None where den < ``min_den``."""
    return [None if (d or 0) < min_den else (n or 0.0) / d for n, d in zip(num, den)]
