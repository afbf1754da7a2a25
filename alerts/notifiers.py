"""Notifiers: generic JSON webhook, Slack-compatible incoming webhook, Prometheus Alertmanager v2.

Payload builders are pure functions of :class:`Notification` lists (tested field by field);
:class:`Dispatcher` delivers them from one named worker thread per notifier with a bounded queue,
retrying transient failures (connection errors, 429, 5xx) with exponential backoff and full jitter
(AWS Architecture Blog, "Exponential Backoff And Jitter", 2015). A failing notifier never blocks or
stops evaluation: ``submit`` never raises and never waits; failures are counted in
:class:`DeliveryStats` and logged.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

import httpx

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Notification:
    """What a notifier is told about one alert: its state now and the evidence.

    ``state``: firing | resolved (pending/cancelled alerts are recorded, not notified).
    ``at``: evaluation time of the change (UTC); ``ends_at`` only for resolved alerts.
    """

    alert_id: str
    rule: str
    key: str
    severity: str
    replica: str
    state: str
    at: datetime
    started_at: datetime
    fired_at: datetime | None
    resolved_at: datetime | None
    summary: str
    description: str
    evidence: dict[str, Any]
    labels: dict[str, str]
    est_cost_usd: float | None
    cost_source: str
    generator_url: str


def rfc3339(value: datetime | None) -> str | None:
    """UTC time as RFC 3339 with milliseconds and ``Z`` (Alertmanager's startsAt/endsAt format)."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


# --- payloads ------------------------------------------------------------------------------------

def webhook_payload(batch: list[Notification], sender: str = "infercost") -> dict[str, Any]:
    """Generic JSON webhook body: ``{version, sender, status, alerts: [...]}``.

    ``status`` is ``firing`` if any alert in the batch fires, else ``resolved``. Each alert has
    id, rule, key, severity, replica, state, summary, description, started_at, fired_at, resolved_at
    (RFC 3339), labels, evidence, estimated_cost_usd, cost_source, generator_url.
    """
    return {
        "version": "1",
        "sender": sender,
        "status": "firing" if any(n.state == "firing" for n in batch) else "resolved",
        "alerts": [{
            "id": n.alert_id, "rule": n.rule, "key": n.key, "severity": n.severity, "replica": n.replica,
            "state": n.state, "summary": n.summary, "description": n.description,
            "started_at": rfc3339(n.started_at), "fired_at": rfc3339(n.fired_at), "resolved_at": rfc3339(n.resolved_at),
            "labels": dict(n.labels), "evidence": n.evidence, "estimated_cost_usd": n.est_cost_usd,
            "cost_source": n.cost_source, "generator_url": n.generator_url,
        } for n in batch],
    }


SLACK_MAX_BLOCKS = 50  # Slack rejects a message with more blocks (Block Kit reference, "Blocks")


def slack_payloads(batch: list[Notification]) -> list[dict[str, Any]]:
    """The batch as Slack messages of at most ``SLACK_MAX_BLOCKS`` blocks each (a header and two blocks
    per alert: 24 alerts per message), in order; headers say "part i/n" when there are several."""
    per = (SLACK_MAX_BLOCKS - 1) // 2
    chunks = [batch[i:i + per] for i in range(0, len(batch), per)] or [[]]
    return [slack_payload(chunk, (i + 1, len(chunks)) if len(chunks) > 1 else None) for i, chunk in enumerate(chunks)]


def slack_payload(batch: list[Notification], part: tuple[int, int] | None = None) -> dict[str, Any]:
    """Slack incoming-webhook body ``{text, blocks}`` (Block Kit: a header, one section per alert
    with mrkdwn text, a context line with times and cost); ``text`` is the notification fallback.
    A cascade's section lists the alerts it groups (``evidence['members']``). At most 24 alerts fit
    Slack's 50-block limit: use :func:`slack_payloads` for larger batches."""
    firing = [n for n in batch if n.state == "firing"]
    title = (f"{len(firing)} alert(s) firing" if firing else "") + (
        (", " if firing else "") + f"{len(batch) - len(firing)} resolved" if len(batch) > len(firing) else "")
    if part is not None:
        title += f" (part {part[0]}/{part[1]})"
    blocks: list[dict[str, Any]] = [{"type": "header", "text": {"type": "plain_text", "text": f"infercost: {title}"[:150]}}]
    lines = []
    for n in batch:
        icon = ":red_circle:" if n.state == "firing" else ":white_check_mark:"
        head = f"{icon} *[{n.state.upper()}] {n.rule}*" + (f" — replica `{n.replica}`" if n.replica else "") + f" ({n.severity})"
        text = f"{head}\n{n.summary}"
        members = n.evidence.get("members") if isinstance(n.evidence, dict) else None
        if members:
            text += "\n*Grouped here (not notified separately):*\n" + "\n".join(
                f"• {m['rule']}{' `' + m['replica'] + '`' if m.get('replica') else ''}: {m['summary']}"[:300]
                for m in members[:10])
        actions = n.evidence.get("actions") if isinstance(n.evidence, dict) else None
        if actions:
            text += "\n*Suggested actions:*\n" + "\n".join(f"• {a}" for a in actions)
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}})
        context = f"started {rfc3339(n.started_at)}"
        if n.resolved_at:
            context += f" · resolved {rfc3339(n.resolved_at)}"
        if n.est_cost_usd is not None:
            context += f" · est. cost ${n.est_cost_usd:,.2f} ({n.cost_source})"
        context += f" · <{n.generator_url}|details>"
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": context}]})
        lines.append(f"[{n.state.upper()}] {n.rule}{' ' + n.replica if n.replica else ''}: {n.summary}")
    return {"text": "\n".join(lines), "blocks": blocks}


