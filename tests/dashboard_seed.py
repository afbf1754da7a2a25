"""A direct generator of realistic telemetry for the dashboard's tests and screenshots.

Writes what the collectors would write: spans into ``otel_traces`` (task root, client attempt,
gateway request, gateway attempt, vLLM ``llm_request``; docs/telemetry.md) and vLLM gauges into
``otel_metrics_gauge`` (``vllm:num_requests_running``, ``vllm:num_requests_waiting``,
``vllm:kv_cache_usage_perc`` per replica every 15 s). The ``llm_calls`` view fills itself.

Deterministic for a given seed. One replica (``r3`` by default) is degraded: 3x slower prefill and
decode, and more 503s, so the health table and the triangle have something to show.

Also :func:`tiny_scenario`: a hand-checkable store (2 replicas, 4 engine requests, 2 tasks) whose
figures the live-operations tests compute by hand.
"""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

UTC = timezone.utc
T0 = datetime(2026, 11, 2, 10, 0, 0, tzinfo=UTC)

SPAN_COLUMNS = ["Timestamp", "TraceId", "SpanId", "ParentSpanId", "SpanName", "SpanKind", "ServiceName",
                "ResourceAttributes", "SpanAttributes", "Duration", "StatusCode", "StatusMessage"]
GAUGE_COLUMNS = ["ResourceAttributes", "ServiceName", "MetricName", "Attributes", "TimeUnix", "Value"]

REPLICAS = {"r1": "H100", "r2": "H100", "r3": "A100", "r4": "A100"}
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
TASK_TYPES = {  # type -> (steps, slo_e2e_ms, prompt tokens range, output tokens range)
    "chat": (1, 8_000, (200, 1_500), (50, 400)),
    "copilot": (4, 20_000, (800, 4_000), (20, 200)),
    "research_agent": (8, 120_000, (1_500, 8_000), (100, 600)),
}
TENANTS = ["acme", "globex", "initech"]

# Markup in telemetry (``generate(names=MARKUP_NAMES)``): a replica id, task type, tenant, model and error
# type carrying a Markdown image, a Markdown link, an HTML image and emphasis, each pointing at a host that
# is not the dashboard's (anyone who can send spans sets these strings).
FOREIGN = "127.0.0.1:9"


def markup(what: str) -> str:
    """``what`` followed by markup that, rendered, would fetch or link ``http://FOREIGN/<what>…``."""
    return (f"{what} ![t](http://{FOREIGN}/{what}.png) [docs](http://{FOREIGN}/{what}) "
            f'<img src="http://{FOREIGN}/{what}-html.png"> **{what}**')


MARKUP_NAMES = {"r3": markup("replica"), "chat": markup("task_type"), "acme": markup("tenant"),
                MODEL: markup("model"), "http.503": markup("error")}


def _hex(n: int, rng: random.Random) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


@dataclass
class _Span:
    start: datetime
    duration_s: float
    trace: str
    span: str
    parent: str
    name: str
    kind: str
    service: str
    resource: dict
    attrs: dict
    status: str = "Ok"

    def row(self):
        return [self.start, self.trace, self.span, self.parent, self.name, self.kind, self.service,
                self.resource, {k: str(v) for k, v in self.attrs.items()}, int(self.duration_s * 1e9),
                self.status, ""]


@dataclass
class Seeded:
    """What was written, for assertions: counts and the time span of the data."""

    start: datetime
    end: datetime
    tasks: int = 0
    engine_calls: int = 0
    spans: int = 0
    gauges: int = 0
    engine_intervals: dict = field(default_factory=dict)  # replica -> [(start, queue_end, end, tokens)]


