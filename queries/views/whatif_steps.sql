-- view: whatif_steps
-- One row per step and simulated policy of $run_id (`polytrace simulate RUN --store`): the
-- predicted rollout time (the step's slowest engine) against the as-recorded policy's. Only
-- the whatif rows of whole steps (engine NULL) count. A policy is a dispatch (the same samples
-- placed otherwise), an algorithm change (partial rollout: samples finish in a later step) or
-- a config change (a lower response cap).
-- @column step INTEGER fmt=count  Training step.
-- @column policy VARCHAR  Simulated policy.
-- @column family VARCHAR  dispatch, algorithm (partial-rollout:q) or config (cap:C).
-- @column dispatch VARCHAR  The policy as charts name it, with what it assumes.
-- @column steady BOOLEAN  Neither the first nor the last simulated step: a partial rollout's steady state (the first step receives no carried samples, the last finishes them all).
-- @column predicted_s DOUBLE fmt=s  Predicted rollout time of the step under the policy (s).
-- @column recorded_s DOUBLE fmt=s  Predicted rollout time of the step as recorded (s).
-- @column saved_s DOUBLE fmt=s  recorded_s - predicted_s (s).
-- @column idle_frac DOUBLE fmt=pct  1 - sum(engine times) / (engines * slowest engine time).
-- @column speedup DOUBLE fmt=x  recorded_s / predicted_s, as the simulation stored it.
-- @column n BIGINT fmt=count  Samples the step generated under the policy (partial rollout: with those carried in).
-- @column recorded_n BIGINT fmt=count  Samples the step generated as recorded.
SELECT
    w.step,
    w.policy,
    CASE WHEN w.policy LIKE 'partial-rollout%' THEN 'algorithm'
         WHEN w.policy LIKE 'cap:%' THEN 'config'
         ELSE 'dispatch' END AS family,
    CASE WHEN w.policy = 'length-balanced' THEN 'length-balanced (knows every length)'
         WHEN w.policy LIKE 'partial-rollout%' THEN w.policy || ' (changes the algorithm)'
         WHEN w.policy LIKE 'cap:%' THEN w.policy || ' (a lower response cap)'
         ELSE w.policy END AS dispatch,
    w.step > min(w.step) OVER (PARTITION BY w.policy) AND w.step < max(w.step) OVER (PARTITION BY w.policy)
        AS steady,
    w.predicted_s,
    b.predicted_s AS recorded_s,
    b.predicted_s - w.predicted_s AS saved_s,
    w.idle_frac,
    w.speedup,
    w.n::BIGINT AS n,
    b.n::BIGINT AS recorded_n
FROM whatif w
JOIN whatif b ON b.run_id = w.run_id AND b.step = w.step AND b.policy = 'as-recorded'
    AND b.engine IS NULL
WHERE w.run_id = $run_id AND w.engine IS NULL
