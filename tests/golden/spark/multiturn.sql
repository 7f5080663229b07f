SELECT
  step,
  rollouts,
  turns,
  turns / NULLIF(rollouts, 0) AS turns_mean,
  turns_max,
  tool_calls,
  tool_latency_p50,
  tool_latency_p99,
  engine_latency_p50,
  engine_latency_p99,
  cached_tokens / NULLIF(cache_prompt_tokens, 0) AS prefix_cache_hit
FROM step_turns
WHERE
  run_id = :run_id
ORDER BY
  step NULLS LAST
