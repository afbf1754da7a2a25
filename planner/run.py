"""``infercost plan``: extract the period's workload, backtest, search candidates, recommend, store.

Position: planner (the one place that drives the store, the serving simulator and the
cost jobs together). Steps, each reported through ``echo``:

1. extract the workload of ``[start, end)`` and the current fleet (``extract.py``,
   ``candidates.current_candidate``);
2. **backtest**: replay the current fleet under the period's incidents (``incidents.py``) with
   ``backtest_seeds`` seeds, and a fault-free replay of it (the baseline candidates are compared
   with); compare the replays' median CPST and p95 TTFT per task type with the measured ones outside
   the minutes of incidents that cannot be modelled (``backtest.py``). On failure: stop, say per
   missed figure which hours and what in them departs, and recommend nothing;
3. evaluate the operator's candidates, the one-move levers and Mélange's GPU mix, then local
   search (``search.py``) within the budget. A period longer than 1.5 days is searched on its
   busiest day (``screen.py``), and the finalists (the cheapest candidates meeting every SLO there)
   are replayed over the whole period;
4. frontier, recommendation, levers (``report.py``) from the whole-period replays; the recommendation
   and the frontier replayed again under the measured incidents (on the screened day when it holds
   every incident); store everything (``results.py``).
"""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from planner import report
from planner.candidates import Candidate, current_candidate
from planner.config import PlanConfig, fleet_base
from planner.extract import extract_workload
from planner.incidents import extract_incidents
from planner.pool import Evaluator
from planner.screen import backtest_replays, faults_within, incident_window, screening_window
from planner.search import SearchState, lever_candidates, run_rounds
from planner.workload import naive_utc
from serving.emulator.profiles import PROFILES


@dataclass
class PlanResult:
    """A planner run: what ``render`` prints and ``results.save`` stores."""

    run_id: str
    start: datetime
    end: datetime
    workload: dict
    current: str
    backtest: dict
    results: list = field(default_factory=list)
    frontier: set = field(default_factory=set)
    recommended: str = ""
    saving_ratio: float | None = None
    saving_usd: float | None = None
    status: str = ""
    message: str = ""
    levers: list = field(default_factory=list)
    assumptions: dict = field(default_factory=dict)
    diagnosis: list = field(default_factory=list)
    stopped: str = ""
    wall_seconds: float = 0.0
    melange: dict = field(default_factory=dict)
    incidents: dict = field(default_factory=dict)  # candidate -> its figures under the measured incidents
    screened: list = field(default_factory=list)  # results on the screening window (empty: not screened)
    screen: dict = field(default_factory=dict)  # the screening window: start, end, tasks


def measured_figures(store, start: datetime, end: datetime, excluded=()) -> dict:
    """The measured CPST, p95 TTFT and prefix-cache hit rate of the period (the backtest's target), and
    under ``compare`` the backtest's figures outside ``excluded`` (``planner.backtest.figures``)."""
    from planner.backtest import figures
    from planner.extract import prefix_hit_rate
    from schema.queries import cost, review
    from schema.queries import planner as pq

    row = cost.period_summary(store, start, end).iloc[0]
    lat = pq.task_latency(store, start, end)
    overall = lat[lat["task_type"] == ""]
    ttft = float(overall["ttft_p95_s"].iloc[0]) if len(overall) else None
    hourly = [(h.isoformat(), int(n), int(bad), float(p) if p == p else None)
              for h, n, bad, p in pq.hourly_latency(store, start, end).itertuples(index=False)]
    cpst = row["cpst_usd"]
    return {"cpst_usd": None if cpst != cpst or cpst is None else float(cpst),
            "ttft_p95_s": None if ttft != ttft else ttft, "hourly": hourly,
            "prefix_hit_rate": prefix_hit_rate(review.prefix_cache(store, start, end)),
            "compare": figures(store, start, end, excluded)}


