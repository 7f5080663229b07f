SELECT
  step,
  prompts,
  kept_prompts AS kept,
  used_prompts AS used,
  response_tokens,
  used_tokens AS trained_tokens,
  response_tokens - used_tokens AS wasted_tokens,
  (
    response_tokens - used_tokens
  ) / NULLIF(response_tokens, 0) AS wasted_token_frac
FROM step_lengths
WHERE
  run_id = :run_id AND filtered
ORDER BY
  step NULLS LAST
