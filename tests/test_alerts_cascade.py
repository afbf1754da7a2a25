"""The cascade's culprit on hand-made series rows: an overloaded fleet with no replica
slower than its peers is no cascade; the replica that then slows is named; an open cascade whose
evidence now points at another replica is re-named; a replica timing out a little at its normal speed
before it slows is named from the slowdown. Figures computed by hand."""

from __future__ import annotations

from datetime import timedelta

import pytest

from alerts import cascade, series
from alerts.config import AlertConfig
from alerts.lifecycle import Lifecycle
from alerts.model import RULE_CASCADE, RULE_QUEUE, RULE_RETRY, Alert, Level, State
from tests.alerts_helpers import T0

N = 12  # buckets, 0 = newest
SPEED = {"H100": (0.01, 4e-5), "A100": (0.02, 8e-5)}  # decode s/token, prefill s/prompt token
FLEET = {"r0": "H100", "r1": "H100", "r2": "H100", "r3": "A100", "r4": "A100"}


def _fleet(overload_from: int | None = 9, r4_late: int = 0, slow: str | None = None, slow_from: int = 1,
           retry_after_slow: int = 30, n: int = N):
    """3 H100 + 2 A100, 100 attempts a bucket each, every one answered, nothing waiting. From bucket
    ``overload_from`` on (newest-first index) the fleet is overloaded: 130 attempts a bucket each (the
    retries), the A100s answer 40 and clients give up on 90 (r4 from ``r4_late`` buckets later: two
    identical replicas tip over a minute or two apart), 20 requests waiting on each A100; every replica
    runs at its GPU type's speed; the fleet's retries 0 -> 30 per 100 first attempts. ``slow``: that
    replica 5x slower from bucket ``slow_from`` on: 2 calls answered of 130 (too few for a speed figure),
    30 requests waiting on it and 25 on each other H100, retries then ``retry_after_slow`` per 100."""
    rows, fleet = [], []
    for b in range(n):
        over = overload_from is not None and b <= overload_from
        slowed = slow is not None and b <= slow_from
        for name, gpu in FLEET.items():
            itl, pre = SPEED[gpu]
            row = {"replica": name, "bucket": b, "gpu_type": gpu, "requests": 100, "itl_p50_s": itl, "itl_samples": 100,
                   "prefill_tok_p50_s": pre, "prefill_samples": 100, "attempts": 100, "gw_ok": 100,
                   "waiting_mean": 0.0, "waiting_min": 0.0}
            if over:
                row.update(attempts=130, gw_ok=130, requests=130, itl_samples=130, prefill_samples=130)
                if gpu == "A100" and (name != "r4" or b <= overload_from - r4_late):
                    row.update(gw_ok=40, gw_abandoned=90, requests=40, itl_samples=40, prefill_samples=40,
                               waiting_mean=20.0, waiting_min=12.0)
            if slowed and name == slow:
                row.update(gw_ok=2, gw_abandoned=128, requests=2, itl_samples=2, prefill_samples=2,
                           itl_p50_s=itl * 5, prefill_tok_p50_s=pre * 5, waiting_mean=30.0, waiting_min=25.0)
            elif slowed and gpu == "H100":
                row.update(waiting_mean=25.0, waiting_min=5.0)
            rows.append(row)
        retries = (retry_after_slow if slowed else 30 if over else 0)
        fleet.append({"bucket": b, "client_attempts": 500 + 5 * retries, "client_retries": 5 * retries})
    return series.build(T0, 60, n, rows, fleet)


