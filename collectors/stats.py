"""The receiver's statistics (a plain dataclass) and their one mapping to Prometheus metrics.

Position: collectors. The receiver, the writer and the spool fill :class:`ReceiverStats`; nothing
else in the receiver touches Prometheus. :class:`ReceiverCollector` exposes a stats object in an
instance-owned ``CollectorRegistry`` (``GET /metrics``), read at scrape time. The alert evaluator
reads the same dataclass through ``Receiver.stats``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily


@dataclass
class ReceiverStats:
    """Counters (since start) and gauges of one receiver. Times in ns since the epoch, durations in s."""

    received: int = 0  # spans in decoded requests (accepted + rejected)
    stored: int = 0  # spans inserted into the store
    rejected: int = 0  # spans refused as invalid (partial_success)
    throttled: int = 0  # spans answered with 429/503 (the client retries them)
    metric_points_received: int = 0
    metric_points_stored: int = 0
    metric_points_rejected: int = 0
    truncated_attributes: int = 0
    content_dropped: int = 0  # prompt/completion attributes and events removed before storing
    quarantined_rows: int = 0  # rows moved to spool/quarantine since start (the store refused them as unparseable)
    quarantine_rows: int = 0  # rows in spool/quarantine now (replay: `infercost spool replay`)
    quarantine_records: int = 0  # records (requests) in spool/quarantine now
    spooled_bytes: int = 0  # bytes of accepted, not yet stored records on disk
    queue_rows: int = 0  # accepted rows (spans + points) not yet stored
    newest_row_time_ns: int = 0  # newest span end / point time stored
    store_available: bool = True
    store_reason: str = ""  # why the store is unavailable: out_of_space, read_only, unreachable, ... ('' = fine)
    spool_write_errors: int = 0  # appends that failed (disk full, I/O error): answered 503, not 200
    spool_last_write_error: str = ""
    spool_skipped_bytes: int = 0  # invalid (torn) bytes found when the spool was opened
    spool_cursor_error: str = ""  # why the spool's read position is not on disk ('' = it is)
    writer_alive: bool = True
    writer_restarts: int = 0  # times the writer loop failed and was restarted
    writer_last_error: str = ""
    inserts: int = 0
    insert_seconds: float = 0.0
    last_error: str = ""
    requests: dict[str, int] = field(default_factory=dict)  # "<path> <status>" -> count

    def health(self) -> tuple[str, list[str]]:
        """("ok" | "degraded", reasons): degraded while the store is unavailable, the spool cannot be
        written, the writer is not running, or records wait in quarantine."""
        reasons = []
        if not self.store_available:
            reasons.append(f"store unavailable ({self.store_reason or 'unknown'}): accepted data waits in the spool")
        if self.spool_last_write_error:
            reasons.append(f"spool write failing ({self.spool_last_write_error}): requests are answered 503")
        if self.spool_cursor_error:
            reasons.append(f"spool read position not saved ({self.spool_cursor_error})")
        if not self.writer_alive:
            reasons.append("writer not running")
        if self.quarantine_records:
            reasons.append(f"{self.quarantine_rows} rows in {self.quarantine_records} quarantined record(s): "
                           f"fix the cause, then `infercost spool replay`")
        return ("degraded" if reasons else "ok"), reasons

    def count_request(self, path: str, status: int) -> None:
        key = f"{path} {status}"
        self.requests[key] = self.requests.get(key, 0) + 1

    def newest_row_lag_seconds(self, now_ns: int | None = None) -> float:
        """Seconds between now and the newest stored row's time (0 before anything is stored)."""
        if not self.newest_row_time_ns:
            return 0.0
        return max(0.0, ((now_ns or time.time_ns()) - self.newest_row_time_ns) / 1e9)


class ReceiverCollector:
    """A prometheus_client collector mapping one :class:`ReceiverStats` to ``infercost_receiver_*``."""

    def __init__(self, stats_fn):
        self._stats_fn = stats_fn  # returns a fresh ReceiverStats (gauges refreshed)

    def describe(self):
        return []  # no up-front description needed: names are fixed, values read at collect time

    def collect(self):
        s = self._stats_fn()
        p = "infercost_receiver_"
        counters = [
            ("spans_received", "Spans in decoded OTLP trace requests (accepted + rejected).", s.received),
            ("spans_stored", "Spans inserted into the store.", s.stored),
            ("spans_rejected", "Spans rejected as invalid (reported in partial_success).", s.rejected),
            ("spans_throttled", "Spans answered with 429/503 back-pressure (clients retry them).", s.throttled),
            ("metric_points_received", "Metric data points in decoded OTLP metric requests.", s.metric_points_received),
            ("metric_points_stored", "Metric data points inserted into the store.", s.metric_points_stored),
            ("metric_points_rejected", "Metric data points rejected as invalid or unsupported.", s.metric_points_rejected),
            ("attributes_truncated", "Attribute values truncated to the size limit.", s.truncated_attributes),
            ("content_dropped", "Prompt and completion attributes and events removed from spans before storing "
                                "(INFERCOST_KEEP_CONTENT=true keeps them).", s.content_dropped),
            ("rows_quarantined", "Rows moved to the quarantine folder (the store refused them as unparseable).",
             s.quarantined_rows),
            ("spool_write_errors", "Spool appends that failed (disk full, I/O error); answered 503.",
             s.spool_write_errors),
            ("writer_restarts", "Times the writer loop failed and was restarted.", s.writer_restarts),
            ("inserts", "Batched inserts into the store.", s.inserts),
        ]
        for name, help_, value in counters:
            family = CounterMetricFamily(p + name, help_)
            family.add_metric([], value)
            yield family
        insert_seconds = CounterMetricFamily(p + "insert_seconds", "Time spent in batched inserts, seconds.")
        insert_seconds.add_metric([], s.insert_seconds)
        yield insert_seconds
        gauges = [
            ("queue_rows", "Accepted rows (spans + points) not yet in the store.", s.queue_rows),
            ("spool_bytes", "Bytes of accepted, not yet stored records in the on-disk spool.", s.spooled_bytes),
            ("newest_row_lag_seconds", "Seconds since the time of the newest row stored.", s.newest_row_lag_seconds()),
            ("store_available", "1 when the last insert succeeded, 0 while the store is unavailable.",
             1 if s.store_available else 0),
            ("quarantine_rows", "Rows in the quarantine folder now (replay: infercost spool replay).",
             s.quarantine_rows),
            ("writer_up", "1 while the writer thread runs.", 1 if s.writer_alive else 0),
        ]
        for name, help_, value in gauges:
            family = GaugeMetricFamily(p + name, help_)
            family.add_metric([], value)
            yield family
        reason = GaugeMetricFamily(p + "store_unavailable", "1 with the reason while the store is unavailable.",
                                   labels=["reason"])
        if not s.store_available:
            reason.add_metric([s.store_reason or "unknown"], 1)
        yield reason
        requests = CounterMetricFamily(p + "requests", "HTTP requests by path and status code.",
                                       labels=["path", "code"])
        for key, value in sorted(s.requests.items()):
            path, code = key.rsplit(" ", 1)
            requests.add_metric([path, code], value)
        yield requests
