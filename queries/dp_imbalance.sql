-- name: dp_imbalance
-- title: DP token imbalance
-- section: Imbalance
-- stored: yes
-- Per step, tokens (prompt + response) on the busiest data-parallel rank over the mean rank:
-- training waits for the busiest rank, so imbalance - 1 is the slowdown an even split would
-- remove. Samples without a dp_rank are left out; steps without any fall back to verl's global_seqlen/max and /mean metrics.
-- @param run_id VARCHAR  Run to analyse.
-- @column step INTEGER fmt=count  Training step.
-- @column ranks BIGINT fmt=count  Data-parallel ranks with samples; NULL from verl metrics.
-- @column max_tokens DOUBLE fmt=tokens  Tokens on the busiest rank: sum of prompt_len + response_len over its samples.
-- @column mean_tokens DOUBLE fmt=tokens  Mean tokens per rank.
-- @column imbalance DOUBLE fmt=x  max_tokens / mean_tokens (1 = even).
-- @column straggler_rank INTEGER fmt=count  dp_rank with the most tokens (lowest on a tie); NULL from verl metrics.
-- @column source VARCHAR  'samples', or 'global_seqlen' when taken from verl's step metrics.
-- @chart line x=step y=imbalance xlabel="step" ylabel="max / mean tokens per DP rank (ratio)" title="DP token imbalance"
SELECT step, ranks, max_tokens, mean_tokens, imbalance, straggler_rank, source
FROM dp_steps
ORDER BY step
