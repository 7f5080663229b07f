WITH stage_order(stage, ord) AS (
  SELECT
    *
  FROM VALUES
    ('gen', 1),
    ('reward', 2),
    ('old_log_prob', 3),
    ('ref', 4),
    ('values', 5),
    ('adv', 6),
    ('update_critic', 7),
    ('update_actor', 8),
    ('step', 9) AS _values
), stages AS (
  SELECT
    run_id,
    step,
    stage,
    seconds
  FROM (
    SELECT
      *
    FROM step_timings
    WHERE
      run_id IN (:bench_run, :formal_run)
  )
  UNPIVOT(seconds FOR 
    stage IN (
      gen_s AS gen,
      reward_s AS reward,
      old_log_prob_s AS old_log_prob,
      ref_s AS ref,
      values_s AS values,
      adv_s AS adv,
      update_critic_s AS update_critic,
      update_actor_s AS update_actor,
      step_s AS step
    )
  )
), timed AS (
  SELECT
    run_id,
    step,
    CAST((
      ROW_NUMBER() OVER (PARTITION BY run_id ORDER BY step NULLS LAST) - 1
    ) AS INT) AS idx
  FROM (
    SELECT DISTINCT
      run_id,
      step
    FROM stages
  )
), pairs AS (
  SELECT
    b.idx,
    b.step AS bench_step,
    f.step AS formal_step
  FROM timed AS b
  JOIN timed AS f
    ON CASE :align
      WHEN 'index'
      THEN b.idx = f.idx
      WHEN 'step'
      THEN b.step = f.step
      ELSE RAISE_ERROR('align must be index or step')
    END
  WHERE
    b.run_id = :bench_run AND f.run_id = :formal_run
), compared AS (
  SELECT
    p.idx,
    p.bench_step,
    p.formal_step,
    b.stage,
    b.seconds AS bench_s,
    f.seconds AS formal_s,
    (
      b.seconds - f.seconds
    ) / NULLIF(f.seconds, 0) * 100 AS error_pct
  FROM pairs AS p
  JOIN stages AS b
    ON b.run_id = :bench_run AND b.step = p.bench_step
  JOIN stages AS f
    ON f.run_id = :formal_run AND f.step = p.formal_step AND f.stage = b.stage
)
SELECT
  c.idx,
  c.bench_step,
  c.formal_step,
  c.stage,
  c.bench_s,
  c.formal_s,
  c.error_pct,
  100 - AVG(ABS(c.error_pct)) OVER (PARTITION BY c.bench_step) AS step_accuracy,
  100 - AVG(ABS(c.error_pct)) OVER () AS accuracy
FROM compared AS c
JOIN stage_order AS o
  USING (stage)
ORDER BY
  c.bench_step NULLS LAST,
  o.ord NULLS LAST
