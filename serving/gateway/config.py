"""Gateway settings: upstreams, routing policy, retry budget, admission control.

Position: serving (gateway). A plain dataclass; ``infercost gateway`` builds it from flags,
tests build it directly. ``validate()`` reports every problem at once (like the OTel Collector's
``Validate()``), and :func:`parse_upstream` reads ``[replica_id=]URL``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlparse

POLICIES = ("round_robin", "least_loaded", "session_affinity")


@dataclass(frozen=True)
class Upstream:
    """One replica: ``replica_id`` (matches the engine's ``service.instance.id`` when given) and base URL (no ``/v1``)."""

    replica_id: str
    url: str


def parse_upstream(spec: str) -> Upstream:
    """``"r0=http://127.0.0.1:8001"`` or ``"http://127.0.0.1:8001[/v1]"`` -> Upstream (id defaults to host:port).

    Raises ValueError naming the bad spec when the URL is not http(s)://host[:port].
    """
    replica_id, sep, url = spec.partition("=")
    if not sep or "://" in replica_id:
        replica_id, url = "", spec
    url = url.strip().rstrip("/")
    if url.endswith("/v1"):
        url = url[:-3]
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError(f"upstream {spec!r}: expected [replica_id=]http(s)://host:port")
    return Upstream(replica_id.strip() or f"{parsed.hostname}:{parsed.port or (443 if parsed.scheme == 'https' else 80)}", url)


@dataclass
class GatewayConfig:
    """Everything the gateway needs. Units: seconds, requests.

    upstreams: the replicas. policy: round_robin | least_loaded | session_affinity.
    max_attempts: upstream attempts per request (first included), only before the first byte
    reached the client. retry_budget_ratio: retries allowed as a fraction of requests in the
    sliding window ``retry_budget_window_s`` (default 10%; Finagle's RetryBudget and
    Envoy's retry budgets use the same idea), plus ``retry_budget_min`` retries per window so a
    quiet gateway can still retry. queue_caps: per ``tenant.priority``, max requests of that priority
    inside the gateway (queued + in flight); ``default_queue_cap`` for other priorities; beyond:
    429 with ``Retry-After: retry_after_s``. max_inflight: upstream concurrency limit (0 = none);
    above it requests wait in the gateway, interactive before batch. scrape_interval_s: how often
    least_loaded reads the replicas' /metrics. eject_after_failures / eject_s / max_ejection_s /
    max_ejection_percent: outlier detection as Envoy does it (a replica whose last N attempts failed
    is skipped for eject_s x times ejected, capped; see :mod:`serving.gateway.routing`).
    Upstream timeouts (:mod:`serving.gateway.watchdog`): connect_timeout_s (TCP connect),
    first_byte_timeout_s (request sent -> first body byte of a stream: queueing + prefill),
    chunk_timeout_s (longest silence inside a stream), response_timeout_s (request sent -> whole
    body of a non-streamed response). A timeout before the first byte reached the client is retried
    on another replica; after it, the stream ends with an error event and ``[DONE]``.
    service_name: OTel resource.
    """

    upstreams: list[Upstream]
    policy: str = "round_robin"
    max_attempts: int = 3
    retry_budget_ratio: float = 0.1
    retry_budget_window_s: float = 10.0
    retry_budget_min: int = 3
    queue_caps: dict[str, int] = field(default_factory=lambda: {"interactive": 1024, "batch": 256})
    default_queue_cap: int = 256
    default_priority: str = "interactive"
    max_inflight: int = 0
    retry_after_s: float = 1.0
    scrape_interval_s: float = 0.5
    eject_after_failures: int = 3
    eject_s: float = 5.0
    max_ejection_s: float = 300.0  # Envoy's max_ejection_time default
    max_ejection_percent: float = 10.0  # Envoy's default; at least one replica can always be ejected
    connect_timeout_s: float = 2.0
    first_byte_timeout_s: float = 60.0
    chunk_timeout_s: float = 30.0
    response_timeout_s: float = 600.0
    service_name: str = "infercost-gateway"
    priorities_order: tuple[str, ...] = ("interactive", "batch")

    def validate(self) -> None:
        """Raise ValueError listing every invalid field."""
        problems = []
        if not self.upstreams:
            problems.append("at least one upstream is required (--upstream URL)")
        ids = [u.replica_id for u in self.upstreams]
        if len(set(ids)) != len(ids):
            problems.append(f"replica ids must be unique, got {ids}")
        if self.policy not in POLICIES:
            problems.append(f"policy {self.policy!r} is not one of {', '.join(POLICIES)}")
        if self.max_attempts < 1:
            problems.append("max_attempts must be >= 1")
        if not 0 <= self.retry_budget_ratio <= 1:
            problems.append("retry_budget_ratio must be within [0, 1]")
        if self.retry_budget_window_s <= 0:
            problems.append("retry_budget_window_s must be > 0")
        if self.retry_budget_min < 0:
            problems.append("retry_budget_min must be >= 0")
        if any(c < 0 for c in self.queue_caps.values()) or self.default_queue_cap < 0:
            problems.append("queue caps must be >= 0")
        if self.max_inflight < 0:
            problems.append("max_inflight must be >= 0 (0 = unlimited)")
        if self.retry_after_s < 0:
            problems.append("retry_after_s must be >= 0")
        if self.scrape_interval_s <= 0:
            problems.append("scrape_interval_s must be > 0")
        for name in ("connect_timeout_s", "first_byte_timeout_s", "chunk_timeout_s", "response_timeout_s", "eject_s"):
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be > 0")
        if not 0 <= self.max_ejection_percent <= 100:
            problems.append("max_ejection_percent must be within [0, 100]")
        if problems:
            raise ValueError("invalid gateway config: " + "; ".join(problems))

    def queue_cap(self, priority: str) -> int:
        return self.queue_caps.get(priority, self.default_queue_cap)
