"""Rule 5, cascading degradation: the chain culprit -> retries -> pressure on the other replicas as
ONE alert naming the culprit by evidence, with the chain's onsets and figures, the incident's
estimated cost and suggested actions.

The chain is built from step changes in the signals (alerts/series.py), not from when other alerts
started: the fleet's retry rate steps up; some replica's own speed (per-token latency against its
group or its own baseline) or its failed and abandoned attempts stepped up first, while its own load
did not (errors or slowness its load does not explain); and the other replicas' queues step up after
it. The culprit is the earliest such replica; the evidence carries, for every candidate, its onset,
before/after figures, its share of the fleet's failed attempts (where the retries come from) and
how much of the other replicas' load rise its failures explain.

A metastable failure (Bronson et al., HotOS'21; Huang et al., OSDI'22) has a trigger (here: the
culprit) and a sustaining effect (retries keeping queues full). So the alert stays firing while
retries or queues stay elevated, even after the culprit recovered; it clears only when retry
amplification and queue growth are both back to CLEAR (then the lifecycle's hysteresis applies).
"""

from __future__ import annotations

from datetime import datetime
from statistics import median
from typing import Any

from alerts.config import AlertConfig, CascadeConfig
from alerts.lifecycle import Lifecycle
from alerts.model import (RULE_CASCADE, RULE_DEGRADATION, RULE_QUEUE, RULE_RETRY, RULE_SATURATION, Level, Signal,
                          replica_label)
from alerts.series import METRICS, FleetSeries, Step, rate_series, step_onset
from schema.queries import alerts as q


def actions(replica: str) -> list[str]:
    """The three moves that break a retry-sustained cascade (of the four moves, avoid, share, move and delay work)."""
    return [
        f"Drain {replica_label(replica)}: take it out of the gateway's pool (or restart it) until its latency is back "
        f"in line with the fleet.",
        "Enforce the retry budget: cap client and gateway retries (e.g. retries <= 10% of requests, token "
        "bucket) with full-jitter exponential backoff, so retries stop sustaining the overload.",
        "Shed load via admission control: reject or defer batch-priority tasks at the gateway (429 with "
        "Retry-After) until queues drain.",
    ]


def _r(value, digits: int = 3):
    return None if value is None else round(float(value), digits)


def retry_rates(fs: FleetSeries, min_first: int) -> list[float | None]:
    """Retries per first attempt per bucket: the larger of the client's (task.attempt >= 2) and the
    gateway's hidden retries (attempts - requests); None where neither has ``min_first`` first attempts."""
    f = fs.fleet
    out: list[float | None] = []
    for b in range(fs.n):
        rates = []
        first = f["client_attempts"][b] - f["client_retries"][b]
        if first >= min_first:
            rates.append(f["client_retries"][b] / first)
        if f["gateway_requests"][b] >= min_first:
            rates.append(max(f["gateway_attempts"][b] - f["gateway_requests"][b], 0.0) / f["gateway_requests"][b])
        out.append(max(rates) if rates else None)
    return out


def _median_over(values, buckets) -> float:
    """Median over the buckets that have data: a minute before the replica (or the store) had any
    telemetry is no evidence of zero load."""
    found = [values[b] for b in buckets if values[b] is not None]
    return median(found) if found else 0.0


def _own_load_ratio(rep, onset: int, min_after: int, n: int) -> float | None:
    before = _median_over(rep.values["attempts"], range(onset + 1, n))
    after = _median_over(rep.values["attempts"], range(max(0, onset - min_after + 1), onset + 1))
    return after / before if before else None


def _load_ratio(fs: FleetSeries, name: str, onset: int, min_after: int) -> float | None:
    """How much the replica's attempts per bucket rose at ``onset`` beyond the fleet's own rise: its
    attempts from the onset on over before, divided by the median of the other replicas' same ratio
    (retries spread by the gateway raise everyone's load alike; a hot session-affinity replica's
    rises alone). None without a before."""
    own = _own_load_ratio(fs.replicas[name], onset, min_after, fs.n)
    if own is None:
        return None
    others = [r for o in fs.replicas if o != name
              for r in [_own_load_ratio(fs.replicas[o], onset, min_after, fs.n)] if r is not None]
    return own / median(others) if others and median(others) > 0 else own