def test_an_overloaded_fleet_without_a_slower_replica_is_no_cascade():
    """Before any fault the A100s time out (blind routing fills them first), retries go up
    30%, queues grow: the old rule named an A100 (its abandonment stepped up, its load no more than the
    fleet's) as the culprit of a cascade. Against its own GPU type it times out alike: no candidate."""
    c = AlertConfig().cascade
    fs = _fleet()
    for name in FLEET:
        assert cascade.candidate(fs, name, c, N - 1) is None
    # r3 against r4 in the onset buckets 9 and 8: 90 given up on of 130 each -> 69% alike
    assert cascade.comparison_peers(fs, "r3") == ["r4"] and cascade.comparison_peers(fs, "r1") == ["r0", "r2"]
    assert cascade.stands_out(fs, "r3", "abandoned", 9, c) == {"stands_out": False, "own_rate": 0.692,
                                                               "peers_rate": 0.692, "bucket": 8}
    assert cascade.find_chain(fs, Lifecycle(180), AlertConfig()) is None
    # r4 tips over two minutes after r3: in r3's onset buckets (9, 8) r4 answered everything, so r3
    # stands out by its share; but its speed on its own work is known and its type's (0.02 s/token, its
    # own baseline): queueing, not slowness -> still no candidate
    late = _fleet(r4_late=2)
    assert cascade.stands_out(late, "r3", "abandoned", 9, c) == {"stands_out": True, "own_rate": 0.692,
                                                                 "peers_rate": 0.0, "bucket": 8}
    assert cascade._speed_normal(late, "r3", 9, c) is True
    assert cascade.candidate(late, "r3", c, N - 1) is None
    assert cascade.find_chain(late, Lifecycle(180), AlertConfig()) is None
    # the same before r3 has a baseline of its own (a run 6 minutes old): judged against its type's other
    # replica in each bucket (0.02 / 0.02)
    young = _fleet(overload_from=4, r4_late=2, n=6)
    assert young.ratios["r3"] == [None] * 6 and young.thin_ratios["r3"] == [None] * 6
    assert cascade._bucket_speed(young, "r3", 4) == pytest.approx(1.0) and cascade._speed_normal(young, "r3", 4, c)


def test_the_replica_that_slows_in_an_overloaded_fleet_is_the_one_named():
    """The same fleet, then r1 (an H100) 5x slower from bucket 1: 2 of its 130 attempts answered (no
    speed figure: aborted requests export no span), 98% given up on while its H100 peers answer all."""
    c = AlertConfig().cascade
    fs = _fleet(slow="r1", retry_after_slow=70)
    cand = cascade.candidate(fs, "r1", c, N - 1)
    assert (cand["evidence"], cand["onset"], cand["compared_with"], cand["peers_rate"]) == (
        "abandoned", 1, ["r0", "r2"], 0.0)
    assert (cand["abandoned_rate_before"], cand["abandoned_rate_after"]) == (0.0, pytest.approx(128 / 130, abs=1e-3))
    # the A100s are no candidates, r1 the only one
    assert [n for n in FLEET if cascade.candidate(fs, n, c, N - 1)] == ["r1"]
    # its chain: retries 30% -> 70% (2.3x) from bucket 1, the other replicas' waiting 40 (the A100s) ->
    # 90 (the H100s' 25 each) from bucket 1
    chain = cascade.find_chain(fs, Lifecycle(180), AlertConfig())
    assert chain["replica"] == "r1" and [x["replica"] for x in chain["candidates"]] == ["r1"]
    assert [(link["step"], link["started_at"][11:16], link["summary"]) for link in chain["chain"]] == [
        ("trigger", "11:58", "replica r1 timed out or lost 98% of its attempts (was 0%) with its load x1.00"),
        ("sustaining", "11:58", "fleet retries per first attempt 30.0% -> 70.0%"),
        ("pressure", "11:58", "requests waiting on the other replicas 40 -> 90")]


def _open_cascade(replica: str, started: int) -> Alert:
    """A firing cascade naming ``replica`` (as the previous rule opened one on a healthy A100 of an
    overloaded fleet, restored from the saved state after an upgrade)."""
    at = T0 - timedelta(minutes=started)
    chain = [{"step": "trigger", "rule": "", "replica": replica, "started_at": at.isoformat(),
              "summary": f"replica {replica} timed out or lost 69% of its attempts (was 0%)", "figures": {}}]
    return Alert(RULE_CASCADE, "", "critical", replica, State.FIRING, started_at=at, fired_at=at,
                 figures={"culprit": replica, "chain": chain, "candidates": [], "actions": []}, notified=True)


