"""The candidate search: the current fleet, the operator's candidates, the four levers, Mélange's
GPU mix, then local search around the cheapest candidate that meets every SLO, within a budget.

Position: planner. Every candidate is evaluated with the full replay (``pool.py``):
simulate, ingest, cost jobs. Rounds are as wide as there are workers (two per worker), so the
cores stay busy; the search stops when the wall-clock budget would be exceeded by one more round
(the time of a round is measured), when ``max_candidates`` were evaluated, or when every neighbour
of the cheapest feasible candidate has been tried.

Local search neighbours of a candidate: one replica fewer in a pool; one replica of a pool moved to
another GPU type; ``--max-num-seqs`` one level up or down; another routing policy.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

from planner.candidates import Candidate, CandidateError, Pool
from serving.emulator.profiles import PROFILES
from serving.emulator.sim_control import AutoscaleRule

LEVER_MOVES = ("avoid", "share", "move", "delay")


@dataclass
class SearchState:
    """Everything evaluated so far (in order) and the budget's bookkeeping."""

    results: list = field(default_factory=list)
    keys: set = field(default_factory=set)
    candidates: dict = field(default_factory=dict)  # name -> Candidate of every result
    started: float = field(default_factory=time.monotonic)
    per_round_s: float | None = None
    stopped: str = ""

    def seen(self, cand: Candidate) -> bool:
        return cand.key() in self.keys