def diagnose(measured_hourly, replay_hourly, top: int = 3) -> list[str]:
    """The hours where the replay departs most from the measured period (task-weighted p95 TTFT gap)."""
    rep = {h: (n, bad, p) for h, n, bad, p in replay_hourly}
    gaps = []
    for h, n, bad, p in measured_hourly:
        rn, rbad, rp = rep.get(h, (0, 0, None))
        if p is None or rp is None:
            continue
        gaps.append((abs(p - rp) * n, h, n, bad, p, rn, rbad, rp))
    gaps.sort(reverse=True)
    return [f"{h[:13]}h: measured {n} tasks ({bad} unsuccessful), p95 TTFT {p:.2f} s; replay {rn} ({rbad}), "
            f"{rp:.2f} s" for _, h, n, bad, p, rn, rbad, rp in gaps[:top] if _ > 0]


def assumptions(workload, current: Candidate, evidence: dict, config: PlanConfig, slos: dict) -> dict:
    """Every setting the replay used that is not the workload itself, with its source."""
    out = {}
    for p in {p.profile for p in current.pools} | {g.profile for g in config.gpu_types.values()}:
        prof = PROFILES[p]
        out[f"profile {p}"] = (f"{prof.gpu_count}x {prof.gpu_type}, {prof.model}: step = {prof.base_s * 1e3:.1f} ms + "
                               f"{prof.prefill_per_token_s * 1e3:.4f} ms/prefill token + "
                               f"{prof.decode_per_seq_s * 1e3:.4f} ms/decode seq + KV reads; KV "
                               f"{prof.kv_capacity_tokens:,} tokens (serving/emulator/profiles.py: vLLM V1 blog, "
                               f"vLLM CI, datasheets)")
    out.update({f"current {k}": v for k, v in evidence.items()})
    out.update({f"client/gateway {k}": v for k, v in workload.evidence.items()})
    out["SLOs"] = ", ".join(f"{t}: TTFT {a or '-'} ms, e2e {b or '-'} ms" for t, (a, b) in sorted(slos.items()))
    out["SLO target"] = f"{config.slo_target:.0%} of each type's tasks succeed within every budget"
    out["faults"] = ("the backtest replays the current fleet under the incidents the store knows (alert history, "
                     "replica minutes); candidates are compared fault-free, the recommendation and the frontier "
                     "also under those incidents")
    out["prices"] = "the store's gpu_prices (as the measured period was priced) + the candidates file's"
    return out


