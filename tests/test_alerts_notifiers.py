"""Notifier payloads received by a local HTTP server and checked field by field; retries with backoff;
a failing notifier never blocks evaluation."""

from __future__ import annotations

from datetime import timedelta

import pytest

from alerts.notifiers import Dispatcher, Notification, Notifier, rfc3339
from tests.alerts_helpers import T0, Receiver

M = timedelta(minutes=1)


def _notification(state="firing"):
    return Notification(
        alert_id="3d7707d29199506d", rule="cascading_degradation", key="", severity="critical", replica="r2",
        state=state, at=T0 + 16 * M if state == "resolved" else T0 + 4 * M, started_at=T0 + 4 * M,
        fired_at=T0 + 4 * M, resolved_at=T0 + 16 * M if state == "resolved" else None,
        summary="Cascading degradation from replica r2", description="One degraded replica ...",
        evidence={"culprit": "r2", "actions": ["Drain replica r2", "Enforce the retry budget", "Shed load"]},
        labels={"replica": "r2"}, est_cost_usd=1.25, cost_source="fallback_gpu_minutes",
        generator_url="http://127.0.0.1:8501/alerts?alert_id=3d7707d29199506d")


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def _deliver(notifiers, batch):
    dispatcher = Dispatcher(notifiers, backoff_base_s=0.01, backoff_max_s=0.02)
    dispatcher.submit(batch)
    assert dispatcher.flush(10)
    dispatcher.stop()
    return dispatcher


def test_generic_webhook_payload(receiver):
    _deliver([Notifier("webhook", receiver.url + "/hooks/infercost")], [_notification()])
    (path, status, content_type, body), = receiver.requests
    assert path == "/hooks/infercost" and status == 200 and content_type == "application/json"
    assert body["version"] == "1" and body["sender"] == "infercost" and body["status"] == "firing"
    alert, = body["alerts"]
    assert alert == {
        "id": "3d7707d29199506d", "rule": "cascading_degradation", "key": "", "severity": "critical",
        "replica": "r2", "state": "firing", "summary": "Cascading degradation from replica r2",
        "description": "One degraded replica ...", "started_at": "2026-11-02T12:04:00.000Z",
        "fired_at": "2026-11-02T12:04:00.000Z", "resolved_at": None, "labels": {"replica": "r2"},
        "evidence": {"culprit": "r2", "actions": ["Drain replica r2", "Enforce the retry budget", "Shed load"]},
        "estimated_cost_usd": 1.25, "cost_source": "fallback_gpu_minutes",
        "generator_url": "http://127.0.0.1:8501/alerts?alert_id=3d7707d29199506d",
    }


def test_slack_payload(receiver):
    _deliver([Notifier("slack", receiver.url + "/services/T000/B000/XXX")], [_notification(), _notification("resolved")])
    body = receiver.bodies("/services/T000/B000/XXX")[0]
    assert set(body) == {"text", "blocks"}
    assert body["text"].splitlines() == ["[FIRING] cascading_degradation r2: Cascading degradation from replica r2",
                                         "[RESOLVED] cascading_degradation r2: Cascading degradation from replica r2"]
    header, section, context, section2, context2 = body["blocks"]
    assert header == {"type": "header", "text": {"type": "plain_text", "text": "infercost: 1 alert(s) firing, 1 resolved"}}
    assert section["type"] == "section" and section["text"]["type"] == "mrkdwn"
    assert section["text"]["text"].startswith(":red_circle: *[FIRING] cascading_degradation* — replica `r2` (critical)")
    assert "• Drain replica r2" in section["text"]["text"]
    assert context == {"type": "context", "elements": [{"type": "mrkdwn", "text":
                       "started 2026-11-02T12:04:00.000Z · est. cost $1.25 (fallback_gpu_minutes) · "
                       "<http://127.0.0.1:8501/alerts?alert_id=3d7707d29199506d|details>"}]}
    assert section2["text"]["text"].startswith(":white_check_mark: *[RESOLVED]")
    assert "resolved 2026-11-02T12:16:00.000Z" in context2["elements"][0]["text"]