def lever_candidates(current: Candidate, seqs_levels: list[int]) -> dict[str, list[Candidate]]:
    """Candidates that change the current fleet in one move each (the four moves):
    avoid = prefix-affinity routing (a task's calls reuse one replica's prefix cache); share =
    larger batches (``--max-num-seqs`` one level up); delay = autoscaling to the load (idle
    replicas parked) and admission control (batch priority capped). ``move`` (the GPU mix) comes
    from the search."""
    out: dict[str, list[Candidate]] = {m: [] for m in LEVER_MOVES}
    if current.policy != "session_affinity":
        out["avoid"].append(current.with_(name="lever-avoid-affinity", policy="session_affinity", origin="lever"))
    up = []
    for p in current.pools:
        seqs = p.max_num_seqs or PROFILES[p.profile].max_num_seqs
        higher = [s for s in sorted(seqs_levels) if s > seqs]
        up.append(Pool(p.gpu_type, p.count, p.profile, p.gpu_count, higher[0] if higher else seqs))
    if tuple(up) != current.pools:
        out["share"].append(current.with_(name="lever-share-batch", pools=tuple(up), origin="lever",
                                          replica_ids=current.replica_ids))
    n = current.n_replicas
    if n > 1:
        seqs = min(p.max_num_seqs or PROFILES[p.profile].max_num_seqs for p in current.pools)
        rule = AutoscaleRule(min_replicas=max(1, math.ceil(n / 4)), max_replicas=n,
                             target_load_per_replica=max(1.0, seqs / 2), cold_start_s=120.0)
        out["delay"].append(current.with_(name="lever-delay-autoscale", autoscale=rule, origin="lever",
                                          replica_ids=current.replica_ids))
    seats = sum(p.count * (p.max_num_seqs or PROFILES[p.profile].max_num_seqs) for p in current.pools)
    caps = (("batch", max(1, seats // 4)), ("interactive", max(1, seats * 2)))
    out["delay"].append(current.with_(name="lever-delay-admission", admission=caps, origin="lever",
                                      replica_ids=current.replica_ids))
    return out


def neighbours(cand: Candidate, gpu_types: dict[str, str], seqs_levels: list[int], policies: list[str],
               max_replicas: int) -> list[Candidate]:
    """Local-search moves around ``cand`` (module docstring), cheapest-looking first."""
    out = []
    pools = list(cand.pools)

    def make(new_pools, tag, **kw):
        new_pools = tuple(p for p in new_pools if p.count > 0)
        n = sum(p.count for p in new_pools)
        if not new_pools or n > max_replicas:
            return
        auto = cand.autoscale
        if auto is not None:  # the rule follows the fleet's new size
            top = n if auto.max_replicas is None or auto.max_replicas >= cand.n_replicas else min(auto.max_replicas, n)
            auto = replace(auto, min_replicas=min(auto.min_replicas, n), max_replicas=top)
        try:
            out.append(cand.with_(name=f"{cand.name}~{tag}", pools=new_pools, origin="local_search", autoscale=auto,
                                  **kw))
        except CandidateError:  # a move the simulator cannot run is simply not a neighbour
            pass

    for i, p in enumerate(pools):  # one replica fewer
        make(pools[:i] + [Pool(p.gpu_type, p.count - 1, p.profile, p.gpu_count, p.max_num_seqs)] + pools[i + 1:],
             f"-{p.gpu_type}")
    for i, p in enumerate(pools):  # one replica moved to another GPU type
        for other, prof in gpu_types.items():
            if other == p.gpu_type:
                continue
            moved = pools[:i] + [Pool(p.gpu_type, p.count - 1, p.profile, p.gpu_count, p.max_num_seqs)] + pools[i + 1:]
            j = next((k for k, q in enumerate(moved) if q.gpu_type == other and q.max_num_seqs == p.max_num_seqs), None)
            if j is None:
                moved.append(Pool(other, 1, prof, PROFILES[prof].gpu_count, p.max_num_seqs))
            else:
                q = moved[j]
                moved[j] = Pool(q.gpu_type, q.count + 1, q.profile, q.gpu_count, q.max_num_seqs)
            make(moved, f"{p.gpu_type}>{other}")
    levels = sorted(set(seqs_levels))
    for direction in (1, -1):  # batch size one level up / down everywhere
        new = []
        for p in pools:
            seqs = p.max_num_seqs or PROFILES[p.profile].max_num_seqs
            cands = [s for s in levels if (s > seqs if direction > 0 else s < seqs)]
            new.append(Pool(p.gpu_type, p.count, p.profile, p.gpu_count,
                            (cands[0] if direction > 0 else cands[-1]) if cands else seqs))
        if new != pools:
            make(new, "seqs+" if direction > 0 else "seqs-")
    for policy in policies:
        if policy != cand.policy:
            out.append(cand.with_(name=f"{cand.name}~{policy}", policy=policy, origin="local_search"))
    for i, p in enumerate(pools):  # one replica more (when nothing cheaper meets the SLOs)
        make(pools[:i] + [Pool(p.gpu_type, p.count + 1, p.profile, p.gpu_count, p.max_num_seqs)] + pools[i + 1:],
             f"+{p.gpu_type}")
    return out


def cheapest_feasible(results):
    ok = [r for r in results if not r.error and r.meets_slo and r.cpst_usd is not None]
    return min(ok, key=lambda r: (r.cpst_usd, r.gpus, r.name)) if ok else None


def run_rounds(evaluator, state: SearchState, first: list[Candidate], *, gpu_types: dict[str, str],
               seqs_levels: list[int], policies: list[str], max_replicas: int, budget_s: float, max_candidates: int,
               search: bool, on: str = "full") -> None:
    """Evaluate ``first``, then local-search rounds (module docstring), each candidate replayed on the
    evaluator's workload ``on``; results and the candidates they came from go to ``state`` (local-search
    candidates are named ``search-NN``)."""
    width = max(2, 2 * max(1, evaluator.workers))

    def evaluate(batch):
        fresh, seen = [], set()
        for c in batch:
            if not state.seen(c) and c.key() not in seen:
                seen.add(c.key())
                fresh.append(c)
        batch = fresh[:max(0, max_candidates - len(state.results))]
        for i, c in enumerate(batch):
            if c.origin == "local_search":
                batch[i] = c = c.with_(name=f"search-{len(state.candidates) + 1:02d}")
            state.keys.add(c.key())
            state.candidates[c.name] = c
        if not batch:
            return []
        began = time.monotonic()
        results = evaluator.evaluate_many(batch, on=on)
        rounds = math.ceil(len(batch) / max(1, evaluator.workers))
        state.per_round_s = (time.monotonic() - began) / max(1, rounds)
        state.results.extend(results)
        return results

    evaluate(first)
    if not search:
        state.stopped = "search disabled"
        return
    best = cheapest_feasible(state.results)
    while True:
        if len(state.results) >= max_candidates:
            state.stopped = f"evaluated {len(state.results)} candidates (max_candidates)"
            return
        elapsed = time.monotonic() - state.started
        rounds_needed = math.ceil(width / max(1, evaluator.workers))
        if state.per_round_s and elapsed + rounds_needed * state.per_round_s > budget_s:
            state.stopped = f"time budget: {elapsed:.0f} s used of {budget_s:.0f} s"
            return
        seed = best or min((r for r in state.results if not r.error and r.cpst_usd is not None),
                           key=lambda r: (-(r.slo_attainment_min or 0.0), r.cpst_usd), default=None)
        if seed is None:
            state.stopped = "no candidate could be evaluated"
            return
        batch = [c for c in neighbours(state.candidates[seed.name], gpu_types, seqs_levels, policies, max_replicas)
                 if not state.seen(c)][:width]
        if not batch:
            state.stopped = "no untried neighbour of the best candidate"
            return
        evaluate(batch)
        best = cheapest_feasible(state.results)
