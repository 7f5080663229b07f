-- name: async_budget
-- title: Async: where each pool's GPU time went
-- section: Async
-- stored: yes
-- An async run's two pools, step by step, each in its own GPU-seconds: the trainer pool's window
-- (its step plus a weight sync logged apart from the step's timer) split into training (busy),
-- waiting for samples and weight sync; the rollout pool's window between two weight updates split
-- into generating (busy) and idle. Each pool's GPU count is the run fact trainer_gpus or
-- rollout_gpus; without one its figures are per GPU (caveat). busy + waiting + weight_sync =
-- gpu_s. Synchronous runs have no rows: step_budget splits their steps.
-- @param run_id VARCHAR  Run to analyse.
-- @column step INTEGER fmt=count  Training step (verl fully-async: weight version).
-- @column pool VARCHAR  trainer or rollout.
-- @column gpus BIGINT fmt=count  The pool's GPUs: runs.trainer_gpus or runs.rollout_gpus, else 1.
-- @column gpus_from VARCHAR  'runs.trainer_gpus', 'runs.rollout_gpus', or 'unknown: per GPU'.
-- @column window_s DOUBLE fmt=s  The pool's wall time for the step (s): trainer timing_s/step + async/weight_sync_s; rollout async/rollout_window_s, else the trainer's window.
-- @column gpu_s DOUBLE fmt=s  window_s x gpus (GPU-s).
-- @column busy DOUBLE fmt=s  Trainer: training, the step minus its wait (GPU-s); rollout: generating (GPU-s).
-- @column waiting DOUBLE fmt=s  Trainer: waiting for samples; rollout: idle, window - active or its logged idle ratio x window (GPU-s).
-- @column weight_sync DOUBLE fmt=s  Trainer: async/weight_sync_s x gpus (GPU-s); rollout: NULL (its pause for the sync is inside its idle).
-- @column caveat VARCHAR  What the chart must say: that a pool's GPU count is unknown, so its figures are per GPU; NULL otherwise.
-- @chart stacked x=step y=busy,waiting,weight_sync group=pool shade=waiting xlabel="step" ylabel="GPU time of the pool" caveat=caveat title="Where each pool's GPU time went"
WITH pools AS (
    SELECT
        l.step,
        m.step_s + coalesce(l.weight_sync_s, 0) AS trainer_window_s,
        coalesce(l.trainer_wait_s, l.trainer_idle_ratio * m.step_s) AS wait_s,
        l.weight_sync_s,
        m.step_s,
        coalesce(l.rollout_window_s, m.step_s + coalesce(l.weight_sync_s, 0)) AS rollout_window_s,
        coalesce(l.rollout_window_s - l.rollout_active_s,
                 l.rollout_idle_ratio * coalesce(l.rollout_window_s, m.step_s + coalesce(l.weight_sync_s, 0)))
            AS rollout_idle_s
    FROM async_logged l
    JOIN (SELECT step, max(value) AS step_s FROM canonical_metrics
          WHERE run_id = $run_id AND key = 'timing_s/step' GROUP BY step) AS m ON m.step = l.step
    WHERE coalesce(l.trainer_wait_s, l.trainer_idle_ratio, l.rollout_idle_ratio, l.rollout_window_s,
                   l.weight_sync_s) IS NOT NULL
), facts AS (
    SELECT trainer_gpus, rollout_gpus FROM runs WHERE run_id = $run_id
)
SELECT
    p.step,
    'trainer' AS pool,
    coalesce(f.trainer_gpus, 1)::BIGINT AS gpus,
    CASE WHEN f.trainer_gpus IS NOT NULL THEN 'runs.trainer_gpus' ELSE 'unknown: per GPU' END AS gpus_from,
    p.trainer_window_s AS window_s,
    p.trainer_window_s * coalesce(f.trainer_gpus, 1) AS gpu_s,
    (p.step_s - coalesce(p.wait_s, 0)) * coalesce(f.trainer_gpus, 1) AS busy,
    p.wait_s * coalesce(f.trainer_gpus, 1) AS waiting,
    coalesce(p.weight_sync_s, 0) * coalesce(f.trainer_gpus, 1) AS weight_sync,
    CASE WHEN f.trainer_gpus IS NULL
         THEN 'A pool''s GPU count is unknown: its figures are per GPU (give trainer_gpus and rollout_gpus at ingest).' END AS caveat
FROM pools p CROSS JOIN facts f
UNION ALL
SELECT
    p.step,
    'rollout' AS pool,
    coalesce(f.rollout_gpus, 1)::BIGINT AS gpus,
    CASE WHEN f.rollout_gpus IS NOT NULL THEN 'runs.rollout_gpus' ELSE 'unknown: per GPU' END AS gpus_from,
    p.rollout_window_s AS window_s,
    p.rollout_window_s * coalesce(f.rollout_gpus, 1) AS gpu_s,
    (p.rollout_window_s - p.rollout_idle_s) * coalesce(f.rollout_gpus, 1) AS busy,
    p.rollout_idle_s * coalesce(f.rollout_gpus, 1) AS waiting,
    NULL::DOUBLE AS weight_sync,
    CASE WHEN f.rollout_gpus IS NULL
         THEN 'A pool''s GPU count is unknown: its figures are per GPU (give trainer_gpus and rollout_gpus at ingest).' END AS caveat
FROM pools p CROSS JOIN facts f
WHERE p.rollout_idle_s IS NOT NULL
ORDER BY step, pool DESC
