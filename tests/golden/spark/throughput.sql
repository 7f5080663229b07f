SELECT
  step,
  MAX(value) FILTER(WHERE
    key = 'perf/throughput') AS throughput,
  MAX(value) FILTER(WHERE
    key = 'perf/total_num_tokens') AS total_num_tokens,
  MAX(value) FILTER(WHERE
    key = 'perf/time_per_step') AS time_per_step_s,
  MAX(value) FILTER(WHERE
    key = 'perf/mfu/actor') AS mfu_actor,
  MAX(value) FILTER(WHERE
    key = 'perf/mfu/critic') AS mfu_critic,
  MAX(value) FILTER(WHERE
    key = 'timing_per_token_ms/gen') AS gen_ms_per_token,
  MAX(value) FILTER(WHERE
    key = 'timing_per_token_ms/ref') AS ref_ms_per_token,
  MAX(value) FILTER(WHERE
    key = 'timing_per_token_ms/values') AS values_ms_per_token,
  MAX(value) FILTER(WHERE
    key = 'timing_per_token_ms/adv') AS adv_ms_per_token,
  MAX(value) FILTER(WHERE
    key = 'timing_per_token_ms/update_critic') AS update_critic_ms_per_token,
  MAX(value) FILTER(WHERE
    key = 'timing_per_token_ms/update_actor') AS update_actor_ms_per_token
FROM step_metrics
WHERE
  run_id = :run_id
  AND key IN (
    'perf/throughput',
    'perf/total_num_tokens',
    'perf/time_per_step',
    'perf/mfu/actor',
    'perf/mfu/critic',
    'timing_per_token_ms/gen',
    'timing_per_token_ms/ref',
    'timing_per_token_ms/values',
    'timing_per_token_ms/adv',
    'timing_per_token_ms/update_critic',
    'timing_per_token_ms/update_actor'
  )
GROUP BY
  step
ORDER BY
  step NULLS LAST