def comparison_peers(fs: FleetSeries, name: str) -> list[str]:
    """The replicas ``name`` is judged against: its GPU type's other replicas when it has any, else every
    other replica (a lone A100 among H100s is slower by design; two A100s are compared with each other)."""
    rep = fs.replicas[name]
    same = [o for o in sorted(fs.replicas) if o != name and rep.gpu_type and fs.replicas[o].gpu_type == rep.gpu_type]
    return same or [o for o in sorted(fs.replicas) if o != name]


def _bad_share(fs: FleetSeries, name: str, kind: str, buckets: range) -> tuple[float, float]:
    """(bad attempts, attempts) of ``name`` over ``buckets``: ``errors`` = upstream errors (gateway 5xx,
    broken streams, engine errors), ``abandoned`` = attempts timed out or given up on by the client."""
    rep = fs.replicas[name]
    g = lambda f, b: rep.get(f, b) or 0.0  # noqa: E731
    if kind == "errors":
        bad = sum(g("gw_errors", b) + g("engine_errors", b) for b in buckets)
    else:
        bad = sum(g("gw_abandoned", b) + g("gw_failed", b) - g("gw_errors", b) for b in buckets)
    return bad, sum(g("attempts", b) for b in buckets)


def stands_out(fs: FleetSeries, name: str, kind: str, onset: int, c: CascadeConfig) -> dict[str, Any]:
    """Does ``name``'s share of ``kind`` attempts (errors | abandoned) stand out against its peers'
    (:func:`comparison_peers`) in some bucket from ``onset`` on (the ``min_after`` buckets of its step)?
    An overloaded fleet times out on every replica alike: that is queue growth and saturation, not one
    replica's fault. In a bucket it stands out when its bad share is >= ``failure_ratio`` x
    the peers' median (and ``failure_delta`` above it), or their good share is >= ``failure_ratio`` x its
    own (a replica answering 1% while a fleet its retries overloaded within the minute answers 43%).
    Bucket by bucket, not pooled: near capacity the culprit's retries overload its peers a minute later.
    Peers with fewer than 5 attempts in a bucket are left out; a bucket without any stands out by default
    (nothing to compare with, as before). Returns the figures of the bucket where it stands out most."""
    best: dict[str, Any] | None = None
    for b in range(max(0, onset - c.min_after + 1), onset + 1):
        bad, attempts = _bad_share(fs, name, kind, range(b, b + 1))
        if attempts < 5:
            continue
        own = bad / attempts
        peers = [pb / pa for o in comparison_peers(fs, name)
                 for pb, pa in [_bad_share(fs, o, kind, range(b, b + 1))] if pa >= 5]
        if not peers:
            found = {"stands_out": True, "own_rate": _r(own), "peers_rate": None, "bucket": b, "margin": own}
        else:
            ref = median(peers)
            worse = own >= c.failure_ratio * ref and own - ref >= c.failure_delta
            answers_less = (1 - ref) >= c.failure_ratio * max(1 - own, 0.0) and own - ref >= c.failure_delta
            found = {"stands_out": worse or answers_less, "own_rate": _r(own), "peers_rate": _r(ref), "bucket": b,
                     "margin": own - ref}
        if best is None or (found["stands_out"], found["margin"]) > (best["stands_out"], best["margin"]):
            best = found
    if best is None:
        return {"stands_out": True, "own_rate": None, "peers_rate": None, "bucket": None}
    best.pop("margin")
    return best


def _bucket_speed(fs: FleetSeries, name: str, b: int, min_samples: int = 5) -> float | None:
    """``name``'s speed ratio in bucket ``b`` (``FleetSeries.ratios``: from at least ``min_samples`` calls of
    its own), else, when it has no reference that way (a replica judged on its own baseline before it has
    one), its per-token latencies over the median of its GPU type's other replicas' in that bucket (the
    smaller of decode and prefill, as the speed ratio; ``min_samples`` calls each); None without either.
    A few calls are no figure: those a slowed replica still finishes in its first minute mostly ran
    before it slowed."""
    ratio = fs.ratios[name][b]
    if ratio is not None:
        return ratio
    rep = fs.replicas[name]
    same = [o for o in comparison_peers(fs, name) if rep.gpu_type and fs.replicas[o].gpu_type == rep.gpu_type]
    parts = []
    for metric, samples in METRICS:
        mine = rep.get(metric, b)
        ref = [fs.replicas[o].get(metric, b) for o in same
               if (fs.replicas[o].get(samples, b) or 0) >= min_samples and fs.replicas[o].get(metric, b)]
        if mine and (rep.get(samples, b) or 0) >= min_samples and ref and median(ref) > 0:
            parts.append(mine / median(ref))
    return min(parts) if parts else None


