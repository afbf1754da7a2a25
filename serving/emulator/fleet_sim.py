"""Virtual-time simulation of a whole serving tier: tasks -> clients -> gateway -> vLLM replicas.

Where it sits: serving/emulator. Drives one engine model (engine.py) per replica on a simulated
clock (a heap of events; idle time is jumped over, identical decode steps are batched), with the
task SDK's client behaviour (``serving.plans.RetryPolicy``: per-attempt timeout, retries with
exponential backoff and full jitter, abandon), and a gateway model (routing ``round_robin`` |
``least_loaded`` | ``session_affinity``, hidden retries on connection errors and 5xx, passive
ejection of a replica that refused a connection). Faults come from a timeline of ``FaultEvent``.

Output, to a sink (otlp.py), with timestamps in simulated time from ``start_time_ns``:
- the spans of docs/telemetry.md: task root, client attempts, gateway request + gateway attempts,
  and vLLM's ``llm_request`` for every finished engine request, in vLLM 0.32's shape (spans.py;
  none for a request the client aborted, none for requests in flight on a replica that crashed;
  resource ``vllm.process_id`` new on every restart);
- every ``metrics_interval_s`` and replica (while it is up): running/waiting/KV-usage gauges,
  token (prompt, cached prompt, generation)/preemption/prefix-cache/request-success sums,
  TTFT/ITL/e2e/queue-time histograms.

Usage::

    from serving.emulator.fleet_sim import ReplicaSpec, simulate
    from serving.emulator.faults import FaultEvent
    from serving.emulator.otlp import MemorySink
    fleet = [ReplicaSpec(f"r{i}") for i in range(4)]
    summary = simulate(plans, fleet, policy="least_loaded", retry_policy=RetryPolicy(timeout_s=30),
                       faults=[FaultEvent(600, "r2", "slowdown", 3.0)], sink=MemorySink(), seed=1)
"""

from __future__ import annotations

import heapq
import random
import time
import zlib

from dataclasses import dataclass, field
from typing import Iterable

from schema import semconv as sc
from serving import otlp_encoding
from serving.emulator.engine import Engine, EngineRequest
from serving.emulator.frontend import FrontEnd, step_outputs
from serving.emulator.kvcache import segments_from_hash_ids
from serving.emulator.sim_control import AutoscaleRule, FleetControl
from serving.emulator.sim_replicas import CLIENT_GATEWAY_S, GATEWAY_REPLICA_S, ReplicaEvents
from serving.emulator.otlp import (SPAN_KIND_CLIENT, SPAN_KIND_INTERNAL, SPAN_KIND_SERVER, STATUS_ERROR, STATUS_OK,
                                   STATUS_UNSET,
                                   ReplicaMetrics, SpanBatcher)
from serving.emulator.profiles import get_profile
from serving.emulator.sim_spans import (CLIENT_SERVICE, GATEWAY_ATTEMPT_SPAN_NAME, GATEWAY_SERVICE,
                                        GATEWAY_SPAN_NAME, client_attrs, gateway_attempt_attrs, gateway_attrs,
                                        step_context, task_context, task_root_attrs)
from schema.semconv import VLLM_PROCESS_ID
from serving.emulator.spans import SCOPE_NAME, engine_span_attributes, replica_resource, sdk_resource
from serving.emulator.static import StaticEngine
from serving.plans import RetryPolicy, TaskPlan

POLICIES = ("round_robin", "least_loaded", "session_affinity")
EJECT_S = 10.0  # passive health check: a replica that refused a connection is skipped this long
GATEWAY_RETRY_STATUS = (500, 502, 503, 504)


@dataclass(frozen=True)
class ReplicaSpec:
    """One replica: ``id`` (becomes ``service.instance.id``), engine ``profile`` name, GPU type and
    count (default: the profile's), prefix caching, static batching (comparison only), and vLLM's
    ``--max-num-seqs`` (default: the profile's)."""

    id: str
    profile: str = "h100-llama-3.1-8b"
    gpu_type: str | None = None
    gpu_count: int | None = None
    prefix_caching: bool = True
    static: bool = False
    max_num_seqs: int | None = None


