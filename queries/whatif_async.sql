-- name: whatif_async
-- title: What if: this run trained asynchronously
-- section: What if
-- stored: yes
-- A synchronous run's steps as the model of its own log predicts them (`polytrace simulate RUN
-- --calibration log --store`), and the same steps with generation overlapping training on two
-- GPU pools (workload/overlap.py): one step off policy (staleness 1), and fully async within a
-- staleness bound of 2 or 4 versions. Each mode takes the one split of the job's GPUs that
-- minimizes the run's predicted time. Throughput work scales with its pool's GPUs, the bounding
-- sample's latency does not, and a sample may take as many trainer steps as the bound allows;
-- weight sync, checkpoint and validation stay on the critical path. An estimate, not a bound:
-- linear scaling, and learning per step taken as unchanged. No rows for an async run.
-- @param run_id VARCHAR  Run to analyse.
-- @column step INTEGER fmt=count  Training step.
-- @column mode VARCHAR  synchronous (the model's prediction of the run as recorded), one-step-off, or fully-async:k.
-- @column split VARCHAR  The GPUs generating: 'k of N GPUs', or a share when the job's GPU count is unknown; 'all GPUs, in turn' for synchronous.
-- @column predicted_s DOUBLE fmt=s  Predicted step time (s).
-- @column measured_s DOUBLE fmt=s  The step's measured time, timing_s/step (s).
-- @column speedup DOUBLE fmt=x  The model's synchronous step over this mode's.
-- @column limited_by VARCHAR  What sets the async step: rollout throughput, training, or slowest sample (the bounding sample must finish within the staleness bound); NULL for synchronous.
-- @chart line x=step y=predicted_s color=mode xlabel="step" ylabel="predicted step time (s)" title="Predicted step time, synchronous and async"
SELECT step, 'synchronous' AS mode, 'all GPUs, in turn' AS split, predicted_sync_s AS predicted_s,
       measured_s, 1.0 AS speedup, NULL::VARCHAR AS limited_by
FROM whatif_async
WHERE run_id = $run_id AND mode = 'one-step-off'
UNION ALL
SELECT step, mode,
       CASE WHEN gpus IS NULL THEN printf('%.0f%% of the GPUs', 100 * rollout_share)
            ELSE printf('%d of %d GPUs', rollout_gpus, gpus) END,
       predicted_s, measured_s, speedup, limited_by
FROM whatif_async
WHERE run_id = $run_id
ORDER BY step, mode
