-- The cost jobs' engine counters and gauges computed once per run. Before, every
-- statement that needed them expanded their views again: job_reconciliation expanded
-- job_engine_counters twice and job_replica_gauges once, job_replica_spend (inside
-- job_replica_minutes) the gauges again, and job_replica_gauges computed its per-minute gauges and
-- its other points twice each (one UNION DISTINCT of their keys joined to both). Each expansion is
-- planned and read anew: the gauges of a 1-day chunk cost ~0.9 CPU-s per expansion at 1M calls.
-- Now
--   * a run materializes them once, like the resolved calls: the explicit runner into
--     engine_counters_runs / replica_gauges_runs under its run_id (schema/jobs/run_resolve.sql,
--     dropped with the run's other scratch rows), the periodic chain into engine_counters_live /
--     replica_gauges_live (two refreshable views between resolution and reconciliation);
--   * job_reconciliation and job_replica_spend read those tables (job_replica_spend takes run_id;
--     job_replica_minutes passes it); job_resolved_calls still expands the counters once;
--   * job_replica_gauges joins its per-minute gauges and other points once, by a FULL OUTER JOIN
--     (both are grouped by replica and minute).
-- Same columns and rows (tests/test_cost_job_views.py compares them with 0180's on a scenario).

CREATE TABLE IF NOT EXISTS engine_counters_live
ENGINE = MergeTree ORDER BY (replica, minute)
EMPTY AS SELECT * FROM job_engine_counters(ws = toDateTime(0, 'UTC'), we = toDateTime(0, 'UTC'));

CREATE TABLE IF NOT EXISTS engine_counters_runs
ENGINE = MergeTree PARTITION BY run_id ORDER BY (run_id, replica, minute) TTL written_at + INTERVAL 1 DAY
EMPTY AS SELECT toUInt64(0) AS run_id, *, toDateTime(now(), 'UTC') AS written_at
FROM job_engine_counters(ws = toDateTime(0, 'UTC'), we = toDateTime(0, 'UTC'));

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
    if(gm.replica != '', gm.replica, op.replica) AS replica,
    if(gm.replica != '', gm.minute, op.minute) AS minute,
    toUInt8(ifNull(gm.scraped, 0) OR op.replica != '') AS up_metrics,
    gm.queue_waiting_avg AS queue_waiting_avg, gm.queue_waiting_max AS queue_waiting_max,
    gm.running_avg AS running_avg, gm.kv_usage_avg AS kv_usage_avg, gm.kv_usage_max AS kv_usage_max,
    toUInt8(ifNull(gm.sat, 0)) AS saturated
-- each (replica, minute) with gauges or other points once: both sides are grouped by it
FROM gauge_minutes AS gm
FULL OUTER JOIN other_points AS op ON op.replica = gm.replica AND op.minute = gm.minute;

CREATE TABLE IF NOT EXISTS replica_gauges_live
ENGINE = MergeTree ORDER BY (replica, minute)
EMPTY AS SELECT * FROM job_replica_gauges(ws = toDateTime(0, 'UTC'), we = toDateTime(0, 'UTC'));

CREATE TABLE IF NOT EXISTS replica_gauges_runs
ENGINE = MergeTree PARTITION BY run_id ORDER BY (run_id, replica, minute) TTL written_at + INTERVAL 1 DAY
EMPTY AS SELECT toUInt64(0) AS run_id, *, toDateTime(now(), 'UTC') AS written_at
FROM job_replica_gauges(ws = toDateTime(0, 'UTC'), we = toDateTime(0, 'UTC'));

CREATE OR REPLACE VIEW job_reconciliation AS
WITH
    {ws:DateTime} AS ws,
    {we:DateTime} AS we,
    {run_id:UInt64} AS p_run_id,
    (SELECT argMax(w_prefill, synced_at) FROM cost_settings) AS w_prefill,
    (SELECT argMax(w_decode, synced_at) FROM cost_settings) AS w_decode,
    -- the run's engine counters and gauges, materialized once (engine_counters_live / _runs,
    -- replica_gauges_live / _runs): not expanded here
    counters AS (
        SELECT * FROM engine_counters_live WHERE p_run_id = 0
        UNION ALL
        SELECT * EXCEPT (run_id, written_at) FROM engine_counters_runs WHERE run_id = p_run_id AND p_run_id != 0
    ),
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
    gauges AS (SELECT replica AS g_replica, minute AS g_minute, saturated AS g_saturated FROM replica_gauges_live
               WHERE p_run_id = 0
               UNION ALL
               SELECT replica, minute, saturated FROM replica_gauges_runs WHERE run_id = p_run_id AND p_run_id != 0)
SELECT
    if(ct.replica != '', ct.replica, pm.pm_replica) AS replica,
    toDateTime(if(ct.replica != '', ct.minute, pm.pm_minute), 'UTC') AS minute,
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
-- each (replica, minute) with counters or call pieces once: both sides are grouped by it
FROM counters AS ct
FULL OUTER JOIN per_minute AS pm ON pm.pm_replica = ct.replica AND pm.pm_minute = ct.minute
LEFT JOIN gauges AS g ON g.g_replica = if(ct.replica != '', ct.replica, pm.pm_replica)
                    AND g.g_minute = if(ct.replica != '', ct.minute, pm.pm_minute);

CREATE OR REPLACE VIEW job_replica_spend AS
WITH
    {ws:DateTime} AS ws,
    {we:DateTime} AS we,
    {run_id:UInt64} AS p_run_id,
    (SELECT argMax(default_gpu_type, synced_at) FROM cost_settings) AS default_gpu_type,
    (SELECT argMax(default_gpu_count, synced_at) FROM cost_settings) AS default_gpu_count,
    gauges AS (
        SELECT * FROM replica_gauges_live WHERE p_run_id = 0
        UNION ALL
        SELECT * EXCEPT (run_id, written_at) FROM replica_gauges_runs WHERE run_id = p_run_id AND p_run_id != 0
    ),
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
    -- the gauges and the work minutes joined once (both grouped by replica and minute), then the
    -- reserved minutes; a key is a minute up by the gauges, with work, or reserved
    gauges_work AS (
        SELECT if(g.replica != '', g.replica, wm.wm_replica) AS gw_replica,
               toDateTime(if(g.replica != '', g.minute, wm.wm_minute), 'UTC') AS gw_minute,
               g.up_metrics AS up_metrics, toUInt8(wm.wm_replica != '') AS up_spans,
               g.queue_waiting_avg AS queue_waiting_avg, g.queue_waiting_max AS queue_waiting_max,
               g.running_avg AS running_avg, g.kv_usage_avg AS kv_usage_avg, g.kv_usage_max AS kv_usage_max,
               g.saturated AS saturated
        FROM gauges AS g
        FULL OUTER JOIN work_minutes AS wm ON wm.wm_replica = g.replica AND wm.wm_minute = g.minute
    ),
    keys AS (
        SELECT if(gw.gw_replica != '', gw.gw_replica, rs.replica) AS replica,
               toDateTime(if(gw.gw_replica != '', gw.gw_minute, rs.minute), 'UTC') AS minute,
               gw.up_metrics AS up_metrics, gw.up_spans AS up_spans,
               gw.queue_waiting_avg AS queue_waiting_avg, gw.queue_waiting_max AS queue_waiting_max,
               gw.running_avg AS running_avg, gw.kv_usage_avg AS kv_usage_avg, gw.kv_usage_max AS kv_usage_max,
               gw.saturated AS saturated
        FROM gauges_work AS gw
        FULL OUTER JOIN (SELECT DISTINCT replica, minute FROM reserved_minutes) AS rs
            ON rs.replica = gw.gw_replica AND rs.minute = gw.gw_minute
        WHERE gw.up_metrics = 1 OR gw.up_spans = 1 OR rs.replica != ''
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
               k.up_metrics AS up_metrics, k.up_spans AS up_spans,
               k.queue_waiting_avg AS queue_waiting_avg, k.queue_waiting_max AS queue_waiting_max,
               k.running_avg AS running_avg, k.kv_usage_avg AS kv_usage_avg, k.kv_usage_max AS kv_usage_max,
               k.saturated AS saturated, pa.pa AS prices
        FROM keys AS k
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
FROM job_replica_spend(ws = {ws:DateTime}, we = {we:DateTime}, run_id = {run_id:UInt64}) AS s
LEFT JOIN alloc AS a ON a.replica = s.replica AND a.minute = s.minute
LEFT JOIN rec AS r ON r.replica = s.replica AND r.minute = s.minute;

-- The periodic chain: counters and gauges of the clock's window after resolution, before reconciliation.
CREATE MATERIALIZED VIEW IF NOT EXISTS cost_engine_counters_mv
REFRESH EVERY 1 MINUTE DEPENDS ON cost_resolved_calls_mv TO engine_counters_live EMPTY
AS SELECT * FROM job_engine_counters(ws = (SELECT max(ws) FROM job_clock), we = (SELECT max(we) FROM job_clock));

CREATE MATERIALIZED VIEW IF NOT EXISTS cost_replica_gauges_mv
REFRESH EVERY 1 MINUTE DEPENDS ON cost_engine_counters_mv TO replica_gauges_live EMPTY
AS SELECT * FROM job_replica_gauges(ws = (SELECT max(ws) FROM job_clock), we = (SELECT max(we) FROM job_clock));

ALTER TABLE cost_reconciliation_mv MODIFY REFRESH EVERY 1 MINUTE DEPENDS ON cost_replica_gauges_mv;