def test_an_open_cascade_whose_evidence_points_elsewhere_is_renamed():
    config = AlertConfig()
    levels = {RULE_RETRY: Level.FIRE, RULE_QUEUE: Level.HOLD}
    lc = Lifecycle(180)
    lc.active[(RULE_CASCADE, "")] = _open_cascade("r3", 7)
    # overloaded, nobody slower than its peers: r3 has no evidence, nobody else has either -> kept
    kept = cascade.cascade_signal(_fleet(), lc, T0, config, levels)
    assert (kept.level, kept.replica, kept.figures.get("renamed_from")) == (Level.HOLD, "r3", None)
    # r1 slowed: the evidence points at r1 (its retries already sustained: no retry step of its own
    # needed; pressure: the H100s' queues filling) -> FIRE naming r1, re-named from r3
    fs = _fleet(slow="r1", retry_after_slow=35)
    assert cascade.find_chain(fs, lc, config) is None  # 30% -> 35% is no retry step: no new cascade
    renamed = cascade.cascade_signal(fs, lc, T0, config, levels)
    assert (renamed.level, renamed.replica, renamed.figures["renamed_from"]) == (Level.FIRE, "r1", "r3")
    assert renamed.description.startswith("Re-named from replica r3, whose evidence no longer holds")
    assert [link["step"] for link in renamed.figures["chain"]] == ["trigger", "sustaining", "pressure"]
    assert renamed.figures["chain"][1]["summary"] == "fleet retries per first attempt at 35.0% (already elevated)"
    # a culprit whose evidence still holds is kept: an open cascade naming r1 stays on r1 (HOLD)
    lc.active[(RULE_CASCADE, "")] = _open_cascade("r1", 2)
    held = cascade.cascade_signal(fs, lc, T0, config, levels)
    assert (held.level, held.replica) == (Level.HOLD, "r1")
    # and nothing is re-named once retries and queues are back (the cascade is clearing)
    lc.active[(RULE_CASCADE, "")] = _open_cascade("r3", 7)
    clearing = cascade.cascade_signal(fs, lc, T0, config, {RULE_RETRY: Level.CLEAR, RULE_QUEUE: Level.CLEAR})
    assert (clearing.level, clearing.replica) == (Level.CLEAR, "r3")


def _wobble_then_slow():
    """Every replica 100 attempts a bucket, all answered at its type's speed, except the A100 r3: in
    buckets 6..3 it times out on 12 (its speed known and normal: 88 answered), from bucket 2 on it
    answers 3 and times out on 97 (too few answers for a speed figure)."""
    rows = []
    for b in range(N):
        for name, gpu in FLEET.items():
            itl, pre = SPEED[gpu]
            row = {"replica": name, "bucket": b, "gpu_type": gpu, "requests": 100, "itl_p50_s": itl, "itl_samples": 100,
                   "prefill_tok_p50_s": pre, "prefill_samples": 100, "attempts": 100, "gw_ok": 100,
                   "waiting_mean": 0.0, "waiting_min": 0.0}
            if name == "r3" and 3 <= b <= 6:
                row.update(gw_ok=88, gw_abandoned=12, requests=88, itl_samples=88, prefill_samples=88)
            elif name == "r3" and b <= 2:
                row.update(gw_ok=3, gw_abandoned=97, requests=3, itl_samples=3, prefill_samples=3)
            rows.append(row)
    return series.build(T0, 60, N, rows, [{"bucket": b, "client_attempts": 500, "client_retries": 0} for b in range(N)])


def test_timeouts_at_normal_speed_do_not_hide_the_slowdown_after_them():
    """r3's abandonment first steps up at bucket 6 (0 -> 12%): it stands out against r4 (0%), but its
    speed is known and normal then (queueing), so that step is not its own, nor are the later onsets of
    the same 12% (buckets 5, 4 and 3: a 12% level the rejected step already reached). From bucket 2 it
    times out on 97%, 3 x 12% and more, with no speed figure: its own step, before 0 (the median of
    five 0s and four 12%s), after 97%, its load x1.00."""
    c = AlertConfig().cascade
    fs = _wobble_then_slow()
    cand = cascade.candidate(fs, "r3", c, N - 1)
    assert (cand["evidence"], cand["onset"], cand["abandoned_rate_before"], cand["abandoned_rate_after"],
            cand["peers_rate"], cand["load_ratio"]) == ("abandoned", 2, 0.0, 0.97, 0.0, 1.0)
    assert [n for n in FLEET if cascade.candidate(fs, n, c, N - 1)] == ["r3"]
