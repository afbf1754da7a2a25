"""The planner's verdicts over evaluated candidates: backtest, Pareto frontier, recommendation,
levers, and the text the CLI prints. Pure functions over ``CandidateResult`` lists (no I/O).

* **Backtest**: the current fleet replayed on its own period must reproduce the measured CPST and
  p95 TTFT (the successful tasks' worst-call TTFT, ``tasks.ttft_s``) within ``tolerance``
  (relative error); otherwise the planner recommends nothing.
* **Frontier**: Pareto-optimal in (CPST lower, p95 TTFT lower, goodput higher).
* **Recommendation**: the cheapest candidate (CPST) meeting every SLO; the saving is against the
  current fleet's replay: ratio ``1 - CPST_rec / CPST_cur``, USD over the period
  ``(CPST_cur - CPST_rec) x successful tasks of the current replay``.
* **Levers**: per move, the best candidate that changes only that move; its predicted saving (as
  above) and its risk: the SLO attainment it leaves (margin to the target) and the p95 TTFT change.
"""

from __future__ import annotations

from dataclasses import dataclass

MOVE_TITLES = {"avoid": "Avoid work (prefix caching)", "share": "Share work (batching)",
               "move": "Move work (GPU mix)", "delay": "Delay work (admission, autoscaling)"}


def rel_error(replayed: float | None, measured: float | None) -> float | None:
    if replayed is None or measured is None or measured == 0:
        return None
    return abs(replayed - measured) / abs(measured)


def backtest(measured: dict, replay, tolerance: float) -> dict:
    """``measured``: {'cpst_usd', 'ttft_p95_s'} of the store, and under ``compare`` its
    ``planner.backtest.figures``; ``replay``: the current fleet's result (its ``compare`` figures, when
    both sides have them, are judged per task type by ``planner.backtest.compare``, outside the
    excluded minutes, with the reasons of every miss under ``why``)."""
    from planner.backtest import compare

    mc, rc = measured.get("compare"), getattr(replay, "compare", None)
    problems, why, types = [], [], {}
    if replay.error:
        problems.append(f"the replay failed: {replay.error}")
    if mc and rc:
        judged = compare(mc, rc, tolerance)
        m_cpst, r_cpst, m_ttft, r_ttft = mc["cpst_usd"], rc["cpst_usd"], mc["ttft_p95_s"], rc["ttft_p95_s"]
        problems += judged["problems"]
        why = judged["why"]
        types = {t: {"measured_ttft_p95_s": v.get("ttft_p95_s"), "tasks": v.get("tasks"),
                     "replayed_ttft_p95_s": rc["types"].get(t, {}).get("ttft_p95_s"),
                     "ttft_error": judged["errors"].get(f"p95 TTFT {t}")} for t, v in sorted(mc["types"].items())}
        m_hit, r_hit = mc.get("hit_rate"), rc.get("hit_rate")
    else:
        m_cpst, r_cpst, m_ttft, r_ttft = (measured.get("cpst_usd"), replay.cpst_usd, measured.get("ttft_p95_s"),
                                          replay.ttft_p95_s)
        for label, err in (("CPST", rel_error(r_cpst, m_cpst)), ("p95 TTFT", rel_error(r_ttft, m_ttft))):
            if err is None:
                problems.append(f"{label}: not measurable on both sides")
            elif err > tolerance:
                problems.append(f"{label} off by {err:.1%} (> {tolerance:.0%})")
        m_hit, r_hit = measured.get("prefix_hit_rate"), replay.prefix_hit_rate
    return {"passed": not problems, "tolerance": tolerance, "measured_cpst_usd": m_cpst,
            "replayed_cpst_usd": r_cpst, "cpst_error": rel_error(r_cpst, m_cpst),
            "measured_ttft_p95_s": m_ttft, "replayed_ttft_p95_s": r_ttft,
            "ttft_error": rel_error(r_ttft, m_ttft), "measured_prefix_hit_rate": m_hit,
            "replayed_prefix_hit_rate": r_hit, "problems": problems, "types": types, "why": why,
            "incidents": measured.get("incidents", {})}


