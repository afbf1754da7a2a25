"""``infercost emulate``: emulated vLLM replicas, live over HTTP or in virtual time.

Live (default)::

    infercost emulate --replicas 4 --profile h100-llama-3.1-8b --base-port 8000 \\
        [--otlp-endpoint http://127.0.0.1:4318] [--faults timeline.yaml]

serves vLLM's OpenAI-compatible API, ``/metrics`` and ``/admin/faults`` on consecutive ports until
Ctrl-C; ``llm_request`` spans go to the OTLP/HTTP endpoint (default: the configured receiver).

Virtual time::

    infercost emulate --virtual --trace azure --duration 1h --replicas 8 [--to otlp|store|none]

replays a task mix built from a public trace (serving.workloads) through the fleet simulator and
sends spans and metric points, timestamped in simulated time ending now (or from ``--start``), to
the receiver (``otlp``), straight into the configured store (``store``; only when no other process
owns an embedded store), or nowhere (``none``: a dry run that prints the summary).

Wiring only: settings -> serving.emulator.
"""

from __future__ import annotations

import re
import signal
import threading
import time
from datetime import datetime, timezone

import click

from infercost.settings import load_settings

PROFILE_NAMES = ("h100-llama-3.1-8b", "a100-llama-3.1-8b", "4xh100-llama-3.1-70b")


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``2h``, ``7d`` -> seconds; raises click.BadParameter otherwise."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text or "")
    if not m:
        raise click.BadParameter(f"{text!r}: expected a duration like 90s, 15m, 2h or 7d")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


def parse_mix(text: str | None) -> dict | None:
    """``chat=0.6,copilot=0.3,research_agent=0.1`` -> dict (None for none); raises click.BadParameter
    otherwise. The ``--mix`` of ``emulate`` and ``load``."""
    if not text:
        return None
    out = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        try:
            share = float(value) if sep else None
        except ValueError:
            share = None
        if share is None:
            raise click.BadParameter(f"{part!r}: expected TYPE=SHARE, e.g. chat=0.6", param_hint="--mix")
        out[name.strip()] = share
    return out


@click.command(name="emulate")
@click.option("--replicas", "-n", default=1, show_default=True, type=click.IntRange(1, 256), help="Number of replicas.")
@click.option("--profile", default="h100-llama-3.1-8b", show_default=True, type=click.Choice(PROFILE_NAMES),
              help="Engine profile (GPU type + model).")
@click.option("--base-port", default=8000, show_default=True, type=click.IntRange(0, 65535),
              help="Live: first port (replica i listens on base+i; 0 = free ports).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Live: bind address.")
@click.option("--otlp-endpoint", default=None, help="OTLP/HTTP receiver base URL (default: the configured receiver).")
@click.option("--no-tracing", is_flag=True, help="Live: export no spans.")
@click.option("--faults", "faults_file", type=click.Path(exists=True, dir_okay=False),
              help="Fault timeline (JSON/YAML list of {at_s, replica, kind, value, until_s}).")
@click.option("--static", is_flag=True, help="Static batching instead of continuous (comparison).")
@click.option("--no-prefix-caching", is_flag=True, help="Disable automatic prefix caching.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the noise, faults and routing draws.")
@click.option("--noise", default=0.0, show_default=True, type=float,
              help="Step-time noise: sigma of a log-normal multiplier per engine step (0 = deterministic).")
@click.option("--virtual", is_flag=True, help="Virtual time: simulate a fleet driven by a trace, as fast as possible.")
@click.option("--trace", default="azure", show_default=True, type=click.Choice(["azure", "mooncake"]),
              help="Virtual: the public trace the workload is built from.")
@click.option("--duration", default="1h", show_default=True, help="Virtual: simulated span (90s, 15m, 2h, 7d).")
@click.option("--rate-scale", default=1.0, show_default=True, type=float, help="Virtual: call-rate multiplier.")
@click.option("--mix", default=None, help="Virtual: task mix, e.g. chat=0.6,copilot=0.3,research_agent=0.1.")
@click.option("--policy", default="least_loaded", show_default=True,
              type=click.Choice(["round_robin", "least_loaded", "session_affinity"]), help="Virtual: gateway routing.")
@click.option("--timeout", "timeout_s", default=60.0, show_default=True, type=float,
              help="Virtual: client timeout per attempt, seconds.")
@click.option("--start", default=None, help="Virtual: ISO time of simulated second 0 (default: now - duration).")
@click.option("--to", "dest", default="otlp", show_default=True, type=click.Choice(["otlp", "store", "none"]),
              help="Virtual: where spans and metric points go.")
@click.option("--metrics-interval", default=10.0, show_default=True, type=float,
              help="Virtual: seconds between metric points per replica.")