def _speed_normal(fs: FleetSeries, name: str, onset: int, c: CascadeConfig) -> bool:
    """Is ``name``'s speed on its own work known and normal in every bucket from ``onset`` on
    (:func:`_bucket_speed` below ``speed_ratio``)? Then its timeouts are queueing (load), not its own
    slowness: two A100s of an overloaded fleet tip into timeouts a minute apart at the same speed."""
    after = range(max(0, onset - c.min_after + 1), onset + 1)
    ratios = [_bucket_speed(fs, name, b) for b in after]
    return all(r is not None for r in ratios) and max(ratios) < c.speed_ratio


def _own_step(values: list[float | None], own, *, max_onset: int, **step) -> Step | None:
    """The earliest step of ``values`` (:func:`alerts.series.step_onset`) that ``own`` (Step -> bool)
    judges the replica's own doing, or None. A step it rejects does not hide a later one that rises over
    the rejected level as a step rises over its before (``ratio`` x that level): at a fleet's load step a
    replica times out a little at its normal speed (queueing), and a slowdown minutes later takes it
    from there to timing out on nearly everything."""
    while max_onset >= 0:
        st = step_onset(values, max_onset=max_onset, **step)
        if st is None or own(st):
            return st
        max_onset = st.onset - 1
        step["min_level"] = max(step.get("min_level", 0.0), step["ratio"] * st.after)
    return None


def candidate(fs: FleetSeries, name: str, c: CascadeConfig, max_onset: int) -> dict[str, Any] | None:
    """The evidence that ``name`` started a cascade, or None. Three kinds of step, each the earliest
    sustained rise of the replica's own series (alerts.series.step_onset) that the conditions below keep
    (:func:`_own_step`: a rise they reject does not hide a later one):
    - ``speed``: its speed ratio against its group (per-token latencies: shape-independent; already a
      comparison with its peers, or with its own baseline net of the fleet's change);
    - ``errors``: its upstream errors per attempt (5xx, refused connections, broken streams: not
      something load causes);
    - ``abandoned``: its attempts that timed out or that clients gave up on, per attempt.
    Speed and abandonment also rise when a replica is merely overloaded, so they count only when its
    own attempts (its load) rose less than ``load_rise`` x the fleet's rise at the onset (a replica
    slowed or failing as more work was routed to it alone is a victim of that load, not a cause).
    Errors and abandonment count only when they stand out against its peers' in a bucket of their step
    (:func:`stands_out`: a fleet timing out everywhere is overloaded), and abandonment only
    when its speed is not known to be normal then (:func:`_speed_normal`: timeouts at normal speed are
    queueing)."""
    rep = fs.replicas[name]
    attempts = rep.values["attempts"]
    g = lambda f, b: rep.get(f, b) or 0.0  # noqa: E731
    errors = [g("gw_errors", b) + g("engine_errors", b) for b in range(fs.n)]
    abandoned = [g("gw_abandoned", b) + g("gw_failed", b) - g("gw_errors", b) for b in range(fs.n)]
    loads, peers = {}, {}

    def own_load(kind: str, st: Step) -> bool:
        loads[kind] = _load_ratio(fs, name, st.onset, c.min_after)
        return loads[kind] is None or loads[kind] <= c.load_rise  # above: a victim of its load, not the cause

    def own_failures(kind: str, st: Step) -> bool:
        peers[kind] = stands_out(fs, name, kind, st.onset, c)
        if not peers[kind]["stands_out"]:
            return False  # as its peers: load, not its fault
        if kind == "abandoned":
            return not _speed_normal(fs, name, st.onset, c) and own_load(kind, st)  # normal speed: queueing
        return True

    kw = dict(min_after=c.min_after, max_onset=max_onset)
    rate = dict(ratio=c.failure_ratio, min_delta=c.failure_delta, min_level=c.failure_floor, **kw)
    steps = {
        "speed": _own_step(fs.ratios[name], lambda st: own_load("speed", st), ratio=c.speed_ratio, min_delta=0.3, **kw),
        "errors": _own_step(rate_series(errors, attempts, 5), lambda st: own_failures("errors", st), **rate),
        "abandoned": _own_step(rate_series(abandoned, attempts, 5), lambda st: own_failures("abandoned", st), **rate),
    }
    found = [(k, st) for k, st in steps.items() if st is not None]
    if not found:
        return None
    kind, first = max(found, key=lambda x: x[1].onset)
    since = range(0, first.onset + 1)
    bad = [errors[b] + abandoned[b] for b in range(fs.n)]
    speed, err, ab = steps["speed"], steps["errors"], steps["abandoned"]
    return {"replica": name, "onset": first.onset, "onset_at": fs.bucket_start(first.onset).isoformat(),
            "evidence": kind, "gpu_type": rep.gpu_type, "peers": fs.peers.get(name),
            "compared_with": comparison_peers(fs, name),
            "speed_before": _r(speed.before) if speed else None, "speed_after": _r(speed.after) if speed else None,
            "error_rate_before": _r(err.before) if err else None, "error_rate_after": _r(err.after) if err else None,
            "abandoned_rate_before": _r(ab.before) if ab else None,
            "abandoned_rate_after": _r(ab.after) if ab else None,
            "peers_rate": (peers.get(kind) or {}).get("peers_rate"),
            "load_ratio": _r(loads.get(kind) if kind in loads else _load_ratio(fs, name, first.onset, c.min_after)),
            "failed_since_onset": int(sum(bad[b] for b in since)), "attempts_since_onset": int(rep.total("attempts", since))}