def plan(store, start: datetime, end: datetime, config: PlanConfig | None = None, *, slos: dict | None = None,
         workers: int = 2, progress: bool = True, seed: int = 0, echo=print, search: bool | None = None,
         scratch_dir=None, inprocess_url: str = "chdb://memory") -> PlanResult:
    """Run the planner over ``[start, end)`` (see module docstring). Returns a PlanResult.

    Raises WorkloadError (nothing to replay), CandidateError / PlanConfigError (bad candidates or
    profiles), RuntimeError (a worker died)."""
    config = config or PlanConfig()
    began = time.monotonic()
    start, end = naive_utc(start), naive_utc(end)
    from schema.queries import planner as pq

    first = pq.telemetry_start(store, start, end)
    if first is not None and first > start:  # replicas the store never saw up would be billed idle in the replay
        echo(f"planner: the store's telemetry of the period begins at {first:%Y-%m-%d %H:%M} UTC; replaying from there")
        start = first
    echo(f"planner: extracting the workload of {start:%Y-%m-%d %H:%M} .. {end:%Y-%m-%d %H:%M} UTC")
    workload = extract_workload(store, start, end, slos=slos, sharing_model=config.prefix_sharing)

    cur = config.current
    current, evidence = current_candidate(
        pq.replicas(store, start, end), config.profiles(), policy=cur.policy or workload.gateway_policy,
        gateway_retries=workload.gateway_retries if cur.gateway_retries is None else cur.gateway_retries,
        max_num_seqs=cur.max_num_seqs, admission=cur.admission)
    model = next(iter({p.model for p in workload.plans}), "")
    user = config.user_candidates(model)
    base = fleet_base(store, config, workload.slos)
    incidents = extract_incidents(store, start, end, list(current.replica_ids or ()))
    measured = measured_figures(store, start, end, incidents.windows)
    measured["incidents"] = incidents.summary()
    run = PlanResult(run_id=uuid.uuid4().hex[:12], start=start, end=end, workload=workload.summary(),
                     current=current.name, backtest={},
                     assumptions=assumptions(workload, current, evidence, config, workload.slos))
    echo(f"planner: {len(workload.plans)} tasks, {workload.calls} calls; current fleet {current.label()}")
    state = SearchState(started=began)
    state.candidates[current.name] = current
    s = config.search
    gpu_types = _gpu_types(current, config)
    levers = lever_candidates(current, s.max_num_seqs)
    first = list(user) + [c for group in levers.values() for c in group]
    do_search = s.enabled if search is None else search
    expected = s.max_candidates if do_search else min(s.max_candidates, 1 + len(first))
    screen = screening_window(workload, s.screen_hours)
    stress = None  # the window candidates are replayed on under the measured incidents (None: the period)
    if screen is not None and incidents.faults:
        stress = (screen if faults_within(incidents.faults, screen, workload) is not None
                  else incident_window(workload, incidents.faults, s.screen_hours))
    windows = {name: w for name, w in (("screen", screen), ("incidents", stress)) if w is not None}
    k = backtest_replays(config.backtest_seeds, workload.seconds)
    quiet = [current] if incidents.faults else []
    with Evaluator(workload, base, workers=workers, slo_target=config.slo_target, seed=seed, progress=progress,
                   scratch_dir=scratch_dir, inprocess_url=inprocess_url, windows=windows) as evaluator:
        # the bar's ETA covers the whole run (the search's bound, the replays under the incidents)
        stressed = ({} if not incidents.faults else {"full": UNDER_INCIDENTS} if stress is None
                    else {"incidents": 1 + UNDER_INCIDENTS})
        if screen is None:
            evaluator.expect({"full": k + len(quiet) + expected + stressed.get("full", 0)})
        else:
            evaluator.expect({"full": k + len(quiet) + s.finalists + stressed.get("full", 0), "screen": 1 + expected,
                              "incidents": stressed.get("incidents", 0)})
        # What happened, replayed ``k`` times (the backtest judges their median), and the same fleet on
        # a quiet day (the baseline candidates are compared with).
        began_backtest = time.monotonic()
        runs = evaluator.evaluate_many([current] * k + quiet,
                                       faults=[incidents.faults or None] * k + [None] * len(quiet),
                                       compare=incidents.windows,
                                       seeds=[seed + i for i in range(k)] + [seed] * len(quiet))
        full_round_s = (time.monotonic() - began_backtest) / math.ceil((k + len(quiet)) / max(1, workers))
        happened, replay = runs[0], runs[k] if quiet else runs[0]
        if k > 1:
            from planner.backtest import median_figures

            happened.compare = median_figures([r.compare for r in runs[:k] if not r.error])
        state.results.append(replay)
        state.keys.add(current.key())
        run.backtest = report.backtest(measured, happened, config.tolerance)
        run.backtest["replays"] = k
        if not run.backtest["passed"]:
            run.diagnosis = run.backtest["why"] or diagnose(measured["hourly"], happened.hourly)
            run.results = [replay]
            run.status = "backtest_failed"
            run.message = ("none: the backtest failed, so the replay cannot be trusted to predict "
                           f"({'; '.join(run.backtest['problems'])})"
                           + longer_period_hint(start, end, pq.telemetry_start(store, end - HINT_REACH, end),
                                                run.backtest["problems"]))
            run.wall_seconds = time.monotonic() - began
            return run
        echo(f"planner: backtest passed (CPST {run.backtest['cpst_error']:.1%}, p95 TTFT "
             f"{run.backtest['ttft_error']:.1%}); searching")
        on, reserve_s = "full", 0.0
        if screen is not None:
            on = "screen"
            run.screen = {"start": screen.start.isoformat(), "end": screen.end.isoformat(), "tasks": len(screen.plans)}
            echo(f"planner: comparing candidates on the busiest {s.screen_hours:g} h ({screen.start:%Y-%m-%d %H:%M} .. "
                 f"{screen.end:%Y-%m-%d %H:%M} UTC, {len(screen.plans)} of {len(workload.plans)} tasks); the "
                 f"{s.finalists} cheapest meeting every SLO there are then replayed over the whole period")
            state.results = [evaluator.evaluate_many([current], on="screen")[0]]
            reserve_s = math.ceil(s.finalists / max(1, workers)) * full_round_s
        if do_search:
            from planner.melange import propose

            ttft_budget = min((a for a, _ in workload.slos.values() if a), default=2000.0) / 1000.0
            prices = _replica_prices(base, gpu_types)
            echo(f"planner: profiling {len(prices)} GPU type(s) x {len(s.max_num_seqs)} batch size(s) per "
                 f"request-size bucket for the GPU mix (Mélange), TTFT budget {ttft_budget:g} s")
            mel, run.melange = propose(workload, {t: (p, prices[t]) for t, p in gpu_types.items() if t in prices},
                                       s.max_num_seqs, ttft_budget, s.max_replicas, current)
            first += mel
        run_rounds(evaluator, state, first, gpu_types=gpu_types, seqs_levels=s.max_num_seqs, policies=s.policies,
                   max_replicas=s.max_replicas, budget_s=s.budget_s - reserve_s,
                   max_candidates=s.max_candidates, search=do_search, on=on)
        run.stopped = state.stopped
        if screen is None:
            run.results = state.results
            _conclude(run, replay, levers, config)
        else:
            _confirm(run, evaluator, state, replay, levers, config)
        if incidents.faults:
            _under_incidents(run, evaluator, state, current, happened, incidents, workload, stress)
    run.wall_seconds = time.monotonic() - began
    return run


