-- What the engine counters say and which calls their unexplained work may be charged to
-- (shared/DESIGN.md "Cost model" item 2; schema/jobs/README.md states the rules as implemented).
-- Three job views replaced, the resolved calls gain one column:
--   * job_resolved_calls: reached_engine (1 = an engine span, or a gateway attempt that was not
--     rejected and got an answer: an upstream status, a chunk, tokens or the prompt's usage); and
--     cached tokens no span reported estimated from the counters NET of the hits spans reported in
--     the same replica-minute (vLLM leaves prompt_tokens_details out when nothing was cached, so a
--     call without a count is often a miss whose minute's hits another call reported);
--   * job_call_costs: counter work no span explains is charged only to calls without an engine span
--     that reached an engine, never to a call answered 429 or refused (it stays `unspanned`);
--   * job_engine_counters: a minute whose counter series all started after the previous scrape (a
--     restart) covers only (series start, last scrape], not the time before the restart; cached
--     prompt tokens from vllm:prompt_tokens_by_source (local_cache_hit + external_kv_transfer, over
--     its own total) where a replica exports it, before vllm:prompt_tokens_cached and the prefix-cache
--     hits / queries.
-- llm_calls_mv: a span that reports cache writes (gen_ai.usage.cache_write.input_tokens, before it
-- gen_ai.usage.cache_creation.input_tokens) reported its cache usage: no cache read count = 0 read.
--
-- A refresh of the chain replaces a *_live table with one built from the view's old column list:
-- pause the chain while resolved_calls_live changes (as 0061 / 0064 did), resume it at the end.

SYSTEM STOP VIEW cost_copy_call_costs_mv;
SYSTEM STOP VIEW cost_copy_replica_minutes_mv;
SYSTEM STOP VIEW cost_copy_tasks_mv;
SYSTEM STOP VIEW cost_watermark_mv;
SYSTEM STOP VIEW cost_clock_mv;
SYSTEM STOP VIEW cost_resolved_calls_mv;
SYSTEM STOP VIEW cost_engine_counters_mv;
SYSTEM STOP VIEW cost_replica_gauges_mv;
SYSTEM STOP VIEW cost_reconciliation_mv;
SYSTEM STOP VIEW cost_call_costs_mv;
SYSTEM STOP VIEW cost_replica_minutes_mv;
SYSTEM STOP VIEW cost_tasks_mv;
SYSTEM CANCEL VIEW cost_copy_call_costs_mv;
SYSTEM CANCEL VIEW cost_copy_replica_minutes_mv;
SYSTEM CANCEL VIEW cost_copy_tasks_mv;
SYSTEM CANCEL VIEW cost_watermark_mv;
SYSTEM CANCEL VIEW cost_clock_mv;
SYSTEM CANCEL VIEW cost_resolved_calls_mv;
SYSTEM CANCEL VIEW cost_engine_counters_mv;
SYSTEM CANCEL VIEW cost_replica_gauges_mv;
SYSTEM CANCEL VIEW cost_reconciliation_mv;
SYSTEM CANCEL VIEW cost_call_costs_mv;
SYSTEM CANCEL VIEW cost_replica_minutes_mv;
SYSTEM CANCEL VIEW cost_tasks_mv;

-- Resolved calls (both scratch tables keep one column order: the job views read them with UNION ALL).
ALTER TABLE resolved_calls_live ADD COLUMN IF NOT EXISTS reached_engine UInt8 AFTER call_work;
ALTER TABLE resolved_calls_runs ADD COLUMN IF NOT EXISTS reached_engine UInt8 AFTER call_work;

-- 2a. Engine counters per replica-minute of [ws, we) (0064's, with the covered span of a restarted
-- series and the cached prompt tokens by source).
CREATE OR REPLACE VIEW job_engine_counters AS
WITH
    {ws:DateTime} AS ws,
    {we:DateTime} AS we,
    ws - INTERVAL 1 HOUR AS lo,
    points AS (
        SELECT ResourceAttributes['service.instance.id'] AS replica,
               multiIf(MetricName IN ('vllm:prompt_tokens', 'vllm:prompt_tokens_total'), 'prompt',
                       MetricName IN ('vllm:generation_tokens', 'vllm:generation_tokens_total'), 'generation',
                       MetricName IN ('vllm:prompt_tokens_cached', 'vllm:prompt_tokens_cached_total'), 'cached',
                       -- by source: computed here, or read from the local prefix cache / another instance
                       MetricName IN ('vllm:prompt_tokens_by_source', 'vllm:prompt_tokens_by_source_total'),
                           if(Attributes['source'] = 'local_compute', 'source_compute', 'source_cached'),
                       MetricName IN ('vllm:prefix_cache_hits', 'vllm:prefix_cache_hits_total'), 'hits',
                       MetricName IN ('vllm:prefix_cache_queries', 'vllm:prefix_cache_queries_total'), 'queries',
                       'preemptions') AS name,
               Attributes AS series, TimeUnix AS ts, StartTimeUnix AS st, toUnixTimestamp64Nano(StartTimeUnix) AS st_ns,
               Value AS value
        FROM otel_metrics_sum
        WHERE TimeUnix >= lo AND TimeUnix < we AND ResourceAttributes['service.instance.id'] != ''
          AND MetricName IN ('vllm:prompt_tokens', 'vllm:prompt_tokens_total', 'vllm:generation_tokens',
                             'vllm:generation_tokens_total', 'vllm:prompt_tokens_cached', 'vllm:prompt_tokens_cached_total',
                             'vllm:prefix_cache_hits', 'vllm:prefix_cache_hits_total', 'vllm:prefix_cache_queries',
                             'vllm:prefix_cache_queries_total', 'vllm:num_preemptions', 'vllm:num_preemptions_total',
                             'vllm:prompt_tokens_by_source', 'vllm:prompt_tokens_by_source_total')
          AND (MetricName NOT IN ('vllm:prompt_tokens_by_source', 'vllm:prompt_tokens_by_source_total')
               OR Attributes['source'] IN ('local_compute', 'local_cache_hit', 'external_kv_transfer'))
    ),
    increases AS (
        SELECT replica, name, ts, st_ns, value,
               lagInFrame(value, 1, -1.0) OVER w AS prev_value,
               lagInFrame(st_ns, 1, toInt64(0)) OVER w AS prev_st_ns,
               multiIf(prev_value < 0, if(st_ns >= toUnixTimestamp64Nano(toDateTime64(lo, 9)), value, nan),
                       value < prev_value OR (st_ns != prev_st_ns AND st_ns > 0 AND prev_st_ns > 0), value,
                       value - prev_value) AS increase
        FROM points
        WINDOW w AS (PARTITION BY replica, name, series ORDER BY ts ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)
    ),
    -- the replica's scrape times (the prompt counter's points) and the span each minute covers:
    -- (previous scrape, last scrape], from the series' start when every series of the replica (one
    -- per engine) started after the previous scrape: a restarted series covers only its own
    -- lifetime, not the time before the restart, when the replica did work no counter saw
    scrapes AS (
        SELECT replica, minute, max(s_last) AS last_scrape, min(s_first_start) AS first_start
        FROM (SELECT replica, toStartOfMinute(ts) AS minute, max(ts) AS s_last, argMin(st, ts) AS s_first_start
              FROM points WHERE name = 'prompt' GROUP BY replica, minute, series)
        GROUP BY replica, minute
    ),
    covers AS (
        SELECT replica, minute, last_scrape,
               greatest(lagInFrame(last_scrape, 1, toDateTime64(0, 9)) OVER (PARTITION BY replica ORDER BY minute
                            ROWS BETWEEN 1 PRECEDING AND CURRENT ROW), first_start) AS prev_scrape
        FROM scrapes
    )
