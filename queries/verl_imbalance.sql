-- name: verl_imbalance
-- title: DP token imbalance (verl)
-- section: Imbalance
-- Load imbalance over data-parallel ranks from verl's global_seqlen/* metrics: tokens on
-- the busiest rank over the mean rank (1 = perfectly even), and what verl's sequence
-- balancing would reach (balanced_max / mean). The gap between the two is what
-- balancing saves on the slowest rank.
-- @param run_id VARCHAR  Run to analyse.
-- @column step INTEGER  Training step.
-- @column seqlen_min DOUBLE  global_seqlen/min: tokens on the lightest DP rank.
-- @column seqlen_max DOUBLE  global_seqlen/max: tokens on the heaviest DP rank.
-- @column seqlen_mean DOUBLE  global_seqlen/mean: mean tokens per DP rank.
-- @column balanced_max DOUBLE  global_seqlen/balanced_max: heaviest rank after balancing.
-- @column imbalance DOUBLE  seqlen_max / seqlen_mean.
-- @column balanced_imbalance DOUBLE  balanced_max / seqlen_mean: what balancing would reach.
-- @chart line x=step y=imbalance,balanced_imbalance xlabel="step" ylabel="max / mean tokens per DP rank (ratio)" title="DP token imbalance"
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
