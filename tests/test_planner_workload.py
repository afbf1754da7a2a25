"""Planner, workload extraction: the plans the simulator ran come back from the store (named queries
over the spans the real producers emitted), with the clients' retry behaviour and the fleet."""

from __future__ import annotations

from datetime import timedelta

import pytest

from planner.candidates import current_candidate
from planner.extract import extract_workload
from planner.workload import WorkloadError, resample
from planner_helpers import T0, measured_store
from schema import jobs
from schema.queries import planner as pq
from serving.emulator.faults import FaultEvent
from serving.emulator.fleet_sim import ReplicaSpec
from serving.plans import CallPlan, RetryPolicy, StepPlan, TaskPlan


def _plans():
    chat = TaskPlan("t-chat", "chat", "acme", 10.0, (StepPlan("respond", (CallPlan(300, 40),)),),
                    slo_ttft_ms=2000, slo_e2e_ms=60000)
    copilot = TaskPlan("t-copilot", "copilot", "globex", 20.5, (
        StepPlan("context", (CallPlan(900, 30),)),
        StepPlan("check_1", (CallPlan(500, 250), CallPlan(400, 200), CallPlan(600, 350))),  # not sorted: order kept
        StepPlan("edit_2", (CallPlan(1200, 60),)),
    ), slo_ttft_ms=1000, slo_e2e_ms=300000)
    agent = TaskPlan("t-agent", "research_agent", "acme", 35.25, (
        StepPlan("plan", (CallPlan(700, 50),)),
        StepPlan("search_1", (CallPlan(200, 10), CallPlan(220, 12))),
    ), priority="batch", slo_e2e_ms=1800000)
    return [chat, copilot, agent]


def _shape(plans):
    return [(p.task_id, p.task_type, p.tenant, p.priority, round(p.arrival_s, 6), p.slo_ttft_ms, p.slo_e2e_ms,
             [(s.name, [(c.prompt_tokens, c.output_tokens) for c in s.calls]) for s in p.steps])
            for p in plans]


def test_extracted_plans_are_the_plans_that_ran(store):
    plans = _plans()
    # max_num_seqs 2 and a scrape every second: the fan-out of 3 queues beside a full batch
    fleet = [ReplicaSpec("r0", max_num_seqs=2)]
    measured_store(store, plans, fleet, metrics_interval_s=1.0)
    w = extract_workload(store, T0, T0 + timedelta(hours=1))
    assert _shape(w.plans) == _shape(plans)
    assert w.hourly == (3,)
    assert (w.gateway_policy, w.gateway_retries, w.admission_rejections) == ("least_loaded", 1, 0)
    assert w.client.timeout_s == RetryPolicy().timeout_s and "assumed" in w.evidence["timeout_s"]
    assert w.client.give_up_after_failed_steps == 1 and w.client.abandon_after_s is None
    assert w.prefix_hit_rate == 0.0 and not w.prefix_sharing  # no shared prefix in these plans
    assert w.slos == {"chat": (2000.0, 60000.0), "copilot": (1000.0, 300000.0), "research_agent": (None, 1800000.0)}
    current, evidence = current_candidate(pq.replicas(store, T0, T0 + timedelta(hours=1)), policy=w.gateway_policy,
                                          gateway_retries=w.gateway_retries)
    assert [(p.gpu_type, p.count, p.profile, p.max_num_seqs) for p in current.pools] == [
        ("H100", 1, "h100-llama-3.1-8b", 2)]
    assert current.replica_ids == ("r0",) and evidence["r0.max_num_seqs"].startswith("measured")
    # the SLO file wins over the tasks' own budgets
    w2 = extract_workload(store, T0, T0 + timedelta(hours=1), slos={"chat": (500.0, None)})
    assert next(p for p in w2.plans if p.task_type == "chat").slo_ttft_ms == 500.0


def test_client_retry_behaviour_is_measured(store):
    # one replica 20x slower: its prefill still ends within the 2 s timeout (the gateway reads the
    # prompt's usage from the first chunk), its 300-token decode does not: every attempt times out
    # after 2 s, the client tries 3 times with full jitter (base 0.4 s) and the task fails on its
    # first failed step
    plans = [TaskPlan(f"t{i}", "chat", "acme", 5.0 + 7 * i, (StepPlan("respond", (CallPlan(800, 300),)),))
             for i in range(6)]
    policy = RetryPolicy(max_attempts=3, backoff_base_s=0.4, backoff_max_s=0.8, timeout_s=2.0)
    measured_store(store, plans, [ReplicaSpec("r0")], retry_policy=policy,
                   faults=[FaultEvent(0.0, "r0", "slowdown", 20.0)], seed=3)
    w = extract_workload(store, T0, T0 + timedelta(hours=1))
    assert w.client.timeout_s == pytest.approx(2.0, abs=1e-6)  # median length of the timed-out attempts
    assert w.client.max_attempts == 3
    assert w.evidence["backoff"].startswith("measured: 6 gaps")
    assert 0 < w.client.backoff_base_s <= 0.8  # 2 x mean of uniform(0, 0.4) draws
    assert w.client.give_up_after_failed_steps == 1
    # the failed calls keep their prompt (the gateway attempt's usage: vLLM 0.32 exports no span for
    # an aborted request); their output was cut by the timeout
    assert all(p.steps[0].calls[0].prompt_tokens == 800 for p in w.plans)


def test_resample_keeps_the_hourly_shape_and_changes_arrivals(store):
    plans = [TaskPlan(f"t{i}", "chat", "acme", 60.0 * i, (StepPlan("respond", (CallPlan(100, 5),)),))
             for i in range(40)]
    measured_store(store, plans, [ReplicaSpec("r0")])
    w = extract_workload(store, T0, T0 + timedelta(hours=1))
    again = resample(w, seed=1)
    assert resample(w, seed=1) == again  # reproducible
    assert abs(len(again) - 40) <= 20 and {p.task_type for p in again} == {"chat"}
    assert [p.arrival_s for p in again] != [p.arrival_s for p in w.plans]
    assert all(0 <= p.arrival_s < 3600 for p in again)


def test_a_task_still_running_at_the_period_end_is_not_in_its_workload(store):
    # t-early runs at 10 s; t-late starts at 3595 s and decodes 2,000 tokens at about 6 ms a step (the
    # profile's base step time), so its root ends about 12 s later, after the hour. The jobs run
    # over the hour, then over the next (as the periodic chain does when it reaches that minute): the
    # hour's workload is t-early alone both times, not one task more once the next hour is computed.
    plans = [TaskPlan("t-early", "chat", "acme", 10.0, (StepPlan("respond", (CallPlan(300, 40),)),)),
             TaskPlan("t-late", "chat", "acme", 3595.0, (StepPlan("respond", (CallPlan(300, 2000),)),))]
    measured_store(store, plans, [ReplicaSpec("r0")])
    period = (T0, T0 + timedelta(hours=1))
    before = extract_workload(store, *period)
    jobs.run_jobs(store, start=T0 + timedelta(hours=1), end=T0 + timedelta(hours=2))
    late = pq.workload_tasks(store, T0, T0 + timedelta(hours=2))
    assert list(late["task_id"]) == ["t-early", "t-late"]  # t-late's row exists now, in the next hour
    after = extract_workload(store, *period)
    assert [p.task_id for p in before.plans] == [p.task_id for p in after.plans] == ["t-early"]
    assert before.hourly == after.hourly == (1,)


def test_an_empty_period_is_a_clear_error(store):
    with pytest.raises(WorkloadError, match="no task started"):
        extract_workload(store, T0, T0 + timedelta(hours=1))
