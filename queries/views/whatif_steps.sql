-- view: whatif_steps
-- One row per step and simulated dispatch policy of $run_id (`polytrace simulate RUN --store`):
-- the predicted rollout time (the step's slowest engine) against the as-recorded policy's.
-- Only the whatif rows of whole steps (engine NULL) count.
-- @column step INTEGER fmt=count  Training step.
-- @column policy VARCHAR  Dispatch policy ('length-balanced' is an oracle bound).
-- @column dispatch VARCHAR  The policy as charts name it: length-balanced is marked '(oracle bound)'.
-- @column predicted_s DOUBLE fmt=s  Predicted rollout time of the step under the policy (s).
-- @column recorded_s DOUBLE fmt=s  Predicted rollout time of the step as recorded (s).
-- @column saved_s DOUBLE fmt=s  recorded_s - predicted_s (s).
-- @column idle_frac DOUBLE fmt=pct  1 - sum(engine times) / (engines * slowest engine time).
-- @column speedup DOUBLE fmt=x  recorded_s / predicted_s, as the simulation stored it.
SELECT
    w.step,
    w.policy,
    CASE WHEN w.policy = 'length-balanced' THEN 'length-balanced (oracle bound)' ELSE w.policy END
        AS dispatch,
    w.predicted_s,
    b.predicted_s AS recorded_s,
    b.predicted_s - w.predicted_s AS saved_s,
    w.idle_frac,
    w.speedup
FROM whatif w
JOIN whatif b ON b.run_id = w.run_id AND b.step = w.step AND b.policy = 'as-recorded'
    AND b.engine IS NULL
WHERE w.run_id = $run_id AND w.engine IS NULL
