"""Weekly schedule and delivery of the review (webhook, SMTP): helpers for ``infercost up``.

``infercost up`` starts a :class:`WeeklyScheduler` (``infercost.commands.review.scheduler_from_settings``
builds one from the settings): a named daemon thread that sleeps until :func:`next_run`, writes
the review of :func:`app.review.weeks.last_complete_week` with :func:`app.review.write_report` and
hands it to :func:`deliver`. Nothing here reads the environment.

Webhook: one HTTP POST of JSON ``{"text": <markdown>, "week": "2026-W48", "title": ...,
"markdown": ..., "html": ...}``; ``text`` makes it readable by Slack / Mattermost / Teams-style
incoming webhooks, the other fields serve a custom receiver. SMTP: one message with the Markdown as
the plain-text part, the HTML as the alternative part and as an attachment.
"""

from __future__ import annotations

import logging
import smtplib
import ssl
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from email.message import EmailMessage
from pathlib import Path

import httpx

log = logging.getLogger(__name__)


def next_run(now: datetime, weekday: int = 0, hour: int = 6, minute: int = 0) -> datetime:
    """The next weekly run strictly after ``now`` (UTC): by default Monday 06:00 UTC.

    Args:
        now: the current time (naive = UTC).
        weekday: 0 = Monday .. 6 = Sunday. hour, minute: time of day in UTC.

    Returns:
        An aware UTC datetime > now. Raises ValueError for an out-of-range weekday/hour/minute.
    """
    if not 0 <= weekday <= 6 or not 0 <= hour <= 23 or not 0 <= minute <= 59:
        raise ValueError(f"bad schedule weekday={weekday} hour={hour} minute={minute} (0-6, 0-23, 0-59)")
    now = now.replace(tzinfo=timezone.utc) if now.tzinfo is None else now.astimezone(timezone.utc)
    candidate = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    candidate += timedelta(days=(weekday - candidate.weekday()) % 7)
    if candidate <= now:
        candidate += timedelta(days=7)
    return candidate


@dataclass(frozen=True)
class SmtpTarget:
    """Where to mail the review. ``starttls`` upgrades a plain connection (port 587);
    ``use_ssl`` connects with TLS from the start (port 465). ``to`` holds one address or more."""

    host: str
    port: int = 587
    sender: str = "infercost@localhost"
    to: tuple[str, ...] = ()
    username: str = ""
    password: str = ""
    starttls: bool = True
    use_ssl: bool = False
    timeout_s: float = 30.0

    def problems(self) -> list[str]:
        """Every configuration problem at once (empty when valid)."""
        out = []
        if not self.host:
            out.append("SMTP host is empty")
        if not 1 <= self.port <= 65535:
            out.append(f"SMTP port {self.port} is outside 1..65535")
        if not self.to:
            out.append("no SMTP recipient (to)")
        if any("@" not in a for a in self.to):
            out.append(f"SMTP recipients must be e-mail addresses: {list(self.to)}")
        if self.starttls and self.use_ssl:
            out.append("choose STARTTLS or implicit TLS (use_ssl), not both")
        return out


@dataclass
class DeliveryResult:
    """What :func:`deliver` did: one entry per target, ``ok`` or the error message."""

    results: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(v == "ok" for v in self.results.values())


def webhook_payload(week: str, title: str, markdown: str, html: str) -> dict:
    """The JSON body POSTed to a webhook (see the module docstring)."""
    return {"text": markdown, "week": week, "title": title, "markdown": markdown, "html": html}


def deliver(html_path: Path, md_path: Path, *, week: str, title: str, webhook_url: str | None = None,
            smtp: SmtpTarget | None = None, timeout_s: float = 30.0) -> DeliveryResult:
    """Send the written report to a webhook and/or by SMTP. Never raises for a delivery failure:
    each target's outcome is in the result (the caller logs it and keeps the files).

    Args:
        html_path, md_path: the files written by :func:`app.review.write_report`.
        week: ``2026-W48``; title: the report's title (mail subject).
        webhook_url: http(s) URL; a non-2xx answer is a failure.
        smtp: an :class:`SmtpTarget`; invalid settings are reported, not sent.

    Raises:
        ValueError: a webhook URL that is not http(s) (a configuration error, not a delivery one).
    """
    result = DeliveryResult()
    html = Path(html_path).read_text(encoding="utf-8")
    markdown = Path(md_path).read_text(encoding="utf-8")
    if webhook_url:
        if not webhook_url.startswith(("http://", "https://")):
            raise ValueError(f"webhook URL must be http(s)://…, got {webhook_url!r}")
        try:
            response = httpx.post(webhook_url, json=webhook_payload(week, title, markdown, html), timeout=timeout_s)
            result.results["webhook"] = "ok" if response.is_success else f"HTTP {response.status_code}"
        except httpx.HTTPError as exc:
            result.results["webhook"] = f"{type(exc).__name__}: {exc}"
    if smtp is not None:
        problems = smtp.problems()
        if problems:
            result.results["smtp"] = "; ".join(problems)
        else:
            try:
                _send_mail(smtp, title, markdown, html, Path(html_path).name)
                result.results["smtp"] = "ok"
            except (smtplib.SMTPException, OSError) as exc:
                result.results["smtp"] = f"{type(exc).__name__}: {exc}"
    for target, outcome in result.results.items():
        if outcome != "ok":
            log.warning("weekly review delivery to %s failed: %s", target, outcome)
    return result


