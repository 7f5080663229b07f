-- view: partial_steps
-- The steps of $run_id that hold under half the responses of the run's median step (its samples
-- rows): a step cut short (a crashed run's last step file, a step still being written) whose
-- lengths say nothing about the run's trend. The length findings leave them out and say so.
-- @column step INTEGER fmt=count  Training step.
-- @column n BIGINT fmt=count  The step's responses.
-- @column typical DOUBLE fmt=count  The median step's responses.
SELECT step, n, typical
FROM (SELECT step, n, median(n) OVER () AS typical FROM step_lengths WHERE run_id = $run_id)
WHERE n < 0.5 * typical
