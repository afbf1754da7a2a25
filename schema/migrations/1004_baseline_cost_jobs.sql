-- The cost model: one parameterized view per job step over a window [ws, we) of whole UTC minutes.
-- The periodic chain (1005) and the explicit runner (schema/jobs) run these same views; schema/jobs/README.md
-- walks one call through them.

-- Step 1a. Engine counters: what each replica's vLLM counters say it did per minute.
-- Per replica-minute of [ws, we), with the span a restarted series covers and the cached prompt tokens by source.
CREATE VIEW IF NOT EXISTS job_engine_counters AS
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

-- Step 1b. Gauges: each replica-minute's queue, running requests, KV use, saturation and whether it was up.
CREATE VIEW IF NOT EXISTS job_replica_gauges AS
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

-- Step 1c. Calls: llm_calls rows grouped into units of GPU work, each field from its best evidence, with task context.
-- Task context explicit (task.id) or derived from the trace's root; engine spans joined to their client
-- call by response id, parent link or containment.
CREATE VIEW IF NOT EXISTS job_resolved_calls AS
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
    -- A gateway request that is the root of its own trace (the client sent no traceparent, as today's
    -- openai client does not) belongs to the one client call span whose gen_ai.response.id is the request
    -- id the gateway's attempt relayed, as an engine root does (by_response_id): the client span is covered
    -- by the gateway's attempts, not a call of its own. A request id two client spans claim stays unjoined.
    gw_by_response_id AS (
        SELECT to_trace, to_span, g_trace, g_request
        FROM (
            SELECT anyIf(trace_id, call_source = 'client') AS to_trace,
                   anyIf(span_id, call_source = 'client') AS to_span,
                   anyIf(trace_id, call_source = 'gateway') AS g_trace,
                   anyIf(parent_span_id, call_source = 'gateway') AS g_request
            FROM llm_calls
            WHERE start_time >= lo AND start_time < we AND request_id != '' AND call_source IN ('client', 'gateway')
            GROUP BY request_id
            HAVING countIf(call_source = 'client') = 1 AND countIf(call_source = 'gateway') > 0
               AND uniqExactIf((trace_id, parent_span_id), call_source = 'gateway') = 1
        )
        WHERE (g_trace, g_request) IN (SELECT trace_id, span_id FROM gw_requests WHERE parent_span_id = '')
    ),
    covered AS (
        SELECT c.trace_id AS cv_trace_id, g.span_id AS cv_request, c.trace_id AS cv_client_trace, c.ttft_s AS cv_ttft,
               c.error_class AS cv_class, c.model AS cv_model, c.finish_reason AS cv_finish
        FROM llm_calls AS c
        INNER JOIN gw_requests AS g ON g.trace_id = c.trace_id AND g.parent_span_id = c.span_id
        WHERE c.call_source = 'client' AND c.start_time >= lo AND c.start_time < we
        UNION ALL
        SELECT r.g_trace, r.g_request, c.trace_id, c.ttft_s, c.error_class, c.model, c.finish_reason
        FROM llm_calls AS c
        INNER JOIN gw_by_response_id AS r ON r.to_trace = c.trace_id AND r.to_span = c.span_id
        WHERE c.call_source = 'client' AND c.start_time >= lo AND c.start_time < we
    ),
    -- vLLM spans that are roots of their own trace (the client sent no traceparent, as today's openai
    -- client does not), each joined to the one client call span whose gen_ai.response.id is its
    -- gen_ai.request.id: the engine request is that call's, in the client's trace, never a second
    -- call. A request id that two client spans claim stays unjoined (no guess). n > 1: every choice's
    -- span joins the same call.
    by_response_id AS (
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
    by_response_id_ids AS (
        SELECT request_id FROM llm_calls
        WHERE start_time >= lo AND start_time < we AND call_source = 'client' AND request_id != ''
    ),
    -- A client call span that records no response id (OpenInference's LLM spans) and an engine root
    -- span whose request id no client span claims: the same prompt and output token counts, the same
    -- model (or one a suffix of the other: "org/name" and "name"), the engine span inside the client
    -- span's time (1 s of slack for the hosts' clocks). Parallel calls of one trace with equal counts
    -- pair in start order (either pairing gives the task the same figures); an engine span whose
    -- candidates lie in two traces is left unjoined, never guessed: it stays an unattributed engine call,
    -- and each client span a call with no replica (no spend; the data-quality panel counts them).
    contained_pairs AS (
        SELECT e.trace_id AS e_trace, e.span_id AS e_span, e.start_time AS e_start,
               c.trace_id AS c_trace, c.span_id AS c_span, c.start_time AS c_start,
               e.prompt_tokens AS p_tokens, e.output_tokens AS o_tokens,
               uniqExact(c.trace_id) OVER (PARTITION BY e.trace_id, e.span_id) AS n_traces
        FROM (SELECT trace_id, span_id, model, prompt_tokens, output_tokens, start_time, end_time, request_id
              FROM llm_calls
              WHERE start_time >= lo AND start_time < we AND call_source = 'engine' AND parent_span_id = ''
                AND prompt_tokens IS NOT NULL AND output_tokens IS NOT NULL) AS e
        INNER JOIN (SELECT trace_id, span_id, model, prompt_tokens, output_tokens, start_time, end_time
                    FROM llm_calls
                    WHERE start_time >= lo AND start_time < we AND call_source = 'client' AND request_id = ''
                      AND prompt_tokens IS NOT NULL AND output_tokens IS NOT NULL) AS c
            ON c.prompt_tokens = e.prompt_tokens AND c.output_tokens = e.output_tokens
        WHERE e.start_time >= c.start_time - INTERVAL 1 SECOND AND e.end_time <= c.end_time + INTERVAL 1 SECOND
          AND (e.model = c.model OR endsWith(e.model, concat('/', c.model)) OR endsWith(c.model, concat('/', e.model)))
          AND (e.request_id = '' OR e.request_id NOT IN (SELECT request_id FROM by_response_id_ids))
    ),
    by_containment AS (
        SELECT pr.1 AS a_trace, pr.2 AS a_span, c_trace AS to_trace, pr.3 AS to_span
        FROM (
            SELECT c_trace,
                   arraySort(x -> x.3, groupUniqArray((e_trace, e_span, e_start))) AS engines,
                   arraySort(x -> x.2, groupUniqArray((c_span, c_start))) AS clients,
                   arrayMap(i -> (engines[i].1, engines[i].2, clients[i].1),
                            range(1, least(length(engines), length(clients)) + 1)) AS pairs
            FROM contained_pairs
            WHERE n_traces = 1
            GROUP BY c_trace, p_tokens, o_tokens
        )
        ARRAY JOIN pairs AS pr
    ),
    -- HTTP client spans under a call (the OpenAI client's requests, instrumented by httpx / requests):
    -- a propagated traceparent makes vLLM's span their child, so it belongs to their parent call
    http_attempts AS (
        SELECT trace_id AS ha_trace, span_id AS ha_span, parent_span_id AS ha_parent
        FROM llm_calls
        WHERE start_time >= lo AND start_time < we AND call_source = 'http' AND parent_span_id != ''
    ),
    adopted AS (
        SELECT * FROM by_response_id
        UNION ALL
        SELECT * FROM by_containment
    ),
    units AS (
        SELECT
            any(if(a.to_trace != '', a.to_trace, l.trace_id)) AS u_trace_id,
            -- one 64-bit key per (trace, unit): hashing two strings once is cheaper than grouping by them
            cityHash64(if(a.to_trace != '', a.to_trace, l.trace_id),
                       multiIf(a.to_trace != '', a.to_span,
                               call_source = 'engine' AND ha.ha_parent != '', ha.ha_parent,
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
        LEFT JOIN http_attempts AS ha ON ha.ha_trace = l.trace_id AND ha.ha_span = l.parent_span_id
        WHERE l.start_time >= lo AND l.start_time < we AND l.call_source != 'http'
          AND NOT (l.call_source = 'client' AND (l.trace_id, l.span_id) IN (SELECT trace_id, parent_span_id FROM gw_requests))
          AND NOT (l.call_source = 'client' AND (l.trace_id, l.span_id) IN (SELECT to_trace, to_span FROM gw_by_response_id))
        GROUP BY unit_key
    ),
    resolved AS (
        SELECT
            u.*, cv.cv_ttft AS cv_ttft, cv.cv_class AS cv_class, cv.cv_model AS cv_model, cv.cv_finish AS cv_finish,
            cv.cv_client_trace AS cv_client_trace,
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
    -- no explicit task context: a client call span's task is its trace's root (task_spans_mv), whether
    -- the span is in the unit or covers the gateway's request; an engine span alone (no client span above
    -- or joined to it) stays unattributed
    multiIf(ctx.1 != '', ctx.1, n_client > 0, u_trace_id, ifNull(cv_client_trace, '')) AS task_id, ctx.2 AS task_type, ctx.3 AS tenant_id, ctx.4 AS task_step,
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

-- Step 2. Reconciliation: per replica-minute, the calls' work against the counters (the gap work no span explains).
CREATE VIEW IF NOT EXISTS job_reconciliation AS
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

-- Step 3. Allocation: each call split into the minutes it overlaps, priced, and given its category -> call_costs.
-- A derived task's outcome, type and tenant come from its root.
CREATE VIEW IF NOT EXISTS job_call_costs AS
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
        SELECT task_id AS tl_task_id, max(end_time) AS task_last_end,
               argMax(status, end_time) AS task_last_status
        FROM calls WHERE task_id != '' GROUP BY task_id
    ),
    step_ok AS (
        SELECT task_id AS so_task_id, task_step AS so_step, task_call AS so_call,
               maxIf(task_attempt, status != 'error' AND partial = 0) AS ok_attempt
        FROM calls WHERE task_id != '' GROUP BY task_id, task_step, task_call
    ),
    -- evaluation results on the tasks' traces: any fail label fails the task, else a pass label passes it
    verdicts AS (
        SELECT trace_id AS v_trace,
               multiIf(max(outcome = 'failure'), 'failure', max(outcome = 'success'), 'success', '') AS verdict
        FROM task_spans
        WHERE context_source = 'evaluation'
          AND end_time >= ws - toIntervalSecond((SELECT argMax(task_lookback_s, synced_at) FROM cost_settings))
          AND end_time < we + toIntervalSecond((SELECT argMax(task_lookback_s, synced_at) FROM cost_settings))
        GROUP BY trace_id
    ),
    roots AS (
        SELECT rr.*, ifNull(v.verdict, '') AS root_verdict
        FROM (
            SELECT task_id AS r_task_id,
                   argMax(tuple(outcome, context_source, status, task_type, tenant_id), end_time) AS rt,
                   rt.1 AS raw_outcome, rt.2 AS root_source, rt.3 AS root_status, rt.4 AS root_type, rt.5 AS root_tenant
            FROM task_spans
            WHERE end_time >= ws - toIntervalSecond(2 * max_call_s)
              AND end_time < we + toIntervalSecond((SELECT argMax(task_lookback_s, synced_at) FROM cost_settings))
              AND task_id IN (SELECT task_id FROM calls WHERE task_id != '') AND context_source != 'evaluation'
            GROUP BY task_id) AS rr
        LEFT JOIN verdicts AS v ON v.v_trace = rr.r_task_id
    ),
    sized AS (
        SELECT k.*, k.call_work * k.share + k.gap_w AS piece_work,
               rm.rm_total AS total_work, cp.cp_work AS capacity_work_, cp.cp_source AS capacity_source_,
               tl.task_last_end AS task_last_end, so.ok_attempt AS ok_attempt,
               toUInt8(f.f_replica != '') AS in_fleet,
               if(in_fleet, f.f_gpu_type, default_gpu_type) AS fleet_gpu_type,
               if(in_fleet, f.f_gpu_count, default_gpu_count) AS fleet_gpu_count,
               r.r_task_id != '' AS has_root,
               -- a derived root (not the task SDK's): failure when its status is Error or the task's
               -- last call ended in Error with nothing after it; success otherwise; task.outcome on the
               -- root, then an evaluation result on the trace, override both
               multiIf(r.raw_outcome IN ('success', 'failure', 'abandoned') OR r.root_source = 'sdk', r.raw_outcome,
                       r.root_verdict != '', r.root_verdict,
                       r.root_status = 'error' OR tl.task_last_status = 'error', 'failure',
                       'success') AS root_outcome,
               r.root_type AS root_type, r.root_tenant AS root_tenant,
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
    s.task_id AS task_id,
    -- a derived task's calls carry no task.type: its root's, once the root has arrived
    if(s.task_type != '' OR NOT s.has_root, s.task_type, s.root_type) AS task_type,
    if(s.tenant_id != '' OR NOT s.has_root, s.tenant_id, s.root_tenant) AS tenant_id,
    s.task_step AS task_step,
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

-- Step 4a. Spend: each replica-minute's GPU spend at the prices valid in it.
CREATE VIEW IF NOT EXISTS job_replica_spend AS
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

-- Step 4b. Replica-minutes: spend, allocated, idle, tokens and gauges per replica-minute -> replica_minutes.
CREATE VIEW IF NOT EXISTS job_replica_minutes AS
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

-- Step 5. Tasks: each task's outcome and its cost by category -> tasks.
-- Derived roots too, with where each task's context came from.
CREATE VIEW IF NOT EXISTS job_tasks AS
WITH
    {ws:DateTime} AS ws,
    {we:DateTime} AS we,
    (SELECT argMax(abandon_timeout_s, synced_at) FROM cost_settings) AS abandon_timeout_s,
    (SELECT argMax(task_lookback_s, synced_at) FROM cost_settings) AS task_lookback_s,
    (SELECT argMax(max_call_s, synced_at) FROM cost_settings) AS max_call_s,
    -- root spans that ended in the window (the exporter's ORDER BY makes this a range read)
    -- evaluation results on the tasks' traces: any fail label fails the task, else a pass label passes it
    verdicts AS (
        SELECT trace_id AS v_trace,
               multiIf(max(outcome = 'failure'), 'failure', max(outcome = 'success'), 'success', '') AS verdict
        FROM task_spans
        WHERE context_source = 'evaluation'
          AND end_time >= ws - toIntervalSecond((SELECT argMax(task_lookback_s, synced_at) FROM cost_settings))
          AND end_time < we + toIntervalSecond((SELECT argMax(task_lookback_s, synced_at) FROM cost_settings))
        GROUP BY trace_id
    ),
    roots AS (
        SELECT rr.*, ifNull(v.verdict, '') AS r_verdict
        FROM (
            SELECT task_id AS r_task_id,
                   argMax(tuple(task_type, tenant_id, tenant_priority, outcome, start_time, end_time,
                                slo_ttft_ms, slo_e2e_ms, context_source, status), end_time) AS r
            FROM task_spans
            WHERE end_time >= ws AND end_time < we AND context_source != 'evaluation'
            GROUP BY task_id) AS rr
        LEFT JOIN verdicts AS v ON v.v_trace = rr.r_task_id
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
              AND task_id IN (SELECT re_task_id FROM recent_ends) AND context_source != 'evaluation')
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
    -- two reads of call_costs, one per kind (disjoint: a rootless task has no root in roots' range):
    -- the rooted tasks' pieces from their earliest root start on (a range of the primary key), the
    -- rootless tasks' from task_lookback_s back, where the few ids of the set let the task_id
    -- bloom filter skip the granules without them (thousands of ids in one set, as the rooted
    -- tasks are, pass every granule)
    ended_pieces AS (
        SELECT call_id, task_id, task_type, tenant_id, model, task_step, task_call, task_attempt, status, partial,
               start_time, end_time, user_ttft_s, user_ttft_source, cost_usd, prompt_tokens, cached_tokens, output_tokens,
               trace_id
        FROM call_costs
        WHERE minute >= (SELECT floor_minute FROM rooted_floor) AND minute < we AND task_id != ''
          AND task_id IN (SELECT r_task_id FROM roots)
        UNION ALL
        SELECT call_id, task_id, task_type, tenant_id, model, task_step, task_call, task_attempt, status, partial,
               start_time, end_time, user_ttft_s, user_ttft_source, cost_usd, prompt_tokens, cached_tokens, output_tokens,
               trace_id
        FROM call_costs
        WHERE minute >= ws - toIntervalSecond(task_lookback_s) AND minute < we AND task_id != ''
          AND task_id IN (SELECT rl_task_id FROM rootless)
    ),
    calls AS (
        SELECT call_id, task_id, any(task_type) AS c_type, any(tenant_id) AS c_tenant, any(model) AS c_model,
               any(task_step) AS c_step, any(task_call) AS c_call, any(task_attempt) AS c_attempt,
               any(status) AS c_status, max(partial) AS c_partial, min(start_time) AS c_start, max(end_time) AS c_end,
               any(user_ttft_s) AS c_ttft, any(user_ttft_source) AS c_ttft_source, sum(cost_usd) AS c_cost,
               sum(prompt_tokens) AS c_p_tokens, sum(cached_tokens) AS c_c_tokens, sum(output_tokens) AS c_o_tokens,
               max(trace_id = task_id) AS c_of_trace
        FROM ended_pieces
        GROUP BY call_id, task_id
    ),
    calls_ctx AS (
        SELECT *,
               max(c_end) OVER (PARTITION BY task_id) AS last_end,
               argMax(c_status, c_end) OVER (PARTITION BY task_id) AS last_status,
               maxIf(c_attempt, c_status != 'error' AND c_partial = 0) OVER (PARTITION BY task_id, c_step, c_call) AS ok_attempt
        FROM calls
    ),
    ended_roots AS (SELECT * FROM roots),
    joined AS (
        SELECT
            if(c.task_id != '', c.task_id, rt.r_task_id) AS t_id,
            rt.r_task_id != '' AS has_root,
            -- a derived root (not the task SDK's) fails when its status is Error or the task's last
            -- call ended in Error with nothing after it; task.outcome on the root, then an evaluation
            -- result on the trace, override both
            multiIf(has_root AND rt.r.4 IN ('success', 'failure', 'abandoned'), rt.r.4,
                    has_root AND rt.r.9 != 'sdk' AND rt.r_verdict != '', rt.r_verdict,
                    has_root AND rt.r.9 != 'sdk', if(rt.r.10 = 'error' OR c.last_status = 'error', 'failure', 'success'),
                    has_root, 'unknown', 'abandoned') AS outcome,
            if(has_root, rt.r.6, toDateTime64(c.last_end + toIntervalSecond(abandon_timeout_s), 9, 'UTC')) AS t_end,
            c.call_id AS call_id, c.c_type AS c_type, c.c_tenant AS c_tenant, c.c_model AS c_model,
            c.c_step AS c_step, c.c_call AS c_call, c.c_attempt AS c_attempt, c.c_status AS c_status,
            c.c_partial AS c_partial, c.c_start AS c_start, c.c_ttft AS c_ttft, c.c_ttft_source AS c_ttft_source,
            c.c_cost AS c_cost,
            c.c_p_tokens AS c_p_tokens, c.c_c_tokens AS c_c_tokens, c.c_o_tokens AS c_o_tokens,
            c.ok_attempt AS ok_attempt,
            rt.r.1 AS r_type, rt.r.2 AS r_tenant, rt.r.3 AS r_priority, rt.r.5 AS r_start,
            rt.r.7 AS r_slo_ttft, rt.r.8 AS r_slo_e2e, rt.r.9 AS r_source, c.c_of_trace AS c_of_trace,
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
               any(r_source) AS t_r_source, max(c_of_trace) AS t_of_trace,
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
    -- a derived task's calls carry no task.step / task.call / task.attempt: each call is one attempt
    toUInt16(if(pt.t_of_trace, pt.n_calls, pt.n_step_calls)) AS step_calls,
    toUInt16(if(pt.t_of_trace, pt.n_calls, pt.n_attempts)) AS attempts,
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
    toDateTime(now(), 'UTC') AS computed_at,
    multiIf(pt.t_has_root, pt.t_r_source, pt.t_of_trace, 'trace_without_root', 'sdk') AS context_source
FROM per_task AS pt
LEFT JOIN slos AS sl ON sl.s_type = if(pt.t_r_type != '', pt.t_r_type, pt.t_c_type)
-- a root span of a trace without task context is a task only when its trace made model calls
WHERE NOT (pt.t_has_root AND pt.t_r_source != 'sdk' AND pt.n_calls = 0);

-- After the rollups: the triangle's blocks of hours that are due.
-- The blocks the rollup step writes for a run over [ws, we): those overlapping it whose every hour
-- has a complete rollup and whose current hour versions no mark names yet (d_versions in hour order).
CREATE VIEW IF NOT EXISTS job_triangle_blocks_due AS
WITH toStartOfDay(toStartOfHour({ws:DateTime})) AS b0,
     toStartOfDay(toStartOfHour({we:DateTime} - INTERVAL 1 SECOND)) + INTERVAL 1 DAY AS b_end
SELECT d_seconds, d_start, d_versions
FROM (SELECT s AS d_seconds,
             if(s = 21600, toStartOfInterval(hour, toIntervalSecond(21600)),
                toStartOfInterval(hour, toIntervalSecond(86400))) AS d_start,
             arrayMap(x -> x.2, arraySort(groupArray((hour, newest)))) AS d_versions
      FROM (SELECT hour, max(version) AS newest FROM cost_rollup_hours
            WHERE hour >= b0 AND hour < b_end
            GROUP BY hour HAVING argMax(complete, version) = 1)
      ARRAY JOIN [toUInt32(21600), toUInt32(86400)] AS s
      GROUP BY d_seconds, d_start
      HAVING length(d_versions) = intDiv(d_seconds, 3600)
         AND d_start + toIntervalSecond(d_seconds) > toStartOfHour({ws:DateTime})
         AND d_start < {we:DateTime})
WHERE (d_seconds, d_start, d_versions) NOT IN (
    SELECT block_seconds, block_start, hour_versions FROM cost_triangle_block_marks
    WHERE block_start >= b0 AND block_start < b_end);
