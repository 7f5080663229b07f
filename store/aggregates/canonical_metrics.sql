-- The run's per-step metrics under the vocabulary's canonical names and units
-- (store/vocabulary/*.toml, kept in metric_vocabulary): what every catalog query reads, so that
-- a query written once serves verl, OpenRLHF, slime, AReaL, ROLL and NeMo-RL alike. The run's
-- framework picks the mapping (a framework no file maps reads as verl, whose keys are the
-- canonical names). A name several logged keys map to takes the first of them the step logged,
-- or their sum where the mapping says combine = "sum", or the first minus the others where it says
-- combine = "difference" (a step that lacks one of them has no value for the name). Timing keys under the framework's stage
-- prefix that no mapping names keep their stage as timing_s/<stage>. step_metrics keeps the raw
-- keys as logged.
-- @column run_id VARCHAR  Owning run.
-- @column step INTEGER  Training step.
-- @column key VARCHAR  Canonical name (store/vocabulary/canonical.toml).
-- @column value DOUBLE  The value in the name's canonical unit (raw value x the mapping's scale).
-- @column raw_key VARCHAR  The logged key it came from (the first, where several add up).
CREATE TABLE canonical_metrics AS
WITH framework AS (
    SELECT coalesce(
        (SELECT any_value(v.framework) FROM runs r JOIN metric_vocabulary v ON v.framework = lower(r.framework)
         WHERE r.run_id = $run_id),
        'verl') AS name
), mapping AS (
    SELECT v.*, count(*) OVER (PARTITION BY v.kind, v.name) AS n_keys
    FROM metric_vocabulary v, framework f WHERE v.framework = f.name
), raw AS (
    SELECT run_id, step, key, value FROM step_metrics WHERE run_id = $run_id
), named AS (
    SELECT r.run_id, r.step, m.name AS key, r.value * m.scale AS value, r.key AS raw_key, m.combine, m.position,
           m.n_keys
    FROM raw r JOIN mapping m ON m.kind = 'metric' AND m.key = r.key
), staged AS (
    SELECT r.run_id, r.step, m.name || r.key[length(m.key) + 1:] AS key, r.value * m.scale AS value, r.key AS raw_key,
           'first' AS combine, 1000000 AS position, 1 AS n_keys
    FROM raw r JOIN mapping m ON m.kind = 'stage' AND starts_with(r.key, m.key)
    WHERE r.key NOT IN (SELECT key FROM mapping WHERE kind = 'metric')
), together AS (
    SELECT * FROM named UNION ALL SELECT * FROM staged
)
SELECT
    run_id,
    step,
    key,
    CASE WHEN any_value(combine) = 'sum' AND count(*) FILTER (WHERE position < 1000000) > 1
         THEN sum(value) FILTER (WHERE position < 1000000)::DOUBLE
         WHEN any_value(combine) = 'difference'
         THEN 2 * arg_min(value, position) - sum(value)::DOUBLE  -- the first minus the others
         ELSE arg_min(value, position) END AS value,
    arg_min(raw_key, position) AS raw_key
FROM together
GROUP BY run_id, step, key
HAVING any_value(combine) <> 'difference' OR count(*) = any_value(n_keys)
