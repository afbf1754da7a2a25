"""Workload plans: what a task will ask of the fleet, independent of how it is driven.

The contract between the workload generators (``serving/workloads``), which build plans from
real traces, and the two drivers: the live load runner (task SDK + OpenAI client against the
gateway) and the virtual-time fleet simulator (``serving/emulator``). Plain dataclasses, no I/O.
Token counts are tokens; times are seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class CallPlan:
    """One model call of a step.

    prompt_tokens: prompt length, tokens. output_tokens: tokens the model will generate
    (the emulator stops there with finish reason ``stop``; ``max_tokens`` caps it at ``length``).
    prefix_blocks: ids of the prompt's 512-token blocks (Mooncake ``hash_ids``); equal ids across
    calls are a shared prefix a prefix cache can reuse. Empty = no known sharing.
    """

    prompt_tokens: int
    output_tokens: int
    prefix_blocks: tuple[int, ...] = ()
    max_tokens: int | None = None
    # The client rejects the answers of this many first attempts (an invalid tool call, malformed
    # JSON) and asks again: each rejected attempt is paid for and is retry waste.
    rejected_attempts: int = 0


@dataclass(frozen=True)
class StepPlan:
    """A workflow step: its calls run concurrently (fan-out) and the step succeeds when all do."""

    name: str
    calls: tuple[CallPlan, ...]


@dataclass(frozen=True)
class TaskPlan:
    """A task a user asked for: steps run in order; ``arrival_s`` is seconds from the workload start."""

    task_id: str
    task_type: str  # chat | copilot | research_agent | ...
    tenant: str
    arrival_s: float
    steps: tuple[StepPlan, ...]
    priority: str = "interactive"
    model: str = "meta-llama/Llama-3.1-8B-Instruct"
    slo_ttft_ms: float | None = None
    slo_e2e_ms: float | None = None
    # The client rejects the result of this step (0-based): a tool error, an invalid plan, a failed
    # check. The task fails there, after paying for every call up to and including that step.
    fail_at_step: int | None = None

    @property
    def n_calls(self) -> int:
        return sum(len(s.calls) for s in self.steps)


@dataclass(frozen=True)
class RetryPolicy:
    """Client behaviour on failure (the task SDK's defaults; see serving/sdk).

    max_attempts: tries per call, first included. backoff_base_s / backoff_max_s: exponential
    backoff with full jitter (AWS Architecture Blog, "Exponential Backoff And Jitter", 2015).
    timeout_s: client gives up on one attempt after this long. give_up_after_failed_steps: the
    task fails when this many steps failed. abandon_after_s: the user leaves (task ``abandoned``).
    """

    max_attempts: int = 3
    backoff_base_s: float = 0.5
    backoff_max_s: float = 8.0
    timeout_s: float = 60.0
    give_up_after_failed_steps: int = 1
    abandon_after_s: float | None = None
    retry_on_status: tuple[int, ...] = field(default=(429, 500, 502, 503, 504))
