-- What the cost model is told: GPU prices, the fleet's replicas, the model's weights and windows
-- (cost_settings), latency budgets per task type, budgets.

-- Cost-engine configuration, synced from fleet.yaml by schema/fleet.py (sync replaces each table's
-- contents: the file is the truth). The jobs read these at run time, so a price change applies to
-- every minute that a (re)computation touches: cost is never frozen at ingest.

-- Versioned GPU prices: a price applies from valid_from until the next valid_from of the same type.
CREATE TABLE IF NOT EXISTS gpu_prices
(
    `gpu_type` LowCardinality(String) COMMENT 'GPU model, e.g. H100, A100',
    `valid_from` DateTime('UTC') COMMENT 'first UTC second at which this price applies',
    `usd_per_gpu_hour` Float64 COMMENT 'USD per GPU per hour',
    `synced_at` DateTime64(3, 'UTC') DEFAULT now64(3) COMMENT 'when fleet.yaml was synced'
)
ENGINE = MergeTree
ORDER BY (gpu_type, valid_from);

-- Replica inventory: replica id (= resource attribute service.instance.id) -> GPU type and count.
CREATE TABLE IF NOT EXISTS replicas
(
    `replica` String COMMENT 'replica id, = service.instance.id of its telemetry',
    `gpu_type` LowCardinality(String) COMMENT 'GPU model; priced from gpu_prices',
    `gpu_count` UInt16 COMMENT 'GPUs the replica holds (tensor-parallel size)',
    `billing` LowCardinality(String) DEFAULT 'on_demand' COMMENT 'on_demand: paid while up | reserved: paid every minute, up or not',
    `capacity_work` Float64 DEFAULT 0 COMMENT 'sustainable work units per minute (0 = learned from its saturated minutes)',
    `synced_at` DateTime64(3, 'UTC') DEFAULT now64(3) COMMENT 'when fleet.yaml was synced'
)
ENGINE = MergeTree
ORDER BY replica;

-- Scalars of the cost model; the jobs read the row with the latest synced_at. The row below holds
-- the documented defaults (synced_at = 0) so the jobs run before any fleet.yaml is synced; keep
-- them equal to schema/fleet.py's defaults (a test checks it).
CREATE TABLE IF NOT EXISTS cost_settings
(
    `w_prefill` Float64 COMMENT 'work units per uncached prompt token',
    `w_decode` Float64 COMMENT 'work units per output token',
    `abandon_timeout_s` UInt32 COMMENT 'seconds after its last call with no task root span before a task is abandoned',
    `default_gpu_type` LowCardinality(String) COMMENT 'GPU type of a replica seen in telemetry but not in fleet.yaml',
    `default_gpu_count` UInt16 COMMENT 'GPU count of such a replica',
    `job_window_s` UInt32 COMMENT 'trailing window every periodic job run recomputes, seconds',
    `max_call_s` UInt32 COMMENT 'longest call the jobs look back for when a window starts mid-call, seconds',
    `task_lookback_s` UInt32 COMMENT 'how far back the task job reads the calls of a task ending in the window, seconds',
    `synced_at` DateTime64(3, 'UTC') DEFAULT now64(3) COMMENT 'when fleet.yaml was synced'
)
ENGINE = MergeTree
ORDER BY synced_at;

-- The defaults, once.
INSERT INTO cost_settings (w_prefill, w_decode, abandon_timeout_s, default_gpu_type, default_gpu_count,
                           job_window_s, max_call_s, task_lookback_s, synced_at)
SELECT 0.25, 1.0, 1800, 'H100', 1, 7200, 3600, 86400, toDateTime64(0, 3, 'UTC')
WHERE (SELECT count() FROM cost_settings) = 0;

-- Latency budgets per task type (a task root span's own slo.* attributes win over these).
CREATE TABLE IF NOT EXISTS task_slos
(
    `task_type` LowCardinality(String) COMMENT 'task.type',
    `ttft_ms` Nullable(Float64) COMMENT 'time-to-first-token budget of every accepted call, milliseconds',
    `e2e_ms` Nullable(Float64) COMMENT 'task start-to-end budget, milliseconds',
    `synced_at` DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = MergeTree
ORDER BY task_type;

-- Spend budgets per tenant and per task type (fleet.yaml `budgets:`), synced by `infercost up` /
-- `demo` / `cost` like the fleet tables: the budget-burn alert, the cost page and the weekly review
-- read them (schema/queries/budgets_status.sql). A sync replaces every row (newest synced_at wins).
CREATE TABLE IF NOT EXISTS budgets
(
    `scope` LowCardinality(String) COMMENT 'tenant | task_type',
    `name` String COMMENT 'the tenant id or task type',
    `period` LowCardinality(String) COMMENT 'day | week (UTC day; ISO week from Monday 00:00 UTC)',
    `usd` Float64 COMMENT 'budget for one period, USD',
    `synced_at` DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree(synced_at)
ORDER BY (scope, name, period);
