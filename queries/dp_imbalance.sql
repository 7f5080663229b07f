-- name: dp_imbalance
-- title: DP token imbalance
-- section: Imbalance
-- Per step, tokens (prompt + response) on the busiest data-parallel rank over the mean rank:
-- training waits for the busiest rank, so imbalance - 1 is the slowdown an even split would
-- remove. Samples without a dp_rank are left out; steps without any fall back to verl's global_seqlen/max and /mean metrics.
-- @param run_id VARCHAR  Run to analyse.
-- @column step INTEGER  Training step.
-- @column ranks BIGINT  Data-parallel ranks with samples; NULL from verl metrics.
-- @column max_tokens DOUBLE  Tokens on the busiest rank: sum of prompt_len + response_len over its samples.
-- @column mean_tokens DOUBLE  Mean tokens per rank.
-- @column imbalance DOUBLE  max_tokens / mean_tokens (1 = even).
-- @column straggler_rank INTEGER  dp_rank with the most tokens (lowest on a tie); NULL from verl metrics.
-- @column source VARCHAR  'samples', or 'global_seqlen' when taken from verl's step metrics.
-- @chart line x=step y=imbalance xlabel="step" ylabel="max / mean tokens per DP rank (ratio)" title="DP token imbalance"
WITH ranks AS (
    SELECT step, dp_rank, coalesce(prompt_tokens, 0) + coalesce(response_tokens, 0) AS tokens
    FROM step_rank_lengths
    WHERE run_id = $run_id AND dp_rank IS NOT NULL),
from_samples AS (
    SELECT
        step,
        count(*) AS ranks,
        max(tokens)::DOUBLE AS max_tokens,
        avg(tokens) AS mean_tokens,
        first(dp_rank ORDER BY tokens DESC, dp_rank) AS straggler_rank,
        'samples' AS source
    FROM ranks
    GROUP BY step),
from_metrics AS (
    SELECT
        step,
        NULL::BIGINT AS ranks,
        max(value) FILTER (WHERE key = 'global_seqlen/max') AS max_tokens,
        max(value) FILTER (WHERE key = 'global_seqlen/mean') AS mean_tokens,
        NULL::INTEGER AS straggler_rank,
        'global_seqlen' AS source
    FROM step_metrics
    WHERE run_id = $run_id
      AND key IN ('global_seqlen/max', 'global_seqlen/mean')
      AND step NOT IN (SELECT step FROM ranks)
    GROUP BY step),
steps AS (
    SELECT * FROM from_samples
    UNION ALL
    SELECT * FROM from_metrics)
SELECT
    step,
    ranks,
    max_tokens,
    mean_tokens,
    max_tokens / NULLIF(mean_tokens, 0) AS imbalance,
    straggler_rank,
    source
FROM steps
ORDER BY step
