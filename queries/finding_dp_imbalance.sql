-- name: finding_dp_imbalance
-- title: Finding: uneven token load over DP ranks
-- section: Findings
-- stored: yes
-- Mean over steps of dp_imbalance's max / mean tokens per data-parallel rank (samples, else
-- verl's global_seqlen), with the worst step. Training waits for the busiest rank, so
-- imbalance - 1 is the share of its time an even split would save. Emitted at 1.10 or more.
-- @param run_id VARCHAR  Run to examine.
-- @column kind VARCHAR  dp_imbalance.
-- @column severity VARCHAR  warn at 1.25 or more, else info.
-- @column value DOUBLE fmt=x  Mean of max / mean tokens per DP rank.
-- @column unit VARCHAR  ratio.
-- @column steps INTEGER[]  The worst step.
-- @column stage VARCHAR  update_actor.
-- @column text VARCHAR  The finding in one sentence.
-- @column evidence VARCHAR  The catalog URL of the per-step imbalance.
-- @chart table
WITH per_step AS (
    SELECT d.step, d.imbalance, d.straggler_rank AS rank, d.source,
           v.balanced_max / NULLIF(v.seqlen_mean, 0) AS balanced
    FROM dp_steps d
    LEFT JOIN verl_steps v ON v.step = d.step AND d.source = 'global_seqlen'
    WHERE d.ranks IS NULL OR d.ranks > 1),
summary AS (
    SELECT avg(imbalance) AS mean_imb, max(imbalance) AS worst, first(step ORDER BY imbalance DESC, step) AS worst_step,
           first(rank ORDER BY imbalance DESC, step) AS worst_rank, avg(balanced) AS balanced
    FROM per_step WHERE imbalance IS NOT NULL)
SELECT
    'dp_imbalance' AS kind,
    CASE WHEN mean_imb >= 1.25 THEN 'warn' ELSE 'info' END AS severity,
    mean_imb AS value,
    'ratio' AS unit,
    [worst_step] AS steps,
    'update_actor' AS stage,
    printf('The busiest DP rank carried %.2f× the mean rank''s tokens on average (%.2f× at step %d%s): '
           'each training step waits for a rank with %.0f%% more tokens than an even split would give it%s.',
           mean_imb, worst, worst_step,
           CASE WHEN worst_rank IS NOT NULL THEN printf(', rank %d', worst_rank) ELSE '' END,
           100 * (mean_imb - 1),
           CASE WHEN balanced IS NOT NULL AND balanced < mean_imb - 0.01
                THEN printf('; verl''s sequence balancing would bring it to %.2f× (trainer.balance_batch)', balanced)
                WHEN balanced IS NOT NULL THEN ''
                ELSE '; balance sequences across ranks by token count (verl: trainer.balance_batch)' END)
        AS text,
    '/api/queries/dp_imbalance?run_id=' || $run_id AS evidence
FROM summary
WHERE mean_imb >= 1.1
