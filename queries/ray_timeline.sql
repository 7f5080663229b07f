-- name: ray_timeline
-- title: Ray timeline of one step
-- section: Stages
-- stored: yes
-- Every call of a Ray timeline as a bar on its worker's lane, coloured by method: where each
-- worker was busy and where it waited on the others. step NULL shows the whole trace, from
-- its first call; a step shows that step's calls, from the step's first call.
-- @param run_id VARCHAR  Run to analyse.
-- @param step INTEGER = NULL  Step to show; NULL for the whole trace.
-- @column step INTEGER fmt=count  Training step of the call; NULL outside every step.
-- @column lane VARCHAR  The worker: its node and the start of its Ray worker id.
-- @column name VARCHAR  Method or task name.
-- @column stage VARCHAR  verl stage the method serves, NULL for others.
-- @column start_s DOUBLE fmt=s  Start after the first shown call's start (s).
-- @column dur_s DOUBLE fmt=s  Duration (s).
-- @chart timeline x=start_s y=lane z=dur_s color=name xlabel="time (s)" ylabel="Ray worker" title="Ray timeline"
WITH shown AS (
    SELECT step, node, worker, name, stage, ts_us, dur_us
    FROM ray_spans
    WHERE run_id = $run_id AND ($step IS NULL OR step = $step)
)
SELECT
    step,
    coalesce(node, '?') || ' ' || coalesce(substr(worker, 1, 15), '?') AS lane,
    name,
    stage,
    (ts_us - min(ts_us) OVER ()) / 1e6 AS start_s,
    dur_us / 1e6 AS dur_s
FROM shown
ORDER BY lane, start_s, name