def alertmanager_payload(batch: list[Notification], resend_s: float, now: datetime | None = None) -> list[dict[str, Any]]:
    """Alertmanager API v2 ``POST /api/v2/alerts`` body: a list of postable alerts
    ``{labels, annotations, startsAt, endsAt, generatorURL}``.

    labels: alertname (the rule), severity, replica (when any), key, source=infercost, plus the
    rule's labels; every value a string. annotations: summary, description, estimated_cost_usd,
    cost_source. startsAt = fired_at. endsAt: resolved_at for a resolved alert; for a firing one
    ``at + 4 x resend_s`` (as Prometheus does, so Alertmanager expires it if we stop re-sending).
    """
    out = []
    for n in batch:
        labels = {"alertname": n.rule, "severity": n.severity, "source": "infercost"}
        if n.key:
            labels["key"] = n.key
        if n.replica:
            labels["replica"] = n.replica
        labels.update({k: str(v) for k, v in n.labels.items()})
        annotations = {"summary": n.summary, "description": n.description or n.summary}
        if n.est_cost_usd is not None:
            annotations["estimated_cost_usd"] = f"{n.est_cost_usd:.2f}"
            annotations["cost_source"] = n.cost_source
        ends = n.resolved_at if n.state == "resolved" else n.at + timedelta(seconds=4 * resend_s)
        out.append({"labels": labels, "annotations": annotations, "startsAt": rfc3339(n.fired_at or n.started_at),
                    "endsAt": rfc3339(ends), "generatorURL": n.generator_url})
    return out


# --- delivery ------------------------------------------------------------------------------------

class DeliveryError(Exception):
    """A delivery failed; ``retryable`` says whether another try may succeed."""

    def __init__(self, message: str, retryable: bool):
        super().__init__(message)
        self.retryable = retryable


@dataclass
class Notifier:
    """One destination: ``kind`` (webhook | slack | alertmanager), its URL and how to build bodies.

    ``wants_resend``: firing alerts are re-sent every ``resend_s`` (Alertmanager expires alerts that
    are not). ``url`` for alertmanager is the base URL; ``/api/v2/alerts`` is appended.
    """

    kind: str
    url: str
    resend_s: float = 60.0
    timeout_s: float = 5.0

    def __post_init__(self):
        if self.kind not in ("webhook", "slack", "alertmanager"):
            raise ValueError(f"unknown notifier kind {self.kind!r}: use webhook, slack or alertmanager")
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(f"{self.kind} notifier URL must start with http:// or https://, got {self.url!r}")

    @property
    def wants_resend(self) -> bool:
        return self.kind == "alertmanager"

    @property
    def endpoint(self) -> str:
        if self.kind == "alertmanager":
            return self.url.rstrip("/") + "/api/v2/alerts"
        return self.url

    def bodies(self, batch: list[Notification]) -> list[Any]:
        """The request bodies of ``batch``: one, except Slack's, split at its 50-block limit."""
        if self.kind == "slack":
            return slack_payloads(batch)
        if self.kind == "alertmanager":
            return [alertmanager_payload(batch, self.resend_s)]
        return [webhook_payload(batch)]

    def send(self, batch: list[Notification], client: httpx.Client) -> None:
        """POST every body of the batch once; raises DeliveryError (see :meth:`post`)."""
        for body in self.bodies(batch):
            self.post(body, client)

    def post(self, body: Any, client: httpx.Client) -> None:
        """POST one body; raises DeliveryError (retryable for connection errors, 408, 429, 5xx)."""
        try:
            response = client.post(self.endpoint, json=body, timeout=self.timeout_s)
        except httpx.HTTPError as exc:
            raise DeliveryError(f"{self.kind} {self.endpoint}: {exc}", retryable=True) from exc
        if response.status_code >= 300:
            retryable = response.status_code in (408, 429) or response.status_code >= 500
            raise DeliveryError(f"{self.kind} {self.endpoint}: HTTP {response.status_code} {response.text[:200]}",
                                retryable)


