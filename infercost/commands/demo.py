"""``infercost demo``: the whole product on emulated GPUs and a real public trace, in one command."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from infercost.settings import load_settings


def parse_duration(value: str | None) -> float | None:
    """``90``, ``90s``, ``2m``, ``1h``, ``7d`` -> seconds; None/"" stays None. Raises click.BadParameter."""
    if value in (None, ""):
        return None
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    text = value.strip().lower()
    scale = units.get(text[-1:], None)
    number = text[:-1] if scale else text
    try:
        seconds = float(number) * (scale or 1)
    except ValueError:
        raise click.BadParameter(f"{value!r}: expected a duration like 90s, 2m, 1h or 7d") from None
    if seconds <= 0:
        raise click.BadParameter(f"{value!r}: must be positive")
    return seconds


@click.command(name="demo")
@click.option("--duration", default=None, help="Stop after this long (e.g. 2m, 1h); default: until Ctrl-C.")
@click.option("--backfill-days", type=float, default=7.0, show_default=True,
              help="Days of history simulated in virtual time before going live (0 = none).")
@click.option("--reset", is_flag=True, help="Delete the demo's data first (default: reuse it).")
@click.option("--rate-scale", type=float, default=None,
              help="Live call rate as a fraction of the Mooncake conversation trace's (default: sized to the "
                   "demo fleet, infercost/demo.py FLEET_SIZING).")
@click.option("--backfill-rate-scale", type=float, default=None,
              help="Backfill call rate at the daily peak, as a fraction of the trace's (default: sized to the "
                   "demo fleet).")
@click.option("--incident-after", default=None,
              help="When the live incident starts (default 8m; a third of --duration when that is shorter; "
                   "before 7m replica-2 has no baseline of its own for the degradation alert).")
@click.option("--incident-replica", default="replica-2", show_default=True)
@click.option("--incident-factor", type=float, default=6.0, show_default=True, help="Slowdown factor.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--port", type=int, default=None, help="Dashboard port (default INFERCOST_DASHBOARD_PORT, 8501).")
@click.option("--receiver-port", type=int, default=None, help="OTLP/HTTP receiver port (default 4318).")
@click.option("--summary-json", type=click.Path(path_type=Path), default=None,
              help="Also write the final summary as JSON here.")
def command(duration, backfill_days, reset, rate_scale, backfill_rate_scale, incident_after, incident_replica,
            incident_factor, seed, port, receiver_port, summary_json):
    """Backfill a week in virtual time, then run a live emulated GPU fleet with an incident, and the dashboard.

    Everything runs in this process: embedded ClickHouse store, OTLP receiver, 3 emulated vLLM
    replicas of Llama-3.1-70B (4x H100, 2 x 4x A100), gateway, a workload replayed from the Mooncake
    conversation trace, the cost jobs, the alert evaluator and the dashboard.
    """
    from infercost.demo import REPLICAS, DemoOptions, run_demo

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # The emulated replicas and the gateway run uvicorn: one access-log line per request is noise here.
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    seconds = parse_duration(duration)
    after = parse_duration(incident_after)
    if after is None:
        after = DemoOptions.incident_after_s if seconds is None else min(DemoOptions.incident_after_s, seconds / 3)
    if incident_replica not in REPLICAS:
        raise click.BadParameter(f"{incident_replica!r}: one of {', '.join(REPLICAS)}", param_hint="--incident-replica")
    rate_scale = DemoOptions.live_rate_scale if rate_scale is None else rate_scale
    backfill_rate_scale = DemoOptions.backfill_rate_scale if backfill_rate_scale is None else backfill_rate_scale
    if backfill_days < 0 or rate_scale <= 0 or backfill_rate_scale <= 0 or incident_factor <= 0:
        raise click.UsageError("--backfill-days must be >= 0; rate scales and --incident-factor must be > 0")
    settings = load_settings(dashboard_port=port, receiver_port=receiver_port)
    options = DemoOptions(duration_s=seconds, backfill_days=backfill_days, reset=reset,
                          backfill_rate_scale=backfill_rate_scale, live_rate_scale=rate_scale,
                          incident_after_s=after, incident_replica=incident_replica,
                          incident_factor=incident_factor, seed=seed, summary_json=summary_json)
    try:
        run_demo(settings, options, echo=click.echo)
    except (OSError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
