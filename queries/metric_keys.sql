-- name: metric_keys
-- title: Logged metric keys
-- section: Other
-- stored: yes
-- Every metric key a run logged, with where it appears: the keys the `metric` query takes.
-- @param run_id VARCHAR  Run to analyse.
-- @column key VARCHAR  Metric key as logged (old timing/<stage> appears as timing_s/<stage>).
-- @column steps BIGINT fmt=count  Steps that logged the key.
-- @column first_step INTEGER fmt=count  First step with the key.
-- @column last_step INTEGER fmt=count  Last step with the key.
-- @column min DOUBLE fmt=count  Smallest value (NaN ignored).
-- @column max DOUBLE fmt=count  Largest value (NaN ignored).
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
