"""Control knobs of the virtual-time fleet: gateway admission control and an autoscaling rule.

Where it sits: a mixin of ``fleet_sim.FleetSimulator`` (which provides ``push``, ``span``,
``end_attempt``, ``after_failure``, ``reps``, ``summary``). Both are the planner's levers
(planner): *delay* work (admission) and size the fleet to the load (autoscaling).
Neither changes the shape of a span or a metric point; they change which ones exist.

Admission control mirrors the live gateway (``serving/gateway/admission.py``): per
``tenant.priority`` a cap on the requests inside the gateway; past it the request is answered at
once with 429 (``gateway.admission=rejected``, ``error.type=admission_rejected``, no upstream
attempt) and the client retries after its backoff, at least ``Retry-After`` (1 s, the gateway's
default ``retry_after_s``) — RFC 9110 §10.2.3 and ``serving.sdk.retry.backoff_s``.

Autoscaling (:class:`AutoscaleRule`) is the Kubernetes HPA algorithm on vLLM's load
(``vllm:num_requests_running`` + ``waiting``, which the gateway sees as requests outstanding per
replica): every ``interval_s``, ``desired = ceil(load / target_load_per_replica)`` clamped to
``[min_replicas, max_replicas]`` (HPA: ``desiredReplicas = ceil(currentMetricValue / target)``
summed over pods). Scale-up boots replicas in fleet order; a booting replica is billed (scraped)
but takes requests only after ``cold_start_s``. Scale-down waits until the desired count has
stayed lower for ``scale_down_after_s`` (HPA's default stabilisation window is 300 s), then drains
the last active replicas: no new requests, parked (not scraped, not billed) once empty.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from serving.emulator.otlp import SPAN_KIND_SERVER, STATUS_ERROR
from serving.emulator.sim_replicas import CLIENT_GATEWAY_S
from serving.emulator.sim_spans import GATEWAY_SPAN_NAME, gateway_attrs

REJECT_STATUS = 429
RETRY_AFTER_S = 1.0  # the live gateway's default Retry-After (serving/gateway/config.py retry_after_s)

# replica states under autoscaling; without a rule every replica is "active" for the whole run
ACTIVE, BOOTING, DRAINING, PARKED = "active", "booting", "draining", "parked"


@dataclass(frozen=True)
class AutoscaleRule:
    """HPA-style autoscaling of the fleet (module docstring). Times in seconds, load in requests.

    min_replicas: always active (the first ones of the fleet list). max_replicas: None = the
    fleet size. target_load_per_replica: requests outstanding (running + waiting) per active
    replica the rule aims at. interval_s: evaluation period. cold_start_s: boot time before a new
    replica takes requests (billed meanwhile). scale_down_after_s: stabilisation window.
    """

    min_replicas: int = 1
    max_replicas: int | None = None
    target_load_per_replica: float = 8.0
    interval_s: float = 60.0
    cold_start_s: float = 120.0
    scale_down_after_s: float = 300.0

    def validate(self, fleet_size: int) -> None:
        """Raise ValueError listing every problem against a fleet of ``fleet_size`` replicas."""
        problems = []
        if not 1 <= self.min_replicas <= fleet_size:
            problems.append(f"min_replicas must be in 1..{fleet_size} (the fleet size), got {self.min_replicas}")
        if self.max_replicas is not None and not self.min_replicas <= self.max_replicas <= fleet_size:
            problems.append(f"max_replicas must be in min_replicas..{fleet_size}, got {self.max_replicas}")
        if self.target_load_per_replica <= 0:
            problems.append("target_load_per_replica must be > 0")
        if self.interval_s <= 0 or self.cold_start_s < 0 or self.scale_down_after_s < 0:
            problems.append("interval_s must be > 0; cold_start_s and scale_down_after_s >= 0")
        if problems:
            raise ValueError("invalid autoscale rule: " + "; ".join(problems))


class FleetControl:
    """Admission and autoscaling events of the simulator (module docstring)."""

    def init_control(self, admission_caps: dict[str, int] | None, autoscale: AutoscaleRule | None) -> None:
        if admission_caps is not None:
            bad = {k: v for k, v in admission_caps.items() if int(v) < 0}
            if bad:
                raise ValueError(f"admission caps must be >= 0, got {bad}")
        self.caps = dict(admission_caps) if admission_caps is not None else None
        self.inside: dict[str, int] = {}
        self.autoscale = autoscale
        self.below_since = None
        self.scale_events = 0
        for r in self.reps:
            r.state = ACTIVE
        if autoscale is not None:
            autoscale.validate(len(self.reps))
            for r in self.reps[autoscale.min_replicas:]:
                r.state = PARKED
            self.push(autoscale.interval_s, self.on_autoscale, None)
        self.routable = [r for r in self.reps if r.state == ACTIVE]

    # ------------------------------------------------------------------ admission
    def admit(self, t, a) -> bool:
        """Count the attempt into its priority's cap; False (after answering 429) when it is full."""
        a.admitted = False
        if self.caps is None:
            return True
        prio = a.task.plan.priority
        cap = self.caps.get(prio, self.caps.get("*"))
        inside = self.inside.get(prio, 0)
        if cap is not None and inside >= cap:
            self.reject(t, a)
            return False
        self.inside[prio] = inside + 1
        a.admitted = True
        return True

    def release(self, a) -> None:
        if a.admitted:
            a.admitted = False
            self.inside[a.task.plan.priority] -= 1

    def reject(self, t, a) -> None:
        self.summary.rejections += 1
        end = t + CLIENT_GATEWAY_S
        task = a.task
        if self.span_mode == "all":
            attrs = gateway_attrs(task.plan, self.policy, 0, None, REJECT_STATUS, 0, None, "admission_rejected")
            attrs["gateway.admission"] = "rejected"
            self.span(self.gateway_res, task.trace_id, a.gw_id, a.client_id, GATEWAY_SPAN_NAME, SPAN_KIND_SERVER,
                      a.gw_start, t, attrs, STATUS_ERROR, "admission_rejected", task.ctx)
        a.gw_id = None  # the gateway request span is written: end_attempt writes only the client's
        self.end_attempt(end, a, error_type=f"http.{REJECT_STATUS}", status=REJECT_STATUS, tokens=0,
                         gw_error="admission_rejected", finish=None, ttft=None)
        self.after_failure(end, a, f"http.{REJECT_STATUS}", REJECT_STATUS, retry_after_s=RETRY_AFTER_S)

    # ------------------------------------------------------------------ autoscaling
    def on_autoscale(self, t, _):
        rule = self.autoscale
        for r in self.reps:
            if r.state == DRAINING and r.outstanding <= 0:
                r.state = PARKED
        active = [r for r in self.reps if r.state == ACTIVE]
        coming = [r for r in self.reps if r.state == BOOTING]
        load = sum(r.outstanding for r in active)
        top = rule.max_replicas or len(self.reps)
        desired = min(top, max(rule.min_replicas, math.ceil(load / rule.target_load_per_replica - 1e-9)))
        have = len(active) + len(coming)
        if desired > have:
            self.below_since = None
            for r in [r for r in self.reps if r.state == DRAINING][:desired - have]:
                r.state = ACTIVE  # still warm: take requests again at once
                have += 1
            for r in [r for r in self.reps if r.state == PARKED][:desired - have]:
                r.state = BOOTING
                r.ready_at = t + rule.cold_start_s
                self.scale_events += 1
                self.push(r.ready_at, self.on_ready, r)
            self.routable = [r for r in self.reps if r.state == ACTIVE]
        elif desired < len(active) and not coming:
            if self.below_since is None:
                self.below_since = t
            elif t - self.below_since >= rule.scale_down_after_s:
                for r in active[desired:]:
                    r.state = DRAINING
                    self.scale_events += 1
                self.below_since = None
                self.routable = [r for r in self.reps if r.state == ACTIVE]
        else:
            self.below_since = None
        if self.active_tasks > 0 or self.arrivals_left:
            self.push(t + rule.interval_s, self.on_autoscale, None)

    def on_ready(self, t, rep):
        if rep.state != BOOTING:
            return
        rep.state = ACTIVE
        self.routable = [r for r in self.reps if r.state == ACTIVE]

    def scraped(self, rep) -> bool:
        """Whether ``rep`` is scraped (hence billed) now: up and not parked."""
        return not rep.down and rep.state != PARKED
