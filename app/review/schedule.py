"""Weekly schedule and delivery of the review (webhook, SMTP): helpers for ``infercost up``.

``infercost up`` (the lead's wiring) calls :func:`next_run` to know when to wake, then
:func:`app.review.write_report` for :func:`app.review.weeks.last_complete_week` and
:func:`deliver` with the settings it reads. Nothing here reads the environment.

Webhook: one HTTP POST of JSON ``{"text": <markdown>, "week": "2026-W48", "title": ...,
"markdown": ..., "html": ...}``; ``text`` makes it readable by Slack / Mattermost / Teams-style
incoming webhooks, the other fields serve a custom receiver. SMTP: one message with the Markdown as
the plain-text part, the HTML as the alternative part and as an attachment.
"""

from __future__ import annotations

import logging
import smtplib
import ssl
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
