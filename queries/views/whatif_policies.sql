-- view: whatif_policies
-- One row per simulated dispatch policy of $run_id: the whole run's predicted rollout time
-- under it (whatif_steps summed over steps) and what it saves against as-recorded.
-- @column policy VARCHAR  Dispatch policy.
-- @column dispatch VARCHAR  The policy as charts name it: length-balanced is marked '(oracle bound)'.
-- @column steps BIGINT fmt=count  Simulated steps.
-- @column rollout_s DOUBLE fmt=s  Predicted rollout time summed over the steps (s).
-- @column recorded_s DOUBLE fmt=s  As-recorded rollout time summed over the same steps (s).
-- @column saved_s DOUBLE fmt=s  Rollout time saved over the steps: sum of the steps' saved_s (s).
-- @column saved_frac DOUBLE fmt=pct  saved_s / recorded_s: share of rollout time saved.
-- @column speedup DOUBLE fmt=x  recorded_s / rollout_s.
SELECT
    policy,
    dispatch,
    steps,
    rollout_s,
    recorded_s,
    saved_s,
    saved_s / NULLIF(recorded_s, 0) AS saved_frac,
    recorded_s / NULLIF(rollout_s, 0) AS speedup
FROM (
    SELECT
        policy,
        dispatch,
        count(*) AS steps,
        sum(predicted_s)::DOUBLE AS rollout_s,
        sum(recorded_s)::DOUBLE AS recorded_s,
        sum(saved_s)::DOUBLE AS saved_s
    FROM whatif_steps
    GROUP BY policy, dispatch) AS totals
