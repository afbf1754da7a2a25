"""Alert quality on labelled virtual-time scenarios: per-rule precision, recall, culprit accuracy,
time-to-detect and notifications per healthy replica-hour, against a baseline measured in the same run.

Run: ``.venv/bin/python benchmarks/bench_alerts.py`` (the evaluation half; ``--half tune`` for the
half the defaults were tuned on, ``--half all``; ``--only NAME`` for matching scenarios; ``--jobs 2``
to run two scenarios at a time).

Scenarios come from ``benchmarks/alert_scenarios`` (catalog.py: fleets of 3-8 mixed H100/A100
replicas, the Azure 2023 and Mooncake traces with their own bursty arrivals or steady Poisson ones,
true cascades, look-alikes, replica down, telemetry loss, SLO burns, flapping, no-fault fleets),
each simulated by the emulator's virtual-time fleet, ingested into a fresh in-memory store and
replayed through ``alerts.evaluator.Evaluator`` every 30 virtual seconds (score.py explains the
verdicts). Baseline (baseline.py): the rules these replaced, on the same series at the same times.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.alert_scenarios import catalog as cat  # noqa: E402
from benchmarks.alert_scenarios import score  # noqa: E402


def _run_one(name: str, step_s: float):
    from benchmarks.alert_scenarios.run import run

    s = next(x for x in cat.catalog() if x.name == name)
    o = run(s, step_s=step_s)
    return o


def _fmt(v, pct=False):
    if v is None:
        return "-"
    return f"{v:.2f}" if not pct else f"{v:.0%}"


def _line(j: score.Judged, o) -> str:
    s = j.scenario
    exp = "; ".join(f"{r['rule']}{'(' + r['replica'] + ')' if r['replica'] else ''} "
                    f"{'ok' if r['detected'] else 'MISSED'}"
                    + (f" +{r['ttd_s'] / 60:.1f}min" if r['ttd_s'] is not None else "")
                    + (f" named {r['named']}" if r['rule'] == cat.CASCADE and r['named'] else "")
                    for r in j.expected) or "nothing expected"
    fps = ", ".join(f"{e.rule}({e.key or '-'})@{e.fired / 60:.1f} {e.why}" for e in j.episodes if e.verdict == "fp")
    lab = o.label
    truth = any(e.rule == cat.CASCADE for e in s.expect)
    check = "" if not lab else (f" | label {'ok' if lab['cascade'] == truth else 'CHECK'}: retries "
                                f"{lab['retry_before']:.0%}->{lab['retry_during']:.0%}, others waiting "
                                f"{lab['others_waiting_before']:g}->{lab['others_waiting_during']:g}")
    return (f"{s.half:4} {s.name:22} {s.trace[:4]}/{s.arrivals[:5]:5} {len(s.fleet)}x{''.join(r.gpu[0] for r in s.fleet):8} "
            f"| {exp} | FP: {fps or 'none'} | notes {j.notifications} (fp {j.fp_notifications}) "
            f"| load {o.load_seconds:.0f}s eval {o.eval_seconds:.0f}s{check}")


def _baseline(rule: str, b: dict, key: str, r: dict) -> str:
    if rule in score.BASELINE_RULES:
        return _fmt(b.get(key))
    if rule in score.NEW_RULES:  # the replaced rules had no such rule: it detected nothing
        return "0.00" if key == "recall" and r.get("expected") else "no rule"
    return "same rule"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--half", choices=("eval", "tune", "all"), default="eval")
    parser.add_argument("--only", default=None, help="run the scenarios whose name contains this")
    parser.add_argument("--jobs", type=int, default=1, help="scenarios run at a time (processes)")
    parser.add_argument("--step", type=float, default=30.0, help="evaluation period, virtual seconds")
    parser.add_argument("--json", default=None, help="write the per-scenario verdicts and the summary here")
    args = parser.parse_args(argv)
    tune, evaluation = cat.split()
    scenarios = {"eval": evaluation, "tune": tune, "all": tune + evaluation}[args.half]
    if args.only:
        scenarios = [s for s in scenarios if args.only in s.name]
    print(f"{len(scenarios)} scenarios ({args.half} half), evaluation every {args.step:g} s", flush=True)
    wall0 = time.perf_counter()
    outcomes = []
    if args.jobs > 1:
        import multiprocessing as mp

        with mp.get_context("spawn").Pool(args.jobs) as pool:
            results = [pool.apply_async(_run_one, (s.name, args.step)) for s in scenarios]
            for r in results:
                o = r.get()
                outcomes.append(o)
                print(_line(score.judge(o), o), flush=True)
    else:
        for s in scenarios:
            o = _run_one(s.name, args.step)
            outcomes.append(o)
            print(_line(score.judge(o), o), flush=True)
    judged = [score.judge(o) for o in outcomes]
    base = [score.judge(o, baseline=True) for o in outcomes]
    summary, bsum = score.summarize(judged), score.summarize(base)
    wall = time.perf_counter() - wall0
    print(f"\nper rule ({args.half} half; baseline = the replaced rules on the same series, same run):")
    print(f"{'rule':24} {'precision':>9} {'recall':>7} {'TP':>3} {'FP':>3} {'allowed':>7} {'expected':>8} "
          f"{'TTD median':>10} | {'baseline P':>10} {'baseline R':>10}")
    for rule in sorted(set(summary["rules"]) | set(bsum["rules"])):
        r = summary["rules"].get(rule, {})
        b = bsum["rules"].get(rule, {})
        ttd = r.get("ttd_median_s")
        print(f"{rule:24} {_fmt(r.get('precision')):>9} {_fmt(r.get('recall')):>7} {r.get('tp', 0):>3} "
              f"{r.get('fp', 0):>3} {r.get('allowed', 0):>7} {r.get('expected', 0):>8} "
              f"{(f'{ttd / 60:.1f} min' if ttd is not None else '-'):>10} | "
              f"{_baseline(rule, b, 'precision', r):>10} {_baseline(rule, b, 'recall', r):>10}")
    print(f"\ncascade culprit accuracy: {_fmt(summary['culprit_accuracy'])} (baseline {_fmt(bsum['culprit_accuracy'])})")
    ttd = summary["ttd_median_s"]
    print(f"median time-to-detect over every expected alert: {ttd / 60:.1f} virtual min" if ttd is not None else "-")
    print(f"notifications: {summary['notifications']} in total, {summary['fp_notifications']} for false positives over "
          f"{summary['healthy_replica_hours']:.1f} healthy replica-hours = "
          f"{_fmt(summary['noise_per_healthy_replica_hour'])} per healthy replica-hour; no-fault fleets: "
          f"{summary['no_fault_notifications']} over {summary['no_fault_replica_hours']:.1f} replica-hours")
    steps = sum(o.steps for o in outcomes)
    evals = sum(o.eval_seconds for o in outcomes)
    print(f"evaluator: {steps} steps, {evals / max(steps, 1) * 1000:.0f} ms per step; simulation + ingest "
          f"{sum(o.load_seconds for o in outcomes):.0f} s; wall {wall:.0f} s ({args.jobs} job(s) on 2 shared cores)")
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "baseline": bsum, "scenarios": [
            {"name": j.scenario.name, "half": j.scenario.half, "expected": j.expected,
             "episodes": [e.__dict__ for e in j.episodes], "notifications": j.notifications,
             "fp_notifications": j.fp_notifications} for j in judged]}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
