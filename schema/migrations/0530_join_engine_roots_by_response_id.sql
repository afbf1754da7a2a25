-- One call, never two: a client's GenAI call span (the OpenTelemetry GenAI instrumentation,
-- OpenLLMetry) and the vLLM request it caused are one call even when the client propagates no
-- traceparent, so that vLLM's llm_request span is the root of a trace of its own. job_resolved_calls
-- (0520's) joins such an engine span to the client span whose gen_ai.response.id equals its
-- gen_ai.request.id; the call's fields come from the best evidence as before (engine > gateway >
-- client), its trace is the client's. The view keeps its columns: the chain needs no pause.

CREATE OR REPLACE VIEW job_resolved_calls AS
WITH
    {ws:DateTime} AS ws,
    {we:DateTime} AS we,
    (SELECT argMax(w_prefill, synced_at) FROM cost_settings) AS w_prefill,
    (SELECT argMax(w_decode, synced_at) FROM cost_settings) AS w_decode,
    (SELECT argMax(max_call_s, synced_at) FROM cost_settings) AS max_call_s,
    ws - toIntervalSecond(max_call_s + 60) AS lo,
    -- prefix-cache hit rates from the engine counters, per replica-minute
    hits AS (SELECT replica AS h_replica, minute AS h_minute, hit_rate AS h_rate, prompt_increase AS h_prompt
             FROM job_engine_counters(ws = {ws:DateTime}, we = {we:DateTime}) WHERE hit_rate IS NOT NULL),
    -- The cached prompt tokens the spans reported, and the prompt tokens of the calls that reported
    -- them, per replica and minute (the call's start minute): one count per call (the rows of a call
    -- share its key; the engine row's count first, else its gateway attempt's, as resolution takes it).
    -- A narrow read of the rows that carry a count, not a second pass over the calls.
    reports AS (
        SELECT rp_replica, rp_minute, sum(rp_prompt) AS rp_prompt, sum(rp_cached) AS rp_cached
        FROM (SELECT argMax(tuple(replica, toStartOfMinute(start_time), ifNull(prompt_tokens, 0), cached_tokens),
                            call_source = 'engine') AS rp,
                     rp.1 AS rp_replica, rp.2 AS rp_minute, toUInt64(rp.3) AS rp_prompt,
                     toUInt64(least(assumeNotNull(rp.4), rp.3)) AS rp_cached
              FROM llm_calls
              WHERE start_time >= lo AND start_time < we AND cached_tokens IS NOT NULL AND replica != ''
                AND call_source IN ('engine', 'gateway')
              GROUP BY cityHash64(trace_id, if(call_source = 'engine' AND parent_span_id != '', parent_span_id, span_id)))
        GROUP BY rp_replica, rp_minute
    ),
    -- Per replica-minute: the counters' rate and prompt tokens (minutes with a rate), what the spans
    -- reported, and the replica's sums over the window; plus one row per replica before any call's
    -- minute with the window's sums alone (each counter row also yields it; grouping merges them), so
    -- that the ASOF join below finds a row for every call on a replica with a rate. Scalars per call,
    -- the counters and reports each read once.
    evidence AS (
        SELECT ev_replica, ev_minute, ev_rate, ev_prompt, ev_rep_prompt, ev_rep_cached,
               sumIf(ev_rate * ev_prompt, ev_has_rate) OVER w AS ev_w_hits,
               sumIf(ev_prompt, ev_has_rate) OVER w AS ev_w_prompt,
               ev_w_hits / nullIf(ev_w_prompt, 0) AS ev_w_rate,
               sumIf(ev_rep_prompt, ev_minute >= ws) OVER w AS ev_w_rep_prompt,
               sumIf(ev_rep_cached, ev_minute >= ws) OVER w AS ev_w_rep_cached,
               ev_has_rate, ev_first
        FROM (SELECT e_replica AS ev_replica, e_minute AS ev_minute, anyIf(e_rate, e_kind = 1) AS ev_rate,
                     sumIf(e_prompt, e_kind = 1) AS ev_prompt, sumIf(e_rep_prompt, e_kind = 2) AS ev_rep_prompt,
                     sumIf(e_rep_cached, e_kind = 2) AS ev_rep_cached, countIf(e_kind = 1) > 0 AS ev_has_rate,
                     countIf(e_kind = 0) > 0 AS ev_first
              FROM (SELECT h_replica AS e_replica, arrayJoin([(h_minute, 1), (toStartOfMinute(lo) - INTERVAL 1 MINUTE, 0)]) AS e,
                           e.1 AS e_minute, e.2 AS e_kind, h_rate AS e_rate, h_prompt AS e_prompt,
                           toUInt64(0) AS e_rep_prompt, toUInt64(0) AS e_rep_cached
                    FROM hits
                    UNION ALL
                    SELECT rp_replica, (rp_minute, 2), rp_minute, 2, NULL, 0, rp_prompt, rp_cached FROM reports)
              GROUP BY ev_replica, ev_minute)
        WINDOW w AS (PARTITION BY ev_replica)
        QUALIFY ev_has_rate OR ev_first
    ),
    gw_requests AS (
        SELECT trace_id, span_id, parent_span_id FROM gateway_requests WHERE start_time >= lo AND start_time < we
    ),
    covered AS (
        SELECT c.trace_id AS cv_trace_id, g.span_id AS cv_request, c.ttft_s AS cv_ttft, c.error_class AS cv_class,
               c.model AS cv_model, c.finish_reason AS cv_finish
        FROM llm_calls AS c
        INNER JOIN gw_requests AS g ON g.trace_id = c.trace_id AND g.parent_span_id = c.span_id
        WHERE c.call_source = 'client' AND c.start_time >= lo AND c.start_time < we
    ),
    -- vLLM spans that are roots of their own trace (the client sent no traceparent, as today's openai
    -- client does not), each joined to the one client call span whose gen_ai.response.id is its
    -- gen_ai.request.id: the engine request is that call's, in the client's trace, never a second
    -- call. A request id that two client spans claim stays unjoined (no guess). n > 1: every choice's
    -- span joins the same call.
    adopted AS (
        SELECT a_trace, a_span, to_trace, to_span
        FROM (
            SELECT groupArrayIf((trace_id, span_id), call_source = 'engine') AS engines,
                   anyIf(trace_id, call_source = 'client') AS to_trace,
                   anyIf(span_id, call_source = 'client') AS to_span
            FROM llm_calls
            WHERE start_time >= lo AND start_time < we AND request_id != ''
              AND (call_source = 'client' OR (call_source = 'engine' AND parent_span_id = ''))
            GROUP BY request_id
            HAVING countIf(call_source = 'client') = 1 AND length(engines) > 0
        )
        ARRAY JOIN engines.1 AS a_trace, engines.2 AS a_span
    ),
    units AS (
        SELECT
            any(if(a.to_trace != '', a.to_trace, l.trace_id)) AS u_trace_id,
            -- one 64-bit key per (trace, unit): hashing two strings once is cheaper than grouping by them
            cityHash64(if(a.to_trace != '', a.to_trace, l.trace_id),
                       multiIf(a.to_trace != '', a.to_span,
                               call_source = 'engine' AND parent_span_id != '', parent_span_id, span_id)) AS unit_key,
            countIf(call_source = 'engine') AS n_engine,
            minIf(span_id, call_source = 'engine') AS e_id,
            anyIf(replica, call_source = 'engine') AS e_replica,
            anyIf(gpu_type, call_source = 'engine') AS e_gpu_type,
            anyIf(model, call_source = 'engine' AND model != '' AND model_scraped = 0) AS e_model,
            anyIf(model, call_source = 'engine' AND model_scraped = 1) AS e_model_scraped,
            maxIf(prompt_tokens, call_source = 'engine') AS e_prompt,
            maxIf(cached_tokens, call_source = 'engine') AS e_cached,
            sumIf(ifNull(output_tokens, 0), call_source = 'engine') AS e_output,
            countIf(call_source = 'engine' AND output_tokens IS NOT NULL) AS e_outputs,
            minIf(ttft_s, call_source = 'engine') AS e_ttft,
            maxIf(e2e_s, call_source = 'engine') AS e_e2e,
            anyIf(finish_reason, call_source = 'engine' AND finish_reason != '') AS e_finish,
            minIf(start_time, call_source = 'engine') AS e_start,
            maxIf(end_time, call_source = 'engine') AS e_end,
            countIf(call_source = 'gateway') AS n_gateway,
            anyIf(upstream_status, call_source = 'gateway') AS g_status,
            anyIf(tuple(span_id, replica, model, prompt_tokens, cached_tokens, output_tokens, ttft_s, e2e_s,
                        finish_reason, start_time, end_time), call_source = 'gateway') AS g,
            anyIf(parent_span_id, call_source = 'gateway') AS g_parent,
            countIf(call_source = 'client') AS n_client,
            anyIf(tuple(span_id, model, prompt_tokens, cached_tokens, output_tokens, ttft_s, e2e_s,
                        finish_reason, start_time, end_time), call_source = 'client') AS c,
            -- task context: gateway > client > engine
            argMax(tuple(task_id, task_type, tenant_id, task_step, ifNull(task_attempt, 0), ifNull(task_call, 0)),
                   multiIf(call_source = 'gateway', 3, call_source = 'client', 2, 1)) AS ctx,
            max(status = 'error') AS any_error,
            max(partial) AS any_partial,
            argMax(error_type, error_type != '') AS first_error_type,
            argMax(error_class, (error_class != '', multiIf(call_source = 'gateway', 3, call_source = 'client', 2, 1)))
                AS own_error_class
        FROM llm_calls AS l
        LEFT JOIN adopted AS a ON a.a_trace = l.trace_id AND a.a_span = l.span_id
        WHERE l.start_time >= lo AND l.start_time < we
          AND NOT (l.call_source = 'client' AND (l.trace_id, l.span_id) IN (SELECT trace_id, parent_span_id FROM gw_requests))
        GROUP BY unit_key
    ),
    resolved AS (
        SELECT
            u.*, cv.cv_ttft AS cv_ttft, cv.cv_class AS cv_class, cv.cv_model AS cv_model, cv.cv_finish AS cv_finish,
            multiIf(n_engine > 0, 'engine', n_gateway > 0, 'gateway', 'client') AS source,
            -- evidence times: engine > gateway > client
            multiIf(n_engine > 0, e_start, n_gateway > 0, g.10, c.9) AS t_start,
            multiIf(n_engine > 0, e_end, n_gateway > 0, g.11, c.10) AS t_end,
            coalesce(e_prompt, g.4, c.3) AS prompt_n,
            coalesce(e_cached, g.5, c.4) AS cached_n,
            if(e_outputs > 0, toUInt64(e_output), ifNull(coalesce(g.6, c.5), 0)) AS output_n,
            coalesce(e_ttft, g.7, c.6) AS evidence_ttft,
            multiIf(cv.cv_ttft IS NOT NULL, cv.cv_ttft, c.6 IS NOT NULL, c.6, g.7 IS NOT NULL, g.7, e_ttft) AS user_ttft,
            multiIf(cv.cv_ttft IS NOT NULL OR c.6 IS NOT NULL, 'client', g.7 IS NOT NULL, 'gateway',
                    e_ttft IS NOT NULL, 'engine', '') AS user_ttft_src,
            multiIf(source = 'engine', e_replica, source = 'gateway', g.2, '') AS replica_,
            toUInt32(ifNull(prompt_n, 0)) AS prompt_,
            toStartOfMinute(t_start) AS start_minute
        FROM units AS u
        LEFT JOIN covered AS cv ON cv.cv_trace_id = u.u_trace_id AND cv.cv_request = u.g_parent
    ),
    -- Cached tokens no span reported are estimated from the counters, net of the hits spans did report:
    -- vLLM leaves prompt_tokens_details out when nothing was cached, so a call without a count is
    -- often a miss whose replica-minute's hits were reported by other calls. Per replica and minute
    -- (the call's start minute, as the rate is looked up), the rate left for the calls without a count
    -- = (the counters' cached tokens - those reported) / (their prompt tokens - those of the reporting
    -- calls), floored at 0, at most 1; where nothing was reported, the counters' rate as it is. A minute
    -- without counters, or whose counted prompt tokens were all reported, takes the same over the window.
    estimated AS (
        SELECT k.*,
               ev.ev_minute = k.start_minute AS minute_hits,
               if(ev.ev_w_rep_prompt = 0 AND ev.ev_w_rep_cached = 0, ev.ev_w_rate,
                  if(ev.ev_w_prompt > ev.ev_w_rep_prompt,
                     least(greatest(ev.ev_w_hits - ev.ev_w_rep_cached, 0) / (ev.ev_w_prompt - ev.ev_w_rep_prompt), 1),
                     NULL)) AS window_rate,
               if(NOT minute_hits, window_rate,
                  if(ev.ev_rep_prompt = 0 AND ev.ev_rep_cached = 0, ev.ev_rate,
                     if(ev.ev_prompt > ev.ev_rep_prompt,
                        least(greatest(ev.ev_rate * ev.ev_prompt - ev.ev_rep_cached, 0) / (ev.ev_prompt - ev.ev_rep_prompt), 1),
                        window_rate))) AS est_rate,
               multiIf(k.cached_n IS NOT NULL, 'span', est_rate IS NOT NULL AND k.prompt_ > 0, 'estimate', '') AS cached_src,
               toUInt32(least(multiIf(cached_src = 'span', k.cached_n, cached_src = 'estimate', round(k.prompt_ * est_rate), 0),
                              k.prompt_)) AS cached_
        FROM resolved AS k
        ASOF LEFT JOIN evidence AS ev ON ev.ev_replica = k.replica_ AND k.start_minute >= ev.ev_minute
    )
SELECT
    multiIf(source = 'engine', e_id, source = 'gateway', g.1, c.1) AS call_id,
    u_trace_id AS trace_id,
    source AS call_source,
    replica_ AS replica,
    if(source = 'engine', e_gpu_type, '') AS gpu_type,
    multiIf(e_model != '', e_model, g.3 != '', g.3, c.2 != '', c.2, ifNull(cv_model, '') != '', cv_model,
            e_model_scraped) AS model,
    ctx.1 AS task_id, ctx.2 AS task_type, ctx.3 AS tenant_id, ctx.4 AS task_step,
    toUInt16(ctx.5) AS task_attempt, toUInt16(ctx.6) AS task_call,
    prompt_ AS prompt_tokens,
    cached_ AS cached_tokens,
    cached_src AS cached_source,
    toUInt32(output_n) AS output_tokens,
    toUInt16(greatest(n_engine, 1)) AS choices,
    evidence_ttft AS ttft_s,
    user_ttft AS user_ttft_s,
    user_ttft_src AS user_ttft_source,
    multiIf(source = 'engine', e_e2e, source = 'gateway', g.8, c.7) AS e2e_s,
    if(any_error, 'error', 'ok') AS status,
    first_error_type AS error_type,
    -- a gateway attempt cut because the client timed out only saw a disconnect
    if(own_error_class = 'client_cancel' AND ifNull(cv_class, '') = 'timeout', 'timeout', own_error_class) AS error_class,
    multiIf(e_finish != '', e_finish, g.9 != '', g.9, c.8 != '', c.8, ifNull(cv_finish, '')) AS finish_reason,
    toUInt8(any_partial) AS partial,
    t_start AS start_time,
    t_end AS end_time,
    w_prefill * greatest(toInt64(prompt_tokens) - toInt64(cached_tokens), 0) + w_decode * output_tokens AS call_work,
    -- whether the call reached an engine, so that counter work no span explains may be charged to it: an
    -- engine span; else a gateway attempt that was not rejected (admission control, HTTP 429) and got
    -- an answer (an upstream status, a chunk, tokens or the prompt's usage), not a refused connection
    toUInt8(source = 'engine'
            OR (error_class != 'rejected'
                AND (g_status IS NOT NULL OR evidence_ttft IS NOT NULL OR output_n > 0 OR prompt_n IS NOT NULL)))
        AS reached_engine
FROM estimated
WHERE t_start < we AND (t_end > ws OR t_start >= ws);
