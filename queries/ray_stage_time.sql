-- name: ray_stage_time
-- title: Ray calls by step, worker and method
-- section: Stages
-- stored: yes
-- From a Ray timeline: each worker's calls of each method (a verl worker method such as
-- actor_rollout_generate_sequences, or a Ray task) per training step, with the time they
-- took and the time the worker waited on the slowest worker of the same method, since the
-- trainer collects every worker's result before it goes on. Steps are inferred from the
-- trainer's rollout and update rounds (see ray_spans.step); calls outside every step (setup,
-- a validation before the first step), or all calls when no step can be inferred, are the
-- rows with step NULL.
-- @param run_id VARCHAR  Run to analyse.
-- @column step INTEGER fmt=count  Training step; NULL outside every step.
-- @column worker VARCHAR  Ray worker process (the trace's tid), on node.
-- @column node VARCHAR  Node the worker ran on.
-- @column name VARCHAR  Method or task name.
-- @column stage VARCHAR  verl stage the method serves (timing_s/<stage>), NULL for others.
-- @column calls BIGINT fmt=count  Calls of the method on the worker in the step.
-- @column total_s DOUBLE fmt=s  Their summed duration (s).
-- @column mean_s DOUBLE fmt=s  total_s / calls: the mean call (s).
-- @column max_s DOUBLE fmt=s  The longest call (s).
-- @column idle_s DOUBLE fmt=s  The slowest worker's total_s for the method in the step minus this worker's (s).
-- @chart table
WITH calls_ AS (
    SELECT
        step,
        worker,
        node,
        name,
        stage,
        count(*) AS calls,
        sum(dur_us)::DOUBLE / 1e6 AS total_s,
        avg(dur_us) / 1e6 AS mean_s,
        max(dur_us) / 1e6 AS max_s
    FROM ray_spans
    WHERE run_id = $run_id
    GROUP BY step, worker, node, name, stage
)
SELECT *, max(total_s) OVER (PARTITION BY step, name) - total_s AS idle_s
FROM calls_
ORDER BY step NULLS FIRST, name, node, worker
