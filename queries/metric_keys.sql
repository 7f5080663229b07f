-- name: metric_keys
-- title: Logged metric keys
-- section: Other
-- stored: yes
-- Every metric key a run logged, with where it appears and the canonical name it is read as
-- (store/vocabulary, the run's framework): the keys the `metric` query takes.
-- @param run_id VARCHAR  Run to analyse.
-- @column key VARCHAR  Metric key as logged (old timing/<stage> appears as timing_s/<stage>).
-- @column steps BIGINT fmt=count  Steps that logged the key.
-- @column first_step INTEGER fmt=count  First step with the key.
-- @column last_step INTEGER fmt=count  Last step with the key.
-- @column min DOUBLE fmt=count  Smallest value (NaN ignored).
-- @column max DOUBLE fmt=count  Largest value (NaN ignored).
-- @column name VARCHAR  Canonical name(s) the catalog reads it as, in its canonical unit; NULL when no query reads it.
-- @chart table title="Logged metric keys"
WITH names AS (
    SELECT raw_key, array_to_string(list_sort(list(DISTINCT key)), ', ') AS name
    FROM canonical_metrics
    WHERE run_id = $run_id
    GROUP BY raw_key
)
SELECT
    m.key,
    count(*) AS steps,
    min(m.step) AS first_step,
    max(m.step) AS last_step,
    min(m.value) FILTER (WHERE NOT isnan(m.value)) AS min,
    max(m.value) FILTER (WHERE NOT isnan(m.value)) AS max,
    any_value(n.name) AS name
FROM step_metrics m
LEFT JOIN names n ON n.raw_key = m.key
WHERE m.run_id = $run_id
GROUP BY m.key
ORDER BY m.key
