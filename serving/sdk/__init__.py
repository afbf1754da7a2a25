"""Task SDK: mark tasks, steps and attempts so cost per successful task is computable.

``task(...)`` (context manager, async context manager, decorator), ``InstrumentedOpenAI`` /
``AsyncInstrumentedOpenAI`` (one CLIENT span per attempt, traceparent + baggage, retries),
``make_tracer_provider`` (OTLP/HTTP). See docs/telemetry.md for the span shapes.
"""

from serving.plans import RetryPolicy
from serving.sdk.client import AsyncInstrumentedOpenAI, CallFailed, CallResult, InstrumentedOpenAI
from serving.sdk.task import Task, current_task, task
from serving.sdk.telemetry import make_tracer_provider
from serving.sdk.usage import StreamUsage

__all__ = ["task", "Task", "current_task", "InstrumentedOpenAI", "AsyncInstrumentedOpenAI", "CallResult",
           "CallFailed", "RetryPolicy", "make_tracer_provider", "StreamUsage"]
