"""``infercost gateway``: the instrumented OpenAI-compatible gateway in front of N replicas."""

from __future__ import annotations

import click

from infercost.settings import load_settings


def _queue_caps(values: tuple[str, ...]) -> dict[str, int]:
    caps = {}
    for v in values:
        prio, sep, n = v.partition("=")
        if not sep or not prio or not n.isdigit():
            raise click.BadParameter(f"{v!r}: expected PRIORITY=N, e.g. interactive=1024", param_hint="--queue-cap")
        caps[prio] = int(n)
    return caps


@click.command(name="gateway")
@click.option("--upstream", "upstreams", multiple=True, required=True, metavar="[ID=]URL",
              help="A replica, e.g. replica-0=http://127.0.0.1:8001 (repeat for each; the id should match "
                   "the replica's service.instance.id).")
@click.option("--policy", type=click.Choice(["round_robin", "least_loaded", "session_affinity"]),
              default="round_robin", show_default=True, help="Routing policy.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Bind address.")
@click.option("--port", type=int, default=8080, show_default=True, help="Bind port.")
@click.option("--max-attempts", type=int, default=3, show_default=True,
              help="Upstream attempts per request (only before the first byte reached the client).")
@click.option("--retry-budget", type=float, default=0.1, show_default=True,
              help="Retries allowed as a fraction of requests over the window.")
@click.option("--retry-budget-window", type=float, default=10.0, show_default=True, help="Retry budget window, seconds.")
@click.option("--retry-budget-min", type=int, default=3, show_default=True, help="Retries always allowed per window.")
@click.option("--queue-cap", "queue_caps", multiple=True, metavar="PRIORITY=N",
              help="Max requests of a tenant.priority inside the gateway (default interactive=1024, batch=256).")
@click.option("--default-queue-cap", type=int, default=256, show_default=True, help="Cap of other priorities.")
@click.option("--max-inflight", type=int, default=0, show_default=True,
              help="Upstream concurrency limit; above it requests wait, interactive first (0 = none).")
@click.option("--retry-after", type=float, default=1.0, show_default=True, help="Retry-After of 429 answers, seconds.")
@click.option("--connect-timeout", type=float, default=2.0, show_default=True, help="Upstream TCP connect timeout, seconds.")
@click.option("--first-byte-timeout", type=float, default=60.0, show_default=True,
              help="Request sent -> first byte of a streamed answer (queueing + prefill), seconds.")
@click.option("--chunk-timeout", type=float, default=30.0, show_default=True,
              help="Longest silence between two chunks of a stream, seconds.")
@click.option("--response-timeout", type=float, default=600.0, show_default=True,
              help="Request sent -> whole body of a non-streamed answer, seconds.")
@click.option("--eject-after", type=int, default=3, show_default=True,
              help="Consecutive failures (connect, timeout, 5xx, malformed) that eject a replica (outlier detection).")
@click.option("--eject-time", type=float, default=5.0, show_default=True,
              help="Base ejection time, seconds (x times ejected, at most 300 s).")
@click.option("--otlp-endpoint", default=None,
              help="OTLP/HTTP receiver for the gateway's spans (default: the configured receiver).")
@click.option("--no-telemetry", is_flag=True, help="Do not export spans.")
def command(upstreams, policy, host, port, max_attempts, retry_budget, retry_budget_window, retry_budget_min,
            queue_caps, default_queue_cap, max_inflight, retry_after, connect_timeout, first_byte_timeout, chunk_timeout,
            response_timeout, eject_after, eject_time, otlp_endpoint, no_telemetry):
    """Run the instrumented gateway: SSE passthrough, routing, retry budget, admission control, spans, /metrics."""
    from serving.gateway import Gateway, GatewayConfig, parse_upstream, serve
    from serving.sdk.telemetry import make_tracer_provider

    try:
        ups = [parse_upstream(u) for u in upstreams]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--upstream") from exc
    caps = {"interactive": 1024, "batch": 256}
    caps.update(_queue_caps(queue_caps))
    config = GatewayConfig(ups, policy=policy, max_attempts=max_attempts, retry_budget_ratio=retry_budget,
                           retry_budget_window_s=retry_budget_window, retry_budget_min=retry_budget_min,
                           queue_caps=caps, default_queue_cap=default_queue_cap, max_inflight=max_inflight,
                           retry_after_s=retry_after, connect_timeout_s=connect_timeout,
                           first_byte_timeout_s=first_byte_timeout, chunk_timeout_s=chunk_timeout,
                           response_timeout_s=response_timeout, eject_after_failures=eject_after, eject_s=eject_time)
    try:
        config.validate()
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    provider = None
    if not no_telemetry:
        if otlp_endpoint is None:
            settings = load_settings()
            otlp_endpoint = f"http://{settings.receiver_host}:{settings.receiver_port}"
        provider = make_tracer_provider(config.service_name, otlp_endpoint=otlp_endpoint, compact_encoding=True)
        click.echo(f"exporting spans to {otlp_endpoint}")
    click.echo(f"gateway on http://{host}:{port} -> {', '.join(f'{u.replica_id}={u.url}' for u in ups)} ({policy})")
    try:
        serve(Gateway(config, tracer_provider=provider), host, port)
    finally:
        if provider is not None:
            provider.shutdown()
