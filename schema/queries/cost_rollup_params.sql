-- Fragment, not a query: cost.rollup_span's parameters under the names the cost queries read them
-- by, as items of a query's WITH clause ("-- include: cost_rollup_params").
    -- the rollups cover [p_hs, p_re), version p_versions[i] for its i-th hour (cost.rollup_span)
    {rollup_start:DateTime} AS p_hs,
    {rollup_end:DateTime} AS p_re,
    {rollup_versions:Array(UInt64)} AS p_versions,
    -- the watermark bound (cost.rollup_span): history below it, live from it on, as the views
    -- call_costs / replica_minutes / tasks read them (their two scalar subqueries per reference
    -- were a third of a query's planning time)
    {watermark:DateTime} AS p_wm,
