"""Routing: which replica serves an attempt. Policies round_robin, least_loaded, session_affinity.

Position: serving (gateway). Pure logic over :class:`ReplicaState`; no I/O (the load scraper
fills ``scraped_waiting`` / ``scraped_running`` from the replicas' ``/metrics``).

* ``round_robin``: next healthy replica in order.
* ``least_loaded``: fewest ``vllm:num_requests_waiting`` + ``vllm:num_requests_running`` as last
  scraped, plus the requests this gateway sent to it since that scrape (so a burst between two
  scrapes does not all land on the same replica); ties broken round-robin.
* ``session_affinity``: consistent hash (a ring with ``VNODES`` points per replica, Karger et al.
  1997) on ``task.id``, so all calls of a task reach the replica whose prefix cache holds the
  task's context; a retry, or an ejected replica, moves to the next replica on the ring. Requests
  without a task id fall back to round-robin.

Passive health (Envoy's outlier detection, ``consecutive_gateway_failure``): a replica whose last
``eject_after_failures`` attempts failed (connect error, timeout, 5xx, malformed or broken stream —
not a 4xx, which is the request's fault) is ejected for ``eject_s`` x the number of times it was
ejected (Envoy's base_ejection_time multiplier), at most ``max_ejection_s``; the multiplier starts
over once the replica stayed un-ejected for ``max_ejection_s``. At most ``max_ejection_percent`` of
the replicas are ejected at once, but always at least one (Envoy's rule). If every replica is
ejected (or tried), all are eligible: better a possibly-bad replica than none.
"""

from __future__ import annotations

import bisect
import hashlib
import time
from dataclasses import dataclass, field

from serving.gateway.config import Upstream

VNODES = 64


@dataclass
class ReplicaState:
    """What the gateway knows about one replica. Counts are requests."""

    upstream: Upstream
    inflight: int = 0
    scraped_waiting: float = 0.0
    scraped_running: float = 0.0
    inflight_at_scrape: int = 0
    scraped_at: float | None = None
    consecutive_failures: int = 0
    ejected_until: float = 0.0
    attempts: int = 0
    failures: int = field(default=0)
    times_ejected: int = 0  # the ejection-time multiplier (Envoy), reset after max_ejection_s un-ejected
    last_ejected_at: float = float("-inf")
    ejections: int = 0  # total ejections (metric)

    @property
    def replica_id(self) -> str:
        return self.upstream.replica_id

    def load(self) -> float:
        """Estimated requests on the replica now (scraped waiting + running + ours since the scrape)."""
        return self.scraped_waiting + self.scraped_running + max(0, self.inflight - self.inflight_at_scrape)


def _hash(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")


class Router:
    """Chooses replicas; owns their :class:`ReplicaState`.

    policy: one of config.POLICIES. eject_after_failures / eject_s / max_ejection_s /
    max_ejection_percent: outlier detection (module doc).
    """

    def __init__(self, upstreams: list[Upstream], policy: str, eject_after_failures: int = 3, eject_s: float = 5.0,
                 clock=time.monotonic, max_ejection_s: float = 300.0, max_ejection_percent: float = 10.0):
        self.replicas = [ReplicaState(u) for u in upstreams]
        self.by_id = {r.replica_id: r for r in self.replicas}
        self.policy = policy
        self.eject_after_failures = eject_after_failures
        self.eject_s = eject_s
        self.max_ejection_s = max_ejection_s
        self.max_ejection_percent = max_ejection_percent
        self._clock = clock
        self._rr = 0
        ring = sorted((_hash(f"{r.replica_id}#{i}"), idx) for idx, r in enumerate(self.replicas) for i in range(VNODES))
        self._ring_keys = [k for k, _ in ring]
        self._ring_idx = [i for _, i in ring]

    def _eligible(self, exclude: set[str]) -> list[int]:
        now = self._clock()
        idx = [i for i, r in enumerate(self.replicas) if r.replica_id not in exclude and r.ejected_until <= now]
        if idx:
            return idx
        # Everyone is ejected (or already tried): better a possibly-bad replica than none.
        return [i for i, r in enumerate(self.replicas) if r.replica_id not in exclude]

    def choose(self, task_id: str | None = None, exclude: set[str] | None = None) -> ReplicaState | None:
        """The replica for the next attempt, never one in ``exclude`` (already tried); None if none is left."""
        exclude = exclude or set()
        eligible = self._eligible(exclude)
        if not eligible:
            return None
        if self.policy == "session_affinity" and task_id:
            allowed = set(eligible)
            start = bisect.bisect(self._ring_keys, _hash(task_id))
            n = len(self._ring_keys)
            for step in range(n):
                idx = self._ring_idx[(start + step) % n]
                if idx in allowed:
                    return self.replicas[idx]
        if self.policy == "least_loaded":
            self._rr += 1
            n = len(self.replicas)
            best = min(eligible, key=lambda i: (self.replicas[i].load(), self.replicas[i].inflight, (i - self._rr) % n))
            return self.replicas[best]
        # round_robin (and the session_affinity fallback)
        n = len(self.replicas)
        allowed = set(eligible)
        for _ in range(n):
            idx = self._rr % n
            self._rr += 1
            if idx in allowed:
                return self.replicas[idx]
        return self.replicas[eligible[0]]

    def record_result(self, replica: ReplicaState, ok: bool) -> float:
        """Feed the passive health check with an attempt's result; returns the ejection time in seconds
        when this failure ejected the replica, else 0."""
        replica.attempts += 1
        if ok:
            replica.consecutive_failures = 0
            return 0.0
        replica.failures += 1
        replica.consecutive_failures += 1
        now = self._clock()
        if replica.consecutive_failures < self.eject_after_failures or replica.ejected_until > now:
            return 0.0
        ejected = sum(1 for r in self.replicas if r.ejected_until > now)
        if ejected >= max(1, int(len(self.replicas) * self.max_ejection_percent / 100)):
            return 0.0  # keep enough replicas serving (Envoy's max_ejection_percent)
        if now - replica.last_ejected_at > self.max_ejection_s:
            replica.times_ejected = 0
        replica.times_ejected += 1
        duration = min(self.eject_s * replica.times_ejected, self.max_ejection_s)
        replica.ejected_until = now + duration
        replica.last_ejected_at = now
        replica.ejections += 1
        replica.consecutive_failures = 0
        return duration

    def ejected(self, replica: ReplicaState) -> bool:
        """True while ``replica`` is ejected."""
        return replica.ejected_until > self._clock()

    def update_scrape(self, replica_id: str, waiting: float, running: float) -> None:
        r = self.by_id[replica_id]
        r.scraped_waiting, r.scraped_running = waiting, running
        r.inflight_at_scrape = r.inflight
        r.scraped_at = self._clock()
