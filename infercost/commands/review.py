"""``infercost review``: write the weekly cost review (self-contained HTML + Markdown) and deliver it.

Reads the store named by the settings (or ``--clickhouse-url``), optionally recomputes the cost
jobs over the two weeks compared (``--recompute``; the store's own refresh jobs keep the tables
current otherwise), builds the review with ``app.review`` and writes
``infercost-review-<week>.html`` and ``.md`` into ``--out``. Delivery flags default to the
``INFERCOST_REVIEW_*`` settings (environment variables).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from pathlib import Path

import click

from infercost.settings import load_settings

log = logging.getLogger(__name__)

# The cost job's default abandonment timeout (schema cost_settings.abandon_timeout_s = 1800 s) plus
# a minute: how far past the last telemetry the jobs run so root-less tasks get their outcome.
ABANDON_MARGIN_S = 1800 + 60


def _run_jobs(store, start: datetime, end: datetime) -> str:
    """Recompute the cost jobs over the telemetry inside [start, end). Only the span from the first to the last telemetry time (plus the abandonment
    timeout, so tasks without a root span are judged as the live job would) is recomputed: empty
    days cost minutes of job time and change nothing. ``end`` must not lie in the future (it is
    the jobs' "now" for abandonment). Returns a note for the user, '' when all went as asked.
    """
    from schema.jobs import run_jobs
    from schema.queries import review as review_queries

    first, last = review_queries.data_extent(store, start, end)
    if first is None:
        return ""
    job_end = min(end.replace(tzinfo=None), last + timedelta(seconds=ABANDON_MARGIN_S))
    job_start = max(start.replace(tzinfo=None), first - timedelta(minutes=1))
    if job_end > job_start:
        run_jobs(store, start=job_start.replace(tzinfo=timezone.utc), end=job_end.replace(tzinfo=timezone.utc))
    return ""


def review_dir(settings) -> Path:
    """Where reviews are written: ``review_out_dir`` or ``<data_dir>/reviews``."""
    return settings.review_out_dir or settings.data_dir / "reviews"


def delivery_from_settings(settings):
    """``(webhook_url or None, SmtpTarget or None)`` from the ``review_*`` settings."""
    from app.review.schedule import SmtpTarget

    smtp = None
    if settings.review_smtp_host:
        smtp = SmtpTarget(
            host=settings.review_smtp_host, port=settings.review_smtp_port, sender=settings.review_smtp_from,
            to=tuple(a.strip() for a in settings.review_smtp_to.split(",") if a.strip()),
            username=settings.review_smtp_user, password=settings.review_smtp_password,
            starttls=settings.review_smtp_starttls and not settings.review_smtp_ssl, use_ssl=settings.review_smtp_ssl)
    return settings.review_webhook_url or None, smtp


def scheduler_from_settings(store, settings):
    """The weekly review scheduler ``infercost up`` starts when ``review_schedule`` is on, else None.

    Usage in ``up``: ``s = scheduler_from_settings(store, settings); s and s.start()``, and
    ``s.stop()`` on shutdown. Raises ValueError for invalid SMTP settings (reported at start-up).
    """
    if not settings.review_schedule:
        return None
    from app.review.schedule import WeeklyScheduler

    webhook_url, smtp = delivery_from_settings(settings)
    if smtp is not None and smtp.problems():
        raise ValueError("review SMTP settings: " + "; ".join(smtp.problems()))
    return WeeklyScheduler(store, review_dir(settings), weekday=settings.review_weekday, hour=settings.review_hour,
                           webhook_url=webhook_url, smtp=smtp)


def _write_from_api(api, week: str, out_dir: Path) -> tuple[Path, Path]:
    """Fetch the review of ``week`` from the owning service's query API and write both files."""
    body = api.get("/review", week=week)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    html_path, md_path = out / f"infercost-review-{week}.html", out / f"infercost-review-{week}.md"
    html_path.write_text(body["html"], encoding="utf-8")
    md_path.write_text(body["markdown"], encoding="utf-8")
    return html_path, md_path


@click.command(name="review")
@click.option("--week", "week_text", default=None, metavar="YYYY-Www",
              help="ISO week to review, e.g. 2026-W48 (default: the last complete week, UTC).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Directory for the HTML and Markdown files (default: <data dir>/reviews).")
@click.option("--clickhouse-url", default=None, help="Store URL (default: INFERCOST_CLICKHOUSE_URL or the embedded store).")
@click.option("--recompute/--no-recompute", "run_jobs", default=False, show_default=True,
              help="Recompute the cost jobs over the telemetry of both weeks first (idempotent; e.g. after a "
                   "fleet.yaml price change older than the jobs' trailing window). Off: the report shows the "
                   "cost tables exactly as the dashboard does.")
@click.option("--webhook", "webhook_url", default=None,
              help="POST the review to this webhook URL (JSON, 'text' = Markdown). Default INFERCOST_REVIEW_WEBHOOK_URL.")
@click.option("--smtp-host", default=None, help="Mail the review via this SMTP host. Default INFERCOST_REVIEW_SMTP_HOST.")
@click.option("--smtp-port", type=int, default=None, help="Default INFERCOST_REVIEW_SMTP_PORT (587).")
@click.option("--smtp-from", "smtp_from", default=None, help="Default INFERCOST_REVIEW_SMTP_FROM.")
@click.option("--smtp-to", default=None, help="Recipients, comma-separated. Default INFERCOST_REVIEW_SMTP_TO.")
@click.option("--smtp-user", default=None, help="Default INFERCOST_REVIEW_SMTP_USER.")
@click.option("--smtp-password", default=None,
              help="Prefer the environment variable INFERCOST_REVIEW_SMTP_PASSWORD to this flag.")
@click.option("--smtp-starttls/--no-smtp-starttls", default=None, help="Default INFERCOST_REVIEW_SMTP_STARTTLS (on).")
@click.option("--smtp-ssl/--no-smtp-ssl", default=None, help="Implicit TLS (port 465). Default INFERCOST_REVIEW_SMTP_SSL.")
def command(week_text, out_dir, clickhouse_url, run_jobs, webhook_url, smtp_host, smtp_port, smtp_from, smtp_to,
            smtp_user, smtp_password, smtp_starttls, smtp_ssl):
    """Write the weekly cost review of one ISO week (HTML + Markdown), optionally deliver it.

    Example: infercost review --week 2026-W48 --out reviews/
    """
    from app.review import BadWeek, last_complete_week, parse_week, write_report
    from app.review.schedule import deliver
    from infercost.locate import APIClient, NoStoreHere, open_for_reading
    from schema.migrate import MigrationError
    from schema.store import StoreError

    now = datetime.now(timezone.utc)
    try:
        week = parse_week(week_text) if week_text else last_complete_week(now)
    except BadWeek as exc:
        raise click.BadParameter(str(exc), param_hint="--week") from exc
    try:
        settings = load_settings(
            clickhouse_url=clickhouse_url, review_webhook_url=webhook_url, review_smtp_host=smtp_host,
            review_smtp_port=smtp_port, review_smtp_from=smtp_from, review_smtp_to=smtp_to,
            review_smtp_user=smtp_user, review_smtp_password=smtp_password, review_smtp_starttls=smtp_starttls,
            review_smtp_ssl=smtp_ssl)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    webhook_url, smtp = delivery_from_settings(settings)
    if smtp is not None and smtp.problems():
        raise click.UsageError("SMTP settings: " + "; ".join(smtp.problems()))
    if webhook_url and not webhook_url.startswith(("http://", "https://")):
        raise click.BadParameter(f"must be an http(s) URL, got {webhook_url!r}", param_hint="--webhook")
    out_dir = out_dir or review_dir(settings)
    try:
        store = open_for_reading(settings, lambda text: click.echo(text, err=True))
        if isinstance(store, APIClient):
            if run_jobs:
                raise click.ClickException("--recompute needs the store itself: stop the service that owns it first")
            html_path, md_path = _write_from_api(store, week.label, out_dir)
        else:
            if run_jobs:
                note = _run_jobs(store, week.previous().start, min(week.end, now))
                if note:
                    click.echo(note, err=True)
            html_path, md_path = write_report(store, week, out_dir, now=now)
    except (StoreError, MigrationError, NoStoreHere, RuntimeError) as exc:
        raise click.ClickException(f"store: {exc}") from exc
    except OSError as exc:
        raise click.ClickException(f"cannot write the review to {out_dir}: {exc}") from exc
    click.echo(f"wrote {html_path}")
    click.echo(f"wrote {md_path}")
    if webhook_url or smtp:
        result = deliver(html_path, md_path, week=week.label, title=f"Weekly cost review {week.label}",
                         webhook_url=webhook_url, smtp=smtp)
        for target, outcome in result.results.items():
            click.echo(f"delivered to {target}: {outcome}" if outcome == "ok" else f"delivery to {target} failed: {outcome}",
                       err=outcome != "ok")
        if not result.ok:
            raise SystemExit(2)