SHORT_PERIOD = timedelta(days=2)  # a shorter period's p95 TTFT per type is mostly one day's busiest hours
HINT_REACH = timedelta(days=7)  # the longest period the hint suggests: `infercost plan`'s default --since


def longer_period_hint(start: datetime, end: datetime, first: datetime | None, problems: list[str]) -> str:
    """What to try after a short period's backtest missed on p95 TTFT alone while the store's telemetry
    (``first``: where it begins within ``HINT_REACH`` of ``end``) holds more days: a day's p95 TTFT per
    task type is one draw of its saturated hours, which no replay reproduces every day (docs/planner.md,
    Limits); a longer period judges several days' tasks together. Empty when that does not apply."""
    if end - start >= SHORT_PERIOD or not problems or not all(p.startswith("p95 TTFT") for p in problems):
        return ""
    if first is None or end - first < SHORT_PERIOD:
        return ""
    days = int((end - first) / timedelta(days=1))
    return (f". One day's p95 TTFT per task type is a single draw of its busiest hours; the store holds {days} "
            f"days of telemetry, and a plan over them (--since {days}d) judges them together")


UNDER_INCIDENTS = 3  # candidates replayed again under the measured incidents: the recommendation, then the frontier


def _confirm(run: PlanResult, evaluator, state, replay, levers: dict, config: PlanConfig) -> None:
    """After a search on the screening window: replay its ``finalists`` cheapest candidates meeting every
    SLO over the whole period; the frontier and the recommendation come from those replays and the
    current fleet's. The levers compare the screened day's figures (each move was replayed only there)."""
    screened_current, run.screened = state.results[0], list(state.results)
    ok = sorted((r for r in state.results if not r.error and r.meets_slo and r.cpst_usd is not None
                 and r.name != replay.name), key=lambda r: (r.cpst_usd, r.gpus, r.name))
    picked, seen = [], set()
    for r in ok:  # a candidate that replayed the window exactly as a cheaper one (a batch size never reached)
        same = (r.cpst_usd, r.ttft_p95_s, r.slo_attainment_min, r.successful_tasks, r.gpus)
        if same not in seen and len(picked) < config.search.finalists:
            seen.add(same)
            picked.append(r)
    finalists = [state.candidates[r.name] for r in picked]
    run.results = [replay] + evaluator.evaluate_many(finalists)
    _conclude(run, replay, levers, config)
    lever_names = {m: [c.name for c in cs] for m, cs in levers.items()}
    best = next((r for r in state.results if r.name == run.recommended), None)
    run.levers = report.levers(state.results, screened_current, lever_names, best, config.slo_target)
    day = evaluator.workloads["screen"]
    # their USD covers the screened window; x to_period (the period's successful tasks per the day's, of
    # the current fleet's replays) is the same CPST gap over the period
    to_period = replay.successful_tasks / screened_current.successful_tasks if screened_current.successful_tasks else None
    for lever in run.levers:
        lever["window"] = {"start": day.start.isoformat(), "end": day.end.isoformat(), "to_period": to_period}


