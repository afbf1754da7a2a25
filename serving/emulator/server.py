"""Live mode: one emulated vLLM replica as an HTTP server speaking vLLM's OpenAI-compatible API.

Where it sits: serving/emulator; wraps the engine model (engine.py) in real time. Routes:
``POST /v1/chat/completions``, ``POST /v1/completions`` (streaming and not,
``stream_options.include_usage`` / ``continuous_usage_stats``), ``GET /v1/models``, ``GET /health``,
``GET /metrics`` (vLLM V1 names, prom.py), ``GET|POST /admin/faults`` (fault injection).

Emulator extensions to the request body (ignored by real vLLM; the openai client sends them with
``extra_body=``): ``emulator_output_tokens`` (tokens to generate before stopping; also header
``x-emulator-output-tokens``), ``emulator_prompt_tokens`` (pretend the prompt has this many tokens),
``emulator_prefix_blocks`` (list of 512-token block ids, Mooncake ``hash_ids``, for prefix caching).
Without them: the prompt is tokenised by a stand-in tokenizer; the output length is
``max_tokens`` when ``ignore_eos`` is set, else a deterministic 32..287 tokens from the prompt's hash.

Conformance with vLLM 0.32 (captured from a real server, shared/reference/vllm-0.32-cpu-captured/;
remaining differences: ``serving/emulator/CONFORMANCE.md``): one ``llm_request`` span per finished
engine request, parented by the incoming ``traceparent`` (scope ``vllm.tracing.otel``, resource with
``vllm.process_id``, new on every restart); ``n`` > 1 runs n engine requests (one span each, same
``gen_ai.request.id`` and parent); a request the client aborts or that a crash loses gets no span.
``max_tokens`` above the context is a 400, a prompt over the context is a 400, and a prompt +
``max_tokens`` over the context is answered 200 with the output capped (finish reason ``length``).
Usage carries ``prompt_tokens_details.cached_tokens`` (the server runs as with
``--enable-prompt-tokens-details``) when the request had cached tokens; a miss has no
``prompt_tokens_details``, as vLLM 0.32 answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
import uuid

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from serving.emulator.engine import DECODE, Engine, EngineRequest
from serving.emulator.faults import FaultState, error_rates, validate_fault
from serving.emulator.frontend import FrontEnd, step_outputs
from serving.emulator.openai_api import (CRASH_MESSAGE, context_error, error_body, error_response, output_tokens,
                                         parse_prompt, request_n)
from serving.emulator.profiles import Profile
from serving.emulator.prom import exposition, make_registry
from serving.emulator.request import RequestFamily
from serving.emulator.responses import stream_response, unary_response
from serving.emulator.spans import SCOPE_NAME, engine_span_attributes, replica_resource
from serving.emulator.static import StaticEngine

HEALTHY = {"slowdown": 1.0, "kv_cut": 0.0, "error_rate": 0.0}  # what a fault kind returns to when it ends

class _Handle:
    """A client request's bridge between the engine loop and its HTTP response: its ``n`` engine
    requests (``reqs``, one per choice), ``done`` once all finished."""

    __slots__ = ("reqs", "left", "event", "crashed", "done", "otel_ctx", "request_id", "span_id")

    def __init__(self, reqs, request_id, otel_ctx, span_id):
        self.reqs = reqs
        self.left = len(reqs)
        self.request_id = request_id
        self.span_id = span_id  # gen_ai.request.id on the spans (completions: "<id>-0", as vLLM)
        self.event = asyncio.Event()
        self.crashed = False
        self.done = False
        self.otel_ctx = otel_ctx


class ReplicaServer:
    """One emulated vLLM replica. Build with ``app()``; run under uvicorn (see live.py).

    ``span_exporter``: an OpenTelemetry SpanExporter (e.g. OTLPSpanExporter or an in-memory one)
    or None for no tracing. ``faults``: initial fault values ``{kind: value}``.
    """

    def __init__(self, replica_id: str, profile: Profile, *, model: str | None = None, span_exporter=None,
                 faults: dict | None = None, seed: int = 0, prefix_caching: bool = True, static: bool = False,
                 served_model_names: tuple[str, ...] = ()):
        self.replica_id = replica_id
        self.profile = profile
        self.model = model or profile.model
        self.served = (self.model,) + tuple(served_model_names)
        self.seed = seed
        self._static = static
        self._prefix = prefix_caching
        self.engine = self._new_engine(0.0)
        self.frontend = FrontEnd(profile)
        self.faults = FaultState()
        self.rng = random.Random(seed)
        self.t0_mono = time.monotonic()
        self.t0_wall_ns = time.time_ns()
        self.registry = make_registry(lambda: self.engine, self.model,
                                      created_wall=lambda eng: self.wall_ns(eng.stats.start_time) / 1e9)
        self.handles: dict[str, _Handle] = {}
        self._aborts: list[str] = []
        self._wake: asyncio.Event | None = None
        self._loop_task = None
        self._restart_task = None
        self._heal_tasks: dict[str, asyncio.Task] = {}  # kind -> task returning it to healthy at until_s
        self.started = time.time()
        self.tracer_provider = None
        self.tracer = None
        self._span_processor = None
        self.process_id = None
        if span_exporter is not None:
            self._init_tracing(span_exporter)
        for kind, value in (faults or {}).items():
            self.set_fault(kind, value)

    # ------------------------------------------------------------------ setup
    def _new_engine(self, now: float):
        if self._static:
            return StaticEngine(self.profile, seed=self.seed, start_time=now)
        return Engine(self.profile, seed=self.seed, start_time=now, prefix_caching=self._prefix)

    def _init_tracing(self, exporter=None):
        """A tracer whose resource names this replica incarnation: a fresh ``vllm.process_id`` (an
        emulated pid) at start and on every restart; one batch processor shared by all of them."""
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        if self._span_processor is None:
            self._span_processor = BatchSpanProcessor(exporter, schedule_delay_millis=200)
        self.process_id = self.rng.randrange(1000, 4_000_000)
        res = Resource.create(replica_resource(self.replica_id, self.profile.gpu_type, self.profile.gpu_count,
                                               self.model, self.process_id))
        self.tracer_provider = TracerProvider(resource=res)
        self.tracer_provider.add_span_processor(self._span_processor)
        self.tracer = self.tracer_provider.get_tracer(SCOPE_NAME)

    def clock(self) -> float:
        """Engine clock: seconds since the server started (monotonic)."""
        return time.monotonic() - self.t0_mono

    def wall_ns(self, t: float) -> int:
        return self.t0_wall_ns + int(t * 1e9)

    def app(self) -> Starlette:
        return Starlette(routes=[
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/health", self.health, methods=["GET"]),
            Route("/metrics", self.metrics, methods=["GET"]),
            Route("/admin/faults", self.admin_faults, methods=["GET", "POST"]),
        ], lifespan=self._lifespan)

    @contextlib.asynccontextmanager
    async def _lifespan(self, app):
        await self._on_startup()
        try:
            yield
        finally:
            await self._on_shutdown()

    async def _on_startup(self):
        self._wake = asyncio.Event()
        self._loop_task = asyncio.get_running_loop().create_task(self._engine_loop(), name=f"engine-{self.replica_id}")

    async def _on_shutdown(self):
        for t in (self._loop_task, self._restart_task, *self._heal_tasks.values()):
            if t:
                t.cancel()
        if self.tracer_provider is not None:
            self.tracer_provider.shutdown()

    # ------------------------------------------------------------------ faults
    def set_fault(self, kind: str, value, until_s: float | None = None) -> None:
        """Apply a fault now. ``crash`` takes ``until_s`` (restart after that many seconds; None = stay down);
        the other kinds end after ``until_s`` seconds (the value returns to healthy; None = until cleared).
        Raises ValueError with the problem when the kind or value is invalid."""
        problems = validate_fault(kind, value) if kind != "crash" else []
        if problems:
            raise ValueError("; ".join(problems))
        if kind == "slowdown":
            self.faults.slowdown = float(value)
            self.engine.slowdown = float(value)
        elif kind == "kv_cut":
            self.faults.kv_cut = float(value)
            self.engine.kv_cut = float(value)
        elif kind == "error_rate":
            self.faults.error_rates = error_rates(value)
        elif kind == "crash":
            self.crash(restart_after_s=until_s if until_s is not None else value)
        if kind != "crash":
            self._schedule_heal(kind, until_s)
        if self._wake is not None:
            self._wake.set()

    def _schedule_heal(self, kind: str, until_s: float | None) -> None:
        # A newer fault of the same kind replaces the pending heal of the older one.
        old = self._heal_tasks.pop(kind, None)
        if old is not None:
            old.cancel()
        if until_s is None:
            return

        async def heal() -> None:
            await asyncio.sleep(float(until_s))
            self._heal_tasks.pop(kind, None)
            self.set_fault(kind, HEALTHY[kind])

        self._heal_tasks[kind] = asyncio.get_event_loop().create_task(heal())

    def crash(self, restart_after_s: float | None = None) -> None:
        """Kill the engine: in-flight streams break, their spans are never exported."""
        lost = self.engine.crash()
        self.faults.down = True
        for req in lost:
            h = self.handles.pop(req.request_id, None)
            if h and not h.crashed:
                h.crashed = True
                for other in h.reqs:
                    self.handles.pop(other.request_id, None)
                h.event.set()
        if restart_after_s is not None:
            loop = asyncio.get_event_loop()
            self._restart_task = loop.create_task(self._restart_later(float(restart_after_s)))

    async def _restart_later(self, delay: float):
        await asyncio.sleep(delay)
        self.restart()

    def restart(self) -> None:
        eng = self._new_engine(self.clock())
        eng.slowdown, eng.kv_cut = self.faults.slowdown, self.faults.kv_cut
        self.engine = eng
        self.frontend.reset(self.clock())
        self.faults.down = False
        if self._span_processor is not None:
            self._init_tracing()
        if self._wake is not None:
            self._wake.set()

    async def admin_faults(self, request: Request):
        """GET: current faults. POST ``{"kind": ..., "value": ..., "until_s": ...}`` or a list of them,
        or ``{"clear": true}``. 400 with every problem on bad input."""
        if request.method == "GET":
            return JSONResponse(self.faults.as_dict())
        try:
            body = await request.json()
        except json.JSONDecodeError as exc:
            return error_response(f"invalid JSON: {exc}", 400)
        items = body if isinstance(body, list) else [body]
        problems = []
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                problems.append(f"item {i}: expected an object")
                continue
            if item.get("clear"):
                continue
            kind = item.get("kind")
            if kind != "crash":
                problems += [f"item {i}: {p}" for p in validate_fault(kind, item.get("value"))]
        if problems:
            return error_response("; ".join(problems), 400)
        for item in items:
            if item.get("clear"):
                self.set_fault("slowdown", 1.0)
                self.set_fault("kv_cut", 0.0)
                self.set_fault("error_rate", 0.0)
                if self.faults.down:
                    self.restart()
                continue
            self.set_fault(item["kind"], item.get("value"), item.get("until_s"))
        return JSONResponse(self.faults.as_dict())

    # ------------------------------------------------------------------ engine loop
    async def _engine_loop(self):
        while True:
            eng = self.engine
            self._apply_aborts()
            if self.faults.down or eng.idle():
                self._wake.clear()
                await self._wake.wait()
                continue
            if eng.now < self.clock() and eng.pending is None and not eng.running:
                # the engine was idle-waiting: steps start now. While requests run, steps follow
                # each other in model time (a late wake-up of a busy host's event loop is not a
                # slower engine step; the next step's sleep is shortened instead).
                eng.now = self.clock()
            end = eng.plan(max_steps=1)
            if end is None:
                self._wake.clear()
                await self._wake.wait()
                continue
            delay = end - self.clock()
            if delay > 0:
                await asyncio.sleep(delay)
            if eng is not self.engine:  # crashed while the step ran
                continue
            finished = eng.commit()
            # the front end processes this step's outputs (from the step's end); a first token made in
            # this step counts for TTFT when the front end picks it up (frontend.py)
            step_outputs(self.frontend, eng, finished, self._engine_busy())
            for req in finished:
                self._complete(req)
            for rid in list(eng.running):
                h = self.handles.get(rid)
                if h:
                    h.event.set()

    def _engine_busy(self) -> bool:
        eng = self.engine
        return not eng.idle() or eng.pending is not None

    def _apply_aborts(self):
        while self._aborts:
            rid = self._aborts.pop()
            req = self.engine.abort(rid)
            if req is not None:
                self._complete(req)

    def _complete(self, req):
        h = self.handles.pop(req.request_id, None)
        if req.finish_reason != "abort":  # vLLM exports no span for a request the client aborted
            self._export_span(req, h)
        if h:
            h.left -= 1
            if h.left == 0:
                h.done = True
            h.event.set()

    def _export_span(self, req, h):
        if self.tracer is None:
            return
        from opentelemetry.trace import SpanKind

        attrs = engine_span_attributes(req, h.span_id if h else req.request_id, self.profile.max_model_len)
        span = self.tracer.start_span("llm_request", context=h.otel_ctx if h else None, kind=SpanKind.SERVER,
                                      start_time=self.wall_ns(req.arrival), attributes=attrs)
        span.end(end_time=self.wall_ns(req.finished))

    # ------------------------------------------------------------------ HTTP
    async def models(self, request: Request):
        data = [{"id": m, "object": "model", "created": int(self.started), "owned_by": "vllm", "root": self.model,
                 "parent": None, "max_model_len": self.profile.max_model_len, "permission": []} for m in self.served]
        return JSONResponse({"object": "list", "data": data})

    async def health(self, request: Request):
        if self.faults.down:
            return Response(status_code=503)
        return Response(status_code=200)

    async def metrics(self, request: Request):
        return PlainTextResponse(exposition(self.registry), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def chat(self, request: Request):
        return await self._serve(request, chat=True)

    async def completions(self, request: Request):
        return await self._serve(request, chat=False)

    async def _serve(self, request: Request, chat: bool):
        arrival = self.clock()
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return error_response(f"Invalid JSON body: {exc}", 400)
        if not isinstance(body, dict):
            return error_response("The request body must be a JSON object.", 400)
        model = body.get("model")
        if model not in self.served:
            return error_response(f"The model `{model}` does not exist.", 404, param="model")
        base_id = request.headers.get("x-request-id") or uuid.uuid4().hex
        request_id = ("chatcmpl-" if chat else "cmpl-") + base_id
        headers = {"x-request-id": base_id}
        try:
            tokens, segments = parse_prompt(body, chat, self.profile.block_size)
            out_tokens = output_tokens(body, request.headers.get("x-emulator-output-tokens"), tokens)
            n = request_n(body)
        except ValueError as exc:
            return error_response(str(exc), 400, headers=headers)
        requested = body.get("max_tokens", body.get("max_completion_tokens") if chat else None)
        problem = context_error(len(tokens), requested, self.profile.max_model_len)
        if problem:
            return error_response(problem[0], 400, headers=headers, param=problem[1])
        # vLLM caps the output at the context: prompt + max_tokens over it is answered, capped.
        max_tokens = self.profile.max_model_len - len(tokens)
        if requested is not None:
            max_tokens = min(int(requested), max_tokens)
        if self.faults.down:
            return error_response(CRASH_MESSAGE, 500, headers=headers)
        for status, p in self.faults.error_rates.items():
            if self.rng.random() < p:
                return error_response(f"Injected fault: HTTP {status}", status, headers=headers)
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        otel_ctx = TraceContextTextMapPropagator().extract(dict(request.headers)) if self.tracer else None
        params = {k: body.get(k) for k in ("temperature", "top_p") if body.get(k) is not None}
        params["max_tokens"] = max_tokens
        family = RequestFamily(n) if n > 1 else None
        reqs = []
        for i in range(n):
            rid = request_id if n == 1 else f"{i}_{request_id}"  # vLLM's child request ids
            req = EngineRequest(rid, len(tokens), out_tokens, max_tokens=max_tokens, segments=segments,
                                arrival=arrival, params=params)
            req.family = family
            reqs.append(req)
        h = _Handle(reqs, request_id, otel_ctx, request_id if chat else request_id + "-0")
        for req in reqs:
            self.handles[req.request_id] = h
        # API server: queued behind the front end's work, then input processing and hand-over (frontend.py)
        await asyncio.sleep(max(0.0, self.frontend.admit(self.clock(), self._engine_busy()) - self.clock()))
        if self.faults.down:
            for req in reqs:
                self.handles.pop(req.request_id, None)
            return error_response(CRASH_MESSAGE, 500, headers=headers)
        eng = self.engine
        if eng.idle() and eng.pending is None:
            eng.now = max(eng.now, self.clock())
        for req in reqs:
            eng.add(req, now=max(eng.now, self.clock()))
        self._wake.set()
        if body.get("stream"):
            so = body.get("stream_options") or {}
            gen = stream_response(self, h, chat, model, bool(so.get("include_usage")),
                                  bool(so.get("continuous_usage_stats")))
            return StreamingResponse(gen, media_type="text/event-stream", headers=headers)
        return await unary_response(self, h, chat, model, headers, request)

    def _abort_soon(self, h: _Handle):
        """The client went away: abort every choice still running (vLLM aborts on disconnect)."""
        if not h.done and not h.crashed:
            self._aborts.extend(r.request_id for r in h.reqs if r.finish_reason is None)
            self._wake.set()

    def n_out(self, req) -> int:
        """Tokens ``req`` generated so far (as of the last committed step)."""
        if req.state == DECODE and self.engine.by_id.get(req.request_id) is req:
            return self.engine.out_tokens(req)
        return req.out


__all__ = ["ReplicaServer", "error_body", "CRASH_MESSAGE"]