def _engine_span(rng, trace, parent, replica, start, prompt, output, degraded, finish="stop", status="Ok",
                 name=None, model=MODEL):
    # ``name``: the replica id the span carries (default ``replica``); ``model``: the model it names
    slow = 3.0 if degraded else 1.0
    # A slow replica also queues: its batch drains slower, so requests wait for a slot.
    queue = rng.uniform(0.0, 2.0) if degraded else rng.uniform(0.0, 0.05)
    prefill = (0.03 + 0.0002 * prompt) * slow
    itl = rng.uniform(0.010, 0.016) * slow
    decode = itl * max(output - 1, 0)
    e2e = queue + prefill + decode
    attrs = {
        "gen_ai.request.id": f"chatcmpl-{_hex(12, rng)}",
        "gen_ai.usage.prompt_tokens": prompt,
        "gen_ai.usage.completion_tokens": output,
        "gen_ai.latency.time_in_queue": round(queue, 6),
        "gen_ai.latency.time_in_model_prefill": round(prefill, 6),
        "gen_ai.latency.time_in_model_decode": round(decode, 6),
        "gen_ai.latency.time_in_model_inference": round(prefill + decode, 6),
        "gen_ai.latency.time_to_first_token": round(queue + prefill, 6),
        "gen_ai.latency.e2e": round(e2e, 6),
        "gen_ai.response.finish_reasons": json.dumps([finish]),
        "gen_ai.request.model": model,
    }
    resource = {"service.name": "vllm", "service.instance.id": name or replica, "gpu.type": REPLICAS[replica],
                "gpu.count": "1"}
    return _Span(start, e2e, trace, _hex(16, rng), parent, "llm_request", "Server", "vllm", resource, attrs, status)


