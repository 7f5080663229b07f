-- name: async_lag
-- title: Async: in-flight against in-queue lag
-- section: Async
-- stored: yes
-- Where each step's staleness comes from: in-flight (versions a trajectory's generation spanned,
-- its last token's version minus its first's: partial rollouts resumed across weight updates) and
-- in-queue (the consuming version minus its last token's: finished and waiting for the trainer).
-- Their means add up to the mean staleness. Seconds come from per-trajectory timestamps where the
-- source logged them. Only async runs have rows.
-- @param run_id VARCHAR  Run to analyse.
-- @column step INTEGER fmt=count  Training step.
-- @column basis VARCHAR  'per-sample' or 'logged' (staleness_steps).
-- @column in_flight_mean DOUBLE fmt=count  Mean in-flight span (versions); logged: staleness mean - in-queue mean.
-- @column in_queue_mean DOUBLE fmt=count  Mean in-queue lag (versions).
-- @column in_flight_max DOUBLE fmt=count  Largest in-flight span (versions).
-- @column in_queue_max DOUBLE fmt=count  Largest in-queue lag (versions).
-- @column gen_s_mean DOUBLE fmt=s  Mean generation time of the step's accepted trajectories, first token's start to last token (s); NULL without timestamps.
-- @column queue_s_mean DOUBLE fmt=s  Mean time from finished (ready, else last token) to taken by the trainer (s); NULL without timestamps.
-- @chart stacked x=step y=in_flight_mean,in_queue_mean xlabel="step" ylabel="mean staleness (policy versions)" title="Staleness split: in flight against in the queue"
SELECT
    s.step,
    s.basis,
    s.in_flight_mean,
    s.in_queue_mean,
    s.in_flight_max,
    s.in_queue_max,
    t.gen_s_mean,
    t.queue_s_mean
FROM staleness_steps s
LEFT JOIN (
    SELECT
        step,
        avg(gen_end_ts - gen_start_ts) AS gen_s_mean,
        avg(consume_ts - coalesce(ready_ts, gen_end_ts)) AS queue_s_mean
    FROM trajectories
    WHERE run_id = $run_id AND status = 'accepted' AND step IS NOT NULL
    GROUP BY step) AS t ON t.step = s.step
WHERE coalesce(s.in_flight_mean, s.in_queue_mean, s.in_flight_max, s.in_queue_max) IS NOT NULL
ORDER BY s.step
