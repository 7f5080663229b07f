-- view: whatif_policies
-- One row per simulated policy of $run_id: the predicted rollout time under it (whatif_steps
-- summed) and what it saves against as-recorded. A dispatch or config policy counts every
-- step; partial rollout counts its steady steps only (not the first, which receives no
-- carried samples, nor the last, which finishes them), with what it carries between steps.
-- length-balanced dispatch knows every length in advance; it is the bound of the simulated
-- dispatches only when none of them saves more.
-- @column policy VARCHAR  Simulated policy.
-- @column family VARCHAR  dispatch, algorithm or config (whatif_steps).
-- @column dispatch VARCHAR  The policy as charts name it; '(perfect-knowledge bound)' on length-balanced when no dispatch beats it.
-- @column bound BOOLEAN  length-balanced saving at least as much as every simulated dispatch.
-- @column steps BIGINT fmt=count  Steps counted.
-- @column rollout_s DOUBLE fmt=s  Predicted rollout time summed over those steps (s).
-- @column recorded_s DOUBLE fmt=s  As-recorded rollout time summed over the same steps (s).
-- @column saved_s DOUBLE fmt=s  Rollout time saved over those steps: sum of the steps' saved_s (s).
-- @column saved_frac DOUBLE fmt=pct  saved_s / recorded_s: share of rollout time saved.
-- @column speedup DOUBLE fmt=x  recorded_s / rollout_s.
-- @column carried_share DOUBLE fmt=pct  Partial rollout: samples finished a step after they started, over the samples generated as recorded (steady steps).
-- @column carried_tokens DOUBLE fmt=tokens  Partial rollout: mean tokens per step still owed by the samples cut at a step's cap (steady steps).
SELECT
    policy,
    family,
    CASE WHEN bound THEN 'length-balanced (perfect-knowledge bound)' ELSE label END AS dispatch,
    bound,
    steps,
    rollout_s,
    recorded_s,
    saved_s,
    saved_s / NULLIF(recorded_s, 0) AS saved_frac,
    recorded_s / NULLIF(rollout_s, 0) AS speedup,
    CASE WHEN family = 'algorithm' THEN carried_share END AS carried_share,
    CASE WHEN family = 'algorithm' THEN carried_tokens END AS carried_tokens
FROM (
    SELECT *,
           policy = 'length-balanced'
               AND saved_s >= max(saved_s) FILTER (WHERE family = 'dispatch') OVER () AS bound
    FROM (
        SELECT
            s.policy,
            s.family,
            any_value(s.dispatch) AS label,
            count(*) AS steps,
            sum(s.predicted_s)::DOUBLE AS rollout_s,
            sum(s.recorded_s)::DOUBLE AS recorded_s,
            sum(s.saved_s)::DOUBLE AS saved_s,
            sum(s.n - s.recorded_n)::DOUBLE / NULLIF(sum(s.recorded_n)::DOUBLE, 0) AS carried_share,
            avg(c.carried_tokens) AS carried_tokens
        FROM whatif_steps s
        LEFT JOIN whatif_carry c ON c.run_id = $run_id AND c.step = s.step AND c.policy = s.policy
        WHERE s.family != 'algorithm' OR s.steady
        GROUP BY s.policy, s.family) AS totals) AS marked