def frontier(results) -> set[str]:
    """Names of the Pareto-optimal results in (CPST min, p95 TTFT min, goodput max)."""
    pts = [r for r in results if not r.error and r.cpst_usd is not None and r.ttft_p95_s is not None]

    def dominates(a, b):
        ga, gb = a.goodput_per_hour or 0.0, b.goodput_per_hour or 0.0
        no_worse = a.cpst_usd <= b.cpst_usd and a.ttft_p95_s <= b.ttft_p95_s and ga >= gb
        better = a.cpst_usd < b.cpst_usd or a.ttft_p95_s < b.ttft_p95_s or ga > gb
        return no_worse and better

    return {b.name for b in pts if not any(dominates(a, b) for a in pts if a is not b)}


@dataclass(frozen=True)
class Saving:
    ratio: float | None
    usd: float | None


def saving(current, other) -> Saving:
    if current is None or other is None or current.cpst_usd is None or other.cpst_usd is None:
        return Saving(None, None)
    ratio = 1 - other.cpst_usd / current.cpst_usd if current.cpst_usd else None
    return Saving(ratio, (current.cpst_usd - other.cpst_usd) * current.successful_tasks)


def recommend(results, current):
    """The cheapest candidate meeting every SLO (None if none does); ties: fewer GPUs, then name."""
    ok = [r for r in results if not r.error and r.meets_slo and r.cpst_usd is not None]
    return min(ok, key=lambda r: (r.cpst_usd, r.gpus, r.name)) if ok else None


def risk(current, other, slo_target: float) -> dict:
    """How far ``other`` sits from breaking an SLO, and its p95 TTFT change against the current fleet."""
    margin = None if other.slo_attainment_min is None else other.slo_attainment_min - slo_target
    ttft = rel_error(other.ttft_p95_s, current.ttft_p95_s) if current else None
    sign = 1 if (other.ttft_p95_s or 0) >= (current.ttft_p95_s or 0) else -1
    if not other.meets_slo:
        level = "high"
    elif margin is not None and margin < 0.02 or (ttft is not None and sign > 0 and ttft > 0.5):
        level = "medium"
    else:
        level = "low"
    return {"level": level, "slo_margin": margin, "ttft_p95_change": None if ttft is None else sign * ttft,
            "meets_slo": other.meets_slo}


def levers(results, current, lever_names: dict[str, list[str]], recommended, slo_target: float) -> list[dict]:
    """One entry per move: the best candidate of that move (meeting the SLOs if any does), its
    predicted saving over the period and its risk. ``move`` uses the recommendation's GPU mix."""
    by_name = {r.name: r for r in results}
    out = []
    for move in ("avoid", "share", "move", "delay"):
        names = list(lever_names.get(move, ()))
        if move == "move" and recommended is not None and recommended.name != getattr(current, "name", None):
            names.append(recommended.name)
        cands = [by_name[n] for n in names if n in by_name and not by_name[n].error and by_name[n].cpst_usd is not None]
        if not cands or current is None:
            out.append({"move": move, "title": MOVE_TITLES[move], "candidate": None, "saving_usd": None,
                        "saving_ratio": None, "risk": None,
                        "note": "not evaluated" if not cands else "no current fleet replay"})
            continue
        best = min(cands, key=lambda r: (not r.meets_slo, r.cpst_usd))
        s = saving(current, best)
        out.append({"move": move, "title": MOVE_TITLES[move], "candidate": best.name, "label": best.spec.get("label"),
                    "saving_usd": s.usd, "saving_ratio": s.ratio, "risk": risk(current, best, slo_target),
                    "note": ""})
    return out


def _f(x, fmt="{:.4f}", none="—"):
    return none if x is None else fmt.format(x)


def _waste_table(results) -> list[str]:
    """Where each candidate's money went (USD over the period; the six categories add up to spend)."""
    cats = ("useful", "retry_waste", "failed_task_waste", "unattributed", "pending", "idle")
    head = f"{'waste by category (USD)':<28} " + " ".join(f"{c:>17}" for c in cats)
    out = [head, "-" * len(head)]
    for r in sorted(results, key=lambda r: (r.cpst_usd is None, r.cpst_usd or 0, r.name)):
        if not r.error:
            out.append(f"{r.name[:28]:<28} " + " ".join(f"{(r.waste or {}).get(c, 0.0):>17.2f}" for c in cats))
    return out