def _under_incidents(run: PlanResult, evaluator, state, current: Candidate, happened, incidents, workload,
                     stress) -> None:
    """Replay the recommendation and the cheapest frontier candidates meeting every SLO under the measured
    incidents (moved onto their replicas, ``incidents.for_candidate``), and say whether each meets its
    SLOs only on a quiet day. ``stress``: a window of the period holding every incident (the period's
    busiest such day, ``screen.incident_window``), which the replays then cover, the current fleet's
    among them; None: the whole period."""
    from planner.incidents import for_candidate

    ids = list(current.replica_ids or ())
    types = {r.id: r.gpu_type for r in current.replicas()}
    ok = sorted((r for r in run.results if not r.error and r.meets_slo and r.name != current.name
                 and (r.name == run.recommended or r.name in run.frontier)),
                key=lambda r: (r.name != run.recommended, r.cpst_usd))[:UNDER_INCIDENTS]
    picked = [state.candidates[r.name] for r in ok if r.name in state.candidates]
    on, faults = "full", incidents.faults
    if stress is not None:
        on, faults, picked = "incidents", faults_within(incidents.faults, stress, workload), [current] + picked
    results = evaluator.evaluate_many(picked, faults=[for_candidate(faults, ids, types, c) for c in picked], on=on)
    if stress is not None:
        happened, results = results[0], results[1:]
    run.incidents = {happened.name: _stress(happened)}
    run.incidents.update({r.name: _stress(r) for r in results})
    run.assumptions["incidents replayed over"] = (
        "the whole period" if stress is None else
        f"{stress.start:%Y-%m-%d %H:%M} .. {stress.end:%Y-%m-%d %H:%M} UTC, the busiest day holding every incident "
        f"({len(stress.plans)} tasks; the candidates' other days are their fault-free replays')")
    rec = run.incidents.get(run.recommended)
    if run.status == "recommended" and rec is not None:
        run.message += ("; also under the measured incidents" if rec["meets_slo"] else
                        f"; on a quiet day only: under the measured incidents {rec['worst']}")


def _stress(result) -> dict:
    worst = min(((t, v.get("slo_attainment") or 0.0) for t, v in result.per_type.items()
                 if v.get("slo_ttft_ms") is not None or v.get("slo_e2e_ms") is not None),
                key=lambda x: x[1], default=(None, None))
    return {"meets_slo": bool(result.meets_slo) and not result.error, "cpst_usd": result.cpst_usd,
            "ttft_p95_s": result.ttft_p95_s, "slo_attainment_min": result.slo_attainment_min,
            "worst": (f"{worst[0]} meets its SLOs for {worst[1]:.1%} of its tasks" if worst[0] else "no SLO"),
            "error": result.error}


