"""``infercost review``: write the weekly cost review (self-contained HTML + Markdown) and deliver it.

Reads the store named by the settings (or ``--clickhouse-url``), recomputes the cost jobs over
the two weeks compared (idempotent; ``--no-run-jobs`` to skip), builds the review with
``app.review`` and writes ``infercost-review-<week>.html`` and ``.md`` into ``--out``.
Delivery flags default to the ``INFERCOST_REVIEW_*`` environment variables.
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
    """Recompute the cost jobs over the telemetry inside [start, end), if the cost engine provides
    ``run_jobs``. Only the span from the first to the last telemetry time (plus the abandonment
    timeout, so tasks without a root span are judged as the live job would) is recomputed: empty
    days cost minutes of job time and change nothing. ``end`` must not lie in the future (it is
    the jobs' "now" for abandonment). Returns a note for the user, '' when all went as asked.
    """
    try:
        from schema.jobs import run_jobs
    except ImportError:
        return "cost jobs not available in this build: using the tables as they are"
    from schema.queries import review as review_queries

    first, last = review_queries.data_extent(store, start, end)
    if first is None:
        return ""
    job_end = min(end.replace(tzinfo=None), last + timedelta(seconds=ABANDON_MARGIN_S))
    job_start = max(start.replace(tzinfo=None), first - timedelta(minutes=1))
    if job_end > job_start:
        run_jobs(store, start=job_start.replace(tzinfo=timezone.utc), end=job_end.replace(tzinfo=timezone.utc))
    return ""


@click.command(name="review")
@click.option("--week", "week_text", default=None, metavar="YYYY-Www",
              help="ISO week to review, e.g. 2026-W48 (default: the last complete week, UTC).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Directory for the HTML and Markdown files (default: <data dir>/reviews).")
@click.option("--clickhouse-url", default=None, help="Store URL (default: INFERCOST_CLICKHOUSE_URL or the embedded store).")
@click.option("--run-jobs/--no-run-jobs", default=True, show_default=True,
              help="Recompute the cost jobs over both weeks first (idempotent).")
@click.option("--webhook", "webhook_url", envvar="INFERCOST_REVIEW_WEBHOOK_URL", default=None,
              help="POST the review to this webhook URL (JSON with 'text' = Markdown). Env INFERCOST_REVIEW_WEBHOOK_URL.")
@click.option("--smtp-host", envvar="INFERCOST_REVIEW_SMTP_HOST", default=None, help="Mail the review via this SMTP host.")
@click.option("--smtp-port", envvar="INFERCOST_REVIEW_SMTP_PORT", type=int, default=587, show_default=True)
@click.option("--smtp-from", "smtp_from", envvar="INFERCOST_REVIEW_SMTP_FROM", default="infercost@localhost", show_default=True)
@click.option("--smtp-to", envvar="INFERCOST_REVIEW_SMTP_TO", default=None,
              help="Recipients, comma-separated. Env INFERCOST_REVIEW_SMTP_TO.")
@click.option("--smtp-user", envvar="INFERCOST_REVIEW_SMTP_USER", default="")
@click.option("--smtp-password", envvar="INFERCOST_REVIEW_SMTP_PASSWORD", default="",
              help="Prefer the environment variable INFERCOST_REVIEW_SMTP_PASSWORD to the flag.")
@click.option("--smtp-starttls/--no-smtp-starttls", default=True, show_default=True)
@click.option("--smtp-ssl", is_flag=True, default=False, help="Implicit TLS (port 465) instead of STARTTLS.")
def command(week_text, out_dir, clickhouse_url, run_jobs, webhook_url, smtp_host, smtp_port, smtp_from, smtp_to,
            smtp_user, smtp_password, smtp_starttls, smtp_ssl):
    """Write the weekly cost review of one ISO week (HTML + Markdown), optionally deliver it.

    Example: infercost review --week 2026-W48 --out reviews/
    """
    from app.review import BadWeek, last_complete_week, parse_week, write_report
    from app.review.schedule import SmtpTarget, deliver
    from schema.migrate import MigrationError, migrate
    from schema.store import StoreError, connect

    now = datetime.now(timezone.utc)
    try:
        week = parse_week(week_text) if week_text else last_complete_week(now)
    except BadWeek as exc:
        raise click.BadParameter(str(exc), param_hint="--week") from exc
    smtp = None
    if smtp_host:
        smtp = SmtpTarget(host=smtp_host, port=smtp_port, sender=smtp_from,
                          to=tuple(a.strip() for a in (smtp_to or "").split(",") if a.strip()),
                          username=smtp_user, password=smtp_password, starttls=smtp_starttls and not smtp_ssl,
                          use_ssl=smtp_ssl)
        problems = smtp.problems()
        if problems:
            raise click.UsageError("SMTP settings: " + "; ".join(problems))
    if webhook_url and not webhook_url.startswith(("http://", "https://")):
        raise click.BadParameter(f"must be an http(s) URL, got {webhook_url!r}", param_hint="--webhook")

    settings = load_settings(clickhouse_url=clickhouse_url)
    out_dir = out_dir or settings.data_dir / "reviews"
    try:
        store = connect(settings.store_url, settings.database)
        migrate(store, settings.retention_days)
        if run_jobs:
            note = _run_jobs(store, week.previous().start, min(week.end, now))
            if note:
                click.echo(note, err=True)
        html_path, md_path = write_report(store, week, out_dir, now=now)
    except (StoreError, MigrationError) as exc:
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
