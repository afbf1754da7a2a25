"""Workloads and fleets of the alert scenarios: task plans from the public traces (bursty: the trace's
own arrival times; steady: Poisson arrivals at the same mean rate), load shapes (flat, surge,
diurnal) and replica specs of mixed H100/A100 fleets sized by a target utilisation.

Position: benchmarks (a harness over serving; nothing in alerts/ imports it). Times in seconds.
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass

import numpy as np

from serving.emulator import profiles
from serving.emulator.fleet_sim import ReplicaSpec
from serving.plans import TaskPlan
from serving.workloads.builder import build_plans
from serving.workloads.traces import load_trace

BASE_PROFILES = {"H100": "h100-llama-3.1-8b", "A100": "a100-llama-3.1-8b"}
# The analytic estimate below against one simulated replica driven at 1.5x it for 10 min (both traces,
# H100 and A100, --max-num-seqs 4/8/16): it served 0.80-0.89 of the estimate, 0.85 typically.
MEASURED_SHARE = 0.85


def profile_name(gpu: str, max_num_seqs: int) -> str:
    """Register (once) and name the engine profile of ``gpu`` (H100 | A100, Llama-3.1-8B) launched with
    ``--max-num-seqs max_num_seqs``: a small running batch saturates a replica at modest simulated rates,
    so a scenario simulates in seconds."""
    name = f"{BASE_PROFILES[gpu]}-seqs{max_num_seqs}"
    if name not in profiles.PROFILES:
        profiles.PROFILES[name] = profiles.PROFILES[BASE_PROFILES[gpu]].with_overrides(
            name=name, max_num_seqs=max_num_seqs)
    return name


@dataclass(frozen=True)
class ReplicaPlan:
    """One replica of a scenario's fleet: id, GPU type (H100 | A100), ``--max-num-seqs``."""

    id: str
    gpu: str
    max_num_seqs: int

    def spec(self) -> ReplicaSpec:
        return ReplicaSpec(self.id, profile=profile_name(self.gpu, self.max_num_seqs))


def replica_capacity(gpu: str, max_num_seqs: int, trace: str) -> float:
    """Sustainable requests per second of one replica on ``trace``'s request shapes (analytic estimate).

    Per request busy time at a full batch B = ``max_num_seqs``: prefill ``prefill_per_token x prompt``
    plus its share of decode steps ``output x step(B) / B`` with ``step(B) = base + decode_per_seq x B
    + kv_read_per_token x B x context`` (profiles.py's step-time model; context = prompt + output/2,
    prefix-cache hits ignored, so the estimate is conservative). Capacity = 1 / mean busy time.
    """
    p = profiles.PROFILES[BASE_PROFILES[gpu]]
    tr = load_trace(trace)
    prompt, out = tr.prompt_tokens.astype(float), tr.output_tokens.astype(float)
    b = float(max_num_seqs)
    step = p.base_s + p.decode_per_seq_s * b + p.kv_read_per_token_s * b * float(np.mean(prompt + out / 2))
    busy = p.prefill_per_token_s * prompt + out * step / b
    return MEASURED_SHARE / float(np.mean(busy))


def fleet_capacity(fleet: list[ReplicaPlan], trace: str, policy: str = "least_loaded") -> float:
    """Sustainable calls per second of ``fleet``: the sum of its replicas' capacities when the gateway
    balances by load; with blind routing (round robin, session affinity) every replica gets an equal
    share, so the slowest replica's capacity times the fleet size."""
    caps = [replica_capacity(r.gpu, r.max_num_seqs, trace) for r in fleet]
    return sum(caps) if policy == "least_loaded" else len(caps) * min(caps)


def draw_fleet(rng: random.Random, n: int, max_num_seqs: int, a100_share: float | None = None) -> list[ReplicaPlan]:
    """``n`` replicas ``r0..``; each an A100 with probability ``a100_share`` (drawn in 0..0.5 when None),
    at least one H100 unless the share is 1."""
    share = rng.uniform(0.0, 0.5) if a100_share is None else a100_share
    gpus = ["A100" if rng.random() < share else "H100" for _ in range(n)]
    if "H100" not in gpus and share < 1:
        gpus[0] = "H100"
    return [ReplicaPlan(f"r{i}", g, max_num_seqs) for i, g in enumerate(gpus)]


