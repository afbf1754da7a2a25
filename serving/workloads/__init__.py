"""Workloads: task plans from real traces (``build_plans``) and the live runner (``run_live``).

Interfaces others use:

* ``build_plans(trace="azure"|"mooncake", data_dir=None, mix={"chat": .6, "copilot": .3,
  "research_agent": .1}, rate_scale=1.0, duration_s=3600, start_offset_s=0, seed=0, tenants=None,
  model=..., priorities=None, slo_ms=None, max_tokens_cap=None, failure_rates=None, reask_rates=None) -> list[TaskPlan]``
  (``AGENTIC_FAILURE_RATES``: the cited per-type task failure rates the demo uses)
* ``run_live(plans, base_url, policy=RetryPolicy(), tracer_provider=None, time_scale=1.0) -> LoadReport``
* ``load_trace(name, data_dir=None) -> Trace``; ``prompt_text(prompt_tokens, prefix_blocks, seed) -> str``
"""

from serving.workloads.builder import AGENTIC_FAILURE_RATES, AGENTIC_REASK_RATES, DEFAULT_MIX, TASK_TYPES, build_plans
from serving.workloads.prompts import prompt_text
from serving.workloads.runner import STEP_REJECTED, LoadReport, run_live, run_task
from serving.workloads.traces import Trace, default_data_dir, load_trace

__all__ = ["build_plans", "run_live", "run_task", "LoadReport", "load_trace", "Trace", "default_data_dir",
           "prompt_text", "DEFAULT_MIX", "TASK_TYPES", "AGENTIC_FAILURE_RATES", "AGENTIC_REASK_RATES", "STEP_REJECTED"]