def pressure(fs: FleetSeries, culprit: str, c: CascadeConfig, earliest: int) -> dict[str, Any] | None:
    """A step up in the other replicas' summed ``vllm:num_requests_waiting`` with its onset at or after
    bucket ``earliest`` (newest-first index), or None."""
    others = [r for n, r in fs.replicas.items() if n != culprit]
    waiting = [sum((r.get("waiting_mean", b) or 0.0) for r in others) if any(r.get("waiting_mean", b) is not None
                                                                             for r in others) else None
               for b in range(fs.n)]
    st = step_onset(waiting, ratio=c.pressure_ratio, min_delta=c.pressure_delta, min_level=c.pressure_floor,
                    min_after=c.min_after, max_onset=earliest)
    if st is None:
        return None
    return {"onset": st.onset, "onset_at": fs.bucket_start(st.onset).isoformat(), "waiting_before": _r(st.before, 2),
            "waiting_after": _r(st.after, 2), "replicas": sorted(r.replica for r in others)}


def find_chain(fs: FleetSeries, lifecycle: Lifecycle, config: AlertConfig, sustained: bool = False,
               exclude: str | None = None) -> dict[str, Any] | None:
    """The chain at ``fs.now``, or None: the fleet's retries are elevated now (the newest ``min_after``
    buckets at ``retry_floor``), and some replica is a culprit candidate (:func:`candidate`) followed by
    a retry step no earlier than ``tolerance_s`` before its onset and no later than ``within_s`` after
    it, and by pressure on the other replicas (a waiting step no earlier than ``tolerance_s`` before its
    onset, or a firing saturation alert of another replica). The earliest such candidate is the
    culprit; ties go to the larger share of the fleet's failed attempts since its onset.

    ``sustained``: an open cascade's retries already sustain the incident (its chain was complete), so
    a new culprit needs no retry step of its own, only its trigger and the pressure after it (re-naming,
    :func:`cascade_signal`). ``exclude``: a replica that cannot be the culprit."""
    c = config.cascade
    tol, within = max(1, c.tolerance_s // fs.bucket_s), c.within_s // fs.bucket_s
    rates = retry_rates(fs, c.min_first_attempts)
    now_level = [v for v in rates[:c.min_after] if v is not None]
    if not now_level or min(now_level) < c.retry_floor:
        return None
    saturated = lifecycle.firing(RULE_SATURATION)
    found = []
    for name in fs.replicas:
        cand = candidate(fs, name, c, fs.n - 1) if name != exclude else None
        if cand is None:
            continue
        retry = step_onset(rates, ratio=c.retry_ratio, min_delta=c.retry_delta, min_level=c.retry_floor,
                           min_after=c.min_after, max_onset=cand["onset"] + tol)
        if retry is not None and retry.onset < cand["onset"] - within:
            retry = None
        if retry is None and not sustained:
            continue
        press = pressure(fs, name, c, cand["onset"] + tol)
        others_saturated = [a.replica for a in saturated if a.replica != name]
        if press is None and not others_saturated:
            continue
        found.append((cand, retry, press, others_saturated))
    if not found:
        return None
    fleet_failed = sum(sum((r.get("gw_failed", b) or 0) + (r.get("gw_abandoned", b) or 0) + (r.get("engine_errors", b) or 0)
                           for b in range(fs.n)) for r in fs.replicas.values()) or 1
    for cand, *_ in found:
        cand["failure_share"] = _r(cand["failed_since_onset"] / fleet_failed)
        cand["explains"] = _explains(fs, cand["replica"], cand["onset"])
    found.sort(key=lambda x: (-x[0]["onset"], -(x[0]["failure_share"] or 0), -(x[0]["speed_after"] or 0)))
    cand, retry, press, others_saturated = found[0]
    name = cand["replica"]
    links = [{"step": "trigger", "rule": "", "replica": name, "started_at": cand["onset_at"],
              "summary": _trigger_summary(cand), "figures": cand}]
    if retry is not None:
        links.append({"step": "sustaining", "rule": RULE_RETRY, "replica": "",
                      "started_at": fs.bucket_start(retry.onset).isoformat(),
                      "summary": f"fleet retries per first attempt {retry.before:.1%} -> {retry.after:.1%}",
                      "figures": {"retry_rate_before": _r(retry.before, 4), "retry_rate_after": _r(retry.after, 4)}})
    else:  # re-naming an open cascade: its retries were already elevated before this trigger
        links.append({"step": "sustaining", "rule": RULE_RETRY, "replica": "", "started_at": cand["onset_at"],
                      "summary": f"fleet retries per first attempt at {min(now_level):.1%} (already elevated)",
                      "figures": {"retry_rate_now": _r(min(now_level), 4)}})
    if press is not None:
        links.append({"step": "pressure", "rule": RULE_QUEUE, "replica": "", "started_at": press["onset_at"],
                      "summary": (f"requests waiting on the other replicas {press['waiting_before']:g} -> "
                                  f"{press['waiting_after']:g}"), "figures": press})
    for rep in others_saturated:
        links.append({"step": "pressure", "rule": RULE_SATURATION, "replica": rep,
                      "started_at": lifecycle.get(RULE_SATURATION, rep).started_at.isoformat(),
                      "summary": f"{replica_label(rep)} saturated", "figures": {}})
    return {"replica": name, "chain": links, "candidates": [x[0] for x in found], "started_at": cand["onset_at"]}


def _explains(fs: FleetSeries, culprit: str, onset: int) -> float | None:
    """How much of the other replicas' rise in attempts per bucket since ``onset`` the culprit's failed
    and abandoned attempts per bucket account for (1.0 = all of it; its removal explains their load)."""
    rep = fs.replicas[culprit]
    after, before = range(0, onset + 1), range(onset + 1, fs.n)
    others = [r for n, r in fs.replicas.items() if n != culprit]
    rise = sum(_median_over(r.values["attempts"], after) - _median_over(r.values["attempts"], before) for r in others)
    bad = _median_over([(rep.get("gw_failed", b) or 0) + (rep.get("gw_abandoned", b) or 0) for b in range(fs.n)], after)
    return _r(min(bad / rise, 9.99)) if rise > 0 else None


def _trigger_summary(c: dict[str, Any]) -> str:
    if c["evidence"] == "speed":
        return (f"{replica_label(c['replica'])} slowed on its own work: speed ratio {c['speed_before']:.2f} -> "
                f"{c['speed_after']:.2f} (its load x{c['load_ratio'] or 1:.2f})")
    if c["evidence"] == "errors":
        return (f"{replica_label(c['replica'])} answered {c['error_rate_after']:.0%} of its attempts with upstream errors "
                f"(was {c['error_rate_before']:.0%})")
    return (f"{replica_label(c['replica'])} timed out or lost {c['abandoned_rate_after']:.0%} of its attempts (was "
            f"{c['abandoned_rate_before']:.0%}) with its load x{c['load_ratio'] or 1:.2f}")


def cascade_signal(fs: FleetSeries | None, lifecycle: Lifecycle, now: datetime, config: AlertConfig,
                   levels: dict[str, Level]) -> Signal:
    """The cascade verdict at ``now`` (key "": one cascade alert per fleet).

    ``levels``: this evaluation's fleet verdicts of RULE_RETRY and RULE_QUEUE. A new cascade FIREs on
    a complete chain (:func:`find_chain`). An active one stays (HOLD) while retry amplification or
    queue growth is not CLEAR; then CLEAR. The culprit named at onset is kept while its evidence holds
    (it is still a candidate, or still degraded); when its evidence no longer holds and another
    replica's does (:func:`renamed_chain`), the verdict is a FIRE naming the new culprit with
    ``figures["renamed_from"]``: the evaluator resolves the open cascade and fires this one.
    """
    current = lifecycle.get(RULE_CASCADE, "")
    sustained = levels.get(RULE_RETRY, Level.CLEAR) is not Level.CLEAR or levels.get(RULE_QUEUE, Level.CLEAR) is not Level.CLEAR
    if current is not None:
        replica = current.replica
        renamed = renamed_chain(fs, lifecycle, config, replica) if sustained and fs is not None else None
        if renamed is not None:
            return _fire(renamed, renamed_from=replica)
        culprit = "recovered"
        if fs is not None and replica in fs.replicas:
            speed = [v for v in fs.ratios[replica][:2] if v is not None]
            culprit = "still degraded" if speed and max(speed) >= config.cascade.speed_ratio else "recovered"
        if lifecycle.get(RULE_DEGRADATION, replica) is not None:
            culprit = "still degraded"
        figures = dict(current.figures)
        figures.update(culprit_status=culprit, retry_level=levels.get(RULE_RETRY, Level.CLEAR).value,
                       queue_level=levels.get(RULE_QUEUE, Level.CLEAR).value)
        level = Level.HOLD if sustained else Level.CLEAR
        summary = _summary(replica, figures["chain"], culprit)
        return Signal(RULE_CASCADE, "", level, "critical", summary, figures, replica=replica,
                      description=current.description, labels={"replica": replica})
    chain = find_chain(fs, lifecycle, config) if fs is not None else None
    if chain is None:
        return Signal(RULE_CASCADE, "", Level.CLEAR, "critical", "no cascade", {})
    return _fire(chain)


def renamed_chain(fs: FleetSeries, lifecycle: Lifecycle, config: AlertConfig, named: str) -> dict[str, Any] | None:
    """The chain of another culprit when an open cascade's evidence now points away from ``named``, else
    None (a cascade opened on a healthy replica kept naming it after the real culprit slowed).

    ``named`` keeps the cascade while it has evidence: still a culprit candidate on the current series
    (:func:`candidate`: its trigger is in the window and still stands out against its peers), its speed
    ratio at ``speed_ratio`` in the newest two buckets, or a degradation alert active on it; and while
    no data is left about it (absence of evidence is no recovery). Otherwise the culprit of the chain
    :func:`find_chain` finds among the other replicas, their retries counted as already sustained."""
    c = config.cascade
    if named not in fs.replicas or lifecycle.get(RULE_DEGRADATION, named) is not None:
        return None
    speed = [v for v in fs.ratios[named][:2] if v is not None]
    if (speed and max(speed) >= c.speed_ratio) or candidate(fs, named, c, fs.n - 1) is not None:
        return None
    return find_chain(fs, lifecycle, config, sustained=True, exclude=named)


def _fire(chain: dict[str, Any], renamed_from: str = "") -> Signal:
    replica = chain["replica"]
    figures = {"culprit": replica, "chain": chain["chain"], "candidates": chain["candidates"],
               "actions": actions(replica), "culprit_status": "degraded"}
    description = ("One replica slowed or failed on its own work, clients retried, and the other replicas' queues "
                   "grew: a cascading (possibly metastable) failure. The culprit is the replica whose own speed or "
                   "failures stepped up first while its load did not and its peers' did not; the evidence lists every "
                   "candidate. The alert stays firing while retries and queues stay elevated, even after the culprit "
                   "recovers. Suggested actions: " + " ".join(f"({i}) {a}" for i, a in enumerate(actions(replica), 1)))
    if renamed_from:
        figures["renamed_from"] = renamed_from
        description = (f"Re-named from {replica_label(renamed_from)}, whose evidence no longer holds (not slower "
                       f"than its peers, not failing more than them): the evidence now points at "
                       f"{replica_label(replica)}. " + description)
    return Signal(RULE_CASCADE, "", Level.FIRE, "critical", _summary(replica, chain["chain"], "degraded"), figures,
                  replica=replica, description=description, labels={"replica": replica})


def _summary(replica: str, chain: list[dict[str, Any]], culprit: str) -> str:
    parts = []
    for link in chain:
        t = link["started_at"][11:16]
        parts.append(f"{t} {link['summary']}")
    return f"Cascading degradation from {replica_label(replica)} ({culprit}): " + " -> ".join(parts)


def estimate_cost(store, start: datetime, end: datetime, config: AlertConfig) -> tuple[float | None, str, dict]:
    """Estimated waste of an incident over ``[start, end]`` in USD, the estimate's source, and details.

    Preferred: the cost engine's ``schema.queries.cost.waste_breakdown(store, start, end)`` (waste =
    everything but useful work: retry, failed-task, idle), source ``cost_engine``. Fallback (its
    tables absent or failing): fleet spend = replicas seen x ``gpus_per_replica`` x ``gpu_hour_usd``
    x hours, times the retry share of attempts (retries / attempts), source ``fallback_gpu_minutes``.
    Returns (None, "unavailable", {...}) when neither works. Never raises.
    """
    try:
        from schema.queries import cost as cost_queries  # built by the cost engine; optional here

        breakdown = cost_queries.waste_breakdown(store, start, end)
        waste = _waste_from_breakdown(breakdown)
        if waste is not None:
            return round(waste, 4), "cost_engine", {"waste_usd": round(waste, 4)}
    except Exception:  # absent module/tables, or another shape: fall back below
        pass
    try:
        usage = q.fleet_usage(store, start, end)
    except Exception as exc:  # the store may be the problem; the alert still goes out
        return None, "unavailable", {"error": str(exc)[:200]}
    c = config.cascade
    hours = max((end - start).total_seconds(), 0.0) / 3600.0
    replicas = max(usage.get("engine_replicas", 0), usage.get("gauge_replicas", 0))
    spend = replicas * c.gpus_per_replica * c.gpu_hour_usd * hours
    if usage.get("client_attempts"):
        share = usage["client_retries"] / usage["client_attempts"]
    elif usage.get("gateway_attempts"):
        share = usage["gateway_retries"] / usage["gateway_attempts"]
    else:
        share = 0.0
    details = {"replicas": replicas, "hours": round(hours, 4), "gpu_hour_usd": c.gpu_hour_usd,
               "fleet_spend_usd": round(spend, 4), "retry_share": round(share, 4)}
    return round(spend * share, 4), "fallback_gpu_minutes", details


def _waste_from_breakdown(breakdown) -> float | None:
    """Total waste USD from the cost engine's breakdown (a DataFrame or mapping of category -> USD)."""
    waste_categories = ("retry_waste", "failed_task_waste", "idle")
    try:
        if hasattr(breakdown, "to_dict"):  # DataFrame: either category/usd rows or one row of columns
            cols = list(breakdown.columns)
            if "category" in cols:
                usd_col = next(c for c in cols if c.endswith("usd") or c in ("cost", "spend"))
                parts = breakdown[breakdown["is_subset"] == 0] if "is_subset" in cols else breakdown
                if float(parts[usd_col].fillna(0).sum()) <= 0:
                    return None  # the cost jobs have not covered this period yet: use the fallback
                total = parts[parts["category"].isin(waste_categories)][usd_col].fillna(0).sum()
                return float(total)
            row = breakdown.iloc[0].to_dict() if len(breakdown) else {}
            return float(sum(float(v) for k, v in row.items() if any(k.startswith(w) for w in waste_categories)))
        if isinstance(breakdown, dict):
            return float(sum(float(v) for k, v in breakdown.items() if any(k.startswith(w) for w in waste_categories)))
    except Exception:
        return None
    return None