@dataclass
class SimSummary:
    """What a simulation produced. Times in seconds."""

    tasks: dict = field(default_factory=lambda: {"success": 0, "failure": 0, "abandoned": 0})
    calls: int = 0
    attempts: int = 0
    engine_requests: int = 0
    engine_spans: int = 0
    spans: int = 0
    metric_points: int = 0
    client_retries: int = 0
    gateway_retries: int = 0
    timeouts: int = 0
    rejections: int = 0  # attempts the gateway's admission control answered with 429
    scale_events: int = 0  # autoscaling: replicas booted or drained
    crashed_requests: int = 0
    preemptions: int = 0
    generation_tokens: int = 0
    sim_seconds: float = 0.0
    wall_seconds: float = 0.0
    per_replica: dict = field(default_factory=dict)

    @property
    def requests_per_wall_second(self) -> float:
        return self.engine_requests / self.wall_seconds if self.wall_seconds else 0.0


class _Rep:
    __slots__ = ("spec", "idx", "profile", "engine", "ver", "down", "unhealthy_until", "outstanding", "errors",
                 "res_key", "res_attrs", "start_s", "inflight", "preempt_base", "gen_base", "requests", "metrics",
                 "spans_lost", "metrics_lost", "draining",
                 "state", "ready_at", "frontend", "fe_since")


class _Task:
    __slots__ = ("plan", "trace_id", "root_id", "start", "step_i", "pending", "step_failed", "failed_steps",
                 "done", "inflight", "last_error", "ctx")


class _Attempt:
    __slots__ = ("task", "step", "ci", "call", "n", "t0", "client_id", "gw_id", "gw_start", "gw_no", "gw_retries",
                 "gw_att_id", "gw_att_start", "rep", "req", "done", "tried", "admitted")


