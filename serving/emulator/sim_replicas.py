"""Replica-level events of the fleet simulator: faults, crashes and restarts, metric ticks.

Where it sits: a mixin of ``fleet_sim.FleetSimulator`` (which provides ``interrupt``,
``reschedule``, ``end_attempt``, ``after_failure``, ``push``, ``ns``, ``sink`` and ``summary``).
A crashed replica loses its in-flight requests without spans (vLLM never exports them), refuses
connections until it restarts, and starts its cumulative metric series again; a dead replica is
not scraped. Virtual-time only faults: ``telemetry_loss`` (the replica serves, its spans and/or
metric points stop arriving) and ``drain`` (a planned scale-down: out of the gateway's pool, shut
down once idle, back with a fresh engine at ``until_s``).
"""

from __future__ import annotations

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

from serving.emulator.faults import FaultEvent, error_rates

CLIENT_GATEWAY_S = 0.001  # one network hop client <-> gateway, seconds (same rack)
GATEWAY_REPLICA_S = 0.0005  # one hop gateway <-> replica


class ReplicaEvents:
    # ------------------------------------------------------------------ faults
    def on_fault(self, t, ev: FaultEvent):
        for rep in self.reps if ev.replica == "*" else [self.by_id[ev.replica]]:
            if ev.kind == "crash":
                self.crash(t, rep, ev.until_s)
                continue
            if ev.kind == "error_rate":
                rep.errors = error_rates(ev.value)
                continue
            if ev.kind == "telemetry_loss":
                source = ev.value or "all"
                rep.spans_lost = rep.spans_lost or source in ("spans", "all")
                rep.metrics_lost = rep.metrics_lost or source in ("metrics", "all")
                continue
            if ev.kind == "drain":
                rep.draining = True
                continue
            self.interrupt(rep, t)
            if ev.kind == "slowdown":
                rep.engine.slowdown = float(ev.value)
            elif ev.kind == "kv_cut":
                rep.engine.kv_cut = float(ev.value)
            self.reschedule(rep)

    def on_fault_end(self, t, ev: FaultEvent):
        for rep in self.reps if ev.replica == "*" else [self.by_id[ev.replica]]:
            if ev.kind == "error_rate":
                rep.errors = {}
                continue
            if ev.kind == "telemetry_loss":
                source = ev.value or "all"
                rep.spans_lost = rep.spans_lost and source == "metrics"
                rep.metrics_lost = rep.metrics_lost and source == "spans"
                continue
            if ev.kind == "drain":
                rep.draining = False
                if rep.down:  # it was shut down once idle: it comes back as a new process
                    self.on_restart(t, rep)
                continue
            self.interrupt(rep, t)
            if ev.kind == "slowdown":
                rep.engine.slowdown = 1.0
            elif ev.kind == "kv_cut":
                rep.engine.kv_cut = 0.0
            self.reschedule(rep)

    def crash(self, t, rep, restart_at):
        if rep.down:
            return
        self.interrupt(rep, t)
        rep.engine.crash()
        rep.down = True
        rep.ver += 1
        for a in list(rep.inflight.values()):
            self.summary.crashed_requests += 1
            rep.outstanding -= 1
            tokens = a.req.out if a.req.first_token is not None else 0
            ttft = None
            if a.req.first_token is not None:
                ttft = a.req.first_token + GATEWAY_REPLICA_S + CLIENT_GATEWAY_S - a.t0
            end = t + GATEWAY_REPLICA_S + CLIENT_GATEWAY_S
            self.end_attempt(end, a, error_type="stream_broken", status=200, tokens=tokens, gw_error="stream_broken",
                             finish=None, ttft=ttft)
            self.after_failure(end, a, "stream_broken", None)
        rep.inflight.clear()
        if restart_at is not None:
            self.push(max(restart_at, t), self.on_restart, rep)

    def on_restart(self, t, rep):
        st = rep.engine.stats
        rep.preempt_base += st.num_preemptions
        rep.gen_base += st.generation_tokens
        rep.engine.restart(t)
        rep.frontend.reset(t)
        rep.fe_since = t
        self.new_incarnation(rep)
        rep.start_s = t
        rep.down = False
        rep.unhealthy_until = -1.0
        self.reschedule(rep)

    # ------------------------------------------------------------------ metrics
    def on_tick(self, t, _):
        parts = []
        now_ns = self.ns(t)
        for rep in self.reps:
            if rep.draining and not rep.down and not rep.inflight:
                rep.down = True  # drained and idle: shut down (and no longer a scrape target)
                rep.engine.crash()
                rep.ver += 1
            if not self.scraped(rep) or rep.metrics_lost:
                continue  # a dead (or, autoscaled, parked) replica is not scraped; a lost one's points never arrive
            self.interrupt(rep, t)
            self.reschedule(rep)
            if self.sink is not None:
                parts.append(rep.metrics.snapshot(rep.engine, now_ns, self.ns(rep.start_s)))
                self.summary.metric_points += rep.metrics.n_points
        if parts:
            self.sink(ExportMetricsServiceRequest.FromString(b"".join(parts)))
        if self.active_tasks > 0 or self.arrivals_left:
            self.push(t + self.interval, self.on_tick, None)