def shape_multiplier(shape: str, params: dict, t: np.ndarray) -> np.ndarray:
    """Arrival-rate multiplier m(t) of a load shape: ``flat`` 1; ``surge`` ``factor`` inside
    [``at_s``, ``until_s``) with 60 s linear ramps; ``diurnal`` a raised cosine from ``low`` (start and end)
    to ``high`` at ``peak_s``, period ``2 x (peak_s)`` (a compressed day)."""
    if shape == "flat":
        return np.ones_like(t)
    if shape == "surge":
        up = np.clip((t - params["at_s"]) / 60.0, 0.0, 1.0)
        down = np.clip((params["until_s"] - t) / 60.0, 0.0, 1.0)
        return 1.0 + (params["factor"] - 1.0) * np.minimum(up, down)
    if shape == "diurnal":
        low, high, peak = params["low"], params["high"], params["peak_s"]
        return low + (high - low) * 0.5 * (1.0 - np.cos(np.pi * np.clip(t / peak, 0.0, 2.0)))
    raise ValueError(f"unknown load shape {shape!r}")


def warp(plans: list[TaskPlan], shape: str, params: dict, duration_s: float) -> list[TaskPlan]:
    """Re-time plans built at a constant rate so that the rate follows ``shape``: a plan at base time u
    moves to the t where the integral of m from 0 to t equals u. Plans past ``duration_s`` are dropped."""
    if shape == "flat":
        return [p for p in plans if p.arrival_s < duration_s]
    grid = np.linspace(0.0, duration_s, int(duration_s) + 1)
    cum = np.concatenate(([0.0], np.cumsum(shape_multiplier(shape, params, grid[:-1]) * np.diff(grid))))
    base = np.array([p.arrival_s for p in plans])
    keep = base < cum[-1]
    times = np.interp(base[keep], cum, grid)
    return [dataclasses.replace(p, arrival_s=float(t)) for p, t in zip((p for p, k in zip(plans, keep) if k), times)]


def base_duration(shape: str, params: dict, duration_s: float) -> float:
    """Length of constant-rate workload that :func:`warp` turns into ``duration_s`` of ``shape``."""
    grid = np.linspace(0.0, duration_s, int(duration_s) + 1)
    return float(np.sum(shape_multiplier(shape, params, grid[:-1]) * np.diff(grid)))


def make_plans(trace: str, arrivals: str, rate_per_s: float, duration_s: float, seed: int, offset_s: float,
               mix: dict[str, float], shape: str = "flat", shape_params: dict | None = None) -> list[TaskPlan]:
    """Task plans for a scenario: ``trace`` (azure | mooncake) lengths; ``arrivals`` ``trace`` (the trace's
    own, bursty inter-arrival times, scaled to ``rate_per_s`` calls per second) or ``poisson`` (steady:
    exponential gaps at the same rate, order of the trace rows kept); ``shape`` modulates the rate.
    ``offset_s`` selects where in the (looped) trace the window starts."""
    shape_params = shape_params or {}
    length = base_duration(shape, shape_params, duration_s)
    tr = load_trace(trace)
    scale = rate_per_s / (len(tr) / tr.span_s)
    plans = build_plans(trace, mix=mix, rate_scale=scale, duration_s=length,
                        start_offset_s=offset_s, seed=seed, tenants=("acme", "globex", "initech"))
    plans = [dataclasses.replace(p, arrival_s=p.arrival_s - offset_s) for p in plans]
    if arrivals == "poisson":
        rng = random.Random(seed * 7919 + 1)
        calls_per_task = sum(p.n_calls for p in plans) / max(len(plans), 1)
        t = 0.0
        timed = []
        for p in plans:
            t += rng.expovariate(rate_per_s / calls_per_task)
            timed.append(dataclasses.replace(p, arrival_s=t))
        plans = timed
    elif arrivals != "trace":
        raise ValueError(f"arrivals must be 'trace' or 'poisson', got {arrivals!r}")
    plans.sort(key=lambda p: p.arrival_s)
    return warp(plans, shape, shape_params, duration_s)


def rate_for(utilisation: float, fleet: list[ReplicaPlan], trace: str, policy: str = "least_loaded") -> float:
    """Calls per second that load ``fleet`` to ``utilisation`` (0..1) of its estimated capacity."""
    if not math.isfinite(utilisation) or utilisation <= 0:
        raise ValueError(f"utilisation must be > 0, got {utilisation}")
    return utilisation * fleet_capacity(fleet, trace, policy)