def _send_mail(target: SmtpTarget, subject: str, markdown: str, html: str, filename: str) -> None:
    msg = EmailMessage()
    msg["Subject"] = subject
    msg["From"] = target.sender
    msg["To"] = ", ".join(target.to)
    msg.set_content(markdown)
    msg.add_alternative(html, subtype="html")
    msg.add_attachment(html.encode("utf-8"), maintype="text", subtype="html", filename=filename)
    context = ssl.create_default_context()
    if target.use_ssl:
        client = smtplib.SMTP_SSL(target.host, target.port, timeout=target.timeout_s, context=context)
    else:
        client = smtplib.SMTP(target.host, target.port, timeout=target.timeout_s)
    with client:
        if target.starttls and not target.use_ssl:
            client.starttls(context=context)
        if target.username:
            client.login(target.username, target.password)
        client.send_message(msg)


@dataclass
class ScheduledRun:
    """One run of the scheduler: the week reviewed, the files written, what delivery did."""

    week: str
    html_path: Path
    md_path: Path
    delivery: DeliveryResult | None


@dataclass
class SchedulerStats:
    """Counters of the scheduler (plain data; the service maps them to metrics if it wants)."""

    runs: int = 0
    failures: int = 0
    last_week: str = ""
    last_error: str = ""
    next_run_at: datetime | None = None


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


class WeeklyScheduler:
    """Writes and delivers the review of the last complete week every week, in its own thread.

    Args:
        store: the service's store. out_dir: where the files go.
        weekday, hour, minute: when (UTC), as :func:`next_run`. webhook_url, smtp: as :func:`deliver`.
        clock: returns the current aware UTC datetime (tests inject a fixed one).

    ``start()`` launches the thread ``infercost-review``; ``stop()`` wakes and joins it (idempotent).
    A failed run (store down, disk full) is logged and counted; the next week runs as usual.
    """

    def __init__(self, store, out_dir: Path | str, *, weekday: int = 0, hour: int = 6, minute: int = 0,
                 webhook_url: str | None = None, smtp: SmtpTarget | None = None, clock=_utcnow):
        next_run(datetime(2026, 1, 1), weekday, hour, minute)  # validates the schedule now, not in the thread
        self.store = store
        self.out_dir = Path(out_dir)
        self.when = (weekday, hour, minute)
        self.webhook_url = webhook_url or None
        self.smtp = smtp
        self.clock = clock
        self.stats = SchedulerStats()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self, now: datetime | None = None) -> ScheduledRun:
        """Write the review of the last week complete at ``now`` and deliver it. Raises what
        :func:`app.review.write_report` raises (StoreError, OSError); delivery failures are in the result."""
        from app.review import write_report
        from app.review.weeks import last_complete_week

        now = now or self.clock()
        week = last_complete_week(now)
        html_path, md_path = write_report(self.store, week, self.out_dir, now=now)
        delivery = None
        if self.webhook_url or self.smtp:
            delivery = deliver(html_path, md_path, week=week.label, title=f"Weekly cost review {week.label}",
                               webhook_url=self.webhook_url, smtp=self.smtp)
        self.stats.runs += 1
        self.stats.last_week = week.label
        return ScheduledRun(week.label, html_path, md_path, delivery)

    def _loop(self) -> None:
        last: datetime | None = None
        while not self._stop.is_set():
            now = self.clock()
            # the first slot may be exactly now; after a run, the slot strictly after it
            at = next_run(now - timedelta(seconds=1) if last is None else max(now, last), *self.when)
            self.stats.next_run_at = at
            if self._stop.wait(max(0.0, (at - now).total_seconds())):
                break
            try:
                self.run_once(at)
            except Exception as exc:  # a bad week must not kill the service's scheduler
                self.stats.failures += 1
                self.stats.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("weekly review run failed")
            last = at

    def start(self) -> "WeeklyScheduler":
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="infercost-review", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