def _type_table(plan) -> list[str]:
    """Per task type vs its SLO, for the current fleet, the recommendation and the frontier."""
    head = (f"{'per task type vs SLO':<28} {'type':<16} {'tasks':>7} {'p95 TTFT s':>10} {'budget':>8} "
            f"{'p95 e2e s':>10} {'budget':>9} {'attained':>9}  meets")
    out = [head, "-" * len(head)]
    shown = [r for r in plan.results if not r.error and (r.name in (plan.current, plan.recommended)
                                                         or r.name in plan.frontier)]
    for r in sorted(shown, key=lambda r: (r.name != plan.current, r.name != plan.recommended, r.name)):
        for t, v in sorted(r.per_type.items()):
            budget_t = _f(v.get("slo_ttft_ms") and v["slo_ttft_ms"] / 1000, "{:.2f}")
            budget_e = _f(v.get("slo_e2e_ms") and v["slo_e2e_ms"] / 1000, "{:.0f}")
            out.append(f"{r.name[:28]:<28} {t[:16]:<16} {int(v.get('tasks') or 0):>7} "
                       f"{_f(v.get('ttft_p95_s'), '{:.3f}'):>10} {budget_t:>8} {_f(v.get('e2e_p95_s'), '{:.1f}'):>10} "
                       f"{budget_e:>9} {_f(v.get('slo_attainment'), '{:.1%}'):>9}  {'yes' if v.get('meets_slo') else 'NO'}")
    return out


