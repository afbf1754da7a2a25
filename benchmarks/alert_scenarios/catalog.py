"""The labelled alert scenarios: a generator of fleets, workloads and faults, each with its truth.

A scenario is drawn from its family and its seed (:func:`draw`): fleet size (3-8), GPU mix (H100 /
A100), ``--max-num-seqs``, trace (Azure 2023 conversation or Mooncake), arrivals (the trace's own,
bursty, or Poisson, steady), load, client retry policy, and the fault's replica, time and size. The
truth says which alerts MUST fire (``expect``: rule, replica, the onset the time-to-detect counts
from, the culprit a cascade must name) and which MAY fire (``allow``: true symptoms of the situation,
e.g. queue growth in a surge); any other firing alert is a false positive.

:func:`catalog` lists every family's instances; the seed decides the half: even seeds tune the
defaults, odd seeds evaluate them (:func:`split`). Family instances alternate trace and arrivals so
both halves hold both traces, bursty and steady.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from serving.emulator.faults import FaultEvent
from serving.plans import RetryPolicy

from benchmarks.alert_scenarios.workload import ReplicaPlan, draw_fleet, fleet_capacity

# rule names (alerts.model), repeated here as plain strings so the catalog reads as data
CASCADE, DEGRADATION, RETRY, QUEUE, SATURATION = ("cascading_degradation", "replica_degradation",
                                                  "retry_amplification", "queue_growth", "saturation")
SLO, INGESTION, DOWN, TELEMETRY = "slo_burn_rate", "ingestion_health", "replica_down", "telemetry_health"
SYMPTOMS = (RETRY, QUEUE, SATURATION, SLO)  # what an overloaded fleet truly shows
MAX_RATE = 12.0  # calls/s: keeps one scenario's simulation + ingest within ~30 s on a shared core


@dataclass(frozen=True)
class Expect:
    """An alert that must fire: ``rule`` about ``replica`` ("" = fleet-wide), at or after ``at_s``
    (the fault's onset, from which time-to-detect counts); a cascade must name ``culprit``.
    ``hold_until_s``: the alert must still be firing then (e.g. while the fault lasts and data is gone)."""

    rule: str
    replica: str = ""
    at_s: float = 0.0
    culprit: str = ""
    hold_until_s: float | None = None


@dataclass(frozen=True)
class Scenario:
    """One labelled run. Times in seconds from the start; rates in calls per second."""

    name: str
    family: str
    seed: int
    trace: str
    arrivals: str
    fleet: tuple[ReplicaPlan, ...]
    rate: float
    duration_s: float = 1800.0
    policy: str = "round_robin"
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    gateway_retries: int = 1
    faults: tuple[FaultEvent, ...] = ()
    shape: str = "flat"
    shape_params: tuple = ()
    mix: tuple = (("chat", 1.0),)
    offset_s: float = 0.0
    noise_sigma: float = 0.0
    outage: tuple[float, float] | None = None  # receiver down: all telemetry in [a, b) is lost
    scrape_fails_on_loss: bool = False  # metrics loss seen as failed scrapes (up = 0), not as silence
    expect: tuple[Expect, ...] = ()
    # (rule, replica or "*") that may fire from ``allow_from_s``; (rule, replica, from_s) from ``from_s``
    allow: tuple[tuple, ...] = ()
    note: str = ""

    @property
    def half(self) -> str:
        return "tune" if self.seed % 2 == 0 else "eval"

    @property
    def faulty(self) -> set[str]:
        """Replicas with an injected fault (``*`` = all)."""
        return {f.replica for f in self.faults}

    @property
    def allow_from_s(self) -> float:
        """Allowed alerts count from here: the first fault, or a surge's start (diurnal load and
        session affinity shape the whole run)."""
        starts = [f.at_s for f in self.faults] + ([self.outage[0]] if self.outage else [])
        if self.shape == "surge":
            starts.append(dict(self.shape_params)["at_s"])
        return min(starts) if starts else 0.0

    def allows(self, rule: str, replica: str, t: float | None = None) -> bool:
        """May ``rule`` fire about ``replica`` (at ``t``) without being a false positive?"""
        for entry in self.allow:
            r, rep = entry[0], entry[1]
            start = entry[2] if len(entry) > 2 else self.allow_from_s
            if r == rule and (rep == "*" or rep == replica) and (t is None or t >= start):
                return True
        return False


def _allow(rules, replica: str = "*") -> tuple:
    return tuple((r, replica) for r in rules)


class _Draw:
    """The seeded draws shared by every family."""

    def __init__(self, family: str, i: int, seed: int):
        self.rng = random.Random(seed * 1_000_003 + sum(map(ord, family)))
        k = list(FAMILIES).index(family)
        # instances 2j (tune) and 2j+1 (eval) share trace and arrivals; they alternate over j and families
        self.trace = ("azure", "mooncake")[(k + i // 2) % 2]
        self.arrivals = ("trace", "poisson")[(k // 2 + i // 2) % 2]
        self.n = self.rng.randint(3, 8)
        self.seqs = self.rng.choice((4, 8, 16))
        self.fleet = draw_fleet(self.rng, self.n, self.seqs)
        self.offset = round(self.rng.uniform(0, 2400), 1)
        self.noise = self.rng.choice((0.0, 0.05))
        self.timeout = self.rng.choice((10.0, 15.0, 20.0)) if self.trace == "azure" else self.rng.choice((30.0, 40.0))
        self.attempts = self.rng.choice((2, 3, 4))
        self.at = float(self.rng.randint(8, 12) * 60)
        self.victim = self.rng.choice(self.fleet).id

    def rate(self, utilisation: float, policy: str = "round_robin") -> float:
        """Calls/s for ``utilisation`` of the fleet's estimated capacity under ``policy`` (blind routing:
        of its slowest replica's), the fleet shrunk in ``--max-num-seqs`` first when that rate would
        make the run slow to simulate. Mooncake's 7k-85k-token prompts with 30-40 s client timeouts tip
        a fleet into self-sustained retries well below its throughput limit: its loads are 0.85x."""
        if self.trace == "mooncake":
            utilisation *= 0.85
        while fleet_capacity(self.fleet, self.trace, policy) * utilisation > MAX_RATE and self.seqs > 4:
            self.seqs //= 2
            self.fleet = [ReplicaPlan(r.id, r.gpu, self.seqs) for r in self.fleet]
        return round(fleet_capacity(self.fleet, self.trace, policy) * utilisation, 3)

    def base(self, family: str, i: int, seed: int, **kw) -> dict:
        d = dict(name=f"{family}-{i}", family=family, seed=seed, trace=self.trace, arrivals=self.arrivals,
                 fleet=tuple(self.fleet), offset_s=self.offset, noise_sigma=self.noise,
                 retry=RetryPolicy(max_attempts=self.attempts, timeout_s=self.timeout))
        d.update(kw)
        return d


def draw(family: str, i: int, seed: int) -> Scenario:
    """Instance ``i`` of ``family`` with ``seed`` (the seed decides every random draw and the half)."""
    d = _Draw(family, i, seed)
    rng, at, victim = d.rng, d.at, d.victim
    if family in ("cascade_slow", "cascade_errors", "metastable"):
        # A cascade needs the healthy replicas near their capacity too: with blind routing a mixed fleet
        # loaded to its slowest replica leaves the faster ones idle enough to absorb every retry, so
        # these fleets are of one GPU type, 3-4 replicas (the culprit's retries spread over few peers).
        # They replay the Azure trace (bursty for even instance pairs, steady for odd ones): on the
        # tuning runs, Mooncake fleets this hot either absorbed the culprit's retries or tipped into
        # self-sustained timeouts before any fault (7k-85k-token prompts against 30-40 s timeouts).
        d.trace, d.arrivals = "azure", ("trace", "poisson")[(i // 2) % 2]
        d.timeout = rng.choice((10.0, 15.0, 20.0))
        d.fleet = draw_fleet(rng, rng.randint(3, 4), d.seqs, a100_share=float(rng.random() < 0.3))
        victim = d.victim = rng.choice(d.fleet).id
    if family == "cascade_slow":
        factor = round(rng.uniform(2.5, 5.0), 2)
        until = None if rng.random() < 0.3 else at + rng.randint(8, 12) * 60
        rate = d.rate(rng.uniform(0.78, 0.88))
        return Scenario(**d.base(family, i, seed, rate=rate, faults=(FaultEvent(at, victim, "slowdown", factor, until),),
                                 expect=(Expect(CASCADE, "", at, victim), Expect(DEGRADATION, victim, at)),
                                 allow=_allow(SYMPTOMS), note=f"{victim} {factor}x slower"))
    if family == "cascade_errors":
        p = round(rng.uniform(0.5, 0.7), 2)
        rate = d.rate(rng.uniform(0.72, 0.82))
        return Scenario(**d.base(family, i, seed, rate=rate,
                                 faults=(FaultEvent(at, victim, "error_rate", {503: p}, at + 720),),
                                 expect=(Expect(CASCADE, "", at, victim), Expect(DEGRADATION, victim, at)),
                                 allow=_allow(SYMPTOMS), note=f"{victim} answers {p:.0%} 503s before its engine"))
    if family == "metastable":
        rate = d.rate(rng.uniform(0.78, 0.86))
        return Scenario(**d.base(family, i, seed, rate=rate,
                                 retry=RetryPolicy(max_attempts=5, timeout_s=d.timeout),
                                 faults=(FaultEvent(at, victim, "slowdown", 3.0, at + 300),),
                                 expect=(Expect(CASCADE, "", at, victim), Expect(DEGRADATION, victim, at)),
                                 allow=_allow(SYMPTOMS), note=f"{victim} 3x slower for 5 min near capacity"))
    if family == "surge":
        factor = round(rng.uniform(2.0, 3.0), 2)
        rate = d.rate(rng.uniform(0.3, 0.42))
        return Scenario(**d.base(family, i, seed, rate=rate, shape="surge",
                                 shape_params=(("at_s", at), ("until_s", at + rng.randint(5, 10) * 60),
                                               ("factor", factor)),
                                 allow=_allow(SYMPTOMS), note=f"global surge x{factor}"))
    if family == "scale_down":
        rate = d.rate(rng.uniform(0.35, 0.5))
        return Scenario(**d.base(family, i, seed, rate=rate, faults=(FaultEvent(at, victim, "drain"),),
                                 allow=_allow(SYMPTOMS), note=f"planned scale-down of {victim}"))
    if family == "crash_restart":
        down = rng.randint(15, 60)
        rate = d.rate(rng.uniform(0.3, 0.5))
        return Scenario(**d.base(family, i, seed, rate=rate, faults=(FaultEvent(at, victim, "crash", None, at + down),),
                                 allow=_allow((RETRY, SLO)), note=f"{victim} crashes, back after {down}s"))
    if family == "diurnal":
        rate = d.rate(1.0)
        return Scenario(**d.base(family, i, seed, rate=rate, shape="diurnal",
                                 shape_params=(("low", 0.2), ("high", round(rng.uniform(0.85, 1.0), 2)),
                                               ("peak_s", 1050.0)),
                                 allow=_allow(SYMPTOMS), note="diurnal peak"))
    if family == "affinity":
        rate = d.rate(rng.uniform(0.35, 0.5))
        return Scenario(**d.base(family, i, seed, rate=rate, policy="session_affinity",
                                 mix=(("chat", 0.5), ("copilot", 0.5)), allow=_allow((QUEUE, SATURATION)),
                                 note="session affinity: uneven load per replica"))
    if family == "degraded_contained":
        factor = round(rng.uniform(2.0, 4.0), 2)
        if i % 2 == 0:
            rate, policy, why = d.rate(rng.uniform(0.08, 0.2)), "round_robin", "low load"
        else:
            rate, policy, why = d.rate(rng.uniform(0.3, 0.4), "least_loaded"), "least_loaded", "least-loaded routing"
        return Scenario(**d.base(family, i, seed, rate=rate, policy=policy,
                                 faults=(FaultEvent(at, victim, "slowdown", factor),),
                                 expect=(Expect(DEGRADATION, victim, at),), allow=_allow((RETRY, SLO)),
                                 note=f"{victim} {factor}x slower, contained by {why}"))
    if family == "replica_down":
        rate = d.rate(rng.uniform(0.3, 0.45))
        return Scenario(**d.base(family, i, seed, rate=rate, faults=(FaultEvent(at, victim, "crash"),),
                                 expect=(Expect(DOWN, victim, at, hold_until_s=d_end(at)),),
                                 allow=_allow(SYMPTOMS), note=f"{victim} crashed for good"))
    if family == "telemetry_one":
        source = ("all", "spans", "metrics")[i % 3]
        rate = d.rate(rng.uniform(0.3, 0.55))
        return Scenario(**d.base(family, i, seed, rate=rate, faults=(FaultEvent(at, victim, "telemetry_loss", source),),
                                 scrape_fails_on_loss=bool(rng.random() < 0.5),
                                 expect=(Expect(TELEMETRY, victim, at, hold_until_s=d_end(at)),),
                                 note=f"{victim} serves but its {source} telemetry stops"))
    if family == "telemetry_all":
        rate = d.rate(rng.uniform(0.3, 0.5))
        return Scenario(**d.base(family, i, seed, rate=rate, faults=(FaultEvent(at, "*", "telemetry_loss", "all"),),
                                 expect=(Expect(TELEMETRY, "", at, hold_until_s=d_end(at)),),
                                 allow=((INGESTION, "*"),),  # once traffic stops, nothing arrives at all
                                 note="every replica's spans and metrics stop (gateway spans still arrive)"))
    if family == "receiver_outage":
        rate = d.rate(rng.uniform(0.3, 0.5))
        return Scenario(**d.base(family, i, seed, rate=rate, outage=(at, at + 480),
                                 expect=(Expect(INGESTION, "", at),), note="the receiver is down for 8 min"))
    if family == "blind_degraded":
        factor = round(rng.uniform(3.0, 4.0), 2)
        rate = d.rate(rng.uniform(0.1, 0.2))
        lost = at + 420
        return Scenario(**d.base(family, i, seed, rate=rate,
                                 faults=(FaultEvent(at, victim, "slowdown", factor),
                                         FaultEvent(lost, victim, "telemetry_loss", "all")),
                                 expect=(Expect(DEGRADATION, victim, at, hold_until_s=d_end(at)),
                                         Expect(TELEMETRY, victim, lost)),
                                 allow=_allow((RETRY, SLO)),
                                 note=f"{victim} {factor}x slower, then its telemetry stops (still slow)"))
    if family == "slo_slow":
        p = round(rng.uniform(0.03, 0.05), 3)
        rate = d.rate(rng.uniform(0.2, 0.4))
        return Scenario(**d.base(family, i, seed, rate=rate, gateway_retries=0,
                                 retry=RetryPolicy(max_attempts=1, timeout_s=d.timeout * 3),
                                 faults=(FaultEvent(at, "*", "error_rate", p),),
                                 expect=(Expect(SLO, "", at),), allow=((SLO, "*"),),
                                 note=f"every replica fails {p:.1%} of calls: slow budget burn"))
    if family == "slo_sharp":
        p = round(rng.uniform(0.3, 0.5), 2)
        rate = d.rate(rng.uniform(0.2, 0.4))
        return Scenario(**d.base(family, i, seed, rate=rate, gateway_retries=0,
                                 retry=RetryPolicy(max_attempts=1, timeout_s=d.timeout * 3),
                                 faults=(FaultEvent(at, "*", "error_rate", p, at + 600),),
                                 expect=(Expect(SLO, "", at),), allow=((SLO, "*"), (RETRY, "*")),
                                 note=f"every replica fails {p:.0%} of calls for 10 min: sharp burn"))
    if family == "flapping":
        factor = round(rng.uniform(2.5, 4.0), 2)
        rate = d.rate(rng.uniform(0.1, 0.25))
        faults, t = [], at
        while t < at + 720:
            on = rng.randint(60, 150)
            faults.append(FaultEvent(t, victim, "slowdown", factor, t + on))
            t += on + rng.randint(45, 120)
        return Scenario(**d.base(family, i, seed, rate=rate, faults=tuple(faults),
                                 expect=(Expect(DEGRADATION, victim, at),), allow=_allow((RETRY, SLO)),
                                 note=f"{victim} {factor}x slower on and off for 12 min"))
    if family == "overload_slow":
        # 3 H100 + 2 A100 behind blind routing at a load that keeps tens of requests
        # waiting before any fault (20-180 on the tuning runs, the A100s' queues full, clients timing
        # out after 10 s and retrying: 3 attempts), then one H100 5x slower from minute 12. The overload
        # is queue growth, saturation and retries (allowed from the start), never a cascade: no replica
        # is slower than its peers (the two A100s time out alike). After minute 12 the slowed H100 is
        # degraded; a cascade may fire only if it names it. The trace's own (bursty) arrivals: at the
        # same mean load Poisson arrivals either kept up or tipped within minutes into a self-sustained
        # overload of 200+ requests waiting (measured at 1.1-1.6x the estimated capacity).
        d.trace, d.arrivals = "azure", "trace"
        d.timeout, d.attempts = 10.0, 3
        gpus = ["H100"] * 3 + ["A100"] * 2
        rng.shuffle(gpus)
        d.fleet = [ReplicaPlan(f"r{j}", g, d.seqs) for j, g in enumerate(gpus)]
        victim = d.victim = rng.choice([r.id for r in d.fleet if r.gpu == "H100"])
        at = 720.0
        rate = d.rate(rng.uniform(1.2, 1.3))
        return Scenario(**d.base(family, i, seed, rate=rate, faults=(FaultEvent(at, victim, "slowdown", 5.0),),
                                 expect=(Expect(DEGRADATION, victim, at),),
                                 allow=tuple((r, "*", 0.0) for r in SYMPTOMS) + ((CASCADE, victim, at),),
                                 note=f"overloaded before any fault, then {victim} 5x slower"))
    if family == "queue_wobble":
        # a healthy fleet whose queue wobbles (under a request or two waiting now and
        # then, the worst replica's queue-time p95 rising to seconds as bursts of Mooncake's 7k-85k-token
        # prompts queue behind each other at --max-num-seqs 4; the trace's first minutes are its
        # burstiest for that): nothing to alert on.
        d.trace, d.arrivals, d.timeout = "mooncake", "trace", rng.choice((30.0, 40.0))
        d.seqs, d.offset = 4, round(rng.uniform(0, 400), 1)
        d.fleet = draw_fleet(rng, rng.randint(3, 4), 4)
        rate = d.rate(rng.uniform(0.2, 0.3))
        return Scenario(**d.base(family, i, seed, rate=rate, note="no fault, the queue wobbling"))
    if family == "healthy":
        policy = rng.choice(("round_robin", "least_loaded"))
        rate = d.rate(rng.uniform(0.2, 0.6), policy)
        return Scenario(**d.base(family, i, seed, rate=rate, policy=policy, note="no fault"))
    raise ValueError(f"unknown scenario family {family!r}")


def d_end(at: float) -> float:
    """The time a held expectation is checked at: 12 min after the onset (the run goes on 18+ min)."""
    return at + 720


# family -> instances; an instance's seed is 100 x family number + instance (parity = half)
FAMILIES = {
    "cascade_slow": 6, "cascade_errors": 2, "metastable": 2,
    "surge": 4, "scale_down": 2, "crash_restart": 2, "diurnal": 2, "affinity": 2, "degraded_contained": 4,
    "replica_down": 4, "telemetry_one": 6, "telemetry_all": 2, "receiver_outage": 2, "blind_degraded": 2,
    "slo_slow": 2, "slo_sharp": 2, "flapping": 2, "healthy": 6,
    "overload_slow": 4, "queue_wobble": 10,  # issue 41 (appended: the families before keep their seeds)
}


def catalog() -> list[Scenario]:
    """Every scenario (both halves), in family order."""
    out = []
    for k, (family, n) in enumerate(FAMILIES.items()):
        for i in range(n):
            out.append(draw(family, i, 100 * (k + 1) + i))
    return out


def split(scenarios: list[Scenario] | None = None) -> tuple[list[Scenario], list[Scenario]]:
    """(tuning half, evaluation half): even seeds tune, odd seeds evaluate."""
    scenarios = catalog() if scenarios is None else scenarios
    return [s for s in scenarios if s.half == "tune"], [s for s in scenarios if s.half == "eval"]
