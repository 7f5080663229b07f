-- name: fidelity
-- title: Replay fidelity
-- section: Fidelity
-- How closely a benchmark replay (bench_run) reproduces the original run's stage times
-- (formal_run): the paper's accuracy metric, as the PolyTrace suite computes it. Steps
-- with stage timings are paired by position (align=index, as the suite does) or by step
-- number (align=step). For every stage both steps logged,
-- error_pct = (bench - formal) / formal * 100 (NULL when formal is 0). Accuracy is
-- 100 - mean |error_pct| over the stages present: per step in step_accuracy, over every
-- paired step and stage in accuracy. Stages: gen, reward, old_log_prob, ref, values, adv,
-- update_critic, update_actor and step (the whole step).
-- @param bench_run VARCHAR  The replay (benchmark) run.
-- @param formal_run VARCHAR  The original (formal) run it replays.
-- @param align VARCHAR = index  Pair steps by position ('index') or by step number ('step').
-- @column idx INTEGER fmt=count  0-based position of the bench step among the bench run's timed steps.
-- @column bench_step INTEGER fmt=count  Step in the bench run.
-- @column formal_step INTEGER fmt=count  Step in the formal run it is compared with.
-- @column stage VARCHAR  Stage (timing_s/<stage>).
-- @column bench_s DOUBLE fmt=s  Stage time in the bench run (s).
-- @column formal_s DOUBLE fmt=s  Stage time in the formal run (s).
-- @column error_pct DOUBLE fmt=pct100  (bench_s - formal_s) / formal_s * 100.
-- @column step_accuracy DOUBLE fmt=pct100  100 - mean |error_pct| over this step's stages (%).
-- @column accuracy DOUBLE fmt=pct100  100 - mean |error_pct| over every paired step and stage (%).
-- @chart heatmap x=bench_step y=stage z=error_pct xlabel="bench step" ylabel="stage" title="Replay error per stage (%)"
WITH stage_order (stage, ord) AS (
    VALUES ('gen', 1), ('reward', 2), ('old_log_prob', 3), ('ref', 4), ('values', 5),
           ('adv', 6), ('update_critic', 7), ('update_actor', 8), ('step', 9)
), stages AS (
    SELECT run_id, step, stage, seconds
    FROM (SELECT * FROM step_timings WHERE run_id IN ($bench_run, $formal_run))
    UNPIVOT (seconds FOR stage IN (
        gen_s AS 'gen', reward_s AS 'reward', old_log_prob_s AS 'old_log_prob', ref_s AS 'ref',
        values_s AS 'values', adv_s AS 'adv', update_critic_s AS 'update_critic',
        update_actor_s AS 'update_actor', step_s AS 'step'))
), timed AS (
    SELECT run_id, step, (row_number() OVER (PARTITION BY run_id ORDER BY step) - 1)::INTEGER AS idx
    FROM (SELECT DISTINCT run_id, step FROM stages)
), pairs AS (
    SELECT b.idx, b.step AS bench_step, f.step AS formal_step
    FROM timed b
    JOIN timed f
      ON CASE $align
             WHEN 'index' THEN b.idx = f.idx
             WHEN 'step' THEN b.step = f.step
             ELSE error('align must be index or step')
         END
    WHERE b.run_id = $bench_run AND f.run_id = $formal_run
), compared AS (
    SELECT
        p.idx,
        p.bench_step,
        p.formal_step,
        b.stage,
        b.seconds AS bench_s,
        f.seconds AS formal_s,
        (b.seconds - f.seconds) / NULLIF(f.seconds, 0) * 100 AS error_pct
    FROM pairs p
    JOIN stages b ON b.run_id = $bench_run AND b.step = p.bench_step
    JOIN stages f ON f.run_id = $formal_run AND f.step = p.formal_step AND f.stage = b.stage
)
SELECT
    c.idx,
    c.bench_step,
    c.formal_step,
    c.stage,
    c.bench_s,
    c.formal_s,
    c.error_pct,
    100 - avg(abs(c.error_pct)) OVER (PARTITION BY c.bench_step) AS step_accuracy,
    100 - avg(abs(c.error_pct)) OVER () AS accuracy
FROM compared c
JOIN stage_order o USING (stage)
ORDER BY c.bench_step, o.ord
