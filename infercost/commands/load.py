"""``infercost load``: drive task workloads replayed from real traces, live or in virtual time."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from infercost.commands.emulate import parse_mix
from infercost.settings import load_settings


@click.command(name="load")
@click.option("--target", default="http://127.0.0.1:8080/v1", show_default=True,
              help="OpenAI base URL of the gateway (or a replica) for live runs.")
@click.option("--trace", "trace_name", type=click.Choice(["azure", "mooncake"]), default="azure", show_default=True,
              help="Which public trace to replay (arrivals and token lengths).")
@click.option("--traces-dir", "--data-dir", "data_dir", type=click.Path(path_type=Path), default=None,
              help="Folder of the public traces (default: the copy shipped in serving/workloads/data); not INFERCOST_DATA_DIR, the store's "
                   "folder. --data-dir is its former name.")
@click.option("--mix", default="chat=0.6,copilot=0.3,research_agent=0.1", show_default=True, help="Task-type shares.")
@click.option("--rate-scale", type=float, default=1.0, show_default=True, help="Call-rate multiplier over the trace.")
@click.option("--duration", type=float, default=600.0, show_default=True, help="Seconds of the (looped) trace to replay.")
@click.option("--start-offset", type=float, default=0.0, show_default=True, help="Start this many seconds into the trace.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--tenants", default=None, help="Comma-separated tenant ids (default: five demo tenants).")
@click.option("--model", default="meta-llama/Llama-3.1-8B-Instruct", show_default=True)
@click.option("--max-attempts", type=int, default=3, show_default=True, help="Client tries per call.")
@click.option("--backoff-base", type=float, default=0.5, show_default=True, help="Backoff base, seconds (full jitter).")
@click.option("--backoff-max", type=float, default=8.0, show_default=True, help="Backoff cap, seconds.")
@click.option("--timeout", type=float, default=60.0, show_default=True, help="Per-attempt timeout, seconds.")
@click.option("--give-up-after", type=int, default=1, show_default=True, help="A task fails after this many failed steps.")
@click.option("--abandon-after", type=float, default=None, help="A task is abandoned after this many seconds.")
@click.option("--time-scale", type=float, default=1.0, show_default=True, help="Live: replay arrivals this much faster.")
@click.option("--virtual", is_flag=True, help="Run on the emulator's virtual clock instead of live HTTP.")
@click.option("--replicas", type=int, default=4, show_default=True, help="Virtual: emulated replicas.")
@click.option("--profile", default="h100-llama-3.1-8b", show_default=True, help="Virtual: engine profile.")
@click.option("--policy", type=click.Choice(["round_robin", "least_loaded", "session_affinity"]),
              default="least_loaded", show_default=True, help="Virtual: gateway routing policy.")
@click.option("--otlp-endpoint", default=None, help="OTLP/HTTP receiver (default: the configured receiver).")
@click.option("--no-telemetry", is_flag=True, help="Do not export spans (dry runs, load only).")
@click.option("--dry-run", is_flag=True, help="Build the plans, print their summary, send nothing.")
def command(target, trace_name, data_dir, mix, rate_scale, duration, start_offset, seed, tenants, model,
            max_attempts, backoff_base, backoff_max, timeout, give_up_after, abandon_after, time_scale, virtual,
            replicas, profile, policy, otlp_endpoint, no_telemetry, dry_run):
    """Replay chat / copilot / research-agent tasks built from a real trace against the serving tier."""
    from serving.plans import RetryPolicy
    from serving.workloads import build_plans

    try:
        plans = build_plans(trace_name, data_dir, parse_mix(mix), rate_scale=rate_scale, duration_s=duration,
                            start_offset_s=start_offset, seed=seed, model=model,
                            tenants=[t.strip() for t in tenants.split(",") if t.strip()] if tenants else None)
        policy_ = RetryPolicy(max_attempts=max_attempts, backoff_base_s=backoff_base, backoff_max_s=backoff_max,
                              timeout_s=timeout, give_up_after_failed_steps=give_up_after, abandon_after_s=abandon_after)
    except (ValueError, FileNotFoundError) as exc:
        raise click.ClickException(str(exc)) from exc
    by_type: dict[str, int] = {}
    for p in plans:
        by_type[p.task_type] = by_type.get(p.task_type, 0) + 1
    n_calls = sum(p.n_calls for p in plans)
    click.echo(f"{len(plans)} tasks ({', '.join(f'{k} {v}' for k, v in sorted(by_type.items()))}), {n_calls} calls "
               f"from the {trace_name} trace over {duration:.0f} s")
    if dry_run or not plans:
        return
    if not no_telemetry and otlp_endpoint is None:
        settings = load_settings()
        otlp_endpoint = f"http://{settings.receiver_host}:{settings.receiver_port}"
    if virtual:
        _virtual(plans, replicas, profile, policy, policy_, None if no_telemetry else otlp_endpoint, seed)
        return
    from serving.sdk.telemetry import make_tracer_provider
    from serving.workloads import run_live

    provider = None if no_telemetry else make_tracer_provider("infercost-load", otlp_endpoint=otlp_endpoint)
    try:
        report = asyncio.run(run_live(plans, target, policy=policy_, tracer_provider=provider, time_scale=time_scale))
    except KeyboardInterrupt:
        raise click.ClickException("interrupted") from None
    finally:
        if provider is not None:
            provider.shutdown()
    click.echo(report.summary())


def _virtual(plans, replicas, profile, routing, retry_policy, otlp_endpoint, seed):
    try:
        from serving.emulator.fleet_sim import ReplicaSpec, simulate
        from serving.emulator.otlp import OtlpHttpSink
    except ImportError as exc:  # the emulator is optional at import time
        raise click.ClickException(f"virtual-time mode needs the emulator: {exc}") from exc
    sink = OtlpHttpSink(otlp_endpoint) if otlp_endpoint else None
    try:
        summary = simulate(plans, [ReplicaSpec(f"replica-{i}", profile) for i in range(replicas)], policy=routing,
                           retry_policy=retry_policy, sink=sink, seed=seed, progress=True)
    except (ValueError, RuntimeError) as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        if sink is not None:
            sink.close()
    click.echo(f"virtual run: tasks {summary.tasks}, {summary.calls} calls, {summary.attempts} attempts, "
               f"{summary.spans} spans, {summary.metric_points} metric points")
