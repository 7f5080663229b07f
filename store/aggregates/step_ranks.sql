-- One row per step and global rank that logged samples in it: which ranks wrote the run's
-- samples, kept per step so that a live append recomputes only its own steps (the catalog view
-- run_ranks reads the job's size off it).
-- @column run_id VARCHAR  Owning run.
-- @column step INTEGER  Training step.
-- @column rank INTEGER  A global rank with samples in the step.
-- @column samples BIGINT  Its samples in the step.
CREATE TABLE step_ranks AS
SELECT run_id, step, rank, count(*) AS samples
FROM samples
WHERE run_id = $run_id AND rank IS NOT NULL
GROUP BY run_id, step, rank