def command(replicas, profile, base_port, host, otlp_endpoint, no_tracing, faults_file, static, no_prefix_caching,
            seed, noise, virtual, trace, duration, rate_scale, mix, policy, timeout_s, start, dest, metrics_interval):
    """Run emulated vLLM replicas: live HTTP servers, or a virtual-time fleet replaying a trace."""
    from serving.emulator.faults import load_timeline

    settings = load_settings()
    endpoint = otlp_endpoint or f"http://{settings.receiver_host}:{settings.receiver_port}"
    try:
        faults = load_timeline(faults_file) if faults_file else []
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--faults") from None
    if virtual:
        _virtual(settings, replicas, profile, faults, static, no_prefix_caching, seed, trace,
                 parse_duration(duration), rate_scale, parse_mix(mix), policy, timeout_s, start, dest, endpoint,
                 metrics_interval, noise)
    else:
        _live(replicas, profile, base_port, host, None if no_tracing else endpoint, faults, static,
              no_prefix_caching, seed, noise)


def _live(n, profile, base_port, host, endpoint, faults, static, no_prefix, seed, noise):
    from serving.emulator.live import start_replicas

    fleet = start_replicas(n, profile, base_port=base_port, host=host, otlp_endpoint=endpoint, seed=seed,
                           prefix_caching=not no_prefix, static=static,
                           profile_overrides={"noise_sigma": noise} if noise else None)
    for r in fleet:
        click.echo(f"{r.replica_id}: {r.url}/v1  (metrics {r.url}/metrics, faults {r.admin})")
    click.echo(f"profile {profile}; spans -> {endpoint or 'off'}; Ctrl-C to stop")
    if faults:
        fleet.schedule_faults(faults)
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    while not stop.is_set() and fleet.thread.is_alive():
        stop.wait(0.5)
    fleet.stop()


def _virtual(settings, n, profile, faults, static, no_prefix, seed, trace, duration_s, rate_scale, mix, policy,
             timeout_s, start, dest, endpoint, metrics_interval, noise):
    from serving.emulator.fleet_sim import ReplicaSpec, simulate
    from serving.emulator.otlp import CallbackSink, OtlpHttpSink
    from serving.plans import RetryPolicy
    from serving.workloads.builder import build_plans

    if start:
        try:
            t0 = datetime.fromisoformat(start)
        except ValueError:
            raise click.BadParameter(f"{start!r} is not an ISO time", param_hint="--start") from None
        if t0.tzinfo is None:
            t0 = t0.replace(tzinfo=timezone.utc)
        start_ns = int(t0.timestamp() * 1e9)
    else:
        start_ns = (time.time_ns() - int(duration_s * 1e9)) // 1_000_000_000 * 1_000_000_000
    fleet = [ReplicaSpec(f"replica-{i}", profile=profile, static=static, prefix_caching=not no_prefix)
             for i in range(n)]

    def plans():  # hour by hour, so a week never sits in memory at once
        chunk = 3600.0
        off = 0.0
        while off < duration_s:
            yield from build_plans(trace, mix=mix, rate_scale=rate_scale, duration_s=min(chunk, duration_s - off),
                                   start_offset_s=off, seed=seed + int(off // chunk))
            off += chunk

    store = None
    if dest == "otlp":
        sink = OtlpHttpSink(endpoint)
    elif dest == "store":
        from collectors.ingest import ingest_metrics, ingest_traces
        from schema.migrate import migrate
        from schema.store import connect

        store = connect(settings.store_url, settings.database)
        migrate(store, retention_days=settings.retention_days)
        sink = CallbackSink(lambda r: ingest_traces(store, r), lambda r: ingest_metrics(store, r))
    else:
        sink = None
    click.echo(f"simulating {duration_s:.0f} s of {n} x {profile} on the {trace} trace (x{rate_scale}) -> {dest}")
    try:
        summ = simulate(plans(), fleet, start_time_ns=start_ns, policy=policy,
                        retry_policy=RetryPolicy(timeout_s=timeout_s), faults=faults, sink=sink, progress=True,
                        seed=seed, metrics_interval_s=metrics_interval, noise_sigma=noise)
    finally:
        if store is not None:
            store.close()
    click.echo(f"tasks {summ.tasks}; calls {summ.calls}; attempts {summ.attempts}; engine requests "
               f"{summ.engine_requests}; spans {summ.spans}; metric points {summ.metric_points}")
    click.echo(f"simulated {summ.sim_seconds:.0f} s in {summ.wall_seconds:.1f} s wall "
               f"({summ.requests_per_wall_second:.0f} requests/s); retries: client {summ.client_retries}, "
               f"gateway {summ.gateway_retries}; timeouts {summ.timeouts}; preemptions {summ.preemptions}")