def generate(store, tasks: int = 400, hours: float = 1.0, seed: int = 7, start: datetime = T0,
             degraded: str = "r3", gauges: bool = True, names: dict[str, str] | None = None) -> Seeded:
    """Write ``tasks`` tasks spread over ``hours`` from ``start`` into ``store``; returns :class:`Seeded`.

    Each step's call goes client -> gateway -> engine; 2 % of attempts on a healthy replica (25 % on
    the degraded one) fail with HTTP 503 before reaching the engine and are retried by the client (up
    to 3 attempts), 3 % break mid-stream (partial, finish_reason ``abort``). A task whose step runs
    out of attempts fails; 2 % of tasks are abandoned by the client.

    ``names`` renames what the producers would send: ``{"r3": "…", "chat": "…", "acme": "…", MODEL: "…"}``
    gives a replica id, task type, tenant, model or error type another text (the same draws and figures
    otherwise), e.g. :data:`MARKUP_NAMES`.
    """
    rng = random.Random(seed)
    names = dict(names or {})
    shown = lambda value: names.get(value, value)  # noqa: E731
    model = shown(MODEL)
    spans: list[_Span] = []
    out = Seeded(start=start, end=start + timedelta(hours=hours))
    replicas = list(REPLICAS)
    span_s = hours * 3600
    for _ in range(tasks):
        task_type = rng.choices(list(TASK_TYPES), weights=[6, 3, 1])[0]
        steps, slo_ms, p_range, o_range = TASK_TYPES[task_type]
        tenant = rng.choice(TENANTS)
        trace = _hex(32, rng)
        root_id = _hex(16, rng)
        task_id = str(uuid.UUID(int=rng.getrandbits(128)))
        ctx = {"task.id": task_id, "task.type": shown(task_type), "tenant.id": shown(tenant),
               "tenant.priority": "batch" if task_type == "research_agent" else "interactive"}
        t_start = start + timedelta(seconds=rng.uniform(0, span_s))
        t = t_start
        outcome = "success"
        for step in range(1, steps + 1):
            step_name = f"step{step}"
            prompt = rng.randint(*p_range)
            output = rng.randint(*o_range)
            done = False
            for attempt in range(1, 4):
                replica = rng.choice(replicas)
                bad = replica == degraded
                client_id, gw_req_id, gw_att_id = _hex(16, rng), _hex(16, rng), _hex(16, rng)
                step_ctx = dict(ctx, **{"task.step": step_name, "task.attempt": attempt})
                fail = rng.random() < (0.25 if bad else 0.02)
                broken = not fail and rng.random() < 0.03
                if fail:
                    dur = rng.uniform(0.01, 0.05)
                    gw_attrs = dict(step_ctx, **{"gateway.attempt": 1, "gateway.replica": shown(replica),
                                                 "gateway.policy": "least_loaded",
                                                 "gateway.upstream.status_code": 503, "error.type": shown("http.503")})
                    spans.append(_Span(t, dur, trace, gw_att_id, gw_req_id, "gateway.attempt", "Client", "gateway",
                                       {"service.name": "gateway"}, gw_attrs, "Error"))
                    client_attrs = dict(step_ctx, **{"gen_ai.operation.name": "chat", "gen_ai.provider.name": "vllm",
                                                     "gen_ai.request.model": model, "error.type": shown("http.503")})
                else:
                    got = rng.randint(1, max(1, output // 2)) if broken else output
                    eng = _engine_span(rng, trace, gw_att_id, replica, t + timedelta(milliseconds=2), prompt, got, bad,
                                       finish="abort" if broken else "stop", name=shown(replica), model=model)
                    spans.append(eng)
                    out.engine_calls += 1
                    q_end = eng.start + timedelta(seconds=float(eng.attrs["gen_ai.latency.time_in_queue"]))
                    out.engine_intervals.setdefault(replica, []).append(
                        (eng.start, q_end, eng.start + timedelta(seconds=eng.duration_s), prompt + got))
                    dur = eng.duration_s + 0.004
                    gw_attrs = dict(step_ctx, **{"gateway.attempt": 1, "gateway.replica": shown(replica),
                                                 "gateway.policy": "least_loaded",
                                                 "gateway.upstream.status_code": 200, "gateway.tokens_streamed": got})
                    status = "Ok"
                    if broken:
                        gw_attrs["error.type"] = "stream_broken"
                        status = "Error"
                    spans.append(_Span(t, dur, trace, gw_att_id, gw_req_id, "gateway.attempt", "Client", "gateway",
                                       {"service.name": "gateway"}, gw_attrs, status))
                    client_attrs = dict(step_ctx, **{
                        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "vllm", "gen_ai.request.model": model,
                        "gen_ai.usage.input_tokens": prompt, "gen_ai.usage.output_tokens": got,
                        "gen_ai.response.finish_reasons": json.dumps(["abort" if broken else "stop"]),
                        "gen_ai.response.time_to_first_chunk": eng.attrs["gen_ai.latency.time_to_first_token"],
                        "gen_ai.client.tokens_received": got})
                    if broken:
                        client_attrs.update({"gen_ai.client.partial": "true", "error.type": "stream_broken"})
                gw_req_attrs = dict(step_ctx, **{"gateway.policy": "least_loaded", "gateway.retries": 0,
                                                 "gateway.admission": "admitted", "gateway.replica": shown(replica)})
                spans.append(_Span(t, dur + 0.001, trace, gw_req_id, client_id, "gateway chat", "Server", "gateway",
                                   {"service.name": "gateway"}, gw_req_attrs, "Error" if fail or broken else "Ok"))
                spans.append(_Span(t, dur + 0.002, trace, client_id, root_id, f"chat {model}", "Client", "agent",
                                   {"service.name": "agent"}, client_attrs, "Error" if fail or broken else "Ok"))
                t += timedelta(seconds=dur + 0.01 + (0.2 * attempt if fail else 0))
                if not (fail or broken):
                    done = True
                    break
            if not done:
                outcome = "failure"
                break
        if outcome == "success" and rng.random() < 0.02:
            outcome = "abandoned"
        root_attrs = dict(ctx, **{"task.outcome": outcome, "slo.ttft_ms": 2000, "slo.e2e_ms": slo_ms})
        if outcome != "success":
            root_attrs["error.type"] = outcome
        spans.append(_Span(t_start, (t - t_start).total_seconds() + 0.005, trace, root_id, "", f"task {shown(task_type)}",
                           "Internal", "agent", {"service.name": "agent"}, root_attrs,
                           "Ok" if outcome == "success" else "Error"))
        out.tasks += 1
    _insert_spans(store, spans)
    out.spans = len(spans)
    if gauges:
        out.gauges = _insert_gauges(store, out, shown)
    return out


def _insert_spans(store, spans: list[_Span], chunk: int = 20_000) -> None:
    rows = [s.row() for s in spans]
    for i in range(0, len(rows), chunk):
        store.insert("otel_traces", rows[i:i + chunk], SPAN_COLUMNS, tag="test.seed.spans")


def gauge_row(replica: str, metric: str, at: datetime, value: float, model: str = MODEL, name: str | None = None):
    """One ``otel_metrics_gauge`` row in the scraper's layout (replica in ResourceAttributes; ``name``: the
    id it carries, default ``replica``)."""
    resource = {"service.name": "vllm", "service.instance.id": name or replica, "gpu.type": REPLICAS.get(replica, "H100")}
    return [resource, "vllm", metric, {"model_name": model, "engine": "0"}, at, float(value)]


def _insert_gauges(store, seeded: Seeded, shown=lambda value: value, every_s: float = 15.0,
                   kv_capacity_tokens: int = 60_000) -> int:
    rows = []
    n = int((seeded.end - seeded.start).total_seconds() // every_s) + 1
    for replica in REPLICAS:
        intervals = seeded.engine_intervals.get(replica, [])
        for i in range(n):
            at = seeded.start + timedelta(seconds=i * every_s)
            running = sum(1 for s, q, e, _ in intervals if q <= at < e)
            waiting = sum(1 for s, q, e, _ in intervals if s <= at < q)
            kv = min(1.0, sum(tok for s, q, e, tok in intervals if q <= at < e) / kv_capacity_tokens)
            for metric, value in (("vllm:num_requests_running", running), ("vllm:num_requests_waiting", waiting),
                                  ("vllm:kv_cache_usage_perc", kv)):
                rows.append(gauge_row(replica, metric, at, value, shown(MODEL), shown(replica)))
    store.insert("otel_metrics_gauge", rows, GAUGE_COLUMNS, tag="test.seed.gauges")
    return len(rows)


def tiny_scenario(store) -> dict:
    """A hand-checkable store: 4 engine requests on r1 (H100) and r2 (A100) in 10:00-10:05, 1 in 09:55-10:00.

    Current window [10:00, 10:05): engine requests (replica, ttft s, e2e s, output tokens, decode s, finish):
      a: r1, 0.10, 1.00,  10, 0.90, stop       (ITL 0.10)
      b: r1, 0.20, 2.00,  21, 1.80, stop       (ITL 0.09)
      c: r2, 0.40, 3.00,  11, 2.60, stop       (ITL 0.26)
      d: r2, 0.80, 0.80,   0, 0.00, abort, status Error
    Previous window [09:55, 10:00): one request on r1, ttft 0.05, 10 tokens.
    Gateway attempts in the current window: 5 (one 503 on r2 then its retry -> c; a, b, d) over 4
    gateway requests -> 1 hidden retry; client attempts: 4, one with task.attempt=2.
    Task roots ending in [10:00, 10:05): t1 success in 1.5 s (slo 5000 ms), t2 success in 9 s
    (slo 5000 ms, missed), t3 failure. Gauges at 10:04: r1 running 2 waiting 1 kv 0.5; r2 running 1
    waiting 3 kv 0.25; at 09:59: r1 waiting 0, r2 waiting 1.
    """
    rng = random.Random(1)
    at = datetime(2026, 11, 2, 10, 1, 0, tzinfo=UTC)
    spans = []

    def engine(replica, start, ttft, e2e, tokens, decode, finish, status="Ok", parent=""):
        attrs = {"gen_ai.usage.prompt_tokens": 100, "gen_ai.usage.completion_tokens": tokens,
                 "gen_ai.latency.time_to_first_token": ttft, "gen_ai.latency.e2e": e2e,
                 "gen_ai.latency.time_in_model_decode": decode, "gen_ai.latency.time_in_queue": 0.01,
                 "gen_ai.response.finish_reasons": json.dumps([finish]), "gen_ai.request.model": MODEL}
        res = {"service.name": "vllm", "service.instance.id": replica, "gpu.type": {"r1": "H100", "r2": "A100"}[replica]}
        spans.append(_Span(start, e2e, "t" * 32, _hex(16, rng), parent, "llm_request", "Server", "vllm", res, attrs,
                           status))

    def gateway(replica, start, status_code, parent_req, task, attempt, ok=True):
        sid = _hex(16, rng)
        attrs = {"gateway.attempt": 1, "gateway.replica": replica, "gateway.upstream.status_code": status_code,
                 "task.id": task, "task.type": "chat", "tenant.id": "acme", "task.attempt": attempt}
        spans.append(_Span(start, 0.5, "t" * 32, sid, parent_req, "gateway.attempt", "Client", "gateway",
                           {"service.name": "gateway"}, attrs, "Ok" if ok else "Error"))
        return sid

    def client(start, task, attempt, ok=True):
        attrs = {"gen_ai.operation.name": "chat", "gen_ai.request.model": MODEL, "task.id": task, "task.type": "chat",
                 "tenant.id": "acme", "task.attempt": attempt}
        spans.append(_Span(start, 0.5, "t" * 32, _hex(16, rng), "", f"chat {MODEL}", "Client", "agent",
                           {"service.name": "agent"}, attrs, "Ok" if ok else "Error"))

    g_a = gateway("r1", at, 200, "q1", "t1", 1)
    g_b = gateway("r1", at, 200, "q2", "t2", 1)
    gateway("r2", at, 503, "q3", "t2", 1, ok=False)
    g_c = gateway("r2", at, 200, "q3", "t2", 1)
    g_d = gateway("r2", at, 200, "q4", "t3", 1, ok=False)
    engine("r1", at, 0.10, 1.00, 10, 0.90, "stop", parent=g_a)
    engine("r1", at, 0.20, 2.00, 21, 1.80, "stop", parent=g_b)
    engine("r2", at, 0.40, 3.00, 11, 2.60, "stop", parent=g_c)
    engine("r2", at, 0.80, 0.80, 0, 0.0, "abort", status="Error", parent=g_d)
    engine("r1", datetime(2026, 11, 2, 9, 57, tzinfo=UTC), 0.05, 0.5, 10, 0.45, "stop")
    client(at, "t1", 1)
    client(at, "t2", 1)
    client(at, "t2", 2)
    client(at, "t3", 1, ok=False)
    for task, dur, outcome in (("t1", 1.5, "success"), ("t2", 9.0, "success"), ("t3", 2.0, "failure")):
        attrs = {"task.id": task, "task.type": "chat", "tenant.id": "acme", "task.outcome": outcome,
                 "slo.e2e_ms": 5000}
        spans.append(_Span(at, dur, "t" * 32, _hex(16, rng), "", "task chat", "Internal", "agent",
                           {"service.name": "agent"}, attrs, "Ok" if outcome == "success" else "Error"))
    _insert_spans(store, spans)
    g = datetime(2026, 11, 2, 10, 4, tzinfo=UTC)
    p = datetime(2026, 11, 2, 9, 59, tzinfo=UTC)
    rows = [gauge_row("r1", "vllm:num_requests_running", g, 2), gauge_row("r1", "vllm:num_requests_waiting", g, 1),
            gauge_row("r1", "vllm:kv_cache_usage_perc", g, 0.5), gauge_row("r2", "vllm:num_requests_running", g, 1),
            gauge_row("r2", "vllm:num_requests_waiting", g, 3), gauge_row("r2", "vllm:kv_cache_usage_perc", g, 0.25),
            gauge_row("r1", "vllm:num_requests_waiting", p, 0), gauge_row("r2", "vllm:num_requests_waiting", p, 1)]
    store.insert("otel_metrics_gauge", rows, GAUGE_COLUMNS, tag="test.seed.gauges")
    return {"start": datetime(2026, 11, 2, 10, 0, tzinfo=UTC), "end": datetime(2026, 11, 2, 10, 5, tzinfo=UTC)}


FLEET_YAML = """gpu_types:
  H100:
    prices:
      - {usd_per_gpu_hour: 3.60, valid_from: 2025-01-01}
  A100:
    prices:
      - {usd_per_gpu_hour: 1.80, valid_from: 2025-01-01}
replicas:
  r1: {gpu_type: H100, gpu_count: 1}
  r2: {gpu_type: H100, gpu_count: 1}
  r3: {gpu_type: A100, gpu_count: 1}
  r4: {gpu_type: A100, gpu_count: 1}
"""


def stop_periodic_jobs(store) -> None:
    """Stop the cost engine's periodic refresh chain in this database (explicit runs only in tests)."""
    try:
        from schema import jobs
    except ImportError:
        return
    if hasattr(jobs, "stop"):
        jobs.stop(store)


def run_cost_jobs(store, start: datetime, end: datetime) -> bool:
    """Sync the scenario's fleet (prices) and run the cost jobs over [start, end + 5 min) when they exist."""
    try:
        from schema.fleet import parse_fleet, sync_fleet
        from schema.jobs import run_jobs
    except ImportError:
        return False
    stop_periodic_jobs(store)
    sync_fleet(store, parse_fleet(FLEET_YAML))
    run_jobs(store, start=start, end=end + timedelta(minutes=5))
    return True


def seed_alerts(store, seeded: Seeded, replica: str = "r3", cascade: bool = False) -> int:
    """Write a firing and a resolved alert about the degraded replica (its id as the spans carry it:
    ``replica``) when the alerts module exists; with ``cascade``, also a firing cascade naming it as the
    culprit, its chain, candidates and suggested actions in the evaluator's words (``alerts.cascade``)."""
    try:
        from schema.queries.alerts import AlertChange, insert_alert_changes
    except ImportError:
        return 0
    import dataclasses

    names = {f.name for f in dataclasses.fields(AlertChange)}
    fired = seeded.end - timedelta(minutes=20)
    base = dict(alert_id="a-r3-latency", rule="replica_latency_outlier", alert_key=replica, severity="page",
                replica=replica, started_at=fired - timedelta(minutes=3), fired_at=fired, resolved_at=None,
                summary=f"{replica} TTFT p95 2.7x the fleet median", description=f"One slow GPU: {replica} (A100).",
                evidence={"ttft_p95_s": 2.4, "fleet_median_s": 0.9}, est_cost_usd=1.25,
                cost_source="replica_minutes", labels={"gpu.type": "A100"}, evaluator="seed")
    changes = [dict(base, event_time=fired, state="firing"),
               dict(base, alert_id="a-queue", rule="queue_growth", alert_key="fleet", replica="", severity="ticket",
                    summary="Queue grew 3x in 10 min", event_time=fired - timedelta(minutes=10), state="resolved",
                    resolved_at=fired - timedelta(minutes=10), est_cost_usd=None)]
    if cascade:
        changes.append(_cascade_change(base, replica, fired))
    try:
        rows = [AlertChange(**{k: v for k, v in c.items() if k in names}) for c in changes]
        return insert_alert_changes(store, rows)
    except Exception:  # the alerts issue owns this shape; the dashboard test must not depend on it
        return 0


def _cascade_change(base: dict, replica: str, fired: datetime) -> dict:
    """A firing cascade with ``replica`` as its culprit, in the shape ``alerts.evaluator`` stores."""
    from alerts.cascade import actions, _summary
    from alerts.model import alert_id, replica_label

    onset = fired - timedelta(minutes=6)
    chain = [{"step": "trigger", "rule": "", "replica": replica, "started_at": onset.isoformat(),
              "summary": f"{replica_label(replica)} slowed on its own work: speed ratio 1.00 -> 2.70 (its load x1.00)"},
             {"step": "sustaining", "rule": "retry_amplification", "replica": "",
              "started_at": (onset + timedelta(minutes=2)).isoformat(),
              "summary": "fleet retries per first attempt 2.0% -> 9.0%"}]
    candidate = {"replica": replica, "onset_at": onset.isoformat(), "evidence": "speed", "speed_before": 1.0,
                 "speed_after": 2.7, "failure_share": 0.6, "load_ratio": 1.0, "explains": 0.8}
    figures = {"culprit": replica, "chain": chain, "candidates": [candidate], "actions": actions(replica),
               "culprit_status": "degraded"}
    return dict(base, alert_id=alert_id("cascading_degradation", ""), rule="cascading_degradation", alert_key="",
                severity="critical", started_at=onset, event_time=fired, state="firing",
                summary=_summary(replica, chain, "degraded"), description=f"Cascading degradation from {replica}.",
                evidence={"figures": figures, "onset": {"at": onset.isoformat()}}, est_cost_usd=2.5)
