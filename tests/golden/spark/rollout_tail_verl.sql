WITH w AS (
  SELECT
    step,
    MAX(value) FILTER(WHERE
      key = 'timing_s/gen') AS gen_s,
    COALESCE(
      MAX(value) FILTER(WHERE
        key = 'timing_s/agent_loop/slowest/generate_sequences'),
      MAX(value) FILTER(WHERE
        key = 'timing_s/generation_timing/max')
    ) AS slowest_generate_s,
    COALESCE(
      MAX(value) FILTER(WHERE
        key = 'timing_s/agent_loop/generate_sequences/min'),
      MAX(value) FILTER(WHERE
        key = 'timing_s/generation_timing/min')
    ) AS fastest_generate_s,
    MAX(value) FILTER(WHERE
      key = 'timing_s/agent_loop/generate_sequences/mean') AS mean_generate_s,
    MAX(value) FILTER(WHERE
      key = 'timing_s/agent_loop/slowest/response_length') AS slowest_response_len,
    MAX(value) FILTER(WHERE
      key = 'response_length/mean') AS response_mean,
    MAX(value) FILTER(WHERE
      key = 'response_length/max') AS response_max,
    MAX(value) FILTER(WHERE
      key = 'response_length/clip_ratio') AS response_clip_ratio
  FROM step_metrics
  WHERE
    run_id = :run_id
    AND key IN (
      'timing_s/gen',
      'timing_s/agent_loop/slowest/generate_sequences',
      'timing_s/generation_timing/max',
      'timing_s/agent_loop/generate_sequences/min',
      'timing_s/generation_timing/min',
      'timing_s/agent_loop/generate_sequences/mean',
      'timing_s/agent_loop/slowest/response_length',
      'response_length/mean',
      'response_length/max',
      'response_length/clip_ratio'
    )
  GROUP BY
    step
)
SELECT
  step,
  gen_s,
  slowest_generate_s,
  fastest_generate_s,
  mean_generate_s,
  slowest_generate_s / NULLIF(gen_s, 0) AS slowest_share,
  slowest_response_len,
  response_mean,
  response_max,
  response_clip_ratio,
  response_max / NULLIF(response_mean, 0) AS response_tail_ratio,
  slowest_generate_s > 3 * mean_generate_s AS long_tail
FROM w
ORDER BY
  step NULLS LAST
