"""The product against real vLLM 0.32 (CPU), checked against what the client saw.

One workload (tests/vllm/workload.py: streaming and not, usage on, max_tokens hits, n=2, shared
prefixes, a capped prompt, a prompt over the context, a client abort, a retried call) through the
task SDK -> gateway -> real vLLM; spans to the receiver, /metrics through the scraper; then the
cost jobs over the run. Each test is one check of the product against the client's view.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta, timezone

import pytest

from tests.conftest import ARTIFACTS
from tests.vllm.workload import ABORT_MAX_TOKENS, run_workload

KNOWN_FINISH = {"stop", "length", "repetition"}
W_PREFILL, W_DECODE = 0.25, 1.0  # fleet defaults (fleet.example.yaml allocation weights)


@pytest.fixture(scope="module")
def run(stack):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    t0 = datetime.now(timezone.utc)
    seen = run_workload(stack)
    stack.flush()
    from schema.jobs import run_jobs

    start = t0 - timedelta(minutes=2)
    end = datetime.now(timezone.utc) + timedelta(minutes=1)
    run_jobs(stack.store, start=start, end=end)
    (ARTIFACTS / "test_vllm_seen.json").write_text(json.dumps([vars(s) for s in seen], indent=1))
    return {"seen": seen, "start": start.replace(second=0, microsecond=0), "end": end, "t0": t0}


def q(store, sql, params=None):
    r = store.query(sql, params or {}, tag="test.vllm")
    return [dict(zip(r.column_names, row)) for row in r.result_rows]


def calls(store, trace_ids):
    """Resolved calls (call_costs pieces summed per call) of these traces."""
    return q(store, """
        SELECT call_id, trace_id, any(call_source) AS source, any(task_id) AS tid,
               any(task_attempt) AS att, any(status) AS st, any(error_type) AS et,
               any(finish_reason) AS fr, sum(prompt_tokens) AS prompt, sum(cached_tokens) AS cached,
               sum(output_tokens) AS output, sum(work) AS work, sum(cost_usd) AS cost, any(replica) AS rep,
               any(model) AS mdl
        FROM call_costs WHERE trace_id IN {t:Array(String)} GROUP BY call_id, trace_id""", {"t": list(trace_ids)})


def by_case(run, case):
    return [s for s in run["seen"] if s.case == case]


def test_the_workload_ran_as_intended(run):
    seen = run["seen"]
    ok = {s.case for s in seen if s.ok}
    assert ok >= {"stream", "unary", "max_tokens", "n2", "prefix", "capped", "retried"}, [vars(s) for s in seen]
    (too_long,) = by_case(run, "too_long")
    assert (too_long.ok, too_long.error_type, too_long.attempts) == (False, "http.400", 1)
    (abort,) = by_case(run, "abort")
    assert (abort.ok, abort.error_type) == (False, "cancelled")
    (capped,) = by_case(run, "capped")
    assert capped.finish_reasons == ["length"] and capped.input_tokens + capped.output_tokens == 1024
    (retried,) = by_case(run, "retried")
    assert retried.attempts == 2
    assert sum(s.cached_tokens or 0 for s in by_case(run, "prefix")) >= 3 * 384


def test_every_engine_request_is_a_call(run, stack):
    """Each llm_request span (grouped by parent: n=2 gives two) is exactly one resolved call."""
    traces = [s.trace_id for s in run["seen"]]
    engine = q(stack.store, """
        SELECT ParentSpanId AS parent, count() AS spans, groupArray(SpanId) AS ids, any(TraceId) AS trace
        FROM otel_traces WHERE SpanName = 'llm_request' AND TraceId IN {t:Array(String)} GROUP BY ParentSpanId""",
              {"t": traces})
    resolved = calls(stack.store, traces)
    engine_calls = [c for c in resolved if c["source"] == "engine"]
    assert len(engine) == len(engine_calls), (engine, engine_calls)
    covered = {c["call_id"] for c in engine_calls}
    assert all(set(e["ids"]) & covered for e in engine), "an engine request with no call"
    # The client's successful calls and the engine requests match one to one.
    ok = [s for s in run["seen"] if s.ok]
    late = finished_before_abort(run, stack)
    by_trace = {s.trace_id: s for s in run["seen"]}
    assert len(engine) == len(ok) + len(late), ("engine requests of calls the client did not see succeed: "
                                                + repr([by_trace[e["trace"]] for e in engine
                                                        if not by_trace[e["trace"]].ok]))
    assert sorted(e["spans"] for e in engine if by_trace[e["trace"]].ok) == sorted(s.n for s in ok)


def finished_before_abort(run, stack) -> list[dict]:
    """The aborted call's engine request when vLLM generated all of it before the abort reached it.

    vLLM 0.32 exports no span for a request it aborted, so an engine span under the aborted call
    means the race was lost: the client left after the engine had finished (the tiny model on a quiet
    host generates the 900 tokens in ~2 s; the gateway, the receiver and the client share this test's
    interpreter, and an insert holding it can delay the abort by that much). Then the span must be
    the whole generation; anything else is a defect."""
    (abort,) = by_case(run, "abort")
    rows = q(stack.store, """SELECT toUInt32OrZero(SpanAttributes['gen_ai.usage.completion_tokens']) AS output
                             FROM otel_traces WHERE SpanName = 'llm_request' AND TraceId = {t:String}""",
             {"t": abort.trace_id})
    assert all(r["output"] == ABORT_MAX_TOKENS for r in rows), ("an aborted request's span that is not a "
                                                                 "whole generation", rows)
    if rows:
        print(f"[test-vllm] the abort reached vLLM after it finished ({ABORT_MAX_TOKENS} tokens): costed as a "
              "whole generation")
    return rows


def _ok_calls(run, stack):
    seen = {s.trace_id: s for s in run["seen"] if s.ok}
    rows = [c for c in calls(stack.store, seen) if c["source"] == "engine"]
    return [(seen[c["trace_id"]], c) for c in rows]


def test_tokens_equal_usage(run, stack):
    pairs = _ok_calls(run, stack)
    assert len(pairs) == sum(1 for s in run["seen"] if s.ok)
    wrong = [(s.case, s.input_tokens, c["prompt"], s.output_tokens, c["output"]) for s, c in pairs
             if (c["prompt"], c["output"]) != (s.input_tokens, s.output_tokens)]
    assert not wrong, "(case, usage prompt, call prompt, usage output, call output): " + repr(wrong)


def test_cached_tokens_reach_the_cost(run, stack):
    pairs = [(s, c) for s, c in _ok_calls(run, stack) if s.cached_tokens]
    assert len(pairs) >= 3
    for s, c in pairs:
        assert c["cached"] == s.cached_tokens, (s.case, s.cached_tokens, c["cached"])
        expect = W_PREFILL * (s.input_tokens - s.cached_tokens) + W_DECODE * s.output_tokens
        assert math.isclose(c["work"], expect, rel_tol=1e-9), (s.case, c["work"], expect)


def test_finish_reasons_are_known(run, stack):
    pairs = _ok_calls(run, stack)
    assert {c["fr"] for _, c in pairs} <= KNOWN_FINISH, [c["fr"] for _, c in pairs]
    wrong = [(s.case, s.finish_reasons, c["fr"]) for s, c in pairs if c["fr"] != s.finish_reasons[0]]
    assert not wrong, wrong
    # The live-ops finish-reasons panel (its named query) over the run: no 'unknown' share.
    from schema.queries import ops

    # from t0 exactly: the fidelity test's emulated replicas (no gateway in front, so no finish reason
    # to recover) served in the same store until just before the workload started
    panel = ops.finish_reasons(stack.store, run["t0"], datetime.now(timezone.utc))
    # An aborted call vLLM finished anyway has no finish reason when the gateway cut the stream as the
    # client left (no span attribute, no last chunk); when the gateway had relayed it all first, it
    # has the gateway's: at most that one 'unknown'.
    unknown = int(panel.loc[panel["finish_reason"] == "unknown", "requests"].sum())
    assert unknown <= len(finished_before_abort(run, stack)), panel.to_dict("records")
    assert set(panel["finish_reason"]) - {"unknown"} <= KNOWN_FINISH, panel.to_dict("records")


def client_tokens_received(store, trace_id) -> int:
    """Output tokens the SDK saw before the client gave up (its span's gen_ai.client.tokens_received)."""
    (r,) = q(store, """SELECT toUInt32(SpanAttributes['gen_ai.client.tokens_received']) AS n FROM otel_traces
                       WHERE TraceId = {t:String} AND SpanName LIKE 'chat %'""", {"t": trace_id})
    return r["n"]


def test_aborted_call_is_costed(run, stack):
    (abort,) = by_case(run, "abort")
    received = client_tokens_received(stack.store, abort.trace_id)
    assert received > 0, "the client saw tokens before it gave up"
    rows = calls(stack.store, [abort.trace_id])
    assert len(rows) == 1, rows
    (c,) = rows
    assert c["rep"] == "replica-0"
    assert c["output"] >= received
    assert c["prompt"] > 0, "the aborted request's prefill is GPU work too"
    assert c["cost"] > 0


def test_rejected_and_aborted_calls_are_client_errors(run, stack):
    """A 400 (prompt over the context) and a client disconnect are not replica errors."""
    cols = {r["name"] for r in q(stack.store, "SELECT name FROM system.columns WHERE database = currentDatabase() "
                                              "AND table = 'llm_calls'")}
    assert "error_class" in cols, "llm_calls.error_class (the error taxonomy) is missing"
    got = {}
    for case in ("too_long", "abort"):
        (s,) = by_case(run, case)
        got[case] = {r["call_source"]: r["error_class"] for r in q(stack.store, """
            SELECT call_source, error_class FROM llm_calls WHERE trace_id = {t:String} AND call_source != 'engine'""",
                                                          {"t": s.trace_id})}
    assert set(got["too_long"].values()) == {"client_error"}, got
    assert got["abort"]["client"] == "client_cancel", got
    # The gateway's attempt is a client_cancel too, unless vLLM finished first and the gateway relayed
    # the whole answer before the client left (finished_before_abort): then the attempt was a success.
    allowed = {"client_cancel", ""} if finished_before_abort(run, stack) else {"client_cancel"}
    assert got["abort"]["gateway"] in allowed, got


def test_costs_conserve(run, stack):
    from schema.queries import cost

    s = cost.period_summary(stack.store, run["start"], run["end"]).iloc[0]
    assert s["spend_usd"] > 0
    assert math.isclose(s["allocated_usd"] + s["idle_usd"], s["spend_usd"], rel_tol=1e-9)
    # every category of allocated spend (unspanned engine work too, where the cost model reports it)
    parts = (s["useful_usd"] + s["retry_waste_usd"] + s["failed_task_waste_usd"] + s["pending_usd"]
             + s["unattributed_usd"] + s.get("unspanned_usd", 0.0))
    assert math.isclose(parts, s["allocated_usd"], rel_tol=1e-9, abs_tol=1e-12), dict(s)
    # The failed tasks (400, abort) and the retried call's failed attempt are waste, not useful.
    assert s["failed_task_waste_usd"] > 0


def test_model_and_replica_on_engine_rows(run, stack):
    rows = q(stack.store, """SELECT DISTINCT model, replica, gpu_type FROM llm_calls
                            WHERE call_source = 'engine' AND start_time >= {s:DateTime64(9)}""",
             {"s": run["t0"]})  # not before: the fidelity test's emulated replicas served until just before
    assert rows == [{"model": stack.model, "replica": "replica-0", "gpu_type": "CPU"}]


def test_metrics_scraped_from_real_vllm(run, stack):
    names = {r["MetricName"] for t in ("gauge", "sum", "histogram") for r in q(
        stack.store, f"SELECT DISTINCT MetricName FROM otel_metrics_{t} WHERE MetricName LIKE 'vllm:%'")}
    assert {"vllm:num_requests_running", "vllm:prompt_tokens", "vllm:prompt_tokens_cached",
            "vllm:request_success", "vllm:time_to_first_token_seconds", "vllm:admission_rejections"} <= names
    prompt = q(stack.store, """SELECT max(Value) AS v FROM otel_metrics_sum WHERE MetricName = 'vllm:prompt_tokens'
                              AND ResourceAttributes['service.instance.id'] = 'replica-0'""")[0]["v"]
    # Every prompt token of the run's engine requests (aborted ones included) is in the counter.
    seen_prompt = sum((s.input_tokens or 0) * s.n for s in run["seen"] if s.ok)
    assert prompt >= seen_prompt


def test_dashboard_live_tiles_and_cost_page_render(run, stack, artifacts):
    from tests.vllm.browser import render_pages

    texts = render_pages(stack.store, artifacts, {"live": "?range=15m", "cost": "cost?range=1h"})
    assert "Requests/s" in texts["live"] and "TTFT p50" in texts["live"]
    assert "Nothing to show yet" not in texts["live"]
    assert "Cost per successful task" in texts["cost"] or "CPST" in texts["cost"], texts["cost"][:2000]
    for name, body in texts.items():
        for bad in ("Traceback (most recent call last)", "StreamlitAPIException", "Error running app"):
            assert bad not in body, (name, body[:3000])

