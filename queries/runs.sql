-- name: runs
-- title: Runs
-- section: Runs
-- Every ingested run with its size: what there is to analyse.
-- @column run_id VARCHAR  Run id (use it as run_id in the other queries).
-- @column name VARCHAR  Run name.
-- @column format VARCHAR  Input format(s).
-- @column framework VARCHAR  RL framework, when known.
-- @column model VARCHAR  Model, when known.
-- @column task VARCHAR  Workload type, when known.
-- @column steps BIGINT fmt=count  Distinct steps with samples, step metrics, rank stage timings or profiler (ProfilerStep) windows.
-- @column samples BIGINT fmt=count  Responses (rows of samples); NULL when the run has none (a verl log, W&B metrics or a profiler trace count steps, not responses).
-- @column created_at TIMESTAMP  When the run was ingested (UTC).
-- @chart table title="Runs"
SELECT
    r.run_id,
    r.name,
    r.format,
    r.framework,
    r.model,
    r.task,
    (SELECT count(*) FROM (
        SELECT step FROM step_lengths s WHERE s.run_id = r.run_id
        UNION SELECT step FROM step_metrics m WHERE m.run_id = r.run_id
        UNION SELECT step FROM rank_stage k WHERE k.run_id = r.run_id
        UNION SELECT step FROM profiler_steps p WHERE p.run_id = r.run_id)) AS steps,
    (SELECT sum(s.n)::BIGINT FROM step_lengths s WHERE s.run_id = r.run_id) AS samples,
    r.created_at
FROM runs r
ORDER BY r.created_at DESC, r.run_id
