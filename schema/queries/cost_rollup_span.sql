-- How the cost queries split [start, end) (cost.rollup_span): the watermark (minutes below it are
-- read from *_history, from it on from *_live, as the views call_costs / replica_minutes / tasks
-- do), and the whole hours of the range whose newest cost_rollup_hours row says complete (migration
-- 1003), with that row's version, in hour order. With block_seconds > 0 also the marks of the
-- triangle's blocks of that size inside the range (migration 1003): start, version, hour versions
-- (cost.rollup_span keeps those naming the hours' current versions). One row.
WITH
    {start:DateTime} AS p_start,
    {end:DateTime} AS p_end,
    {block_seconds:UInt32} AS p_block,
    toStartOfHour(p_start) AS p_h0,
    if(p_h0 = p_start, p_h0, p_h0 + INTERVAL 1 HOUR) AS p_hs
SELECT
    (SELECT max(watermark) FROM cost_watermark) AS watermark,
    groupArray(hour) AS hours,
    groupArray(newest) AS versions,
    (SELECT groupArray((block_start, version, hour_versions)) FROM cost_triangle_block_marks
     WHERE p_block > 0 AND block_seconds = p_block AND block_start >= p_hs
       AND block_start + toIntervalSecond(p_block) <= toStartOfHour(p_end)) AS blocks
FROM (
    SELECT hour, max(version) AS newest
    FROM cost_rollup_hours
    WHERE hour >= p_hs AND hour < toStartOfHour(p_end)
    GROUP BY hour
    HAVING argMax(complete, version) = 1
    ORDER BY hour
)