class FleetSimulator(ReplicaEvents, FleetControl):
    """The event loop behind ``simulate`` (see its docstring)."""

    def __init__(self, fleet, *, start_time_ns: int, policy: str, retry_policy: RetryPolicy, faults, sink, seed: int,
                 metrics_interval_s: float, gateway_retries: int, spans: str, span_batch: int, full_metrics: bool,
                 noise_sigma: float, step_batching: bool = True, admission_caps: dict[str, int] | None = None,
                 autoscale: AutoscaleRule | None = None):
        if policy not in POLICIES:
            raise ValueError(f"unknown routing policy {policy!r}; known: {', '.join(POLICIES)}")
        if spans not in ("all", "engine", "none"):
            raise ValueError(f"spans must be 'all', 'engine' or 'none', got {spans!r}")
        if not fleet:
            raise ValueError("the fleet needs at least one replica")
        ids = [r.id for r in fleet]
        if len(set(ids)) != len(ids):
            raise ValueError(f"duplicate replica ids in {ids}")
        for ev in faults:
            if ev.replica != "*" and ev.replica not in ids:
                raise ValueError(f"fault {ev} names unknown replica {ev.replica!r}; replicas: {ids}")
        if metrics_interval_s <= 0:
            raise ValueError("metrics_interval_s must be > 0")
        self.start_ns = start_time_ns
        self.policy = policy
        self.rp = retry_policy
        self.rng = random.Random(seed)  # behaviour: fault draws, backoff jitter
        self.ids = random.Random(seed + 0x5EED)  # span and trace ids: the span mode never changes behaviour
        self.interval = metrics_interval_s
        self.gw_budget = gateway_retries
        self.span_mode = spans
        self.full_metrics = full_metrics
        self.max_steps = None if step_batching else 1  # 1: one event per engine step (benchmark baseline)
        self.sink = sink
        self.batcher = SpanBatcher(sink if spans != "none" else None, batch=span_batch)
        self.client_res = self.batcher.resource({"service.name": CLIENT_SERVICE})
        self.gateway_res = self.batcher.resource({"service.name": GATEWAY_SERVICE})
        self.heap: list = []
        self.seq = 0
        self.rr = 0
        self.req_no = 0
        self.summary = SimSummary()
        self.reps: list[_Rep] = []
        self.sdk_res = sdk_resource()
        for i, spec in enumerate(fleet):
            overrides = {"noise_sigma": noise_sigma} if noise_sigma else {}
            if spec.max_num_seqs is not None:
                if spec.max_num_seqs < 1:
                    raise ValueError(f"replica {spec.id}: max_num_seqs must be >= 1, got {spec.max_num_seqs}")
                overrides["max_num_seqs"] = int(spec.max_num_seqs)
            prof = get_profile(spec.profile, **overrides)
            r = _Rep()
            r.spec, r.idx, r.profile = spec, i, prof
            cls = StaticEngine if spec.static else Engine
            kw = {} if spec.static else {"prefix_caching": spec.prefix_caching, "detailed_stats": full_metrics}
            r.engine = cls(prof, seed=seed * 1000 + i, start_time=0.0, **kw)
            r.frontend, r.fe_since = FrontEnd(prof), 0.0
            r.ver = 0
            r.down = False
            r.unhealthy_until = -1.0
            r.outstanding = 0
            r.errors = {}
            r.res_attrs = replica_resource(spec.id, spec.gpu_type or prof.gpu_type, spec.gpu_count or prof.gpu_count,
                                           prof.model)
            self.new_incarnation(r)
            # metric points carry the scraper's resource (no vllm.* span attributes)
            r.metrics = ReplicaMetrics({k: v for k, v in r.res_attrs.items() if not k.startswith("vllm.")},
                                       prof.model, full=full_metrics)
            r.start_s = 0.0
            r.inflight = {}
            r.preempt_base = 0
            r.gen_base = 0
            r.requests = 0
            r.spans_lost = r.metrics_lost = r.draining = False
            self.reps.append(r)
        self.by_id = {r.spec.id: r for r in self.reps}
        for ev in faults:
            self.push(ev.at_s, self.on_fault, ev)
            if ev.until_s is not None and ev.kind != "crash":
                self.push(ev.until_s, self.on_fault_end, ev)
        self.active_tasks = 0
        self.arrivals_left = False
        self.all_healthy_until = -1.0  # no replica is ejected after this time
        self.progress = None
        self.init_control(admission_caps, autoscale)

    # ------------------------------------------------------------------ helpers
    def new_incarnation(self, rep) -> None:
        """A (re)started replica process: vLLM 0.32 puts its pid in ``vllm.process_id`` (an emulated one here)."""
        rep.res_attrs = {**rep.res_attrs, VLLM_PROCESS_ID: str(self.ids.randrange(1000, 4_000_000))}
        rep.res_key = self.batcher.resource({**self.sdk_res, **rep.res_attrs}, SCOPE_NAME)

    def push(self, t: float, fn, arg) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, fn, arg))

    def ns(self, t: float) -> int:
        return self.start_ns + int(t * 1e9)

    def new_id(self) -> bytes:
        if self.span_mode != "all":
            return b""  # no client/gateway spans: ids are never used
        return self.ids.getrandbits(64).to_bytes(8, "big")

    def span(self, res_key, trace_id, span_id, parent, name, kind, start, end, attrs, status=0, msg="", pre=b""):
        self.batcher.add(res_key, otlp_encoding.span(trace_id, span_id, parent, name, kind, self.ns(start), self.ns(end),
                                             attrs, status, msg, pre))
        self.summary.spans += 1

    # ------------------------------------------------------------------ run
    def run(self, plans, progress: bool, until_s: float | None, total: int | None = None) -> SimSummary:
        wall0 = time.perf_counter()
        if isinstance(plans, (list, tuple)):
            plans = sorted(plans, key=lambda p: p.arrival_s)
            total = len(plans)
        it = iter(plans)
        first = next(it, None)
        self.arrivals_left = first is not None
        if first is not None:
            self.push(first.arrival_s, self.on_task_arrival, (first, it))
        self.push(self.interval, self.on_tick, None)
        if progress:
            from tqdm import tqdm

            self.progress = tqdm(total=total, unit="task", desc="simulating", mininterval=0.5)
        heap = self.heap
        t = 0.0
        try:
            while heap:
                t, _, fn, arg = heapq.heappop(heap)
                if until_s is not None and t > until_s:
                    break
                fn(t, arg)
        finally:
            if self.progress is not None:
                self.progress.close()
        self.batcher.flush()
        s = self.summary
        s.sim_seconds = t
        s.scale_events = self.scale_events
        for r in self.reps:
            st = r.engine.stats
            s.preemptions += r.preempt_base + st.num_preemptions
            s.generation_tokens += r.gen_base + st.generation_tokens
            s.per_replica[r.spec.id] = {"requests": r.requests, "preemptions": r.preempt_base + st.num_preemptions,
                                        "generation_tokens": r.gen_base + st.generation_tokens}
        s.wall_seconds = time.perf_counter() - wall0
        return s

    # ------------------------------------------------------------------ tasks
    def on_task_arrival(self, t, arg):
        plan, it = arg
        nxt = next(it, None)
        if nxt is not None:
            if nxt.arrival_s < plan.arrival_s:
                raise ValueError(f"plans must be sorted by arrival_s: {nxt.task_id} ({nxt.arrival_s}) "
                                 f"after {plan.task_id} ({plan.arrival_s})")
            self.push(nxt.arrival_s, self.on_task_arrival, (nxt, it))
        else:
            self.arrivals_left = False
        task = _Task()
        task.plan = plan
        task.trace_id = self.ids.getrandbits(128).to_bytes(16, "big")
        task.root_id = self.new_id()
        task.start = t
        task.step_i = 0
        task.failed_steps = 0
        task.done = False
        task.inflight = {}  # attempt -> None: insertion-ordered (a set of objects iterates in address order)
        task.last_error = None
        task.ctx = otlp_encoding.attributes(task_context(plan)) if self.span_mode == "all" else b""
        self.active_tasks += 1
        if self.rp.abandon_after_s is not None:
            self.push(t + self.rp.abandon_after_s, self.on_abandon, task)
        self.start_step(t, task)

    def start_step(self, t, task):
        steps = task.plan.steps
        if task.plan.fail_at_step is not None and task.step_i == task.plan.fail_at_step + 1:
            # The client rejected the previous step's result (serving.workloads.runner does the same live).
            self.finish_task(t, task, "failure", "step_rejected")
            return
        if task.step_i >= len(steps):
            self.finish_task(t, task, "success" if task.failed_steps == 0 else "failure", task.last_error)
            return
        step = steps[task.step_i]
        if not step.calls:
            task.step_i += 1
            self.start_step(t, task)
            return
        task.pending = len(step.calls)
        task.step_failed = False
        for ci, call in enumerate(step.calls):
            self.summary.calls += 1
            self.start_attempt(t, (task, ci, 1))

    def finish_task(self, t, task, outcome, error_type=None):
        if task.done:
            return
        task.done = True
        for a in list(task.inflight):
            self.cancel_attempt(t, a, "cancelled")
        task.inflight.clear()
        self.active_tasks -= 1
        self.summary.tasks[outcome] = self.summary.tasks.get(outcome, 0) + 1
        if self.span_mode == "all":
            failed = outcome == "failure"
            self.span(self.client_res, task.trace_id, task.root_id, None, f"task {task.plan.task_type}",
                      SPAN_KIND_INTERNAL, task.start, t,
                      task_root_attrs(task.plan, outcome, error_type if outcome != "success" else None),
                      STATUS_ERROR if failed else STATUS_UNSET, (error_type or "") if failed else "", task.ctx)
        if self.progress is not None:
            self.progress.update(1)

    def on_abandon(self, t, task):
        if not task.done:
            self.finish_task(t, task, "abandoned", "abandoned")

    # ------------------------------------------------------------------ client attempts
    def start_attempt(self, t, arg):
        task, ci, n = arg
        if task.done:
            return
        step = task.plan.steps[task.step_i]
        a = _Attempt()
        a.task, a.step, a.ci, a.call, a.n = task, step.name, ci, step.calls[ci], n
        a.t0 = t
        a.client_id = self.new_id()
        a.gw_id = self.new_id()
        a.gw_start = t + CLIENT_GATEWAY_S
        a.gw_no = 0
        a.gw_retries = 0
        a.rep = None
        a.req = None
        a.done = False
        a.tried = []
        task.inflight[a] = None
        self.summary.attempts += 1
        if n > 1:
            self.summary.client_retries += 1
        self.push(t + self.rp.timeout_s, self.on_timeout, a)
        if self.admit(a.gw_start, a):
            self.gateway_try(a.gw_start, a)

    def route(self, t, a) -> _Rep:
        # every replica, unless autoscaling parked it or a planned scale-down (drain) took it out
        reps = [r for r in self.routable if not r.draining] or self.routable or self.reps
        if not a.tried and self.all_healthy_until <= t:
            cands = reps  # the common case: nothing tried yet, nobody ejected
        else:
            cands = [r for r in reps if r not in a.tried and r.unhealthy_until <= t]
        if not cands:
            cands = [r for r in reps if r not in a.tried] or reps
        if self.policy == "round_robin":
            self.rr += 1
            return cands[self.rr % len(cands)]
        if self.policy == "least_loaded":
            self.rr += 1
            off = self.rr % len(cands)
            best = None
            for j in range(len(cands)):
                r = cands[(off + j) % len(cands)]
                if best is None or r.outstanding < best.outstanding:
                    best = r
            return best
        # session affinity: one session (task) -> one replica; crc32, not hash(): stable across runs
        h = zlib.crc32(a.task.plan.task_id.encode()) % len(reps)
        for j in range(len(reps)):
            r = reps[(h + j) % len(reps)]
            if r in cands:
                return r
        return cands[0]

    def gateway_try(self, t, a):
        rep = self.route(t, a)
        a.rep = rep
        a.gw_no += 1
        a.gw_att_id = self.new_id()
        a.gw_att_start = t
        rep.outstanding += 1
        if rep.down:
            rep.unhealthy_until = t + EJECT_S
            self.all_healthy_until = max(self.all_healthy_until, rep.unhealthy_until)
            self.gateway_fail(t + GATEWAY_REPLICA_S, a, "connection_error", None)
            return
        for status, p in rep.errors.items():
            if self.rng.random() < p:
                self.gateway_fail(t + 2 * GATEWAY_REPLICA_S, a, f"http.{status}", status)
                return
        call = a.call
        self.req_no += 1
        segs = segments_from_hash_ids(call.prefix_blocks, call.prompt_tokens) if call.prefix_blocks else ()
        req = EngineRequest(f"chatcmpl-{self.req_no:x}", call.prompt_tokens, call.output_tokens,
                            max_tokens=call.max_tokens, segments=segs, arrival=t + GATEWAY_REPLICA_S, meta=a,
                            params={"max_tokens": call.max_tokens} if call.max_tokens is not None else None)
        a.req = req
        rep.inflight[req.request_id] = a
        rep.requests += 1
        self.summary.engine_requests += 1
        self.push(rep.frontend.admit(req.arrival, not rep.engine.idle()), self.on_engine_add, (rep, req))

    def gateway_fail(self, t, a, error_type, status):
        """An upstream attempt failed before streaming; the gateway retries or answers the client."""
        rep = a.rep
        rep.outstanding -= 1
        task = a.task
        if self.span_mode == "all":
            self.span(self.gateway_res, task.trace_id, a.gw_att_id, a.gw_id, GATEWAY_ATTEMPT_SPAN_NAME,
                      SPAN_KIND_CLIENT, a.gw_att_start, t,
                      gateway_attempt_attrs(task.plan, self.policy, a.gw_no, rep.spec.id, status, 0, error_type,
                                            step_context(a.step, a.ci + 1, a.n)),
                      STATUS_ERROR, error_type, task.ctx)
        a.tried.append(rep)
        retryable = status is None or status in GATEWAY_RETRY_STATUS
        if retryable and a.gw_retries < self.gw_budget and not a.done:
            a.gw_retries += 1
            self.summary.gateway_retries += 1
            self.gateway_try(t, a)
            return
        code = 502 if status is None else status
        end = t + CLIENT_GATEWAY_S
        self.end_attempt(end, a, error_type=f"http.{code}", status=code, tokens=0, gw_error=error_type,
                         finish=None, ttft=None)
        self.after_failure(end, a, f"http.{code}", code)

    def on_engine_add(self, t, arg):
        rep, req = arg
        a = req.meta
        if a.done or rep.inflight.get(req.request_id) is not a:
            return
        self.interrupt(rep, t)
        rep.engine.add(req, now=t)
        self.reschedule(rep)

    def interrupt(self, rep, t):
        """Bring a replica's engine to the first step boundary at or after ``t``."""
        eng = rep.engine
        p = eng.pending
        if p is not None and p.k > 1 and p.end > t:
            done = eng.commit(until=t)
            self.front_end_outputs(rep, done)
            self.deliver(rep, done)
            rep.ver += 1

    def reschedule(self, rep):
        rep.ver += 1
        if rep.down:
            return
        end = rep.engine.plan(max_steps=self.max_steps)
        if end is not None:
            self.push(end, self.on_replica_step, (rep, rep.ver))

    def on_replica_step(self, t, arg):
        rep, ver = arg
        if ver != rep.ver or rep.down:
            return
        done = rep.engine.commit()
        self.front_end_outputs(rep, done)  # before the spans: TTFT ends at the front end's pickup
        self.deliver(rep, done)
        self.reschedule(rep)

    def front_end_outputs(self, rep, finished=()):
        """Queue the output processing of the tokens committed since the last call, and mark the first
        tokens among them with the front end's pickup time (frontend.py)."""
        eng = rep.engine
        step_outputs(rep.frontend, eng, finished, not eng.idle(), start=rep.fe_since)
        rep.fe_since = eng.now

    def deliver(self, rep, finished):
        for req in finished:
            a = rep.inflight.pop(req.request_id, None)
            if a is None:
                continue
            self.engine_span(rep, a, req)
            self.push(req.finished + GATEWAY_REPLICA_S + CLIENT_GATEWAY_S, self.on_complete, a)

    def engine_span(self, rep, a, req):
        if self.span_mode == "none" or rep.spans_lost:
            return
        self.summary.engine_spans += 1
        if self.span_mode == "engine":
            trace_id, parent = self.ids.getrandbits(128).to_bytes(16, "big"), None
        else:
            trace_id, parent = a.task.trace_id, a.gw_att_id
        span_id = self.ids.getrandbits(64).to_bytes(8, "big")
        self.span(rep.res_key, trace_id, span_id, parent, "llm_request", SPAN_KIND_SERVER, req.arrival,
                  req.finished, engine_span_attributes(req, req.request_id, rep.profile.max_model_len))

    def on_complete(self, t, a):
        if a.done:
            return
        a.rep.outstanding -= 1
        req = a.req
        if req.finish_reason == "error":  # vLLM turns finish reason "error" into HTTP 500
            self.end_attempt(t, a, error_type="http.500", status=500, tokens=0, gw_error="http.500", finish=None,
                             ttft=None)
            self.after_failure(t, a, "http.500", 500)
            return
        ttft = req.first_token + GATEWAY_REPLICA_S + CLIENT_GATEWAY_S - a.t0 if req.first_token is not None else None
        self.end_attempt(t, a, error_type=None, status=200, tokens=req.out, gw_error=None, finish=req.finish_reason,
                         ttft=ttft)
        if a.n <= a.call.rejected_attempts and a.n < self.rp.max_attempts:
            # The client rejects this answer (e.g. an invalid tool call) and asks again at once.
            self.start_attempt(t, (a.task, a.ci, a.n + 1))
            return
        self.call_done(t, a, True)

    def end_attempt(self, t, a, *, error_type, status, tokens, gw_error, finish, ttft):
        """Close an attempt's client span, gateway request span and (if still open) gateway attempt span."""
        a.done = True
        self.release(a)
        task = a.task
        task.inflight.pop(a, None)
        if self.span_mode != "all":
            return
        plan = task.plan
        ok = error_type is None
        req = a.req
        gw_ttft = None if ttft is None else ttft - CLIENT_GATEWAY_S
        if a.req is not None and (gw_error or ok):  # the attempt that reached an engine is still open
            gend = t - CLIENT_GATEWAY_S if ok else t
            # the first chunk (after prefill) carried the prompt's usage, as vLLM answers continuous usage
            first = req.first_token is not None and req.first_token + GATEWAY_REPLICA_S <= gend
            self.span(self.gateway_res, task.trace_id, a.gw_att_id, a.gw_id, GATEWAY_ATTEMPT_SPAN_NAME,
                      SPAN_KIND_CLIENT, a.gw_att_start, gend,
                      gateway_attempt_attrs(plan, self.policy, a.gw_no, a.rep.spec.id, status, tokens, gw_error,
                                            step_context(a.step, a.ci + 1, a.n),
                                            input_tokens=req.prompt_tokens if first else None,
                                            cached_tokens=(req.hit_tokens or None) if first else None,
                                            output_tokens=tokens if ok else None,
                                            finish_reason=finish if ok else None,
                                            ttfc=gw_ttft if first else None),
                      STATUS_OK if ok else STATUS_ERROR, gw_error or "", task.ctx)
        if a.gw_id is not None:  # None: admission control already wrote the (rejected) request span
            self.span(self.gateway_res, task.trace_id, a.gw_id, a.client_id, GATEWAY_SPAN_NAME, SPAN_KIND_SERVER,
                      a.gw_start, t - CLIENT_GATEWAY_S if ok else t,
                      gateway_attrs(plan, self.policy, a.gw_retries, a.rep.spec.id if a.rep else None, status,
                                    tokens, gw_ttft, gw_error, step_context(a.step, a.ci + 1, a.n)),
                      STATUS_UNSET if ok else STATUS_ERROR, gw_error or "", task.ctx)
        out_tokens = tokens if ok else None
        self.span(self.client_res, task.trace_id, a.client_id, task.root_id, f"chat {plan.model}", SPAN_KIND_CLIENT,
                  a.t0, t,
                  client_attrs(plan, a.step, a.n, call=a.ci + 1,
                               input_tokens=req.prompt_tokens if (ok and req) else None,
                               cached_tokens=(req.hit_tokens or None) if (ok and req) else None,
                               output_tokens=out_tokens, finish_reason=finish, ttfc=ttft, tokens_received=tokens,
                               error_type=error_type),
                  STATUS_UNSET if ok else STATUS_ERROR, error_type or "", task.ctx)

    def _abort_engine(self, t, a):
        """Abort the attempt's engine request (client went away); returns tokens generated so far.

        The engine first runs to its step boundary at or after ``t``: a request that finished in
        that step ends normally (its span says so) although the client already gave up; one still
        running is aborted and, as in vLLM 0.32, gets no span (only the gateway/client attempt and
        the token counters see it).
        """
        rep, req = a.rep, a.req
        if req is None or rep.inflight.get(req.request_id) is not a:
            return 0
        rep.outstanding -= 1
        if rep.engine.by_id.get(req.request_id) is None:  # not yet added (input overhead): nothing ran
            del rep.inflight[req.request_id]
            req.out = 0
            return 0
        self.interrupt(rep, t)
        if rep.inflight.pop(req.request_id, None) is not None:
            rep.engine.abort(req.request_id)  # vLLM 0.32 exports no span for a client abort
        self.reschedule(rep)
        return req.out

    def on_timeout(self, t, a):
        if a.done:
            return
        self.summary.timeouts += 1
        tokens = self._abort_engine(t, a)
        ttft = None
        if a.req is not None and a.req.first_token is not None:
            ttft = a.req.first_token + GATEWAY_REPLICA_S + CLIENT_GATEWAY_S - a.t0
        self.end_attempt(t, a, error_type="timeout", status=200, tokens=tokens, gw_error="client_disconnect",
                         finish=None, ttft=ttft)
        self.after_failure(t, a, "timeout", None)

    def cancel_attempt(self, t, a, reason):
        if a.done:
            return
        tokens = self._abort_engine(t, a)
        self.end_attempt(t, a, error_type=reason, status=200 if a.req else None, tokens=tokens,
                         gw_error="client_disconnect", finish=None, ttft=None)

    def after_failure(self, t, a, error_type, status, retry_after_s: float = 0.0):
        task = a.task
        if task.done:
            return
        task.last_error = error_type
        retryable = status is None or status in self.rp.retry_on_status
        if retryable and a.n < self.rp.max_attempts:
            cap = min(self.rp.backoff_max_s, self.rp.backoff_base_s * 2 ** (a.n - 1))
            # full jitter, at least the server's Retry-After (serving.sdk.retry.backoff_s)
            delay = max(self.rng.uniform(0, cap), retry_after_s)
            self.push(t + delay, self.start_attempt, (task, a.ci, a.n + 1))
            return
        self.call_done(t, a, False)

    def call_done(self, t, a, ok):
        task = a.task
        if task.done:
            return
        if not ok and not task.step_failed:
            task.step_failed = True
            task.failed_steps += 1
            if task.failed_steps >= self.rp.give_up_after_failed_steps:
                self.finish_task(t, task, "failure", task.last_error)
                return
        task.pending -= 1
        if task.pending == 0:
            task.step_i += 1
            self.start_step(t, task)