@dataclass
class DeliveryStats:
    """Per-notifier counters (mapped to Prometheus by the service, not here)."""

    sent: int = 0
    failed: int = 0
    retries: int = 0
    dropped: int = 0
    last_error: str = ""
    by_kind: dict[str, int] = field(default_factory=dict)


class Dispatcher:
    """Delivers batches to notifiers from one named daemon thread each, off the evaluation path.

    ``max_attempts`` tries per batch, sleeping ``backoff_base_s x 2^n`` (capped at ``backoff_max_s``,
    full jitter) between them; a batch that still fails is dropped and counted. Queues hold
    ``queue_size`` batches; beyond that new batches are dropped and counted (never blocking).
    """

    def __init__(self, notifiers: list[Notifier], max_attempts: int = 5, backoff_base_s: float = 0.5,
                 backoff_max_s: float = 30.0, queue_size: int = 1000, sleep: Callable[[float], None] = time.sleep):
        self.notifiers = list(notifiers)
        self.max_attempts = max_attempts
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.stats = DeliveryStats()
        self._sleep = sleep
        self._queues = [queue.Queue(maxsize=queue_size) for _ in self.notifiers]
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        self._lock = threading.Lock()

    def start(self) -> None:
        if self._threads:
            return
        for index, notifier in enumerate(self.notifiers):
            thread = threading.Thread(target=self._run, args=(index,), name=f"infercost-notify-{notifier.kind}-{index}",
                                      daemon=True)
            thread.start()
            self._threads.append(thread)

    def submit(self, batch: list[Notification], resend_only: bool = False) -> None:
        """Queue ``batch`` for every notifier (only those that want re-sends when ``resend_only``)."""
        if not batch:
            return
        self.start()
        for notifier, q in zip(self.notifiers, self._queues):
            if resend_only and not notifier.wants_resend:
                continue
            try:
                q.put_nowait(batch)
            except queue.Full:
                with self._lock:
                    self.stats.dropped += 1
                log.warning("notifier %s queue full: batch dropped", notifier.kind)

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until every queued batch was delivered or given up; True if all queues drained in time."""
        deadline = time.monotonic() + timeout_s
        for q in self._queues:
            while q.unfinished_tasks:
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.01)
        return True

    def stop(self, timeout_s: float = 5.0) -> None:
        """Drain what can be delivered within ``timeout_s``, then stop the threads. Idempotent."""
        if self._stopping.is_set():
            return
        self.flush(timeout_s)
        self._stopping.set()
        for thread in self._threads:
            thread.join(timeout=1.0)

    def _run(self, index: int) -> None:
        notifier, q = self.notifiers[index], self._queues[index]
        with httpx.Client(trust_env=False) as client:
            while not self._stopping.is_set():
                try:
                    batch = q.get(timeout=0.2)
                except queue.Empty:
                    continue
                try:
                    self._deliver(notifier, batch, client)
                finally:
                    q.task_done()

    def _deliver(self, notifier: Notifier, batch: list[Notification], client: httpx.Client) -> None:
        try:
            bodies = notifier.bodies(batch)
        except Exception as exc:  # a bug in a payload builder must not kill the thread
            with self._lock:
                self.stats.failed += 1
                self.stats.last_error = repr(exc)
            log.exception("alert payload failed")
            return
        for body in bodies:  # in order; a retry re-sends only the body that failed, not those delivered
            self._deliver_body(notifier, body, client)

    def _deliver_body(self, notifier: Notifier, body: Any, client: httpx.Client) -> None:
        for attempt in range(1, self.max_attempts + 1):
            try:
                notifier.post(body, client)
                with self._lock:
                    self.stats.sent += 1
                    self.stats.by_kind[notifier.kind] = self.stats.by_kind.get(notifier.kind, 0) + 1
                return
            except DeliveryError as exc:
                with self._lock:
                    self.stats.last_error = str(exc)
                if not exc.retryable or attempt == self.max_attempts or self._stopping.is_set():
                    with self._lock:
                        self.stats.failed += 1
                    log.warning("alert delivery failed for good: %s", exc)
                    return
                with self._lock:
                    self.stats.retries += 1
                delay = min(self.backoff_max_s, self.backoff_base_s * 2 ** (attempt - 1))
                self._sleep(random.uniform(0, delay))
            except Exception as exc:  # an unexpected error must not kill the thread
                with self._lock:
                    self.stats.failed += 1
                    self.stats.last_error = repr(exc)
                log.exception("alert delivery crashed")
                return
