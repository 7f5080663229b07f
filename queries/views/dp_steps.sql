-- view: dp_steps
-- One row per step of $run_id: tokens (prompt + response) on the busiest data-parallel rank
-- against the mean rank. From samples with a dp_rank; a step without any falls back to
-- verl's global_seqlen/max and /mean metrics (verl_steps) when it logged one of them.
-- @column step INTEGER fmt=count  Training step.
-- @column ranks BIGINT fmt=count  Data-parallel ranks with samples; NULL from verl metrics.
-- @column max_tokens DOUBLE fmt=tokens  Tokens on the busiest rank: sum of prompt_len + response_len over its samples.
-- @column mean_tokens DOUBLE fmt=tokens  Mean tokens per rank.
-- @column imbalance DOUBLE fmt=x  max_tokens / mean_tokens (1 = even).
-- @column straggler_rank INTEGER fmt=count  dp_rank with the most tokens (lowest on a tie); NULL from verl metrics.
-- @column source VARCHAR  'samples', or 'global_seqlen' when taken from verl's step metrics.
SELECT
    step,
    count(*) AS ranks,
    max(tokens)::DOUBLE AS max_tokens,
    avg(tokens) AS mean_tokens,
    max(tokens)::DOUBLE / NULLIF(avg(tokens), 0) AS imbalance,
    first(dp_rank ORDER BY tokens DESC, dp_rank) AS straggler_rank,
    'samples' AS source
FROM (
    SELECT step, dp_rank, coalesce(prompt_tokens, 0) + coalesce(response_tokens, 0) AS tokens
    FROM step_rank_lengths
    WHERE run_id = $run_id AND dp_rank IS NOT NULL) AS ranks
GROUP BY step
UNION ALL
SELECT
    step,
    NULL::BIGINT AS ranks,
    seqlen_max AS max_tokens,
    seqlen_mean AS mean_tokens,
    seqlen_imbalance AS imbalance,
    NULL::INTEGER AS straggler_rank,
    'global_seqlen' AS source
FROM verl_steps
WHERE coalesce(seqlen_max, seqlen_mean) IS NOT NULL
  AND step NOT IN (SELECT step FROM step_rank_lengths WHERE run_id = $run_id AND dp_rank IS NOT NULL)
