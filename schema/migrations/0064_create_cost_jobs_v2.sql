-- The cost jobs, second shape (cost truth on real telemetry shapes):
-- the same chain and runners as 0013/0014, with these rules (schema/jobs/README.md states them):
--   * each field of a call from the best evidence that has it: engine > gateway attempt > client
--     attempt, field by field (tokens, cached tokens, times, finish reason; the model from the
--     engine's own attribute, else the gateway / client, else the scraped model_name label);
--   * vLLM's one llm_request span per choice (n > 1, same parent) = one call: prompt once,
--     outputs summed;
--   * cached tokens with no per-call count are estimated from the replica-minute's counter hit rate
--     (vllm:prompt_tokens_cached / vllm:prompt_tokens, else prefix_cache_hits / _queries), flagged;
--   * counter increases per scrape and series, across resets and restarts (series start time),
--     belonging to the minute of the scrape that saw them; a replica is up in a minute with a
--     successful scrape (not the up=0 point of a failed one) or work;
--   * engine-counter tokens no span explains are charged to that replica-minute's calls without an
--     engine span, else to an `unspanned` row; never spread over unrelated calls;
--   * gauges of counts summed over a data-parallel replica's engines, KV usage weighted by blocks;
--   * allocation by utilisation: a replica-minute allocates spend x min(1, work / capacity), idle
--     the rest; capacity from fleet.yaml, else learned (median work of saturated minutes, else the
--     busiest minute, over 7 days);
--   * a price whose valid_from falls inside a minute applies pro rata by seconds; reserved
--     replicas are billed every minute;
--   * useful/retry per call within a step (task.call); attempts = calls sent incl. retries;
--   * the SLO's TTFT is what the user waited: client, else gateway, else engine.

-- 1. Call resolution: one row per unit of GPU work overlapping [ws, we).
-- Units as in 0013: an engine row's key is its parent span (the gateway attempt, or the client
-- attempt when called directly), every other row's its own span. A unit has at most one gateway
-- and one client row, and one engine row per choice. A client attempt with a gateway request
-- below it is not a unit (its gateway attempts are); what only it knows (the TTFT the user waited,
-- a timeout it hit, its model and finish reason) is joined to those attempts ("covered").
CREATE OR REPLACE VIEW job_resolved_calls AS
WITH
    {ws:DateTime} AS ws,
    {we:DateTime} AS we,
    (SELECT argMax(w_prefill, synced_at) FROM cost_settings) AS w_prefill,
    (SELECT argMax(w_decode, synced_at) FROM cost_settings) AS w_decode,
    (SELECT argMax(max_call_s, synced_at) FROM cost_settings) AS max_call_s,
    ws - toIntervalSecond(max_call_s + 60) AS lo,
    -- prefix-cache hit rates from the engine counters: per replica-minute, and over the window
    hits AS (SELECT replica AS h_replica, minute AS h_minute, hit_rate AS h_rate, prompt_increase AS h_prompt
             FROM job_engine_counters(ws = {ws:DateTime}, we = {we:DateTime}) WHERE hit_rate IS NOT NULL),
    window_hits AS (SELECT h_replica AS wh_replica, sum(h_rate * h_prompt) / nullIf(sum(h_prompt), 0) AS wh_rate
                    FROM hits GROUP BY h_replica),
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
                    e_ttft IS NOT NULL, 'engine', '') AS user_ttft_src
        FROM units AS u
        LEFT JOIN covered AS cv ON cv.cv_trace_id = u.u_trace_id AND cv.cv_request = u.g_parent
    ),
    estimated AS (
        SELECT r.*,
               multiIf(r.source = 'engine', r.e_replica, r.source = 'gateway', tupleElement(r.g, 2), '') AS replica_,
               toUInt32(ifNull(r.prompt_n, 0)) AS prompt_,
               coalesce(h.h_rate, wh.wh_rate) AS est_rate,
               multiIf(r.cached_n IS NOT NULL, 'span', est_rate IS NOT NULL AND prompt_ > 0, 'estimate', '') AS cached_src,
               toUInt32(least(multiIf(cached_src = 'span', r.cached_n, cached_src = 'estimate', round(prompt_ * est_rate), 0),
                              prompt_)) AS cached_
        FROM resolved AS r
        LEFT JOIN hits AS h ON h.h_replica = replica_ AND h.h_minute = toStartOfMinute(r.t_start)
        LEFT JOIN window_hits AS wh ON wh.wh_replica = replica_
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
    w_prefill * greatest(toInt64(prompt_tokens) - toInt64(cached_tokens), 0) + w_decode * output_tokens AS call_work
FROM estimated
WHERE t_start < we AND (t_end > ws OR t_start >= ws);

-- 2a. Engine counters per replica-minute of [ws, we), from otel_metrics_sum (exporter layout).
-- Increase per scrape and series (replica, metric, label set: one series per engine of a
-- data-parallel replica, summed): value - previous value; after a reset (value dropped, or the
-- series start time StartTimeUnix changed: a restart that climbed past the old value) the value
-- itself (the increase since the restart); a series' first point counts whole only when the series
-- started inside the lookback (else its earlier history is unknown). Points of the hour before ws
-- prime the previous values, so a window's first minute is not lost. An increase belongs to the
-- minute of the scrape that saw it; the minute's counters cover (prev_scrape, last_scrape].
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
                       MetricName IN ('vllm:prefix_cache_hits', 'vllm:prefix_cache_hits_total'), 'hits',
                       MetricName IN ('vllm:prefix_cache_queries', 'vllm:prefix_cache_queries_total'), 'queries',
                       'preemptions') AS name,
               Attributes AS series, TimeUnix AS ts, toUnixTimestamp64Nano(StartTimeUnix) AS st_ns, Value AS value
        FROM otel_metrics_sum
        WHERE TimeUnix >= lo AND TimeUnix < we AND ResourceAttributes['service.instance.id'] != ''
          AND MetricName IN ('vllm:prompt_tokens', 'vllm:prompt_tokens_total', 'vllm:generation_tokens',
                             'vllm:generation_tokens_total', 'vllm:prompt_tokens_cached', 'vllm:prompt_tokens_cached_total',
                             'vllm:prefix_cache_hits', 'vllm:prefix_cache_hits_total', 'vllm:prefix_cache_queries',
                             'vllm:prefix_cache_queries_total', 'vllm:num_preemptions', 'vllm:num_preemptions_total')
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
    -- the replica's scrape times (the prompt counter's points) and the span each minute covers
    scrapes AS (
        SELECT replica, toStartOfMinute(ts) AS minute, max(ts) AS last_scrape
        FROM points WHERE name = 'prompt' GROUP BY replica, minute
    ),
    covers AS (
        SELECT replica, minute, last_scrape,
               lagInFrame(last_scrape, 1, toDateTime64(0, 9)) OVER (PARTITION BY replica ORDER BY minute
                   ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS prev_scrape
        FROM scrapes
    )
SELECT
    i.replica AS replica,
    toStartOfMinute(i.ts) AS minute,
    sumIf(i.increase, i.name = 'prompt') AS prompt_increase,
    sumIf(i.increase, i.name = 'generation') AS generation_increase,
    sumIf(i.increase, i.name = 'cached') AS cached_increase,
    sumIf(i.increase, i.name = 'hits') AS hits_increase,
    sumIf(i.increase, i.name = 'queries') AS queries_increase,
    sumIf(i.increase, i.name = 'preemptions') AS preemptions_increase,
    countIf(i.name = 'prompt') AS n_prompt,
    countIf(i.name = 'generation') AS n_generation,
    countIf(i.name = 'cached') AS n_cached,
    countIf(i.name = 'queries') AS n_queries,
    countIf(i.name = 'preemptions') AS n_preemptions,
    multiIf(n_cached > 0 AND prompt_increase > 0, least(cached_increase / prompt_increase, 1),
            n_queries > 0 AND queries_increase > 0, least(hits_increase / queries_increase, 1),
            NULL) AS hit_rate,
    any(cv.prev_scrape) AS covers_from,
    any(cv.last_scrape) AS covers_to
FROM increases AS i
LEFT JOIN covers AS cv ON cv.replica = i.replica AND cv.minute = toStartOfMinute(i.ts)
WHERE i.ts >= ws AND NOT isNaN(i.increase)
GROUP BY replica, minute;

-- 2b. Gauges per replica-minute of [ws, we): per scrape, counts summed over the replica's engines
-- (data parallel: one series per `engine` label), KV usage averaged over engines weighted by their
-- KV blocks (vllm:cache_config_info num_gpu_blocks; equal weights without it); then mean / max over
-- the minute's scrapes. A scrape is successful when it wrote anything but the up=0 point of a
-- failed one (the scraper's `up` gauge, as Prometheus); metric sums and histograms count too.
-- saturated: requests waited for capacity (vllm:num_requests_waiting_by_reason{reason="capacity"},
-- else vllm:num_requests_waiting) on average over the minute.
CREATE OR REPLACE VIEW job_replica_gauges AS
WITH
    {ws:DateTime} AS ws,
    {we:DateTime} AS we,
    per_engine AS (
        SELECT ResourceAttributes['service.instance.id'] AS replica, TimeUnix AS ts, Attributes['engine'] AS engine,
               sumIf(Value, MetricName = 'vllm:num_requests_waiting') AS waiting,
               countIf(MetricName = 'vllm:num_requests_waiting') AS n_waiting,
               sumIf(Value, MetricName = 'vllm:num_requests_waiting_by_reason' AND Attributes['reason'] = 'capacity')
                   AS waiting_capacity,
               countIf(MetricName = 'vllm:num_requests_waiting_by_reason' AND Attributes['reason'] = 'capacity')
                   AS n_waiting_capacity,
               sumIf(Value, MetricName = 'vllm:num_requests_running') AS running,
               countIf(MetricName = 'vllm:num_requests_running') AS n_running,
               anyIf(Value, MetricName IN ('vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc')) AS kv,
               countIf(MetricName IN ('vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc')) AS n_kv,
               ifNull(anyIf(toFloat64OrNull(Attributes['num_gpu_blocks']), MetricName = 'vllm:cache_config_info'), 1)
                   AS kv_blocks,
               countIf(NOT (MetricName = 'up' AND Value = 0)) AS n_ok
        FROM otel_metrics_gauge
        WHERE TimeUnix >= ws AND TimeUnix < we AND ResourceAttributes['service.instance.id'] != ''
        GROUP BY replica, ts, engine
    ),
    per_scrape AS (
        SELECT replica, ts,
               if(sum(n_waiting) > 0, sum(waiting), NULL) AS s_waiting,
               if(sum(n_waiting_capacity) > 0, sum(waiting_capacity), NULL) AS s_waiting_capacity,
               if(sum(n_running) > 0, sum(running), NULL) AS s_running,
               if(sumIf(kv_blocks, n_kv > 0) > 0, sumIf(kv * kv_blocks, n_kv > 0) / sumIf(kv_blocks, n_kv > 0), NULL) AS s_kv,
               sum(n_ok) > 0 AS ok
        FROM per_engine
        GROUP BY replica, ts
    ),
    other_points AS (
        SELECT ResourceAttributes['service.instance.id'] AS replica, toStartOfMinute(TimeUnix) AS minute
        FROM otel_metrics_sum
        WHERE TimeUnix >= ws AND TimeUnix < we AND ResourceAttributes['service.instance.id'] != ''
        GROUP BY replica, minute
        UNION DISTINCT
        SELECT ResourceAttributes['service.instance.id'] AS replica, toStartOfMinute(TimeUnix) AS minute
        FROM otel_metrics_histogram
        WHERE TimeUnix >= ws AND TimeUnix < we AND ResourceAttributes['service.instance.id'] != ''
        GROUP BY replica, minute
    ),
    gauge_minutes AS (
        SELECT replica, toStartOfMinute(ts) AS minute,
               max(ok) AS scraped,
               avg(s_waiting) AS queue_waiting_avg, max(s_waiting) AS queue_waiting_max,
               avg(s_running) AS running_avg, avg(s_kv) AS kv_usage_avg, max(s_kv) AS kv_usage_max,
               ifNull(avg(coalesce(s_waiting_capacity, s_waiting)), 0) > 0 AS sat
        FROM per_scrape
        GROUP BY replica, minute
    )
SELECT
    k.replica AS replica, k.minute AS minute,
    toUInt8(ifNull(gm.scraped, 0) OR op.replica != '') AS up_metrics,
    gm.queue_waiting_avg AS queue_waiting_avg, gm.queue_waiting_max AS queue_waiting_max,
    gm.running_avg AS running_avg, gm.kv_usage_avg AS kv_usage_avg, gm.kv_usage_max AS kv_usage_max,
    toUInt8(ifNull(gm.sat, 0)) AS saturated
FROM (SELECT replica, minute FROM gauge_minutes UNION DISTINCT SELECT replica, minute FROM other_points) AS k
LEFT JOIN gauge_minutes AS gm ON gm.replica = k.replica AND gm.minute = k.minute
LEFT JOIN other_points AS op ON op.replica = k.replica AND op.minute = k.minute;

-- 2c. Reconciliation per replica-minute of [ws, we), for the resolved calls of run run_id (0 =
-- the periodic chain's), materialized into reconciliation_live / _runs (the call_costs and
-- replica_minutes jobs read it). One pass over each call's minutes gives both
--   * span_work: the call's work x its time overlap with the minute (the pieces call_costs makes),
--   * counted tokens: what the minute's counters observed of the call, against the span
--     (covers_from, covers_to] they cover: the prompt at the call's first token (as vLLM counts
--     it), the output spread evenly over [first token, end];
-- then residual = counters - counted per kind (floored at 0), gap_work = w_prefill x residual
-- prompt x (1 - hit rate) + w_decode x residual output, total_work = span_work + gap_work (the
-- allocation denominator: gap work is charged inside the same minute), saturated from the gauges.
CREATE OR REPLACE VIEW job_reconciliation AS
WITH
    {ws:DateTime} AS ws,
    {we:DateTime} AS we,
    {run_id:UInt64} AS p_run_id,
    (SELECT argMax(w_prefill, synced_at) FROM cost_settings) AS w_prefill,
    (SELECT argMax(w_decode, synced_at) FROM cost_settings) AS w_decode,
    counters AS (SELECT * FROM job_engine_counters(ws = {ws:DateTime}, we = {we:DateTime})),
    calls AS (
        SELECT replica, start_time, end_time, ttft_s, prompt_tokens, output_tokens, call_work FROM resolved_calls_live
        WHERE p_run_id = 0 AND replica != ''
        UNION ALL
        SELECT replica, start_time, end_time, ttft_s, prompt_tokens, output_tokens, call_work FROM resolved_calls_runs
        WHERE run_id = p_run_id AND p_run_id != 0 AND replica != ''
    ),
    passes AS (
        SELECT c.replica AS replica, minute,
               toUnixTimestamp64Nano(c.start_time) AS s_ns,
               greatest(toUnixTimestamp64Nano(c.end_time), s_ns) AS e_ns,
               toInt64(toUnixTimestamp(minute)) * 1000000000 AS m_ns,
               e_ns - s_ns AS dur_ns,
               multiIf(dur_ns = 0, if(minute = toStartOfMinute(c.start_time), 1.0, 0.0),
                       greatest(least(e_ns, m_ns + 60000000000) - greatest(s_ns, m_ns), 0) / dur_ns) AS share,
               least(s_ns + toInt64(ifNull(c.ttft_s, 0) * 1e9), e_ns) AS ft_ns,
               toUnixTimestamp64Nano(k.covers_from) AS a_ns,
               toUnixTimestamp64Nano(k.covers_to) AS b_ns,
               k.replica != '' AS has_counters,
               if(has_counters AND ft_ns > a_ns AND ft_ns <= b_ns, c.prompt_tokens, 0) AS counted_prompt,
               if(NOT has_counters, 0,
                  c.output_tokens * if(e_ns > ft_ns, greatest(least(e_ns, b_ns) - greatest(ft_ns, a_ns), 0) / (e_ns - ft_ns),
                                       if(e_ns > a_ns AND e_ns <= b_ns, 1.0, 0.0))) AS counted_output,
               c.call_work * share AS piece_work
        FROM calls AS c
        ARRAY JOIN arrayMap(i -> toDateTime(toStartOfMinute(c.start_time), 'UTC') + i * 60,
                            range(toUInt64(dateDiff('minute', toStartOfMinute(c.start_time), toStartOfMinute(c.end_time)) + 2)))
            AS minute
        LEFT JOIN (SELECT replica, minute, covers_from, covers_to FROM counters) AS k
            ON k.replica = c.replica AND k.minute = minute
        WHERE minute >= ws AND minute < we
    ),
    per_minute AS (
        SELECT replica AS pm_replica, minute AS pm_minute, sum(piece_work) AS pm_work,
               sum(counted_prompt) AS pm_prompt, sum(counted_output) AS pm_output
        FROM passes GROUP BY replica, minute
    ),
    keys AS (
        SELECT pm_replica AS replica, pm_minute AS minute FROM per_minute
        UNION DISTINCT SELECT replica, minute FROM counters
    ),
    gauges AS (SELECT replica AS g_replica, minute AS g_minute, saturated AS g_saturated
               FROM job_replica_gauges(ws = {ws:DateTime}, we = {we:DateTime}))
SELECT
    k.replica AS replica, k.minute AS minute,
    ct.covers_from AS covers_from, ct.covers_to AS covers_to,
    if(ct.n_prompt > 0, ct.prompt_increase, NULL) AS counter_prompt_tokens,
    if(ct.n_generation > 0, ct.generation_increase, NULL) AS counter_generation_tokens,
    multiIf(ct.n_cached > 0, ct.cached_increase, ct.n_queries > 0, ct.hits_increase, NULL) AS counter_cached_tokens,
    ct.hit_rate AS hit_rate,
    if(ct.n_preemptions > 0, ct.preemptions_increase, NULL) AS preemptions,
    pm.pm_prompt + pm.pm_output AS counted_tokens,
    if(ct.n_prompt > 0, greatest(ct.prompt_increase - pm.pm_prompt, 0), 0) AS residual_prompt,
    if(ct.n_generation > 0, greatest(ct.generation_increase - pm.pm_output, 0), 0) AS residual_output,
    w_prefill * residual_prompt * (1 - ifNull(ct.hit_rate, 0)) + w_decode * residual_output AS gap_work,
    pm.pm_work AS span_work,
    span_work + gap_work AS total_work,
    toUInt8(g.g_saturated) AS saturated
FROM keys AS k
LEFT JOIN counters AS ct ON ct.replica = k.replica AND ct.minute = k.minute
LEFT JOIN per_minute AS pm ON pm.pm_replica = k.replica AND pm.pm_minute = k.minute
LEFT JOIN gauges AS g ON g.g_replica = k.replica AND g.g_minute = k.minute;

-- 3. call_costs rows of [ws, we) from the resolved calls and reconciliation of run run_id (0 = the
-- periodic chain's).
-- * Each call split into the minutes it overlaps (work x overlap / duration; a zero-length call sits
--   wholly in its start minute).
-- * Unexplained engine work of a replica-minute (reconciliation gap_work) is charged to the calls
--   on that replica without an engine span whose time overlaps the span the minute's counters
--   cover, in proportion to that overlap (gap_work, inside work; a minute the call has no piece in
--   gets a piece of its own); with no such call it is one `unspanned` row (call_source and
--   category 'unspanned', no task).
-- * Spend of a replica-minute = GPU count x the prices valid in it, pro rata by seconds (a
--   valid_from inside the minute splits it), with the GPU type and count from `replicas` (else the
--   configured default). A piece costs spend x work / greatest(minute work, capacity): the minute
--   allocates spend x min(1, work / capacity), the rest stays idle. Capacity: fleet.yaml, else the
--   median work of the replica's saturated minutes over the 7 days to we (at least 3), else its
--   busiest minute over them.
-- * Category as known at run time: no task -> unattributed; task failed or abandoned ->
--   failed_task_waste; outcome unknown -> pending; task succeeded -> useful when the call
--   succeeded (not error, not partial) with the highest successful attempt of its (step, call),
--   else retry_waste. A task with no root span is abandoned once abandon_timeout_s passed since its
--   last call (at we).
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
    -- unexplained engine work and the calls without an engine span that take it
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
        FROM (SELECT call_id, replica, start_time, end_time FROM calls WHERE call_source != 'engine' AND replica != '') AS c
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

-- 4. Spend and gauges per replica-minute of [ws, we). A row per minute the replica was up (a
-- successful scrape, or work in call_costs) and, for a replica billed `reserved` in fleet.yaml,
-- per minute of the window whether up or not (its down minutes are idle spend). GPU type and
-- count from `replicas` (else the configured default); spend = GPU count x the prices valid in
-- the minute pro rata by seconds (usd_per_gpu_hour: their time-weighted mean; priced = 0: no
-- price valid in any second of it). Gauges from job_replica_gauges.
CREATE OR REPLACE VIEW job_replica_spend AS
WITH
    {ws:DateTime} AS ws,
    {we:DateTime} AS we,
    (SELECT argMax(default_gpu_type, synced_at) FROM cost_settings) AS default_gpu_type,
    (SELECT argMax(default_gpu_count, synced_at) FROM cost_settings) AS default_gpu_count,
    gauges AS (SELECT * FROM job_replica_gauges(ws = {ws:DateTime}, we = {we:DateTime})),
    work_minutes AS (
        SELECT replica AS wm_replica, minute AS wm_minute FROM call_costs
        WHERE minute >= ws AND minute < we AND replica != '' AND work > 0
        GROUP BY replica, minute
    ),
    reserved_minutes AS (
        SELECT replica, minute FROM replicas
        ARRAY JOIN arrayMap(i -> ws + i * 60, range(toUInt64(dateDiff('minute', ws, we)))) AS minute
        WHERE billing = 'reserved'
    ),
    keys AS (
        SELECT replica, minute FROM gauges WHERE up_metrics = 1
        UNION DISTINCT SELECT wm_replica AS replica, wm_minute AS minute FROM work_minutes
        UNION DISTINCT SELECT replica, minute FROM reserved_minutes
    ),
    fleet AS (
        SELECT replica AS f_replica, gpu_type AS f_gpu_type, gpu_count AS f_gpu_count, billing AS f_billing FROM replicas
    ),
    price_arrays AS (
        SELECT gpu_type AS pa_type,
               arraySort(x -> x.1, groupArray((toInt64(toUnixTimestamp(valid_from)), usd_per_gpu_hour))) AS pa
        FROM gpu_prices GROUP BY gpu_type
    ),
    sized AS (
        SELECT k.replica AS replica, k.minute AS minute, toInt64(toUnixTimestamp(k.minute)) AS m_s,
               toUInt8(f.f_replica != '') AS in_fleet,
               if(in_fleet, f.f_gpu_type, default_gpu_type) AS fleet_gpu_type,
               if(in_fleet, f.f_gpu_count, default_gpu_count) AS fleet_gpu_count,
               if(in_fleet AND f.f_billing = 'reserved', 'reserved', 'on_demand') AS billing,
               g.up_metrics AS up_metrics, toUInt8(wm.wm_replica != '') AS up_spans,
               g.queue_waiting_avg AS queue_waiting_avg, g.queue_waiting_max AS queue_waiting_max,
               g.running_avg AS running_avg, g.kv_usage_avg AS kv_usage_avg, g.kv_usage_max AS kv_usage_max,
               g.saturated AS saturated, pa.pa AS prices
        FROM keys AS k
        LEFT JOIN gauges AS g ON g.replica = k.replica AND g.minute = k.minute
        LEFT JOIN work_minutes AS wm ON wm.wm_replica = k.replica AND wm.wm_minute = k.minute
        LEFT JOIN fleet AS f ON f.f_replica = k.replica
        LEFT JOIN price_arrays AS pa ON pa.pa_type = if(f.f_replica != '', f.f_gpu_type, default_gpu_type)
    )
SELECT
    replica, minute, fleet_gpu_type AS gpu_type, toUInt16(fleet_gpu_count) AS gpu_count,
    -- USD per GPU in this minute: each price segment's seconds inside it
    if(length(prices) = 0, 0,
       arraySum(arrayMap(i -> prices[i].2 * greatest(0,
           least(m_s + 60, if(i < length(prices), prices[i + 1].1, m_s + 60)) - greatest(m_s, prices[i].1)),
           arrayEnumerate(prices))) / 3600) AS usd_per_gpu_minute,
    usd_per_gpu_minute * 60 AS usd_per_gpu_hour,
    in_fleet, billing,
    toUInt8(arrayExists(x -> x.1 < m_s + 60, prices)) AS priced,
    toUInt8(up_metrics) AS up_metrics, up_spans, toUInt8(up_metrics OR up_spans) AS up,
    fleet_gpu_count * usd_per_gpu_minute AS spend_usd,
    queue_waiting_avg, queue_waiting_max, running_avg, kv_usage_avg, kv_usage_max, toUInt8(saturated) AS saturated
FROM sized;

-- 5. replica_minutes rows of [ws, we): spend and gauges from job_replica_spend, allocation summed
-- from the call_costs view (the rows readers see), idle = spend - allocated (floored at 0 against
-- float rounding), tokens and latency quantiles of the calls that started in the minute (engine
-- evidence for latencies), counters and the reconciliation of run run_id (reconciliation_*):
-- token_gap = counters - counted_tokens.
CREATE OR REPLACE VIEW job_replica_minutes AS
WITH
    {ws:DateTime} AS ws,
    {we:DateTime} AS we,
    alloc AS (
        SELECT replica, minute,
               sum(cost_usd) AS allocated,
               sumIf(cost_usd, category = 'unattributed') AS unattributed,
               sumIf(cost_usd, category = 'unspanned') AS unspanned,
               countIf(call_source != 'unspanned') AS calls_active,
               sum(requests) AS n_requests,
               sum(prompt_tokens) AS p_tokens,
               sum(cached_tokens) AS c_tokens,
               sumIf(cached_tokens, cached_estimated = 1) AS c_est_tokens,
               sum(output_tokens) AS o_tokens,
               sum(work) AS minute_work,
               sum(gap_work) AS minute_gap_work,
               any(capacity_work) AS capacity,
               any(capacity_source) AS capacity_src,
               quantilesExactIf(0.5, 0.9, 0.99)(ttft_s, first_piece = 1 AND call_source = 'engine' AND ttft_s IS NOT NULL) AS ttft_q,
               quantilesExactIf(0.5, 0.99)(if(output_tokens > 1 AND ttft_s IS NOT NULL, (e2e_s - ttft_s) / (output_tokens - 1), nan),
                                           first_piece = 1 AND call_source = 'engine' AND output_tokens > 1 AND ttft_s IS NOT NULL) AS itl_q,
               quantilesExactIf(0.5, 0.9, 0.99)(e2e_s, first_piece = 1 AND call_source = 'engine') AS e2e_q,
               countIf(first_piece = 1 AND call_source = 'engine' AND ttft_s IS NOT NULL) AS n_ttft,
               countIf(first_piece = 1 AND call_source = 'engine' AND output_tokens > 1 AND ttft_s IS NOT NULL) AS n_itl,
               countIf(first_piece = 1 AND call_source = 'engine') AS n_e2e
        FROM call_costs
        WHERE minute >= ws AND minute < we AND replica != ''
        GROUP BY replica, minute
    ),
    rec AS (
        SELECT * FROM reconciliation_live WHERE {run_id:UInt64} = 0
        UNION ALL
        SELECT * EXCEPT (run_id, written_at) FROM reconciliation_runs WHERE run_id = {run_id:UInt64} AND {run_id:UInt64} != 0
    )
SELECT
    s.minute AS minute, s.replica AS replica, s.gpu_type AS gpu_type, s.gpu_count AS gpu_count,
    s.usd_per_gpu_hour AS usd_per_gpu_hour, s.in_fleet AS in_fleet, s.billing AS billing, s.priced AS priced,
    s.up_metrics AS up_metrics, s.up_spans AS up_spans, s.up AS up,
    s.spend_usd AS spend_usd,
    a.allocated AS allocated_usd,
    greatest(s.spend_usd - a.allocated, 0) AS idle_usd,
    a.unattributed AS unattributed_usd,
    a.unspanned AS unspanned_usd,
    toUInt32(a.calls_active) AS calls_active,
    toUInt32(a.n_requests) AS requests,
    toUInt64(a.p_tokens) AS prompt_tokens,
    toUInt64(a.c_tokens) AS cached_tokens,
    toUInt64(a.c_est_tokens) AS cached_estimated_tokens,
    toUInt64(a.o_tokens) AS output_tokens,
    a.minute_work AS work,
    a.minute_gap_work AS gap_work,
    a.capacity AS capacity_work,
    a.capacity_src AS capacity_source,
    if(a.n_ttft > 0, a.ttft_q[1], NULL) AS ttft_p50_s,
    if(a.n_ttft > 0, a.ttft_q[2], NULL) AS ttft_p90_s,
    if(a.n_ttft > 0, a.ttft_q[3], NULL) AS ttft_p99_s,
    if(a.n_itl > 0, a.itl_q[1], NULL) AS itl_p50_s,
    if(a.n_itl > 0, a.itl_q[2], NULL) AS itl_p99_s,
    if(a.n_e2e > 0, a.e2e_q[1], NULL) AS e2e_p50_s,
    if(a.n_e2e > 0, a.e2e_q[2], NULL) AS e2e_p90_s,
    if(a.n_e2e > 0, a.e2e_q[3], NULL) AS e2e_p99_s,
    s.queue_waiting_avg AS queue_waiting_avg,
    s.queue_waiting_max AS queue_waiting_max,
    s.running_avg AS running_avg,
    s.kv_usage_avg AS kv_usage_avg,
    s.kv_usage_max AS kv_usage_max,
    s.saturated AS saturated,
    r.counter_prompt_tokens AS counter_prompt_tokens,
    r.counter_generation_tokens AS counter_generation_tokens,
    r.counter_cached_tokens AS counter_cached_tokens,
    r.hit_rate AS counter_hit_rate,
    r.preemptions AS preemptions,
    if(r.replica = '', NULL, r.counted_tokens) AS counted_tokens,
    if(r.counter_prompt_tokens IS NULL AND r.counter_generation_tokens IS NULL, NULL,
       ifNull(r.counter_prompt_tokens, 0) + ifNull(r.counter_generation_tokens, 0) - r.counted_tokens) AS token_gap,
    toDateTime(now(), 'UTC') AS computed_at
FROM job_replica_spend(ws = {ws:DateTime}, we = {we:DateTime}) AS s
LEFT JOIN alloc AS a ON a.replica = s.replica AND a.minute = s.minute
LEFT JOIN rec AS r ON r.replica = s.replica AND r.minute = s.minute;

-- 6. tasks rows ending in [ws, we): as 0013's job_tasks, with useful/retry decided per (step,
-- call), steps / step_calls / attempts (distinct step; (step, call); (step, call, attempt)) and
-- the TTFT the user waited (call_costs.user_ttft_s) with its source.
CREATE OR REPLACE VIEW job_tasks AS
WITH
    {ws:DateTime} AS ws,
    {we:DateTime} AS we,
    (SELECT argMax(abandon_timeout_s, synced_at) FROM cost_settings) AS abandon_timeout_s,
    (SELECT argMax(task_lookback_s, synced_at) FROM cost_settings) AS task_lookback_s,
    (SELECT argMax(max_call_s, synced_at) FROM cost_settings) AS max_call_s,
    -- root spans that ended in the window (the exporter's ORDER BY makes this a range read)
    roots AS (
        SELECT task_id AS r_task_id,
               argMax(tuple(task_type, tenant_id, tenant_priority, outcome, start_time, end_time,
                            slo_ttft_ms, slo_e2e_ms), end_time) AS r
        FROM task_spans
        WHERE end_time >= ws AND end_time < we
        GROUP BY task_id
    ),
    -- a rootless task is abandoned abandon_timeout_s after its last call: only calls ending in
    -- [ws - timeout - max_call_s, we) can decide that for this window
    recent_ends AS (
        SELECT task_id AS re_task_id, max(end_time) AS re_last_end
        FROM call_costs
        WHERE minute >= ws - toIntervalSecond(abandon_timeout_s + max_call_s) AND minute < we AND task_id != ''
        GROUP BY task_id
        HAVING re_last_end + toIntervalSecond(abandon_timeout_s) >= ws
           AND re_last_end + toIntervalSecond(abandon_timeout_s) < we
    ),
    rootless AS (
        SELECT re_task_id AS rl_task_id FROM recent_ends
        WHERE re_task_id NOT IN (
            SELECT task_id FROM task_spans
            WHERE end_time >= ws - toIntervalSecond(task_lookback_s) AND end_time < we + toIntervalSecond(task_lookback_s)
              AND task_id IN (SELECT re_task_id FROM recent_ends))
    ),
    -- the ended tasks' pieces: a task with a root span started at its root's start, so those
    -- are read from the earliest such start (at most task_lookback_s back); rootless ones from
    -- task_lookback_s back
    rooted_floor AS (
        SELECT greatest(ws - toIntervalSecond(task_lookback_s),
                        -- 5 minutes of slack for clock skew between the client's and the engines' hosts
                        toStartOfMinute(toDateTime(ifNull(min(r.5), toDateTime64(ws, 9, 'UTC')), 'UTC')) - INTERVAL 5 MINUTE) AS floor_minute
        FROM roots
    ),
    ended_pieces AS (
        SELECT call_id, task_id, task_type, tenant_id, model, task_step, task_call, task_attempt, status, partial,
               start_time, end_time, user_ttft_s, user_ttft_source, cost_usd, prompt_tokens, cached_tokens, output_tokens
        FROM call_costs
        WHERE minute >= (SELECT floor_minute FROM rooted_floor) AND minute < we AND task_id != ''
          AND task_id IN (SELECT r_task_id FROM roots)
        UNION ALL
        SELECT call_id, task_id, task_type, tenant_id, model, task_step, task_call, task_attempt, status, partial,
               start_time, end_time, user_ttft_s, user_ttft_source, cost_usd, prompt_tokens, cached_tokens, output_tokens
        FROM call_costs
        WHERE minute >= ws - toIntervalSecond(task_lookback_s) AND minute < we AND task_id != ''
          AND task_id IN (SELECT rl_task_id FROM rootless)
    ),
    calls AS (
        SELECT call_id, task_id, any(task_type) AS c_type, any(tenant_id) AS c_tenant, any(model) AS c_model,
               any(task_step) AS c_step, any(task_call) AS c_call, any(task_attempt) AS c_attempt,
               any(status) AS c_status, max(partial) AS c_partial, min(start_time) AS c_start, max(end_time) AS c_end,
               any(user_ttft_s) AS c_ttft, any(user_ttft_source) AS c_ttft_source, sum(cost_usd) AS c_cost,
               sum(prompt_tokens) AS c_p_tokens, sum(cached_tokens) AS c_c_tokens, sum(output_tokens) AS c_o_tokens
        FROM ended_pieces
        GROUP BY call_id, task_id
    ),
    calls_ctx AS (
        SELECT *,
               max(c_end) OVER (PARTITION BY task_id) AS last_end,
               maxIf(c_attempt, c_status != 'error' AND c_partial = 0) OVER (PARTITION BY task_id, c_step, c_call) AS ok_attempt
        FROM calls
    ),
    ended_roots AS (SELECT * FROM roots),
    joined AS (
        SELECT
            if(c.task_id != '', c.task_id, rt.r_task_id) AS t_id,
            rt.r_task_id != '' AS has_root,
            multiIf(has_root AND rt.r.4 IN ('success', 'failure', 'abandoned'), rt.r.4,
                    has_root, 'unknown', 'abandoned') AS outcome,
            if(has_root, rt.r.6, toDateTime64(c.last_end + toIntervalSecond(abandon_timeout_s), 9, 'UTC')) AS t_end,
            c.call_id AS call_id, c.c_type AS c_type, c.c_tenant AS c_tenant, c.c_model AS c_model,
            c.c_step AS c_step, c.c_call AS c_call, c.c_attempt AS c_attempt, c.c_status AS c_status,
            c.c_partial AS c_partial, c.c_start AS c_start, c.c_ttft AS c_ttft, c.c_ttft_source AS c_ttft_source,
            c.c_cost AS c_cost,
            c.c_p_tokens AS c_p_tokens, c.c_c_tokens AS c_c_tokens, c.c_o_tokens AS c_o_tokens,
            c.ok_attempt AS ok_attempt,
            rt.r.1 AS r_type, rt.r.2 AS r_tenant, rt.r.3 AS r_priority, rt.r.5 AS r_start,
            rt.r.7 AS r_slo_ttft, rt.r.8 AS r_slo_e2e,
            multiIf(outcome IN ('failure', 'abandoned'), 'failed_task_waste',
                    outcome != 'success', 'pending',
                    c.c_status != 'error' AND c.c_partial = 0 AND c.c_attempt = c.ok_attempt, 'useful',
                    'retry_waste') AS category
        FROM calls_ctx AS c
        FULL OUTER JOIN ended_roots AS rt ON rt.r_task_id = c.task_id
        WHERE t_end >= ws AND t_end < we
    ),
    per_task AS (
        SELECT t_id,
               any(has_root) AS t_has_root, any(outcome) AS t_outcome, any(t_end) AS end_time_,
               any(r_type) AS t_r_type, any(r_tenant) AS t_r_tenant, any(r_priority) AS t_r_priority,
               any(r_start) AS t_r_start, any(r_slo_ttft) AS t_r_slo_ttft, any(r_slo_e2e) AS t_r_slo_e2e,
               anyIf(c_type, call_id != '') AS t_c_type, anyIf(c_tenant, call_id != '') AS t_c_tenant,
               topKIf(1)(c_model, call_id != '') AS t_models,
               minIf(c_start, call_id != '') AS t_c_start,
               uniqExactIf(c_step, call_id != '') AS n_steps,
               uniqExactIf(c_step, c_call, call_id != '') AS n_step_calls,
               uniqExactIf(c_step, c_call, c_attempt, call_id != '') AS n_attempts,
               countIf(call_id != '') AS n_calls,
               sum(c_p_tokens) AS t_p_tokens, sum(c_c_tokens) AS t_c_tokens, sum(c_o_tokens) AS t_o_tokens,
               sum(c_cost) AS t_cost,
               sumIf(c_cost, category = 'useful') AS t_useful,
               sumIf(c_cost, category = 'retry_waste') AS t_retry_waste,
               sumIf(c_cost, category = 'failed_task_waste') AS t_failed_waste,
               sumIf(c_cost, category = 'pending') AS t_pending,
               countIf(call_id != '' AND c_partial = 1) AS n_partial,
               sumIf(c_o_tokens, c_partial = 1) AS t_partial_tokens,
               sumIf(c_cost, c_partial = 1) AS t_partial_cost,
               maxIf(c_ttft, category = 'useful' AND c_ttft IS NOT NULL) AS worst_ttft,
               argMaxIf(c_ttft_source, c_ttft, category = 'useful' AND c_ttft IS NOT NULL) AS worst_ttft_source,
               countIf(category = 'useful' AND c_ttft IS NOT NULL) AS n_ttft
        FROM joined
        GROUP BY t_id
    ),
    slos AS (SELECT task_type AS s_type, argMax(ttft_ms, synced_at) AS s_ttft, argMax(e2e_ms, synced_at) AS s_e2e
             FROM task_slos GROUP BY task_type)
SELECT
    toStartOfMinute(end_time) AS minute,
    pt.t_id AS task_id,
    if(pt.t_r_type != '', pt.t_r_type, pt.t_c_type) AS task_type,
    if(pt.t_r_tenant != '', pt.t_r_tenant, pt.t_c_tenant) AS tenant_id,
    pt.t_r_priority AS tenant_priority,
    if(length(pt.t_models) > 0, pt.t_models[1], '') AS model,
    pt.t_outcome AS outcome,
    toUInt8(pt.t_has_root) AS has_root,
    if(pt.t_has_root, pt.t_r_start, pt.t_c_start) AS start_time,
    pt.end_time_ AS end_time,
    toUInt16(pt.n_steps) AS steps,
    toUInt16(pt.n_step_calls) AS step_calls,
    toUInt16(pt.n_attempts) AS attempts,
    toUInt32(pt.n_calls) AS calls,
    toUInt64(pt.t_p_tokens) AS prompt_tokens,
    toUInt64(pt.t_c_tokens) AS cached_tokens,
    toUInt64(pt.t_o_tokens) AS output_tokens,
    pt.t_cost AS cost_usd,
    pt.t_useful AS useful_usd,
    pt.t_retry_waste AS retry_waste_usd,
    pt.t_failed_waste AS failed_task_waste_usd,
    pt.t_pending AS pending_usd,
    toUInt32(pt.n_partial) AS partial_calls,
    toUInt64(pt.t_partial_tokens) AS partial_tokens,
    pt.t_partial_cost AS partial_usd,
    if(pt.n_ttft > 0, pt.worst_ttft, NULL) AS ttft_s,
    if(pt.n_ttft > 0, pt.worst_ttft_source, '') AS ttft_source,
    greatest((toUnixTimestamp64Nano(end_time) - toUnixTimestamp64Nano(start_time)) / 1e9, 0) AS e2e_s,
    if(pt.t_r_slo_ttft IS NOT NULL, pt.t_r_slo_ttft, sl.s_ttft) AS slo_ttft_ms,
    if(pt.t_r_slo_e2e IS NOT NULL, pt.t_r_slo_e2e, sl.s_e2e) AS slo_e2e_ms,
    toUInt8(pt.t_outcome = 'success'
            AND (slo_ttft_ms IS NULL OR ttft_s IS NULL OR ttft_s * 1000 <= slo_ttft_ms)
            AND (slo_e2e_ms IS NULL OR e2e_s * 1000 <= slo_e2e_ms)) AS slo_met,
    toDateTime(now(), 'UTC') AS computed_at
FROM per_task AS pt
LEFT JOIN slos AS sl ON sl.s_type = if(pt.t_r_type != '', pt.t_r_type, pt.t_c_type);

-- The readers' views expand `*` when created: re-create them (0014's definitions) for the new columns.
CREATE OR REPLACE VIEW call_costs AS
SELECT * FROM call_costs_history WHERE minute < (SELECT max(watermark) FROM cost_watermark)
UNION ALL
SELECT * FROM call_costs_live WHERE minute >= (SELECT max(watermark) FROM cost_watermark);

CREATE OR REPLACE VIEW replica_minutes AS
SELECT * FROM replica_minutes_history WHERE minute < (SELECT max(watermark) FROM cost_watermark)
UNION ALL
SELECT * FROM replica_minutes_live WHERE minute >= (SELECT max(watermark) FROM cost_watermark);

CREATE OR REPLACE VIEW tasks AS
SELECT * FROM tasks_history WHERE minute < (SELECT max(watermark) FROM cost_watermark)
UNION ALL
SELECT * FROM tasks_live WHERE minute >= (SELECT max(watermark) FROM cost_watermark);

-- The refreshable views writing these tables store their column list when created: restate their
-- queries (0014's; replica_minutes now reads the chain's reconciliation, run_id 0). MODIFY QUERY
-- keeps their schedule and DEPENDS ON chain. The chain gains cost_reconciliation_mv between
-- resolution and call_costs.
ALTER TABLE cost_copy_call_costs_mv MODIFY QUERY
SELECT * FROM call_costs_live
WHERE minute >= (SELECT max(watermark) FROM cost_watermark)
  AND minute < (SELECT max(we) - toIntervalSecond(max(window_s) - 600) FROM job_clock)
  AND minute NOT IN (SELECT DISTINCT minute FROM call_costs_history
                     WHERE minute >= (SELECT max(watermark) FROM cost_watermark));

ALTER TABLE cost_copy_replica_minutes_mv MODIFY QUERY
SELECT * FROM replica_minutes_live
WHERE minute >= (SELECT max(watermark) FROM cost_watermark)
  AND minute < (SELECT max(we) - toIntervalSecond(max(window_s) - 600) FROM job_clock)
  AND minute NOT IN (SELECT DISTINCT minute FROM replica_minutes_history
                     WHERE minute >= (SELECT max(watermark) FROM cost_watermark));

ALTER TABLE cost_copy_tasks_mv MODIFY QUERY
SELECT * FROM tasks_live
WHERE minute >= (SELECT max(watermark) FROM cost_watermark)
  AND minute < (SELECT max(we) - toIntervalSecond(max(window_s) - 600) FROM job_clock)
  AND minute NOT IN (SELECT DISTINCT minute FROM tasks_history
                     WHERE minute >= (SELECT max(watermark) FROM cost_watermark));

ALTER TABLE cost_resolved_calls_mv MODIFY QUERY
SELECT * FROM job_resolved_calls(ws = (SELECT max(ws) FROM job_clock), we = (SELECT max(we) FROM job_clock));

CREATE MATERIALIZED VIEW IF NOT EXISTS cost_reconciliation_mv
REFRESH EVERY 1 MINUTE DEPENDS ON cost_resolved_calls_mv TO reconciliation_live EMPTY
AS SELECT * FROM job_reconciliation(ws = (SELECT max(ws) FROM job_clock), we = (SELECT max(we) FROM job_clock), run_id = 0);

ALTER TABLE cost_call_costs_mv MODIFY REFRESH EVERY 1 MINUTE DEPENDS ON cost_reconciliation_mv;

ALTER TABLE cost_call_costs_mv MODIFY QUERY
SELECT * FROM job_call_costs(ws = (SELECT max(ws) FROM job_clock), we = (SELECT max(we) FROM job_clock), run_id = 0);

ALTER TABLE cost_replica_minutes_mv MODIFY QUERY
SELECT * FROM job_replica_minutes(ws = (SELECT max(ws) FROM job_clock), we = (SELECT max(we) FROM job_clock), run_id = 0);

ALTER TABLE cost_tasks_mv MODIFY QUERY
SELECT * FROM job_tasks(ws = (SELECT max(ws) FROM job_clock), we = (SELECT max(we) FROM job_clock));

-- The chain was paused while its tables changed (0061): resume it.
SYSTEM START VIEW cost_copy_call_costs_mv;
SYSTEM START VIEW cost_copy_replica_minutes_mv;
SYSTEM START VIEW cost_copy_tasks_mv;
SYSTEM START VIEW cost_watermark_mv;
SYSTEM START VIEW cost_clock_mv;
SYSTEM START VIEW cost_resolved_calls_mv;
SYSTEM START VIEW cost_reconciliation_mv;
SYSTEM START VIEW cost_call_costs_mv;
SYSTEM START VIEW cost_replica_minutes_mv;
SYSTEM START VIEW cost_tasks_mv;