SELECT
    i.replica AS replica,
    toStartOfMinute(i.ts) AS minute,
    sumIf(i.increase, i.name = 'prompt') AS prompt_increase,
    sumIf(i.increase, i.name = 'generation') AS generation_increase,
    -- cached prompt tokens: by source where the replica exports it (local cache hit + external KV
    -- transfer), else vllm:prompt_tokens_cached
    if(countIf(i.name = 'source_cached') > 0, sumIf(i.increase, i.name = 'source_cached'),
       sumIf(i.increase, i.name = 'cached')) AS cached_increase,
    sumIf(i.increase, i.name = 'hits') AS hits_increase,
    sumIf(i.increase, i.name = 'queries') AS queries_increase,
    sumIf(i.increase, i.name = 'preemptions') AS preemptions_increase,
    countIf(i.name = 'prompt') AS n_prompt,
    countIf(i.name = 'generation') AS n_generation,
    countIf(i.name IN ('cached', 'source_cached')) AS n_cached,
    countIf(i.name = 'queries') AS n_queries,
    countIf(i.name = 'preemptions') AS n_preemptions,
    -- the share of prompt tokens served from a cache: by source (over its own total), else cached /
    -- prompt tokens, else prefix-cache hits / queries (which also count recomputed prompts)
    multiIf(countIf(i.name = 'source_cached') > 0 AND sumIf(i.increase, i.name IN ('source_cached', 'source_compute')) > 0,
                least(cached_increase / sumIf(i.increase, i.name IN ('source_cached', 'source_compute')), 1),
            n_cached > 0 AND prompt_increase > 0, least(cached_increase / prompt_increase, 1),
            n_queries > 0 AND queries_increase > 0, least(hits_increase / queries_increase, 1),
            NULL) AS hit_rate,
    any(cv.prev_scrape) AS covers_from,
    any(cv.last_scrape) AS covers_to
