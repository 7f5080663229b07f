-- name: metric_keys
-- title: Logged metric keys
-- section: Other
-- Every metric key a run logged, with where it appears: the keys the `metric` query takes.
-- @param run_id VARCHAR  Run to analyse.
-- @column key VARCHAR  Metric key as logged (old timing/<stage> appears as timing_s/<stage>).
-- @column steps BIGINT  Steps that logged the key.
-- @column first_step INTEGER  First step with the key.
-- @column last_step INTEGER  Last step with the key.
-- @column min DOUBLE  Smallest value (NaN ignored).
-- @column max DOUBLE  Largest value (NaN ignored).
-- @chart table title="Logged metric keys"
SELECT
    key,
    count(*) AS steps,
    min(step) AS first_step,
    max(step) AS last_step,
    min(value) FILTER (WHERE NOT isnan(value)) AS min,
    max(value) FILTER (WHERE NOT isnan(value)) AS max
FROM step_metrics
WHERE run_id = $run_id
GROUP BY key
ORDER BY key
