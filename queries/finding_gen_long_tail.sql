-- name: finding_gen_long_tail
-- title: Finding: the rollout's long tail in a training log's step time
-- section: Findings
-- stored: yes
-- step_budget's gen_long_tail as a share of the step: on the steps whose training log times its
-- slowest and its mean sample (verl's agent loop; no per-engine data: finding_rollout_tail says
-- those), the rollout's window (the slowest sample, at most timing_s/gen) times
-- sample_times.long_tail_share, summed, over the same steps' timing_s/step; beside the window's
-- busy rest, and the worst step. Steps split by response lengths alone are left out: for short
-- responses the fixed cost of a rollout, not decoding, sets its time, and the proxy would raise a
-- false alarm. In a colocated synchronous run every GPU waits through the tail. Emitted at 10% or
-- more; warn at 20%. Not for an async run (its pools are split by async_budget).
-- @param run_id VARCHAR  Run to examine.
-- @column kind VARCHAR  gen_long_tail.
-- @column severity VARCHAR  warn at 20% or more, else info.
-- @column value DOUBLE fmt=pct  The long tail's share of the steps' time.
-- @column unit VARCHAR  share.
-- @column steps INTEGER[]  The worst step.
-- @column stage VARCHAR  gen.
-- @column text VARCHAR  The finding in one sentence.
-- @column evidence VARCHAR  The catalog URL of step_budget.
-- @chart table
WITH steps AS (
    SELECT
        s.step,
        t.step_s,
        least(s.slowest_sample_s, t.gen_s) * s.long_tail_share AS tail_s,
        least(s.slowest_sample_s, t.gen_s) * (1 - s.long_tail_share) AS busy_s
    FROM sample_times s
    JOIN step_timings t ON t.run_id = $run_id AND t.step = s.step
    WHERE t.gen_s IS NOT NULL AND t.step_s > 0 AND s.long_tail_share IS NOT NULL
      AND s.slowest_sample_s IS NOT NULL AND s.mean_sample_s IS NOT NULL
      AND s.step NOT IN (SELECT step FROM rollout_engines)),
summary AS (
    SELECT
        count(*) AS n,
        sum(tail_s)::DOUBLE / NULLIF(sum(step_s)::DOUBLE, 0) AS share,
        sum(busy_s)::DOUBLE / NULLIF(sum(step_s)::DOUBLE, 0) AS busy_share,
        sum(tail_s)::DOUBLE AS tail_s,
        first(step ORDER BY tail_s / NULLIF(step_s, 0) DESC, step) AS worst,
        max(tail_s / NULLIF(step_s, 0)) AS worst_share
    FROM steps)
SELECT
    'gen_long_tail' AS kind,
    CASE WHEN share >= 0.2 THEN 'warn' ELSE 'info' END AS severity,
    share AS value,
    'share' AS unit,
    [worst] AS steps,
    'gen' AS stage,
    printf('The rollout''s long tail took %.1f%% of the step time over %d step%s (%,.1f s; worst: step %d, '
           '%.1f%%), %s its busy generation (%.1f%%): each step, every GPU waited from when the mean '
           'sample finished until the slowest did, by the log''s sample times, which cannot tell decoding '
           'the last samples from idle engines; try partial rollout (carry samples past a '
           'length into the next step), length-aware scheduling, or a lower response cap, and ask '
           'What if what each would save (polytrace simulate, calibration log).',
           100 * share, n, CASE WHEN n = 1 THEN '' ELSE 's' END, tail_s, worst, 100 * worst_share,
           CASE WHEN share > busy_share THEN 'more than' ELSE 'against' END, 100 * busy_share) AS text,
    '/api/queries/step_budget?run_id=' || $run_id AS evidence
FROM summary
WHERE share >= 0.1 AND (SELECT count(*) FROM async_pools) = 0
