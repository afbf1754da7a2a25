"""The live load runner: drive TaskPlans in real time through the task SDK against a gateway or replica.

Position: serving (workloads). Each plan becomes a task (``task {type}`` root span); its steps run
in order, the calls of a step concurrently (fan-out), each call through
:class:`serving.sdk.AsyncInstrumentedOpenAI` with the client retry policy. Client-side failure
behaviour comes from :class:`serving.plans.RetryPolicy`:

* a call that fails after its attempts fails its step;
* the task fails once ``give_up_after_failed_steps`` steps failed (fewer: it carries on, e.g. one
  search of an agent failed, and succeeds if it reaches the end);
* with ``abandon_after_s`` the user walks away: the task's unfinished calls are cancelled and the
  task ends ``abandoned``.

Calls ask for exactly the planned output length: ``max_tokens`` = planned tokens and vLLM's
``ignore_eos`` (an extension of its OpenAI API), which the emulator honours too.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass, field

from opentelemetry import trace

from serving.plans import RetryPolicy, TaskPlan
from serving.sdk.client import AsyncInstrumentedOpenAI, CallFailed
from serving.sdk.task import task
from serving.workloads.prompts import prompt_text

log = logging.getLogger(__name__)
# error.type of a task whose step result the client rejected (TaskPlan.fail_at_step), e.g. a tool
# error or an invalid plan: the model calls succeeded, the task did not.
STEP_REJECTED = "step_rejected"


@dataclass
class LoadReport:
    """What a run did. outcomes: outcome -> tasks. calls: calls made (a call = all its attempts).
    failed_calls: calls that failed after their attempts. attempts: attempts made. wall_s: seconds."""

    tasks: int = 0
    outcomes: Counter = field(default_factory=Counter)
    calls: int = 0
    failed_calls: int = 0
    attempts: int = 0
    output_tokens: int = 0
    wall_s: float = 0.0

    def summary(self) -> str:
        parts = ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items()))
        return (f"{self.tasks} tasks ({parts}); {self.calls} calls, {self.failed_calls} failed, "
                f"{self.attempts} attempts, {self.output_tokens} output tokens in {self.wall_s:.1f} s")


def call_messages(plan: TaskPlan, step_index: int, call_index: int) -> list[dict]:
    call = plan.steps[step_index].calls[call_index]
    seed = f"{plan.task_id}/{step_index}/{call_index}"
    return [{"role": "user", "content": prompt_text(call.prompt_tokens, call.prefix_blocks, seed)}]


async def run_task(plan: TaskPlan, client: AsyncInstrumentedOpenAI, policy: RetryPolicy, report: LoadReport,
                   tracer_provider: trace.TracerProvider | None = None) -> str:
    """Run one plan as a task; return its outcome (success | failure | abandoned)."""
    async with task(plan.task_type, tenant=plan.tenant, priority=plan.priority, slo_ttft_ms=plan.slo_ttft_ms,
                    slo_e2e_ms=plan.slo_e2e_ms, task_id=plan.task_id, tracer_provider=tracer_provider) as t:

        async def one_call(step_index: int, call_index: int):
            call = plan.steps[step_index].calls[call_index]
            max_tokens = min(call.output_tokens, call.max_tokens) if call.max_tokens else call.output_tokens
            report.calls += 1
            attempt = 1
            while True:
                try:
                    result = await client.chat(model=plan.model, messages=call_messages(plan, step_index, call_index),
                                               max_tokens=max_tokens, extra_body={"ignore_eos": True},
                                               retry_policy=policy, first_attempt=attempt)
                except CallFailed as exc:
                    report.failed_calls += 1
                    report.attempts += exc.attempts - attempt + 1
                    raise
                report.attempts += result.attempts - attempt + 1
                # The client rejects the first `rejected_attempts` answers (an invalid tool call) and asks again.
                if result.attempts > call.rejected_attempts or result.attempts >= policy.max_attempts:
                    break
                attempt = result.attempts + 1
            report.output_tokens += result.output_tokens
            return result

        async def steps():
            failed = 0
            for si, step in enumerate(plan.steps):
                async with t.step(step.name):
                    results = await asyncio.gather(*(one_call(si, ci) for ci in range(len(step.calls))),
                                                   return_exceptions=True)
                errors = [r for r in results if isinstance(r, BaseException)]
                for err in errors:
                    if not isinstance(err, CallFailed):
                        log.warning("task %s step %s: unexpected %r", plan.task_id, step.name, err)
                if errors:
                    failed += 1
                    if failed >= policy.give_up_after_failed_steps:
                        first = errors[0]
                        t.fail(f"step_failed:{getattr(first, 'error_type', type(first).__name__)}")
                        return
                if plan.fail_at_step == si:
                    t.fail(STEP_REJECTED)
                    return
            t.succeed()

        try:
            if policy.abandon_after_s is None:
                await steps()
            else:
                try:
                    await asyncio.wait_for(steps(), policy.abandon_after_s)
                except asyncio.TimeoutError:
                    t.abandon("deadline")
        except asyncio.CancelledError:
            # run_live was cancelled: the load generator is shutting down, not the user deciding.
            t.interrupt()
            raise
    report.tasks += 1
    report.outcomes[t.outcome] += 1
    return t.outcome


async def run_live(plans: list[TaskPlan], base_url: str, *, policy: RetryPolicy | None = None,
                   tracer_provider: trace.TracerProvider | None = None, time_scale: float = 1.0,
                   max_tasks_in_flight: int = 2000, api_key: str = "EMPTY", progress=None) -> LoadReport:
    """Replay ``plans`` against ``base_url`` (``http://host:port/v1``) in real time.

    Task ``i`` starts at ``arrival_s / time_scale`` seconds after the run starts (time_scale 2 =
    twice as fast). At most ``max_tasks_in_flight`` tasks run at once (later arrivals wait: a
    client-side bound, so a stalled fleet cannot exhaust the load generator's memory).
    progress: optional callable(report) invoked after each task. Returns a LoadReport.
    """
    if time_scale <= 0:
        raise ValueError(f"time_scale must be > 0, got {time_scale}")
    policy = policy or RetryPolicy()
    report = LoadReport()
    client = AsyncInstrumentedOpenAI(base_url, api_key, tracer_provider=tracer_provider, retry_policy=policy)
    gate = asyncio.Semaphore(max_tasks_in_flight)
    started = time.monotonic()
    offset = min((p.arrival_s for p in plans), default=0.0)

    async def guarded(plan: TaskPlan):
        try:
            await run_task(plan, client, policy, report, tracer_provider)
        except Exception:  # noqa: BLE001 - one broken task must not stop the run
            log.exception("task %s crashed", plan.task_id)
        finally:
            gate.release()
            if progress is not None:
                progress(report)

    running = set()
    try:
        for plan in sorted(plans, key=lambda p: p.arrival_s):
            delay = started + (plan.arrival_s - offset) / time_scale - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            await gate.acquire()
            job = asyncio.create_task(guarded(plan))
            running.add(job)
            job.add_done_callback(running.discard)
        if running:
            await asyncio.gather(*running)
    finally:
        await client.close()
    report.wall_s = time.monotonic() - started
    return report