def simulate(plans: Iterable[TaskPlan], fleet: list[ReplicaSpec], *, start_time_ns: int | None = None,
             policy: str = "round_robin", retry_policy: RetryPolicy | None = None, faults=(), sink=None,
             progress: bool = False, seed: int = 0, metrics_interval_s: float = 10.0, gateway_retries: int = 1,
             spans: str = "all", span_batch: int = 5000, full_metrics: bool = False, noise_sigma: float = 0.0,
             until_s: float | None = None, total: int | None = None, step_batching: bool = True,
             admission_caps: dict[str, int] | None = None, autoscale: AutoscaleRule | None = None) -> SimSummary:
    """Simulate ``plans`` (``serving.plans.TaskPlan``, ``arrival_s`` seconds from the start) on ``fleet``.

    ``plans``: a list (sorted here) or any iterable already sorted by ``arrival_s`` (read lazily, so
    a week can be generated hour by hour; ``total`` then sizes the progress bar).

    - ``start_time_ns``: wall-clock time of simulated second 0 (default: now, rounded down to the
      minute). Span and metric timestamps are ``start_time_ns + simulated seconds``.
    - ``policy``: gateway routing; ``gateway_retries``: the gateway's hidden retry budget per request
      (connection errors and 5xx before any token).
    - ``retry_policy``: client behaviour (default ``RetryPolicy()``).
    - ``faults``: ``FaultEvent`` list (``at_s``/``until_s`` in simulated seconds).
    - ``sink``: callable receiving ``ExportTraceServiceRequest`` / ``ExportMetricsServiceRequest``;
      None = count only. ``spans``: ``all`` | ``engine`` (only ``llm_request``, as vLLM alone) | ``none``.
    - ``metrics_interval_s``: period of metric points per replica (simulated seconds).
    - ``until_s``: stop there even if work remains.
    - ``step_batching``: jump runs of identical decode steps at once (False = one event per engine
      step; same results up to float rounding, much slower: the benchmark's baseline).
    - ``admission_caps``: gateway admission control, ``tenant.priority`` -> max requests inside the
      gateway (``"*"``: any other priority); None = off. ``autoscale``: an ``AutoscaleRule``
      (sim_control.py); None = every replica up for the whole run.
    Returns a ``SimSummary``. Raises ValueError for an unknown policy/profile/replica or bad fault.
    """
    if start_time_ns is None:
        start_time_ns = (time.time_ns() // 60_000_000_000) * 60_000_000_000
    sim = FleetSimulator(fleet, start_time_ns=start_time_ns, policy=policy, retry_policy=retry_policy or RetryPolicy(),
                         faults=list(faults), sink=sink, seed=seed, metrics_interval_s=metrics_interval_s,
                         gateway_retries=gateway_retries, spans=spans, span_batch=span_batch,
                         full_metrics=full_metrics, noise_sigma=noise_sigma, step_batching=step_batching,
                         admission_caps=admission_caps, autoscale=autoscale)
    return sim.run(plans, progress, until_s, total)