def test_slack_batches_over_50_blocks_are_split_and_only_the_failed_part_is_retried():
    import dataclasses

    batch = [dataclasses.replace(_notification(), alert_id=f"{i:016x}", replica=f"r{i}") for i in range(30)]
    batch[0] = dataclasses.replace(batch[0], evidence={**batch[0].evidence, "members": [
        {"rule": "retry_amplification", "replica": "", "state": "firing", "summary": "retries at 20%"}]})
    receiver = Receiver(statuses=[200, 503])  # the second part fails once
    try:
        _deliver([Notifier("slack", receiver.url + "/slack")], batch)
        posts = [(status, body) for _, status, _, body in receiver.requests]
    finally:
        receiver.close()
    # Slack refuses messages of more than 50 blocks: a header and 2 blocks per alert -> 24 + 6 alerts
    assert [(status, len(b["blocks"])) for status, b in posts] == [(200, 1 + 2 * 24), (503, 1 + 2 * 6),
                                                                   (200, 1 + 2 * 6)]
    bodies = [b for _, b in posts]
    assert [b["blocks"][0]["text"]["text"] for b in bodies] == [
        "infercost: 24 alert(s) firing (part 1/2)", "infercost: 6 alert(s) firing (part 2/2)",
        "infercost: 6 alert(s) firing (part 2/2)"]  # part 2 retried after its 503; part 1 sent once
    assert bodies[1] == bodies[2] and len(bodies[0]["text"].splitlines()) == 24
    grouped = bodies[0]["blocks"][1]["text"]["text"]
    assert "*Grouped here (not notified separately):*\n• retry_amplification: retries at 20%" in grouped


def test_alertmanager_v2_payload(receiver):
    _deliver([Notifier("alertmanager", receiver.url, resend_s=60)], [_notification(), _notification("resolved")])
    (path, status, _, body), = receiver.requests
    assert path == "/api/v2/alerts" and status == 200
    firing, resolved = body
    assert set(firing) == {"labels", "annotations", "startsAt", "endsAt", "generatorURL"}
    assert firing["labels"] == {"alertname": "cascading_degradation", "severity": "critical", "source": "infercost",
                                "replica": "r2"}
    assert firing["annotations"] == {"summary": "Cascading degradation from replica r2",
                                     "description": "One degraded replica ...", "estimated_cost_usd": "1.25",
                                     "cost_source": "fallback_gpu_minutes"}
    assert firing["startsAt"] == "2026-11-02T12:04:00.000Z"
    assert firing["endsAt"] == "2026-11-02T12:08:00.000Z"  # at + 4 x 60 s, as Prometheus does
    assert firing["generatorURL"] == "http://127.0.0.1:8501/alerts?alert_id=3d7707d29199506d"
    assert resolved["endsAt"] == "2026-11-02T12:16:00.000Z"
    assert all(isinstance(v, str) for a in body for v in list(a["labels"].values()) + list(a["annotations"].values()))


def test_delivery_retries_with_backoff_then_succeeds():
    receiver = Receiver(statuses=[503, 500])
    try:
        dispatcher = _deliver([Notifier("webhook", receiver.url)], [_notification()])
    finally:
        receiver.close()
    assert [s for _, s, _, _ in receiver.requests] == [503, 500, 200]
    assert dispatcher.stats.sent == 1 and dispatcher.stats.retries == 2 and dispatcher.stats.failed == 0


def test_client_errors_are_not_retried_and_dead_notifier_does_not_block(receiver):
    bad = Receiver(statuses=[400])
    try:
        dispatcher = _deliver([Notifier("webhook", bad.url)], [_notification()])
    finally:
        bad.close()
    assert len(bad.requests) == 1 and dispatcher.stats.failed == 1 and dispatcher.stats.retries == 0
    # a closed port (connection refused) next to a working notifier: the working one still delivers
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]
    dispatcher = Dispatcher([Notifier("webhook", f"http://127.0.0.1:{dead_port}/x"),
                             Notifier("webhook", receiver.url + "/ok")], max_attempts=3, backoff_base_s=0.01)
    dispatcher.submit([_notification()])  # returns at once: delivery happens on the workers
    assert dispatcher.flush(10)
    dispatcher.stop()
    assert len(receiver.bodies("/ok")) == 1
    assert dispatcher.stats.failed == 1 and dispatcher.stats.retries == 2


def test_notifier_validation_and_time_format():
    with pytest.raises(ValueError, match="unknown notifier kind"):
        Notifier("pager", "http://127.0.0.1:1")
    with pytest.raises(ValueError, match="must start with http"):
        Notifier("slack", "hooks.slack.invalid/x")
    assert rfc3339(T0 + timedelta(milliseconds=1500)) == "2026-11-02T12:00:01.500Z"
