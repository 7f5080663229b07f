-- name: verl_imbalance
-- title: Tokens per DP rank (verl)
-- section: Imbalance
-- stored: yes
-- How far apart the data-parallel ranks' token loads are in each step, from verl's
-- global_seqlen/* metrics: the lightest, mean and heaviest rank in tokens. dp_imbalance
-- draws the resulting max / mean ratio; this shows the loads themselves, and, where verl
-- logs balanced_max, what its sequence balancing would reach (balanced_imbalance vs
-- imbalance): the gap is what balancing saves on the slowest rank.
-- @param run_id VARCHAR  Run to analyse.
-- @column step INTEGER fmt=count  Training step.
-- @column seqlen_min DOUBLE fmt=tokens  global_seqlen/min: tokens on the lightest DP rank.
-- @column seqlen_max DOUBLE fmt=tokens  global_seqlen/max: tokens on the heaviest DP rank.
-- @column seqlen_mean DOUBLE fmt=tokens  global_seqlen/mean: mean tokens per DP rank.
-- @column balanced_max DOUBLE fmt=tokens  global_seqlen/balanced_max: heaviest rank after balancing.
-- @column imbalance DOUBLE fmt=x  seqlen_max / seqlen_mean.
-- @column balanced_imbalance DOUBLE fmt=x  balanced_max / seqlen_mean: what balancing would reach.
-- @chart band x=step y=seqlen_min,seqlen_mean,seqlen_max xlabel="step" ylabel="tokens on a DP rank (tokens)" title="Tokens per DP rank: lightest, mean and heaviest (verl global_seqlen)"
SELECT
    step,
    seqlen_min,
    seqlen_max,
    seqlen_mean,
    balanced_max,
    seqlen_imbalance AS imbalance,
    balanced_imbalance
FROM verl_steps
WHERE coalesce(seqlen_min, seqlen_max, seqlen_mean, balanced_max) IS NOT NULL
ORDER BY step
