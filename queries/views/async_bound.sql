-- view: async_bound
-- The staleness bound $run_id was configured with, in policy versions: the run fact
-- max_staleness (given at ingest), else the first of the config keys that frameworks name it by
-- (PolyTrace's max_staleness, AReaL's rollout.max_head_offpolicyness, NeMo-RL's
-- grpo.async_grpo.max_trajectory_age_steps). One row; bound NULL when none is known. verl's
-- staleness_threshold is a share of extra samples per version, not a version bound, and is not read.
-- @column bound INTEGER fmt=count  The bound (versions), or NULL.
-- @column bound_from VARCHAR  Where it came from: runs.max_staleness or config.<key>; NULL without one.
SELECT
    coalesce(r.max_staleness, c.max_staleness, c.head_offpolicyness, c.flat_head_offpolicyness,
             c.trajectory_age, c.flat_trajectory_age) AS bound,
    CASE WHEN r.max_staleness IS NOT NULL THEN 'runs.max_staleness'
         WHEN c.max_staleness IS NOT NULL THEN 'config.max_staleness'
         WHEN c.head_offpolicyness IS NOT NULL THEN 'config.rollout.max_head_offpolicyness'
         WHEN c.flat_head_offpolicyness IS NOT NULL THEN 'config.max_head_offpolicyness'
         WHEN c.trajectory_age IS NOT NULL THEN 'config.grpo.async_grpo.max_trajectory_age_steps'
         WHEN c.flat_trajectory_age IS NOT NULL THEN 'config.max_trajectory_age_steps' END AS bound_from
FROM (SELECT max_staleness, config FROM runs WHERE run_id = $run_id) AS r
CROSS JOIN (
    SELECT
        TRY_CAST(json_extract_string(config, '$.max_staleness') AS INTEGER) AS max_staleness,
        TRY_CAST(json_extract_string(config, '$.rollout.max_head_offpolicyness') AS INTEGER) AS head_offpolicyness,
        TRY_CAST(json_extract_string(config, '$.max_head_offpolicyness') AS INTEGER) AS flat_head_offpolicyness,
        TRY_CAST(json_extract_string(config, '$.grpo.async_grpo.max_trajectory_age_steps') AS INTEGER) AS trajectory_age,
        TRY_CAST(json_extract_string(config, '$.max_trajectory_age_steps') AS INTEGER) AS flat_trajectory_age
    FROM runs WHERE run_id = $run_id) AS c