def _conclude(run: PlanResult, replay, levers: dict, config: PlanConfig) -> None:
    run.frontier = report.frontier(run.results)
    best = report.recommend(run.results, replay)
    lever_names = {m: [c.name for c in cs] for m, cs in levers.items()}
    run.levers = report.levers(run.results, replay, lever_names, best, config.slo_target)
    if best is None:
        run.status = "no_feasible"
        run.message = "none: no candidate met every SLO (the current fleet neither)" + _closest(
            run.results + run.screened, config.slo_target)
        return
    s = report.saving(replay, best)
    run.recommended, run.saving_ratio, run.saving_usd = best.name, s.ratio, s.usd
    if best.name == replay.name or (s.ratio is not None and s.ratio <= 0 and replay.meets_slo):
        run.status = "no_saving"
        run.message = (f"keep the current fleet ({replay.spec['label']}): it is already the cheapest meeting every "
                       f"SLO, CPST ${replay.cpst_usd:.4f}, worst SLO attainment {replay.slo_attainment_min:.1%}")
        return
    run.status = "recommended"
    if s.ratio is not None and s.ratio < 0:  # the current fleet misses an SLO: the cheapest that meets them costs more
        run.message = (f"{best.name} ({best.spec['label']}): CPST ${best.cpst_usd:.4f} vs ${replay.cpst_usd:.4f}, "
                       f"{-s.ratio:.1%} more, meets every SLO (the current fleet: worst SLO attainment "
                       f"{replay.slo_attainment_min or 0:.1%})")
        return
    run.message = (f"{best.name} ({best.spec['label']}): CPST ${best.cpst_usd:.4f} vs ${replay.cpst_usd:.4f}, "
                   f"saving {s.ratio:.1%} (${s.usd:,.2f} over the period), meets every SLO")


def _closest(results, slo_target: float) -> str:
    """The task types no candidate served within their SLOs: the best attainment any candidate reached,
    by which candidate, against which budgets (what a feasible fleet, or an operator's SLO, must change)."""
    best: dict[str, tuple] = {}
    for r in results:
        if r.error:
            continue
        for t, v in r.per_type.items():
            a = v.get("slo_attainment")
            if a is not None and (v.get("slo_ttft_ms") is not None or v.get("slo_e2e_ms") is not None) \
                    and (t not in best or a > best[t][0]):
                best[t] = (a, r.name, v.get("slo_ttft_ms"), v.get("slo_e2e_ms"), v.get("ttft_p95_s"))
    short = [f"{t} at best {a:.1%} ({name}: p95 TTFT {p or 0:.1f} s vs budget {(b or 0) / 1000:g} s, "
             f"e2e budget {(e or 0) / 1000:g} s)" for t, (a, name, b, e, p) in sorted(best.items()) if a < slo_target]
    return f"; short of the {slo_target:.0%} target: " + "; ".join(short) if short else ""


def _gpu_types(current: Candidate, config: PlanConfig) -> dict[str, str]:
    """GPU type -> profile the search may use: the current fleet's types and the file's."""
    out = {p.gpu_type: p.profile for p in current.pools}
    out.update(config.profiles())
    return out


def _replica_prices(base: dict, gpu_types: dict[str, str]) -> dict[str, float]:
    """USD per replica-hour of each GPU type at its newest price (x GPUs per replica of its profile)."""
    out = {}
    for t, prof in gpu_types.items():
        prices = base["gpu_types"].get(t, {}).get("prices", [])
        if prices:
            newest = max(prices, key=lambda p: str(p.get("valid_from", "")))
            out[t] = float(newest["usd_per_gpu_hour"]) * PROFILES[prof].gpu_count
    return out
