-- Spend budgets per tenant and per task type (fleet.yaml `budgets:`), synced by `infercost up` /
-- `demo` / `cost` like the fleet tables: the budget-burn alert, the cost page and the weekly review
-- read them (schema/queries/budgets_status.sql). A sync replaces every row (newest synced_at wins).
CREATE TABLE IF NOT EXISTS budgets
(
    scope LowCardinality(String) COMMENT 'tenant | task_type',
    name String COMMENT 'the tenant id or task type',
    period LowCardinality(String) COMMENT 'day | week (UTC day; ISO week from Monday 00:00 UTC)',
    usd Float64 COMMENT 'budget for one period, USD',
    synced_at DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree(synced_at)
ORDER BY (scope, name, period)
