"""GPU mix by request-size buckets, as Mélange chooses it: profile each GPU per bucket, solve an ILP.

Position: planner (proposes candidates; ``search.py`` evaluates them with the full
replay). Source: Griggs et al., "Mélange: Cost Efficient Large Language Model Serving by
Exploiting GPU Heterogeneity" (2024): requests are bucketed by (input length, output length);
each GPU type's maximum request rate per bucket within the SLO is profiled; an integer program
picks GPU counts ``n_g`` and the fraction ``x_bg`` of each bucket's load each type serves:

    minimise  sum_g price_g * n_g
    s.t.      sum_g x_bg = 1                      for every bucket b
              sum_b x_bg * load_b / rate_gb <= n_g  for every GPU config g
              sum_g n_g <= max_replicas,  n_g integer >= 0,  0 <= x_bg <= 1

Here a "GPU config" is a (GPU type, ``--max-num-seqs``) pair; ``rate_gb`` is profiled with the
emulator's engine model (the same profiles the replay uses) instead of a GPU: one replica, a
Poisson stream of single-call requests of the bucket's median size, the highest rate whose p95
TTFT stays within the budget with the replica keeping up (>= 95 % of the requests done by the end
of the arrivals + 60 s). ``load_b``: calls per second of the bucket in the period's busiest hour
(the fleet is not autoscaled: it must carry the peak), times ``load_factor``.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass

import numpy as np

from planner.candidates import Candidate, Pool
from serving.emulator.fleet_sim import ReplicaSpec, simulate
from serving.emulator.profiles import PROFILES
from serving.plans import CallPlan, RetryPolicy, StepPlan, TaskPlan

HOUR = 3600.0
PROFILE_REQUESTS = 240  # requests per profiling run
KEEP_UP = 0.95


@dataclass(frozen=True)
class Bucket:
    """Calls with prompt in [prompt_lo, prompt_hi) and output in [output_lo, output_hi) tokens;
    ``prompt``/``output``: its median call; ``peak_rate``: calls/s in the busiest hour."""

    prompt_lo: int
    prompt_hi: int
    output_lo: int
    output_hi: int
    prompt: int
    output: int
    peak_rate: float


def buckets(workload, splits: int = 3) -> list[Bucket]:
    """Equal-count buckets of the workload's calls: ``splits`` prompt x ``splits`` output ranges."""
    calls = [(int(p.arrival_s // HOUR), c.prompt_tokens, c.output_tokens)
             for p in workload.plans for s in p.steps for c in s.calls]
    if not calls:
        return []
    per_hour = np.bincount([h for h, _, _ in calls])
    peak = int(np.argmax(per_hour))
    prompts = np.array([c[1] for c in calls])
    outputs = np.array([c[2] for c in calls])
    pe = np.unique(np.quantile(prompts, np.linspace(0, 1, splits + 1)).astype(int))
    oe = np.unique(np.quantile(outputs, np.linspace(0, 1, splits + 1)).astype(int))
    pe[-1] += 1
    oe[-1] += 1
    out = []
    for i in range(len(pe) - 1):
        for j in range(len(oe) - 1):
            sel = [(h, p, o) for h, p, o in calls if pe[i] <= p < pe[i + 1] and oe[j] <= o < oe[j + 1]]
            if not sel:
                continue
            at_peak = sum(1 for h, _, _ in sel if h == peak)
            out.append(Bucket(int(pe[i]), int(pe[i + 1]), int(oe[j]), int(oe[j + 1]),
                              int(statistics.median(p for _, p, _ in sel)), int(statistics.median(o for _, _, o in sel)),
                              at_peak / HOUR))
    return out


def _requests(bucket: Bucket, rate: float, seed: int) -> list[TaskPlan]:
    rng = random.Random(seed)
    t, out = 0.0, []
    for i in range(PROFILE_REQUESTS):
        t += rng.expovariate(rate)
        out.append(TaskPlan(f"p{i}", "profile", "", t, (StepPlan("s", (CallPlan(bucket.prompt, bucket.output),)),)))
    return out


def sustains(profile: str, max_num_seqs: int | None, bucket: Bucket, rate: float, ttft_budget_s: float) -> bool:
    """Whether one replica keeps up with ``rate`` calls/s of the bucket's size within the TTFT budget."""
    from serving.emulator.otlp import span_attrs

    plans = _requests(bucket, rate, seed=7)
    ttfts = []

    def sink(request):
        for rs in getattr(request, "resource_spans", ()):
            for ss in rs.scope_spans:
                for s in ss.spans:
                    a = span_attrs(s)
                    ttfts.append(a.get("gen_ai.latency.time_to_first_token", math.inf))

    horizon = plans[-1].arrival_s + 60.0
    summary = simulate(plans, [ReplicaSpec("p", profile, max_num_seqs=max_num_seqs)], sink=sink, spans="engine",
                       retry_policy=RetryPolicy(max_attempts=1, timeout_s=3600), until_s=horizon, start_time_ns=0)
    done = summary.tasks.get("success", 0)
    if done < KEEP_UP * len(plans) or not ttfts:
        return False
    return float(np.percentile(ttfts, 95)) <= ttft_budget_s


def max_rate(profile: str, max_num_seqs: int | None, bucket: Bucket, ttft_budget_s: float) -> float:
    """The highest sustainable rate (calls/s), by doubling then bisection (5 steps): > 0 or 0.0."""
    lo, hi = 0.0, 0.5
    while sustains(profile, max_num_seqs, bucket, hi, ttft_budget_s):
        lo, hi = hi, hi * 2
        if hi > 512:
            return lo
    for _ in range(5):
        mid = (lo + hi) / 2
        if sustains(profile, max_num_seqs, bucket, mid, ttft_budget_s):
            lo = mid
        else:
            hi = mid
    return lo


def solve(bks: list[Bucket], configs: list[tuple[str, int | None, str, float]], rates: dict, max_replicas: int,
          load_factor: float = 1.0) -> dict[int, int] | None:
    """The ILP of the module docstring. ``configs``: (gpu_type, max_num_seqs, profile, usd per hour);
    ``rates[(config index, bucket index)]``: calls/s. Returns config index -> count, or None."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    nb, ng = len(bks), len(configs)
    if not nb or not ng:
        return None
    # variables: n_0..n_{ng-1}, then x_{b,g} row-major (b, g)
    nvar = ng + nb * ng
    cost = np.zeros(nvar)
    cost[:ng] = [c[3] for c in configs]
    rows, lo, hi = [], [], []
    for b in range(nb):
        row = np.zeros(nvar)
        for g in range(ng):
            row[ng + b * ng + g] = 1
        rows.append(row), lo.append(1), hi.append(1)
    ub = np.ones(nvar)
    ub[:ng] = max_replicas
    for g in range(ng):
        row = np.zeros(nvar)
        row[g] = -1
        for b in range(nb):
            r = rates.get((g, b), 0.0)
            if r > 0:
                row[ng + b * ng + g] = bks[b].peak_rate * load_factor / r
            else:
                ub[ng + b * ng + g] = 0  # this GPU config cannot serve the bucket within the SLO
        rows.append(row), lo.append(-np.inf), hi.append(0)
    total = np.zeros(nvar)
    total[:ng] = 1
    rows.append(total), lo.append(1), hi.append(max_replicas)
    integrality = np.zeros(nvar)
    integrality[:ng] = 1
    res = milp(cost, constraints=LinearConstraint(np.array(rows), lo, hi), integrality=integrality,
               bounds=Bounds(np.zeros(nvar), ub), options={"time_limit": 10})
    if res.x is None:
        return None
    return {g: int(round(res.x[g])) for g in range(ng) if round(res.x[g]) > 0}


def propose(workload, gpu_types: dict[str, tuple[str, float]], seqs_levels: list[int], ttft_budget_s: float,
            max_replicas: int, base: Candidate, load_factors=(1.0, 0.6)) -> tuple[list[Candidate], dict]:
    """Mélange candidates: for each load factor, the cheapest mix covering the peak hour.

    ``gpu_types``: type -> (profile, usd per replica-hour). Returns the candidates (with the base's
    policy and gateway knobs) and a JSON-able account: buckets, profiled rates, solutions."""
    bks = buckets(workload)
    configs = [(t, s, prof, price) for t, (prof, price) in sorted(gpu_types.items()) for s in seqs_levels]
    rates = {}
    for g, (t, seqs, prof, _) in enumerate(configs):
        for b, bucket in enumerate(bks):
            rates[(g, b)] = max_rate(prof, seqs, bucket, ttft_budget_s)
    account = {"buckets": [b.__dict__ for b in bks], "ttft_budget_s": ttft_budget_s,
               "rates": {f"{configs[g][0]} seqs {configs[g][1]} / bucket {b}": r for (g, b), r in rates.items()},
               "solutions": []}
    out = []
    for lf in load_factors:
        sol = solve(bks, configs, rates, max_replicas, lf)
        account["solutions"].append({"load_factor": lf, "counts": {f"{configs[g][0]} seqs {configs[g][1]}": n
                                                                   for g, n in (sol or {}).items()}})
        if not sol:
            continue
        # a replica has its profile's GPUs (a 70B profile is tensor parallel over 4): priced as the ILP priced it
        pools = tuple(Pool(configs[g][0], n, configs[g][2], PROFILES[configs[g][2]].gpu_count, configs[g][1])
                      for g, n in sorted(sol.items()))
        out.append(base.with_(name=f"melange-{len(out) + 1}", pools=pools, origin="melange", autoscale=None))
    return out, account