FROM increases AS i
LEFT JOIN covers AS cv ON cv.replica = i.replica AND cv.minute = toStartOfMinute(i.ts)
WHERE i.ts >= ws AND NOT isNaN(i.increase)
GROUP BY replica, minute;

-- 1. Call resolution (0180's, with reached_engine and the cached-token estimate net of reported hits).
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
    units AS (
        SELECT
            any(trace_id) AS u_trace_id,
            -- one 64-bit key per (trace, unit): hashing two strings once is cheaper than grouping by them
            cityHash64(trace_id, if(call_source = 'engine' AND parent_span_id != '', parent_span_id, span_id)) AS unit_key,
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
        FROM llm_calls
        WHERE start_time >= lo AND start_time < we
          AND NOT (call_source = 'client' AND (trace_id, span_id) IN (SELECT trace_id, parent_span_id FROM gw_requests))
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

-- 3. call_costs rows (0064's, the gap work charged only to calls that reached an engine).
CREATE OR REPLACE VIEW job_call_costs AS
WITH
    {ws:DateTime} AS ws,
    {we:DateTime} AS we,
    {run_id:UInt64} AS p_run_id,
    (SELECT argMax(abandon_timeout_s, synced_at) FROM cost_settings) AS abandon_timeout_s,
    (SELECT argMax(max_call_s, synced_at) FROM cost_settings) AS max_call_s,
    (SELECT argMax(default_gpu_type, synced_at) FROM cost_settings) AS default_gpu_type,
    (SELECT argMax(default_gpu_count, synced_at) FROM cost_settings) AS default_gpu_count,
    calls AS (
        SELECT * FROM resolved_calls_live WHERE p_run_id = 0
        UNION ALL
        SELECT * EXCEPT (run_id, written_at) FROM resolved_calls_runs WHERE run_id = p_run_id AND p_run_id != 0
    ),
    rec AS (
        SELECT * FROM reconciliation_live WHERE p_run_id = 0
        UNION ALL
        SELECT * EXCEPT (run_id, written_at) FROM reconciliation_runs WHERE run_id = p_run_id AND p_run_id != 0
    ),
    pieces AS (
        SELECT call_id, trace_id, call_source, replica, gpu_type, model, task_id, task_type, tenant_id, task_step,
               task_attempt, task_call, start_time, end_time, status, error_type, error_class, finish_reason, partial,
               prompt_tokens, cached_tokens, cached_source, output_tokens, ttft_s, user_ttft_s, user_ttft_source, e2e_s,
               call_work, minute,
               toUnixTimestamp64Nano(start_time) AS s_ns,
               toUnixTimestamp64Nano(end_time) AS e_ns,
               toInt64(toUnixTimestamp(minute)) * 1000000000 AS m_ns,
               greatest(e_ns - s_ns, 0) AS dur_ns,
               if(dur_ns = 0, 0, greatest(least(e_ns, m_ns + 60000000000) - greatest(s_ns, m_ns), 0)) AS overlap_ns,
               if(dur_ns = 0, 1.0, overlap_ns / dur_ns) AS share,
               toUInt8(minute = toStartOfMinute(start_time)) AS first_piece
        FROM calls
        ARRAY JOIN arrayMap(i -> toDateTime(toStartOfMinute(start_time), 'UTC') + i * 60,
                            range(toUInt64(dateDiff('minute', toStartOfMinute(start_time), toStartOfMinute(end_time)) + 1))) AS minute
        WHERE minute >= ws AND minute < we AND (overlap_ns > 0 OR (dur_ns = 0 AND first_piece = 1))
    ),
    -- unexplained engine work and the calls without an engine span that take it: those that reached
    -- an engine (a stream that broke, a crash), never one that did no engine work (rejected, refused)
    gap_minutes AS (
        SELECT replica AS gm_replica, minute AS gm_minute, covers_from AS gm_from, covers_to AS gm_to, gap_work AS gm_gap
        FROM rec WHERE gap_work > 0
    ),
    candidates AS (
        SELECT c.call_id AS cd_call_id, g.gm_replica AS cd_replica, g.gm_minute AS cd_minute, g.gm_gap AS cd_gap,
               greatest(least(toUnixTimestamp64Nano(c.end_time), toUnixTimestamp64Nano(g.gm_to))
                        - greatest(toUnixTimestamp64Nano(c.start_time), toUnixTimestamp64Nano(g.gm_from)), 1) AS cd_weight,
               -- does the call have a piece in that minute (see pieces)?
               toStartOfMinute(c.start_time) <= g.gm_minute AND g.gm_minute <= toStartOfMinute(c.end_time)
                   AND (c.end_time > toDateTime64(g.gm_minute, 9, 'UTC') OR c.end_time = c.start_time) AS cd_has_piece
        FROM (SELECT call_id, replica, start_time, end_time FROM calls
              WHERE call_source != 'engine' AND replica != '' AND reached_engine = 1) AS c
        INNER JOIN gap_minutes AS g ON g.gm_replica = c.replica
        WHERE c.start_time <= g.gm_to AND c.end_time > g.gm_from
    ),
    charges AS (
        SELECT cd_call_id AS ch_call_id, cd_minute AS ch_minute, cd_has_piece AS ch_has_piece,
               cd_gap * cd_weight / sum(cd_weight) OVER (PARTITION BY cd_replica, cd_minute) AS ch_work
        FROM candidates
    ),
    charged AS (
        SELECT p.*, ch.ch_work AS gap_w
        FROM pieces AS p
        LEFT JOIN (SELECT ch_call_id, ch_minute, ch_work FROM charges WHERE ch_has_piece) AS ch
            ON ch.ch_call_id = p.call_id AND ch.ch_minute = p.minute
        UNION ALL
        -- a charge in a minute the call has no piece in (the counters saw it after its last minute)
        SELECT c.call_id, c.trace_id, c.call_source, c.replica, c.gpu_type, c.model, c.task_id, c.task_type, c.tenant_id,
               c.task_step, c.task_attempt, c.task_call, c.start_time, c.end_time, c.status, c.error_type, c.error_class,
               c.finish_reason, c.partial, c.prompt_tokens, c.cached_tokens, c.cached_source, c.output_tokens, c.ttft_s,
               c.user_ttft_s, c.user_ttft_source, c.e2e_s, c.call_work, ch.ch_minute AS minute,
               0 AS s_ns, 0 AS e_ns, 0 AS m_ns, 0 AS dur_ns, 0 AS overlap_ns, 0.0 AS share, toUInt8(0) AS first_piece,
               ch.ch_work AS gap_w
        -- the calls stream through, the (few) charges are the hash table
        FROM calls AS c
        INNER JOIN (SELECT ch_call_id, ch_minute, ch_work FROM charges WHERE NOT ch_has_piece) AS ch
            ON ch.ch_call_id = c.call_id
        UNION ALL
        -- unspanned engine work: no call to charge it to
        SELECT concat('unspanned:', g.gm_replica, ':', toString(g.gm_minute)), '', 'unspanned', g.gm_replica, '', '', '', '',
               '', '', toUInt16(0), toUInt16(0), toDateTime64(g.gm_minute, 9, 'UTC'),
               toDateTime64(g.gm_minute + 60, 9, 'UTC'), 'ok', '', '', '', toUInt8(0), toUInt32(0), toUInt32(0), '',
               toUInt32(0), CAST(NULL, 'Nullable(Float64)'), CAST(NULL, 'Nullable(Float64)'), '', 0.0, 0.0, g.gm_minute,
               0, 0, 0, 0, 0, 0.0, toUInt8(0), g.gm_gap
        FROM gap_minutes AS g
        WHERE (g.gm_replica, g.gm_minute) NOT IN (SELECT cd_replica, cd_minute FROM candidates)
    ),
    fleet AS (
        SELECT replica AS f_replica, gpu_type AS f_gpu_type, gpu_count AS f_gpu_count, capacity_work AS f_capacity
        FROM replicas
    ),
    -- capacity learned per replica: its saturated minutes' work (median) or its busiest minute,
    -- over history before the window and the window's reconciliation
    learned AS (
        SELECT l_replica, countIf(l_sat = 1) AS n_sat, quantileExactIf(0.5)(l_work, l_sat = 1) AS sat_work,
               max(l_work) AS peak_work
        FROM (
            SELECT replica AS l_replica, work AS l_work, saturated AS l_sat FROM replica_minutes_history
            WHERE minute >= we - INTERVAL 7 DAY AND minute < ws AND work > 0
            UNION ALL
            SELECT replica, total_work, saturated FROM rec WHERE total_work > 0
        )
        GROUP BY l_replica
    ),
    capacity AS (
        SELECT l.l_replica AS cp_replica,
               multiIf(f.f_capacity > 0, f.f_capacity, l.n_sat >= 3, l.sat_work, l.peak_work) AS cp_work,
               multiIf(f.f_capacity > 0, 'fleet', l.n_sat >= 3, 'saturated', 'peak') AS cp_source
        FROM learned AS l
        LEFT JOIN fleet AS f ON f.f_replica = l.l_replica
    ),
    price_arrays AS (
        SELECT gpu_type AS pa_type,
               arraySort(x -> x.1, groupArray((toInt64(toUnixTimestamp(valid_from)), usd_per_gpu_hour))) AS pa
        FROM gpu_prices GROUP BY gpu_type
    ),
    -- per task and (step, call), over every call of the window (not only this minute's)
    task_last AS (
        SELECT task_id AS tl_task_id, max(end_time) AS task_last_end FROM calls WHERE task_id != '' GROUP BY task_id
    ),
    step_ok AS (
        SELECT task_id AS so_task_id, task_step AS so_step, task_call AS so_call,
               maxIf(task_attempt, status != 'error' AND partial = 0) AS ok_attempt
        FROM calls WHERE task_id != '' GROUP BY task_id, task_step, task_call
    ),
    roots AS (
        SELECT task_id AS r_task_id, argMax(outcome, end_time) AS root_outcome
        FROM task_spans
        WHERE end_time >= ws - toIntervalSecond(2 * max_call_s)
          AND end_time < we + toIntervalSecond((SELECT argMax(task_lookback_s, synced_at) FROM cost_settings))
          AND task_id IN (SELECT task_id FROM calls WHERE task_id != '')
        GROUP BY task_id
    ),
    sized AS (
        SELECT k.*, k.call_work * k.share + k.gap_w AS piece_work,
               rm.rm_total AS total_work, cp.cp_work AS capacity_work_, cp.cp_source AS capacity_source_,
               tl.task_last_end AS task_last_end, so.ok_attempt AS ok_attempt,
               toUInt8(f.f_replica != '') AS in_fleet,
               if(in_fleet, f.f_gpu_type, default_gpu_type) AS fleet_gpu_type,
               if(in_fleet, f.f_gpu_count, default_gpu_count) AS fleet_gpu_count,
               r.r_task_id != '' AS has_root, r.root_outcome AS root_outcome,
               pa.pa AS prices
        FROM charged AS k
        LEFT JOIN (SELECT replica AS rm_replica, minute AS rm_minute, total_work AS rm_total FROM rec) AS rm
            ON rm.rm_replica = k.replica AND rm.rm_minute = k.minute
        LEFT JOIN capacity AS cp ON cp.cp_replica = k.replica
        LEFT JOIN task_last AS tl ON tl.tl_task_id = k.task_id
        LEFT JOIN step_ok AS so ON so.so_task_id = k.task_id AND so.so_step = k.task_step AND so.so_call = k.task_call
        LEFT JOIN fleet AS f ON f.f_replica = k.replica
        LEFT JOIN roots AS r ON r.r_task_id = k.task_id
        LEFT JOIN price_arrays AS pa ON pa.pa_type = if(f.f_replica != '', f.f_gpu_type, default_gpu_type)
    )
SELECT
    s.minute AS minute, s.call_id AS call_id, s.trace_id AS trace_id, s.call_source AS call_source,
    s.replica AS replica, if(s.gpu_type != '', s.gpu_type, s.fleet_gpu_type) AS gpu_type, s.model AS model,
    s.task_id AS task_id, s.task_type AS task_type, s.tenant_id AS tenant_id, s.task_step AS task_step,
    s.task_attempt AS task_attempt, s.task_call AS task_call, s.start_time AS start_time, s.end_time AS end_time,
    s.status AS status, s.error_type AS error_type, s.error_class AS error_class, s.finish_reason AS finish_reason,
    s.partial AS partial, s.first_piece AS first_piece, s.first_piece AS requests,
    toUInt32(if(s.first_piece, s.prompt_tokens, 0)) AS prompt_tokens,
    toUInt32(if(s.first_piece, s.cached_tokens, 0)) AS cached_tokens,
    toUInt8(s.first_piece AND s.cached_source = 'estimate') AS cached_estimated,
    toUInt32(if(s.first_piece, s.output_tokens, 0)) AS output_tokens,
    s.ttft_s AS ttft_s, s.user_ttft_s AS user_ttft_s, s.user_ttft_source AS user_ttft_source, s.e2e_s AS e2e_s,
    s.overlap_ns / 1e9 AS overlap_s,
    s.piece_work AS work,
    s.gap_w AS gap_work,
    s.total_work AS minute_work,
    if(s.replica = '', 0, s.capacity_work_) AS capacity_work,
    if(s.replica = '', '', s.capacity_source_) AS capacity_source,
    -- USD: the GPU-seconds of each price segment inside the minute
    if(s.replica = '' OR length(s.prices) = 0, 0,
       s.fleet_gpu_count * arraySum(arrayMap(i -> s.prices[i].2 * greatest(0,
               least(toInt64(toUnixTimestamp(s.minute)) + 60,
                     if(i < length(s.prices), s.prices[i + 1].1, toInt64(toUnixTimestamp(s.minute)) + 60))
               - greatest(toInt64(toUnixTimestamp(s.minute)), s.prices[i].1)), arrayEnumerate(s.prices))) / 3600) AS spend_usd,
    if(s.total_work > 0, spend_usd * s.piece_work / greatest(s.total_work, capacity_work), 0) AS cost_usd,
    multiIf(s.call_source = 'unspanned', 'unspanned',
            s.task_id = '', 'unattributed',
            task_outcome IN ('failure', 'abandoned'), 'failed_task_waste',
            task_outcome != 'success', 'pending',
            s.status != 'error' AND s.partial = 0 AND s.task_attempt = s.ok_attempt, 'useful',
            'retry_waste') AS category,
    multiIf(s.task_id = '', '',
            s.has_root AND s.root_outcome IN ('success', 'failure', 'abandoned'), s.root_outcome,
            s.has_root, 'unknown',
            s.task_last_end + toIntervalSecond(abandon_timeout_s) <= we, 'abandoned',
            'unknown') AS task_outcome,
    toDateTime(now(), 'UTC') AS computed_at
FROM sized AS s;

-- The refreshable view writing resolved_calls_live stores its column list when created: restate its
-- call (periodic.write_out writes it out again after the migrations); MODIFY QUERY keeps its schedule
-- and DEPENDS ON.
ALTER TABLE cost_resolved_calls_mv MODIFY QUERY
SELECT * FROM job_resolved_calls(ws = (SELECT max(ws) FROM job_clock), we = (SELECT max(we) FROM job_clock));

-- llm_calls_mv (0062's query): cached tokens from gen_ai.usage.cache_read.input_tokens, else the older
-- gen_ai.usage.cached_tokens, else 0 when the span reports cache writes
-- (gen_ai.usage.cache_write.input_tokens, named gen_ai.usage.cache_creation.input_tokens before): it
-- reported its cache usage, and read nothing from the cache. MODIFY QUERY keeps the view (and its
-- place among the views on otel_traces); rows already stored keep their values.
ALTER TABLE llm_calls_mv MODIFY QUERY
SELECT
    start_time, end_time, trace_id, span_id, parent_span_id, call_source, service_name, span_name,
    replica, gpu_type,
    if(span_model = '' AND call_source = 'engine', sm.served, span_model) AS model,
    toUInt8(span_model = '' AND call_source = 'engine' AND sm.served != '') AS model_scraped,
    request_id, task_id, task_type, task_step, task_attempt, task_call, tenant_id,
    tenant_priority, prompt_tokens, cached_tokens, output_tokens, ttft_s, e2e_s, queue_s, prefill_s,
    decode_s, inference_s, finish_reason, status, error_type,
    toUInt8(ifNull(output_tokens, 0) > 0 AND (
        status = 'error'
        OR (finish_reason != ''
            AND finish_reason NOT IN ('stop', 'length', 'tool_calls', 'content_filter', 'function_call', 'repetition'))
        OR client_partial IN ('true', '1'))) AS partial,
    gateway_retries, upstream_status, policy
FROM (
    SELECT
        Timestamp AS start_time,
        fromUnixTimestamp64Nano(toUnixTimestamp64Nano(Timestamp) + toInt64(Duration), 'UTC') AS end_time,
        TraceId AS trace_id,
        SpanId AS span_id,
        ParentSpanId AS parent_span_id,
        multiIf(
            SpanName = 'llm_request'
                OR (SpanKind IN ('Server', 'SPAN_KIND_SERVER') AND mapContains(SpanAttributes, 'gen_ai.latency.e2e')),
            'engine',
            mapContains(SpanAttributes, 'gateway.attempt'), 'gateway',
            'client') AS call_source,
        ServiceName AS service_name,
        SpanName AS span_name,
        multiIf(call_source = 'engine', if(ResourceAttributes['service.instance.id'] != '', ResourceAttributes['service.instance.id'], ServiceName),
                call_source = 'gateway', SpanAttributes['gateway.replica'],
                '') AS replica,
        ResourceAttributes['gpu.type'] AS gpu_type,
        multiIf(SpanAttributes['gen_ai.request.model'] != '', SpanAttributes['gen_ai.request.model'],
                SpanAttributes['gen_ai.response.model'] != '', SpanAttributes['gen_ai.response.model'],
                ResourceAttributes['gen_ai.request.model']) AS span_model,
        if(SpanAttributes['gen_ai.request.id'] != '', SpanAttributes['gen_ai.request.id'], SpanAttributes['gen_ai.response.id']) AS request_id,
        SpanAttributes['task.id'] AS task_id,
        SpanAttributes['task.type'] AS task_type,
        SpanAttributes['task.step'] AS task_step,
        toUInt16OrNull(SpanAttributes['task.attempt']) AS task_attempt,
        toUInt16OrNull(SpanAttributes['task.call']) AS task_call,
        SpanAttributes['tenant.id'] AS tenant_id,
        SpanAttributes['tenant.priority'] AS tenant_priority,
        coalesce(toUInt32OrNull(SpanAttributes['gen_ai.usage.prompt_tokens']),
                 toUInt32OrNull(SpanAttributes['gen_ai.usage.input_tokens'])) AS prompt_tokens,
        coalesce(toUInt32OrNull(SpanAttributes['gen_ai.usage.cache_read.input_tokens']),
                 toUInt32OrNull(SpanAttributes['gen_ai.usage.cached_tokens']),
                 if(mapContains(SpanAttributes, 'gen_ai.usage.cache_write.input_tokens')
                        OR mapContains(SpanAttributes, 'gen_ai.usage.cache_creation.input_tokens'),
                    toUInt32(0), NULL)) AS cached_tokens,
        coalesce(toUInt32OrNull(SpanAttributes['gen_ai.usage.completion_tokens']),
                 toUInt32OrNull(SpanAttributes['gen_ai.usage.output_tokens']),
                 toUInt32OrNull(SpanAttributes['gateway.tokens_streamed']),
                 toUInt32OrNull(SpanAttributes['gen_ai.client.tokens_received'])) AS output_tokens,
        coalesce(toFloat64OrNull(SpanAttributes['gen_ai.latency.time_to_first_token']),
                 toFloat64OrNull(SpanAttributes['gen_ai.response.time_to_first_chunk'])) AS ttft_s,
        ifNull(toFloat64OrNull(SpanAttributes['gen_ai.latency.e2e']), Duration / 1e9) AS e2e_s,
        toFloat64OrNull(SpanAttributes['gen_ai.latency.time_in_queue']) AS queue_s,
        toFloat64OrNull(SpanAttributes['gen_ai.latency.time_in_model_prefill']) AS prefill_s,
        toFloat64OrNull(SpanAttributes['gen_ai.latency.time_in_model_decode']) AS decode_s,
        toFloat64OrNull(SpanAttributes['gen_ai.latency.time_in_model_inference']) AS inference_s,
        if(startsWith(SpanAttributes['gen_ai.response.finish_reasons'], '['),
           JSONExtractString(SpanAttributes['gen_ai.response.finish_reasons'], 1),
           SpanAttributes['gen_ai.response.finish_reasons']) AS finish_reason,
        multiIf(StatusCode IN ('Error', 'STATUS_CODE_ERROR'), 'error',
                StatusCode IN ('Ok', 'STATUS_CODE_OK'), 'ok', 'unset') AS status,
        SpanAttributes['error.type'] AS error_type,
        toUInt16OrNull(SpanAttributes['gateway.retries']) AS gateway_retries,
        toUInt16OrNull(SpanAttributes['gateway.upstream.status_code']) AS upstream_status,
        SpanAttributes['gateway.policy'] AS policy,
        SpanAttributes['gen_ai.client.partial'] AS client_partial
    FROM otel_traces
    WHERE SpanName = 'llm_request'
       OR (SpanKind IN ('Server', 'SPAN_KIND_SERVER') AND mapContains(SpanAttributes, 'gen_ai.latency.e2e'))
       OR mapContains(SpanAttributes, 'gateway.attempt')
       OR (SpanKind IN ('Client', 'SPAN_KIND_CLIENT') AND mapContains(SpanAttributes, 'gen_ai.operation.name'))
) AS c
LEFT JOIN (SELECT replica AS sm_replica, argMax(model, seen) AS served FROM replica_models GROUP BY replica) AS sm
    ON sm.sm_replica = c.replica;

-- The chain was paused while its tables changed: resume it.
SYSTEM START VIEW cost_copy_call_costs_mv;
SYSTEM START VIEW cost_copy_replica_minutes_mv;
SYSTEM START VIEW cost_copy_tasks_mv;
SYSTEM START VIEW cost_watermark_mv;
SYSTEM START VIEW cost_clock_mv;
SYSTEM START VIEW cost_resolved_calls_mv;
SYSTEM START VIEW cost_engine_counters_mv;
SYSTEM START VIEW cost_replica_gauges_mv;
SYSTEM START VIEW cost_reconciliation_mv;
SYSTEM START VIEW cost_call_costs_mv;
SYSTEM START VIEW cost_replica_minutes_mv;
SYSTEM START VIEW cost_tasks_mv;
