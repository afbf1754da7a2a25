"""``infercost demo``: the whole product on emulated GPUs and a real public trace, in one process.

1. The store of the data dir (the embedded default ``<data dir>/clickhouse``, the same one
   ``infercost cost`` / ``review`` / ``dashboard`` open), migrated; the demo fleet (Llama-3.1-70B on one
   4x H100 and two 4x A100 replicas, with an H100 price cut three days ago) synced from ``demo_fleet.yaml``.
2. History: the previous N days simulated in virtual time (``infercost.backfill``), with one
   scripted incident at a load peak (replica-2 slowed 6x for 20 minutes, ending ~20 minutes before the
   demo starts, so the dashboard's default "Last hour" shows it); the cost jobs run over it and the
   alert evaluator is replayed over the incident.
3. Live: the OTLP receiver, 3 emulated replicas (OpenAI API, /metrics, spans), the /metrics
   scraper, the instrumented gateway, the task workload replaying the Mooncake conversation
   trace through the task SDK, the cost jobs (refreshable materialized views), the alert evaluator
   and the dashboard. A scripted incident slows replica-2 down 6x 8 minutes in (``BASELINE_WARMUP_S``).
4. Ctrl-C, SIGTERM or ``--duration`` stops everything cleanly and prints a summary. Tasks cut off by
   the stop end with no outcome (``error.type`` = ``shutdown``): not failures, not waste.

The workload is agentic: research agents and copilot actions fail on their own at a step k of n
after paying for steps 1..k (``serving.workloads.AGENTIC_FAILURE_RATES``, with their sources), and
clients time out and retry; the Mooncake conversation trace gives the arrivals, lengths and shared prefixes.

Load and fleet are sized together (``FLEET_SIZING``): what two cores can emulate is ~0.2-0.5 calls a
second, so the fleet is one whose capacity that load fills to an operator's 40-60 %.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import secrets
import shutil
import signal
import string
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from infercost.service import Service, check_exposure, dashboard_auth, open_store, sync_fleet
from schema.redact import redact
from infercost.settings import Settings

log = logging.getLogger(__name__)

MODEL = "meta-llama/Llama-3.1-70B-Instruct"
# replica id -> (emulator profile, GPU type); the demo fleet file prices the same ids (4 GPUs each).
REPLICAS = {
    "replica-0": ("4xh100-llama-3.1-70b", "H100"),
    "replica-1": ("4xa100-llama-3.1-70b", "A100"),
    "replica-2": ("4xa100-llama-3.1-70b", "A100"),
}
MIX = {"chat": 0.6, "copilot": 0.3, "research_agent": 0.1}
# FLEET_SIZING. Two cores emulate ~0.2-0.5 calls a second (the backfill simulates a few hundred calls a second
# with their spans; the live phase streams every token through a client, a gateway and a replica). The
# Mooncake conversation trace (Kimi's production traffic: ~12k-token prompts, most of them a shared
# prefix, ~340 output tokens) makes each call the work of a long-context agent step, and a 70B model at
# vLLM's --max-num-seqs 4 (a latency-first setting for such contexts; vLLM's default is 256) makes a
# replica sustain what that load can fill: measured in the emulator at saturation with this workload,
# 59k work units a minute on 4x H100 and 41k on 4x A100 (``capacity`` in demo_fleet.yaml). At the
# backfill's rate one 7-day run allocated 48 % of the week's spend; from 13 to 17 UTC on weekdays the replicas
# were 70-78 % busy with requests queued in half their minutes. The live load (live_rate_scale, constant)
# allocated 62 % of the live phase's spend from its 3rd to its 11th minute (benchmarks/bench_demo_start.py).
TRACE = "mooncake"
MAX_NUM_SEQS = 4
# The demo's latency budgets per task type, (TTFT ms, e2e ms), carried by its tasks and in demo_fleet.yaml.
# A task's TTFT is its worst call's: the trace's ~14k-token prompts (some far longer) take seconds of
# prefill on a 70B model, behind up to 4 running requests, so the library's interactive budgets (1-2 s)
# fit no fleet of these GPUs. These sit just above what this fleet serves to 97 % of each type's tasks on
# a quiet hour of a 1-day backfill (p97 TTFT / e2e: chat 14.7 / 50 s, copilot 24.8 / 337 s, research agent
# 35.2 / 634 s) and well below the incident's peak (chat 59 / 163 s, copilot 74 / 1113 s), so the incident
# breaks them and an ordinary hour does not. Research agents still miss theirs at the busy hours: their
# ~50 calls queued behind 4-request batches time out (90 s) and fail the task, which a fleet sized for
# them avoids (``infercost plan``).
SLO_MS = {"chat": (20_000.0, 120_000.0), "copilot": (30_000.0, 480_000.0), "research_agent": (45_000.0, 900_000.0)}
# Live seconds before the incident for the degradation rule to have replica-2's own baseline. The two
# A100s are too few to be judged against their GPU type (alerts SeriesConfig.min_same_type_peers 2), so
# each is judged against its own older buckets: at least 4 (alerts.series.BASELINE_MIN) of >= 5 calls
# (min_samples), from 3 buckets back (BASELINE_FROM). The backfill ends 15 min before the demo started
# and its last minutes can hold no call on replica-2 (its backfilled calls are sparse: tens of minutes
# without one happen), so the live load (an A100 gets ~6-8 calls a minute, fewer in the first) must
# supply them: ~5 busy minutes + 3 buckets' lag -> 7 min. With the incident at 3 min the rule has no
# baseline for replica-2 and raises nothing.
BASELINE_WARMUP_S = 420.0
# How long before the backfilled fault its fixed load starts: the alerts are replayed from 30 min before the
# fault over series of 24 one-minute buckets (alerts SeriesConfig), so the minutes the cascade rule judges
# before the fault hold the fixed load, not whatever the diurnal curve put there (with the load stepping up
# 10 min before the fault, at the afternoon peak the other A100 timed out first and was named).
INCIDENT_LEAD_S = 3000.0


def demo_profile(base: str, max_num_seqs: int = MAX_NUM_SEQS) -> str:
    """Register (once) and return the name of ``base`` with ``max_num_seqs`` (default: the demo's)."""
    from serving.emulator import profiles

    name = f"{base}-seqs{max_num_seqs}"
    if name not in profiles.PROFILES:
        profiles.PROFILES[name] = profiles.PROFILES[base].with_overrides(name=name, max_num_seqs=max_num_seqs)
    return name


def alert_config():
    """The alert rules' settings for the demo fleet (saturation at the replicas' --max-num-seqs)."""
    from alerts.config import AlertConfig

    config = AlertConfig()
    config.saturation.max_running = MAX_NUM_SEQS
    # Agentic tasks fail on their own (AGENTIC_FAILURE_RATES: ~7.5 % of the demo's tasks): a 99 %
    # task-success objective would burn all week. 85 % leaves the incident to stand out.
    config.slo.success_target = 0.85
    return config


@dataclass
class DemoOptions:
    """The demo's knobs (CLI flags). Times in seconds; rate scales multiply the trace's call rate."""

    duration_s: float | None = None  # None: until Ctrl-C
    backfill_days: float = 7.0
    reset: bool = False
    backfill_rate_scale: float = 0.2
    # Constant (no daily curve), high enough that most of the live phase's spend is allocated (~60 %;
    # at 0.1 ~70 % of it is idle): FLEET_SIZING.
    live_rate_scale: float = 0.15
    incident_after_s: float = 480.0  # BASELINE_WARMUP_S and a minute's margin
    incident_replica: str = "replica-2"
    incident_factor: float = 6.0
    incident_length_s: float = 600.0
    # A 70B call with a long context takes 10-40 s (prefill and ~340 tokens at ~30-50 ms each), up to a minute
    # more when it queues behind 4 others at the afternoon peak: clients wait 90 s before retrying, so the 6x
    # slower replica's calls (60-240 s) time out and a healthy replica's queue at the peak does not. At 60 s
    # the other A100 can time out before the fault and the cascade rule names it; at 120 s (with a 5x
    # slowdown) too few calls time out for a cascade.
    client_timeout_s: float = 90.0
    # The backfilled incident's load, as a multiple of the weekday afternoon peak: the same replay of the trace
    # whatever the hour the demo starts (BackfillPlan.fixed_load), from INCIDENT_LEAD_S before the fault to its
    # end. Above the peak the two healthy replicas cannot absorb the slowed one's share and its retries (their
    # queues step up: the cascade). At 1.0 a backfill can raise no cascade (too few retries) and at 0.85-0.9
    # the others absorb it; at 1.1 backfills started at any hour of the day name replica-2.
    incident_load: float = 1.1
    seed: int = 0
    summary_json: Path | None = None
    failure_rates: dict | None = None  # None: serving.workloads.AGENTIC_FAILURE_RATES
    reask_rates: dict | None = None  # None: no re-asked calls (see reask_rates())


def failure_rates(options: DemoOptions) -> dict:
    from serving.workloads import AGENTIC_FAILURE_RATES

    return dict(AGENTIC_FAILURE_RATES if options.failure_rates is None else options.failure_rates)


def reask_rates(options: DemoOptions) -> dict:
    """Off by default: re-asked calls (serving.workloads.AGENTIC_REASK_RATES) are attempts >= 2 at a
    steady rate, which raises the retry baseline the cascade rule compares an incident against."""
    return dict(options.reask_rates or {})


def incident_expectation(options: DemoOptions) -> str:
    """What the live incident should raise, for the banner: a replica-degradation alert only when the
    incident leaves the rule ``BASELINE_WARMUP_S`` of live history to judge the replica against."""
    if options.incident_after_s >= BASELINE_WARMUP_S:
        return ("expect a replica-degradation alert 2-4 min after it starts, "
                f"{options.incident_replica} judged against its own speed of the minutes before")
    return (f"before {BASELINE_WARMUP_S / 60:.0f} min of live history "
            f"{options.incident_replica} has no baseline of its own: no degradation alert expected")


def new_run_id() -> str:
    """A short id unique to one demo run: prefixes the live task ids so a re-run never merges tasks."""
    return datetime.now(timezone.utc).strftime("%m%d%H%M") + secrets.token_hex(2)


def live_plans(options: DemoOptions, run_id: str, horizon_s: float):
    """The live workload's task plans; task ids carry ``run_id`` (re-runs with the same seed would
    otherwise reuse ids, so one task would combine the calls of two runs)."""
    import dataclasses

    from serving.workloads import build_plans

    plans = build_plans(TRACE, None, MIX, rate_scale=options.live_rate_scale, duration_s=horizon_s,
                        seed=options.seed + 1, start_offset_s=0, model=MODEL, failure_rates=failure_rates(options),
                        reask_rates=reask_rates(options), slo_ms=SLO_MS)
    return [dataclasses.replace(p, task_id=f"live-{run_id}-{p.task_id}") for p in plans]


def utcnow() -> datetime:
    return datetime.now(timezone.utc).replace(second=0, microsecond=0)


def _retry_policy(timeout_s: float):
    from serving.plans import RetryPolicy

    # Clients time out and retry: what turns one slow GPU into a cascade.
    return RetryPolicy(max_attempts=3, backoff_base_s=0.5, backoff_max_s=8.0, timeout_s=timeout_s,
                       give_up_after_failed_steps=1)


def demo_fleet_file(data_dir: Path, now: datetime) -> Path:
    """Write the demo fleet (price cut dated three days before ``now``) under ``data_dir``; returns its path."""
    template = string.Template((Path(__file__).with_name("demo_fleet.yaml")).read_text())
    path = data_dir / "demo-fleet.yaml"
    path.write_text(template.substitute(price_change_date=(now - timedelta(days=3)).date().isoformat()))
    return path


def backfill_plan(options: DemoOptions, now: datetime):
    """The history to simulate before ``now`` (``infercost.backfill.BackfillPlan``) and its incident's
    start, in seconds from the plan's start."""
    from infercost.backfill import BackfillPlan
    from serving.emulator.faults import FaultEvent
    from serving.emulator.fleet_sim import ReplicaSpec

    start = now - timedelta(days=options.backfill_days)
    end = now - timedelta(minutes=15)  # tasks still running at the end finish before live starts
    span_s = (end - start).total_seconds()
    # The incident runs from 40 to 20 min before the live start (the backfill ends 15 min before it): the
    # dashboard's default range, the last hour, holds it from onset to recovery for the first ~20 min.
    incident_at = max(0.0, span_s - 1500)
    faults = [FaultEvent(incident_at, options.incident_replica, "slowdown", options.incident_factor,
                         incident_at + 1200)]
    # The load steps up INCIDENT_LEAD_S before the fault: the cascade rule wants the culprit slow while its
    # own load is steady (a replica that slows as its load rises is just busy).
    fixed_load = [(max(0.0, incident_at - INCIDENT_LEAD_S), incident_at + 1200,
                   options.backfill_rate_scale * options.incident_load)]
    plan = BackfillPlan(start=start, end=end, rate_scale=options.backfill_rate_scale,
                        fleet=[ReplicaSpec(rid, demo_profile(profile), gpu) for rid, (profile, gpu) in REPLICAS.items()],
                        faults=faults, fixed_load=fixed_load, seed=options.seed, mix=MIX, trace=TRACE, model=MODEL,
                        retry_policy=_retry_policy(options.client_timeout_s), failure_rates=failure_rates(options),
                        reask_rates=reask_rates(options), slo_ms=SLO_MS)
    return plan, incident_at


def backfill_history(store, options: DemoOptions, now: datetime, echo=print) -> dict:
    """Simulate ``options.backfill_days`` before ``now`` into the store, run the jobs and replay the alerts."""
    from alerts.service import AlertService
    from infercost.backfill import run_backfill
    from schema import jobs

    plan, incident_at = backfill_plan(options, now)
    start, end = plan.start, plan.end
    echo(f"backfill: simulating {options.backfill_days:g} day(s) of the fleet in virtual time "
         f"({start:%Y-%m-%d %H:%M} .. {end:%Y-%m-%d %H:%M} UTC), incident on {options.incident_replica} "
         f"at {start + timedelta(seconds=incident_at):%Y-%m-%d %H:%M} UTC")
    began = time.monotonic()
    summary = run_backfill(store, plan, progress=True)
    echo(f"backfill: {sum(summary.tasks.values())} tasks, {summary.calls} calls, {summary.spans} spans, "
         f"{summary.metric_points} metric points in {time.monotonic() - began:.0f} s")
    echo("cost jobs: recomputing the backfilled window ...")
    jobs.run_jobs(store, start=start, end=now)
    replay_from = start + timedelta(seconds=incident_at) - timedelta(minutes=30)
    replay_to = min(now, start + timedelta(seconds=incident_at + 1200) + timedelta(minutes=60))
    echo(f"alerts: replaying the evaluator minute by minute over {replay_from:%H:%M} .. {replay_to:%H:%M} UTC")
    service = AlertService(store, alert_config())
    t = replay_from
    while t <= replay_to:
        service.step(now=t)
        t += timedelta(minutes=1)
    return {"tasks": summary.tasks, "calls": summary.calls, "spans": summary.spans}


class LoadThread:
    """Runs the live task workload (``serving.workloads.run_live``) on its own event loop thread."""

    def __init__(self, plans, base_url: str, policy, tracer_provider):
        self.plans, self.base_url, self.policy, self.tracer_provider = plans, base_url, policy, tracer_provider
        self.loop = asyncio.new_event_loop()
        self.report = None
        self._task = None
        self.thread = threading.Thread(target=self._run, name="infercost-demo-load", daemon=True)

    def _run(self):
        from serving.workloads import run_live

        asyncio.set_event_loop(self.loop)
        self._task = self.loop.create_task(run_live(self.plans, self.base_url, policy=self.policy,
                                                    tracer_provider=self.tracer_provider))
        try:
            self.report = self.loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            pass
        except Exception:  # the demo keeps running its other parts
            log.exception("the demo workload stopped with an error")
        finally:
            # gather() reports "cancelled" before its children finish cancelling: let every task end (their
            # roots are exported as interrupted) instead of being destroyed pending at exit.
            pending = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
            for t in pending:
                t.cancel()
            if pending:
                self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.close()

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        if self._task is not None and not self._task.done():
            self.loop.call_soon_threadsafe(self._task.cancel)
        self.thread.join(15)
        if self.tracer_provider is not None:
            self.tracer_provider.shutdown()


class _Stoppable:
    def __init__(self, fn):
        self.stop = fn


def run_demo(settings: Settings, options: DemoOptions, echo=print) -> dict:
    """Run the demo until ``options.duration_s`` passes or Ctrl-C; returns the final summary dict."""
    from app.server import serve
    from collectors.scraper import ScrapeTarget, Scraper
    from schema import jobs
    from serving.emulator.live import start_replicas
    from serving.gateway import Gateway, GatewayConfig
    from serving.gateway.config import Upstream
    from serving.gateway.server import ServerThread
    from serving.sdk.telemetry import make_tracer_provider
    check_exposure(settings.dashboard_host, settings, "dashboard")
    check_exposure(settings.api_host, settings, "query API", token_only=True)
    data_dir = Path(settings.data_dir)
    if options.reset:
        reset_data(settings, echo)
    data_dir.mkdir(parents=True, exist_ok=True)
    now = utcnow()
    echo(f"store: {redact(settings.store_url)}")
    store = open_store(settings, echo=echo)
    sync_fleet(store, demo_fleet_file(data_dir, now), echo=echo)

    had_history = bool(store.scalar("SELECT count() > 0 FROM otel_traces", tag="demo.has_history"))
    if options.backfill_days > 0 and not had_history:
        backfill_history(store, options, now, echo)
    elif had_history:
        echo(f"reusing the data in {data_dir} (pass --reset to start over)")

    service = Service(store, settings)
    live_started = utcnow()
    receiver = service.start_receiver()  # the scraper below needs the replicas' URLs first
    otlp = f"http://{settings.receiver_host}:{receiver.port}"
    fleets = []
    for profile in dict.fromkeys(p for p, _ in REPLICAS.values()):
        ids = [rid for rid, (p, _) in REPLICAS.items() if p == profile]
        fleets.append(start_replicas(len(ids), demo_profile(profile), ids=ids, otlp_endpoint=otlp, seed=options.seed))
    replicas = {r.replica_id: r for fleet in fleets for r in fleet}
    service.extra.extend(fleets)
    service.scraper = Scraper([ScrapeTarget(f"{r.url}/metrics", rid, REPLICAS[rid][1], 1, MODEL)
                               for rid, r in replicas.items()], receiver.metrics_sink, interval_s=5.0)
    service.scraper.start()
    gateway_provider = make_tracer_provider("infercost-gateway", otlp_endpoint=otlp)
    gateway = ServerThread(Gateway(GatewayConfig([Upstream(rid, r.url) for rid, r in replicas.items()],
                                                 policy="least_loaded"), tracer_provider=gateway_provider)).start()
    service.extra.append(_Stoppable(lambda: (gateway.stop(), gateway_provider.shutdown())))
    horizon = options.duration_s or 24 * 3600
    run_id = new_run_id()
    plans = live_plans(options, run_id, horizon)
    load = LoadThread(plans, f"{gateway.url}/v1", _retry_policy(options.client_timeout_s),
                      make_tracer_provider("infercost-demo-client", otlp_endpoint=otlp)).start()
    service.extra.append(load)
    service.start_jobs()  # the schedule `infercost up` runs: the chain and the late-data recompute
    service.start_alerts(config=alert_config())
    api = service.start_api()
    dashboard = serve(store, settings.dashboard_host, settings.dashboard_port, block=False,
                      otlp_endpoint=f"{otlp}/v1/traces", auth=dashboard_auth(settings))
    service.extra.insert(0, dashboard)

    incident = replicas[options.incident_replica]
    timer = threading.Timer(options.incident_after_s, lambda: (
        incident.set_fault("slowdown", options.incident_factor, options.incident_length_s),
        echo(f"incident: {options.incident_replica} is now {options.incident_factor:g}x slower for "
             f"{options.incident_length_s:.0f} s; watch Alerts and Live operations")))
    timer.daemon = True
    timer.start()
    echo("")
    echo(f"  dashboard      {dashboard.url}   (Live operations, Cost per successful task, Triangle, Tasks, Alerts, Weekly review, Planner)")
    echo(f"  OTLP receiver  {otlp}/v1/traces   (receiver metrics: {otlp}/metrics)")
    echo(f"  gateway        {gateway.url}/v1   (OpenAI-compatible; {len(replicas)} emulated replicas behind it)")
    echo(f"  query API      {api.url}   (JSON; cost metrics for Prometheus: {api.url.rsplit('/api/', 1)[0]}/metrics)")
    echo(f"  incident       {options.incident_replica} slowed {options.incident_factor:g}x in "
         f"{options.incident_after_s:.0f} s ({incident_expectation(options)}); the backfilled "
         f"incident of 40 min ago, at a load peak, shows the full cascade on the Alerts page")
    echo("  Ctrl-C stops everything." if options.duration_s is None else f"  stopping in {options.duration_s:.0f} s.")
    deadline = time.monotonic() + options.duration_s if options.duration_s else None
    restore = stop_on_sigterm()
    try:
        while deadline is None or time.monotonic() < deadline:
            time.sleep(0.5)
    except KeyboardInterrupt:
        echo("\nstopping ...")
    finally:
        timer.cancel()
        service.stop()
        restore()
    # The last minutes: run the jobs once more so the summary includes them.
    jobs.run_jobs(store, start=live_started - timedelta(hours=2), end=utcnow() + timedelta(minutes=1))
    service.alerts = None
    summary = final_summary(store, now - timedelta(days=max(options.backfill_days, 0)) if not had_history else None,
                            utcnow() + timedelta(minutes=1))
    print_summary(summary, echo)
    if options.summary_json:
        Path(options.summary_json).write_text(json.dumps(json_safe(summary), indent=2, default=str, allow_nan=False))
    store.close()
    return summary


def stop_on_sigterm():
    """Make SIGTERM stop the demo like Ctrl-C (clean stop, summary); returns a function restoring the old
    handler. Only the main thread may install handlers: elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def on_term(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    return lambda: signal.signal(signal.SIGTERM, previous)


def reset_data(settings: Settings, echo=print) -> None:
    """``--reset``: delete the embedded store and the receiver's spool of the data dir (reviews stay).
    A server store (``INFERCOST_CLICKHOUSE_URL``) is left alone: the user drops its database."""
    paths = [settings.spool_dir]
    if settings.clickhouse_url:
        echo("reset: the store is a ClickHouse server: drop its database yourself to start over")
    else:
        paths.insert(0, Path(settings.data_dir) / "clickhouse")
    for path in paths:
        if path.exists():
            echo(f"reset: removing {path}")
            shutil.rmtree(path)


def json_safe(value):
    """``value`` with NaN / infinity replaced by None (JSON has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def final_summary(store, start: datetime | None, end: datetime) -> dict:
    """Spans ingested, rows per table, tasks by outcome, CPST, and alerts fired, from named queries."""
    from schema import queries
    from schema.queries import alerts as alert_queries
    from schema.queries import cost

    counts = queries.run(store, "demo_table_counts")
    start = start or end - timedelta(days=7)
    overall = cost.period_summary(store, start, end)
    row = overall.iloc[0].to_dict() if len(overall) else {}
    fired = alert_queries.alerts_in_period(store, start, end)
    return {
        "window": [start.isoformat(), end.isoformat()],
        "tables": dict(zip(counts["table"], (int(v) for v in counts["rows"]))),
        "summary": json_safe({k: (float(v) if isinstance(v, (int, float)) else v) for k, v in row.items()}),
        "alerts": fired.to_dict(orient="records") if len(fired) else [],
    }


# Where the spend went: the cost model's categories (schema/jobs/README.md), in the summary's order.
SPEND_CATEGORIES = (("useful_usd", "useful"), ("retry_waste_usd", "retry waste"),
                    ("failed_task_waste_usd", "failed-task waste"), ("unattributed_usd", "unattributed"),
                    ("pending_usd", "pending"), ("idle_usd", "idle GPUs"))


def waste_shares(summary: dict) -> list[tuple[str, float]]:
    """``(category, share of spend)`` of :data:`SPEND_CATEGORIES`; empty when the period has no spend."""
    spend = summary.get("spend_usd") or 0.0
    if not spend > 0:
        return []
    return [(label, (summary.get(key) or 0.0) / spend) for key, label in SPEND_CATEGORIES]


def print_summary(summary: dict, echo=print) -> None:
    s = summary["summary"]
    echo("")
    echo("summary")
    echo(f"  spans ingested          {summary['tables'].get('otel_traces', 0):,}")
    echo(f"  tasks                   {summary['tables'].get('tasks', 0):,}")
    for key, label in (("cpst_usd", "cost per successful task"), ("cost_per_request_usd", "cost per request"),
                       ("cost_per_1m_tokens_usd", "cost per 1M tokens"), ("spend_usd", "spend")):
        if key in s and s[key] is not None:
            echo(f"  {label:<23} ${s[key]:,.4f}")
    for label, share in waste_shares(s):
        echo(f"    {label:<21} {share:6.1%}")
    cascades = [a for a in summary["alerts"] if a.get("rule") == "cascading_degradation"]
    echo(f"  alerts fired            {len(summary['alerts'])} ({len(cascades)} cascading degradation"
         + (f": {', '.join(sorted({a.get('replica', '') for a in cascades}))})" if cascades else ")"))
