-- One row per step that has samples: the step's length distribution and filter outcome.
-- The three quantiles come out of one sort, as a list.
-- @column run_id VARCHAR  Owning run.
-- @column step INTEGER  Training step.
-- @column n BIGINT  Responses (samples rows).
-- @column prompts BIGINT  Distinct prompt_id.
-- @column prompt_tokens BIGINT  Sum of prompt_len over the responses.
-- @column response_tokens BIGINT  Sum of response_len.
-- @column prompt_mean DOUBLE  avg(prompt_len).
-- @column response_mean DOUBLE  avg(response_len).
-- @column response_std DOUBLE  stddev_pop(response_len).
-- @column response_max INTEGER  max(response_len).
-- @column capped BIGINT  Responses truncated, or at or over runs.max_response_len.
-- @column cap_known BIGINT  Responses whose capping is known (truncated set, or a known cap).
-- @column filtered BOOLEAN  Some sample of the step carries DAPO filter flags (kept/used).
-- @column kept_prompts BIGINT  Distinct prompts with kept.
-- @column used_prompts BIGINT  Distinct prompts with used.
-- @column used_tokens BIGINT  Response tokens of samples with used (trained on); 0 without a filter.
-- @column at_max BIGINT  Responses exactly as long as the step's longest (a cap shows as many of them).
-- @column response_p50 DOUBLE  quantile_cont(response_len, 0.5).
-- @column response_p90 DOUBLE  quantile_cont(response_len, 0.9).
-- @column response_p99 DOUBLE  quantile_cont(response_len, 0.99).
CREATE TABLE step_lengths AS
WITH longest AS (
    SELECT step, max(response_len) AS response_max FROM samples WHERE run_id = $run_id GROUP BY step)
SELECT * EXCLUDE (q), q[1] AS response_p50, q[2] AS response_p90, q[3] AS response_p99
FROM (
    SELECT
        s.run_id,
        s.step,
        count(*) AS n,
        count(DISTINCT s.prompt_id) AS prompts,
        sum(s.prompt_len)::BIGINT AS prompt_tokens,
        sum(s.response_len)::BIGINT AS response_tokens,
        avg(s.prompt_len) AS prompt_mean,
        avg(s.response_len) AS response_mean,
        stddev_pop(s.response_len) AS response_std,
        quantile_cont(s.response_len, [0.5, 0.9, 0.99]) AS q,
        max(s.response_len) AS response_max,
        count(*) FILTER (WHERE s.truncated OR s.response_len >= r.max_response_len) AS capped,
        count(*) FILTER (WHERE s.truncated IS NOT NULL OR r.max_response_len IS NOT NULL)
            AS cap_known,
        bool_or(s.kept IS NOT NULL OR s.used IS NOT NULL) AS filtered,
        count(DISTINCT s.prompt_id) FILTER (WHERE s.kept) AS kept_prompts,
        count(DISTINCT s.prompt_id) FILTER (WHERE s.used) AS used_prompts,
        coalesce(sum(s.response_len) FILTER (WHERE s.used)::BIGINT, 0) AS used_tokens,
        count(*) FILTER (WHERE s.response_len = x.response_max) AS at_max
    FROM samples s
    JOIN runs r ON r.run_id = s.run_id
    JOIN longest x ON x.step = s.step
    WHERE s.run_id = $run_id
    GROUP BY s.run_id, s.step)
