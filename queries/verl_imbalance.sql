-- name: verl_imbalance
-- title: Tokens per DP rank (verl)
-- section: Imbalance
-- How far apart the data-parallel ranks' token loads are in each step, from verl's
-- global_seqlen/* metrics: the lightest, mean and heaviest rank in tokens. dp_imbalance
-- draws the resulting max / mean ratio; this shows the loads themselves, and, where verl
-- logs balanced_max, what its sequence balancing would reach (balanced_imbalance vs
-- imbalance): the gap is what balancing saves on the slowest rank.
-- @param run_id VARCHAR  Run to analyse.
-- @column step INTEGER  Training step.
-- @column seqlen_min DOUBLE  global_seqlen/min: tokens on the lightest DP rank.
-- @column seqlen_max DOUBLE  global_seqlen/max: tokens on the heaviest DP rank.
-- @column seqlen_mean DOUBLE  global_seqlen/mean: mean tokens per DP rank.
-- @column balanced_max DOUBLE  global_seqlen/balanced_max: heaviest rank after balancing.
-- @column imbalance DOUBLE  seqlen_max / seqlen_mean.
-- @column balanced_imbalance DOUBLE  balanced_max / seqlen_mean: what balancing would reach.
-- @chart band x=step y=seqlen_min,seqlen_mean,seqlen_max xlabel="step" ylabel="tokens on a DP rank (tokens)" title="Tokens per DP rank: lightest, mean and heaviest (verl global_seqlen)"
WITH w AS (
    SELECT
        step,
        max(value) FILTER (WHERE key = 'global_seqlen/min') AS seqlen_min,
        max(value) FILTER (WHERE key = 'global_seqlen/max') AS seqlen_max,
        max(value) FILTER (WHERE key = 'global_seqlen/mean') AS seqlen_mean,
        max(value) FILTER (WHERE key = 'global_seqlen/balanced_max') AS balanced_max
    FROM step_metrics
    WHERE run_id = $run_id
      AND key IN ('global_seqlen/min', 'global_seqlen/max', 'global_seqlen/mean',
                  'global_seqlen/balanced_max')
    GROUP BY step
)
SELECT
    step,
    seqlen_min,
    seqlen_max,
    seqlen_mean,
    balanced_max,
    seqlen_max / NULLIF(seqlen_mean, 0) AS imbalance,
    balanced_max / NULLIF(seqlen_mean, 0) AS balanced_imbalance
FROM w
ORDER BY step