def render(plan) -> str:
    """The CLI's report of a ``PlanResult``: backtest first, then table, frontier, recommendation."""
    bt = plan.backtest
    lines = [f"Planner run {plan.run_id}: {plan.start:%Y-%m-%d %H:%M} .. {plan.end:%Y-%m-%d %H:%M} UTC "
             f"({plan.workload['tasks']} tasks, {plan.workload['calls']} calls)", ""]
    replays = bt.get("replays") or 1
    lines.append("Backtest (current fleet replayed on its own period" +
                 (f"; the median of {replays} replays):" if replays > 1 else "):"))
    lines.append(f"  CPST      measured {_f(bt.get('measured_cpst_usd'), '${:.4f}')}  replayed "
                 f"{_f(bt.get('replayed_cpst_usd'), '${:.4f}')}  error {_f(bt.get('cpst_error'), '{:.1%}')}")
    lines.append(f"  p95 TTFT  measured {_f(bt.get('measured_ttft_p95_s'), '{:.3f} s')}  replayed "
                 f"{_f(bt.get('replayed_ttft_p95_s'), '{:.3f} s')}  error {_f(bt.get('ttft_error'), '{:.1%}')}")
    for t, v in (bt.get("types") or {}).items():
        lines.append(f"  p95 TTFT  {t:<14} measured {_f(v.get('measured_ttft_p95_s'), '{:.3f} s')}  replayed "
                     f"{_f(v.get('replayed_ttft_p95_s'), '{:.3f} s')}  error {_f(v.get('ttft_error'), '{:.1%}')}")
    lines.append(f"  prefix-cache hit rate measured {_f(bt.get('measured_prefix_hit_rate'), '{:.1%}')}  replayed "
                 f"{_f(bt.get('replayed_prefix_hit_rate'), '{:.1%}')}")
    incidents = bt.get("incidents") or {}
    for line in incidents.get("replayed", []):
        lines.append(f"  incident replayed: {line}")
    for line in incidents.get("excluded", []):
        lines.append(f"  excluded from the comparison: {line}")
    if incidents and not incidents.get("replayed") and not incidents.get("excluded"):
        lines.append("  incidents: none in the alert history or the replica minutes")
    lines.append(f"  => {'PASSED' if bt.get('passed') else 'FAILED: ' + '; '.join(bt.get('problems', []))} "
                 f"(tolerance {bt.get('tolerance', 0):.0%})")
    for d in plan.diagnosis:
        lines.append(f"     {d}")
    lines.append("")
    if plan.results:
        head = (f"{'candidate':<28} {'fleet':<44} {'spend $':>9} {'CPST $':>8} {'attr $':>8} {'idle':>5} "
                f"{'TTFT95':>7} {'e2e95':>7} {'goodput/h':>9} {'SLO min':>7}  flags")
        lines += [head, "-" * len(head)]
        for r in sorted(plan.results, key=lambda r: (r.cpst_usd is None, r.cpst_usd or 0, r.name)):
            flags = []
            if r.name == plan.current:
                flags.append("current")
            if r.name in plan.frontier:
                flags.append("frontier")
            if r.meets_slo:
                flags.append("meets SLO")
            if r.name == plan.recommended:
                flags.append("RECOMMENDED")
            if r.error:
                flags.append(f"error: {r.error}")
            lines.append(f"{r.name[:28]:<28} {r.spec.get('label', '')[:44]:<44} {r.spend_usd:>9.2f} "
                         f"{_f(r.cpst_usd):>8} {_f(r.attributed_cpst_usd):>8} {_f(r.idle_ratio, '{:.0%}'):>5} "
                         f"{_f(r.ttft_p95_s, '{:.2f}'):>7} {_f(r.e2e_p95_s, '{:.1f}'):>7} "
                         f"{_f(r.goodput_per_hour, '{:.1f}'):>9} {_f(r.slo_attainment_min, '{:.1%}'):>7}  "
                         f"{', '.join(flags)}")
        lines.append("")
        lines += _waste_table(plan.results) + [""] + _type_table(plan) + [""]
    if plan.screened:
        sc = plan.screen
        lines.append(f"Compared on the busiest day ({sc['start'][:16]} .. {sc['end'][:16]} UTC, {sc['tasks']} tasks); "
                     f"the cheapest meeting every SLO there were replayed over the whole period (above):")
        for r in sorted(plan.screened, key=lambda r: (r.cpst_usd is None, r.cpst_usd or 0, r.name)):
            flags = ", ".join(f for f, on in (("current", r.name == plan.current), ("meets SLO", r.meets_slo),
                                                ("replayed over the period", any(x.name == r.name for x in plan.results)),
                                                (f"error: {r.error}", bool(r.error))) if on)
            lines.append(f"  {r.name[:28]:<28} {r.spec.get('label', '')[:44]:<44} CPST {_f(r.cpst_usd)}  "
                         f"TTFT95 {_f(r.ttft_p95_s, '{:.2f}'):>6}  SLO min {_f(r.slo_attainment_min, '{:.1%}'):>6}  {flags}")
        lines.append("")
    lines.append(f"Recommendation: {plan.message}")
    if plan.incidents:
        lines.append("")
        lines.append("Under the measured incidents (replayed again; candidates above are compared fault-free):")
        for name, v in plan.incidents.items():
            lines.append(f"  {name[:28]:<28} CPST {_f(v.get('cpst_usd'))}  p95 TTFT {_f(v.get('ttft_p95_s'), '{:.2f} s')}"
                         f"  SLO min {_f(v.get('slo_attainment_min'), '{:.1%}')}  "
                         f"{'meets every SLO' if v.get('meets_slo') else 'misses: ' + v.get('worst', '')}")
    if plan.levers:
        lines.append("")
        lines.append("Levers (each a planner candidate changing one move" +
                     ("; figures of the busiest day, where they were compared):" if plan.screened else "):"))
        for lv in plan.levers:
            if lv["candidate"] is None:
                lines.append(f"  {lv['title']:<38} {lv['note']}")
                continue
            rk = lv["risk"]
            lines.append(f"  {lv['title']:<38} {lv['candidate']}: saving {_f(lv['saving_ratio'], '{:+.1%}')} "
                         f"(${_f(lv['saving_usd'], '{:,.2f}')}), risk {rk['level']} "
                         f"(SLO margin {_f(rk['slo_margin'], '{:+.1%}')}, p95 TTFT {_f(rk['ttft_p95_change'], '{:+.0%}')})")
    lines.append("")
    lines.append("Assumptions:")
    for key, value in plan.assumptions.items():
        lines.append(f"  {key}: {value}")
    screened = f" over the period ({len(plan.screened)} compared on the busiest day)" if plan.screened else ""
    lines.append(f"Search: {plan.stopped}; {len(plan.results)} candidates{screened} in {plan.wall_seconds:.0f} s")
    return "\n".join(lines)
