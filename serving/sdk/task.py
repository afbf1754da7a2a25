"""The task SDK: mark a task (what succeeds or fails), its steps, and its outcome.

Position: serving. A task is one unit of work a user asked for (docs/telemetry.md):

    with task("research_agent", tenant="acme", slo_e2e_ms=30_000, tracer_provider=tp) as t:
        with t.step("search"):
            client.chat(model=..., messages=...)
        t.succeed()

* ``task(...)`` opens the root span ``task {task.type}`` (INTERNAL, docs/telemetry.md) and puts
  task.id / task.type / tenant.id / tenant.priority into W3C baggage, so every model call made
  inside it — in this process or, through the gateway, in others — carries the task context.
* ``t.step(name)`` opens ``step {name}`` and sets ``task.step`` in baggage for the calls inside.
* Outcome: ``t.succeed()``, ``t.fail(reason)``, ``t.abandon(reason)``. An exception escaping the
  block ends the task as ``failure`` (error.type = the exception's class name, re-raised); a block
  that ends with no outcome is ``abandoned`` (the client walked away without deciding).
* ``t.interrupt("shutdown")``: the client process stops before the task decides; the root span
  gets ``error.type`` and no ``task.outcome`` (the outcome stays unknown, not a failure).
* Async: ``async with task(...) as t`` (contextvars keep concurrent tasks apart).
* Decorator: ``@task("chat", tenant="acme")`` runs each call of the function (sync or async) as a
  new task; returning marks ``success`` unless the function set an outcome itself
  (:func:`current_task` gives it the Task).
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import threading
import time
import uuid
from typing import Any, Callable

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from schema import semconv as sc
from serving.sdk.context import with_task_baggage

INSTRUMENTATION_NAME = "infercost.serving.sdk"
INTERRUPTED = "interrupted"  # Task.outcome while no outcome is exported (see Task.interrupt)
INTERRUPTED_SHUTDOWN = "shutdown"  # error.type of a task cut off by its client process stopping

_CURRENT: contextvars.ContextVar["Task | None"] = contextvars.ContextVar("infercost_task", default=None)


def current_task() -> "Task | None":
    """The innermost open task of this thread / asyncio task, or None."""
    return _CURRENT.get()


class Step:
    """A step of a task: the ``step {name}`` span and ``task.step`` baggage while it is open."""

    def __init__(self, owner: "Task", name: str):
        self.task = owner
        self.name = name
        self._span = None
        self._token = None

    def __enter__(self) -> "Step":
        attrs = dict(self.task.context_attributes())
        attrs[sc.TASK_STEP] = self.name
        self._span = self.task.tracer.start_span(f"step {self.name}", kind=SpanKind.INTERNAL, attributes=attrs)
        ctx = trace.set_span_in_context(self._span)
        ctx = with_task_baggage({sc.TASK_STEP: self.name}, ctx)
        self._token = otel_context.attach(ctx)
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is not None:
            self._span.set_status(Status(StatusCode.ERROR, str(exc)[:200]))
            self._span.set_attribute(sc.ERROR_TYPE, getattr(exc, "error_type", None) or type(exc).__name__)
        otel_context.detach(self._token)
        self._span.end()
        return False

    async def __aenter__(self) -> "Step":
        return self.__enter__()

    async def __aexit__(self, exc_type, exc, tb) -> bool:
        return self.__exit__(exc_type, exc, tb)


class Task:
    """One task: context manager (sync and async) and decorator. See the module docstring.

    task_type: low-cardinality kind (chat, copilot, research_agent, ...). tenant: tenant.id.
    priority: tenant.priority (interactive, batch, ...). slo_ttft_ms / slo_e2e_ms: the latency
    budget promised (milliseconds), recorded on the root span. task_id: default a random uuid4 hex.
    tracer_provider: where spans go (default: the global provider). attributes: extra root-span
    attributes. Raises ValueError on an empty task_type or tenant.
    """

    def __init__(self, task_type: str, *, tenant: str, priority: str = "interactive",
                 slo_ttft_ms: float | None = None, slo_e2e_ms: float | None = None,
                 task_id: str | None = None, tracer_provider: trace.TracerProvider | None = None,
                 attributes: dict[str, Any] | None = None):
        if not task_type:
            raise ValueError("task_type must be a non-empty string (e.g. 'chat', 'research_agent')")
        if not tenant:
            raise ValueError("tenant must be a non-empty string (the tenant.id paying for the task)")
        self.task_type = task_type
        self.tenant = tenant
        self.priority = priority
        self.slo_ttft_ms = slo_ttft_ms
        self.slo_e2e_ms = slo_e2e_ms
        self._fixed_id = task_id
        self.task_id = task_id or uuid.uuid4().hex
        self.tracer_provider = tracer_provider
        self.tracer = trace.get_tracer(INSTRUMENTATION_NAME, tracer_provider=tracer_provider)
        self.extra_attributes = dict(attributes or {})
        self.outcome: str | None = None
        self.reason: str | None = None
        self.started_at: float | None = None  # time.monotonic() at start
        self._span = None
        self._tokens: list = []
        self._entered = False
        self._calls: dict[str, int] = {}
        self._calls_lock = threading.Lock()

    # --- context ------------------------------------------------------------------------------
    def context_attributes(self) -> dict[str, str]:
        """task.id, task.type, tenant.id, tenant.priority: carried by every span of the task."""
        return {sc.TASK_ID: self.task_id, sc.TASK_TYPE: self.task_type, sc.TENANT_ID: self.tenant,
                sc.TENANT_PRIORITY: self.priority}

    @property
    def span(self):
        return self._span

    def step(self, name: str) -> Step:
        """A context manager for step ``name`` (sync or async ``with``)."""
        if not name:
            raise ValueError("step name must be a non-empty string")
        return Step(self, name)

    def next_call(self, step: str | None) -> int:
        """The next call index (1, 2, ..) of ``step`` in this task: ``task.call`` on every attempt of
        that call, so parallel calls of one step are told apart (thread- and asyncio-safe)."""
        key = step or ""
        with self._calls_lock:
            self._calls[key] = self._calls.get(key, 0) + 1
            return self._calls[key]

    # --- outcome ------------------------------------------------------------------------------
    def succeed(self) -> None:
        """Mark the task ``success`` (the last outcome set wins)."""
        self.outcome, self.reason = "success", None

    def fail(self, reason: str = "failed") -> None:
        """Mark the task ``failure``; ``reason`` becomes ``error.type`` on the root span."""
        self.outcome, self.reason = "failure", reason

    def abandon(self, reason: str = "abandoned") -> None:
        """Mark the task ``abandoned`` (the user gave up, e.g. a deadline passed)."""
        self.outcome, self.reason = "abandoned", reason

    def interrupt(self, reason: str = INTERRUPTED_SHUTDOWN) -> None:
        """End the task with NO outcome: the client process itself stopped (e.g. shut down) before the
        task could decide. The root span carries ``error.type`` = ``reason`` and no ``task.outcome``, so
        the cost job keeps its outcome unknown (calls ``pending``): neither a failure nor waste."""
        self.outcome, self.reason = INTERRUPTED, reason

    # --- lifecycle ------------------------------------------------------------------------------
    def _start(self) -> "Task":
        if self._entered:
            raise RuntimeError("a Task object is single-use; call task(...) again for a new task")
        self._entered = True
        self.started_at = time.monotonic()
        attrs: dict[str, Any] = dict(self.context_attributes())
        if self.slo_ttft_ms is not None:
            attrs[sc.SLO_TTFT_MS] = float(self.slo_ttft_ms)
        if self.slo_e2e_ms is not None:
            attrs[sc.SLO_E2E_MS] = float(self.slo_e2e_ms)
        attrs.update(self.extra_attributes)
        # A task is the root of its own trace, even when started inside another span.
        self._span = self.tracer.start_span(f"{sc.TASK_SPAN_NAME_PREFIX}{self.task_type}", kind=SpanKind.INTERNAL,
                                            attributes=attrs, context=otel_context.Context())
        ctx = trace.set_span_in_context(self._span, otel_context.Context())
        ctx = with_task_baggage(self.context_attributes(), ctx)
        self._tokens = [otel_context.attach(ctx), _CURRENT.set(self)]
        return self

    def _finish(self, exc: BaseException | None) -> None:
        if exc is not None and self.outcome is None:
            if isinstance(exc, (KeyboardInterrupt, GeneratorExit)) or type(exc).__name__ == "CancelledError":
                self.abandon(type(exc).__name__)
            else:
                self.fail(getattr(exc, "error_type", None) or type(exc).__name__)
        if self.outcome is None:
            self.abandon("unfinished")
        span = self._span
        if self.outcome == INTERRUPTED:
            span.set_attribute(sc.ERROR_TYPE, self.reason or INTERRUPTED_SHUTDOWN)
        else:
            span.set_attribute(sc.TASK_OUTCOME, self.outcome)
        if self.outcome == INTERRUPTED:
            pass
        elif self.outcome == "failure":
            span.set_status(Status(StatusCode.ERROR, self.reason or "failure"))
            span.set_attribute(sc.ERROR_TYPE, self.reason or "failure")
        elif self.outcome == "abandoned":
            span.set_attribute(sc.ERROR_TYPE, self.reason or "abandoned")
        else:
            span.set_status(Status(StatusCode.OK))
        otel_token, task_token = self._tokens
        _CURRENT.reset(task_token)
        otel_context.detach(otel_token)
        span.end()

    def __enter__(self) -> "Task":
        return self._start()

    def __exit__(self, exc_type, exc, tb) -> bool:
        self._finish(exc)
        return False

    async def __aenter__(self) -> "Task":
        return self._start()

    async def __aexit__(self, exc_type, exc, tb) -> bool:
        self._finish(exc)
        return False

    # --- decorator ----------------------------------------------------------------------------
    def _fresh(self) -> "Task":
        return Task(self.task_type, tenant=self.tenant, priority=self.priority, slo_ttft_ms=self.slo_ttft_ms,
                    slo_e2e_ms=self.slo_e2e_ms, task_id=None, tracer_provider=self.tracer_provider,
                    attributes=self.extra_attributes)

    def __call__(self, fn: Callable) -> Callable:
        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def async_wrapper(*args, **kwargs):
                async with self._fresh() as t:
                    result = await fn(*args, **kwargs)
                    if t.outcome is None:
                        t.succeed()
                    return result
            return async_wrapper

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self._fresh() as t:
                result = fn(*args, **kwargs)
                if t.outcome is None:
                    t.succeed()
                return result
        return wrapper


def task(task_type: str, *, tenant: str, priority: str = "interactive", slo_ttft_ms: float | None = None,
         slo_e2e_ms: float | None = None, task_id: str | None = None,
         tracer_provider: trace.TracerProvider | None = None, attributes: dict[str, Any] | None = None) -> Task:
    """Open a task: ``with task(...) as t``, ``async with task(...) as t`` or ``@task(...)``. See :class:`Task`."""
    return Task(task_type, tenant=tenant, priority=priority, slo_ttft_ms=slo_ttft_ms, slo_e2e_ms=slo_e2e_ms,
                task_id=task_id, tracer_provider=tracer_provider, attributes=attributes)
