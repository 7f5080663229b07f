WITH w AS (
  SELECT
    step,
    MAX(value) FILTER(WHERE
      key = 'global_seqlen/min') AS seqlen_min,
    MAX(value) FILTER(WHERE
      key = 'global_seqlen/max') AS seqlen_max,
    MAX(value) FILTER(WHERE
      key = 'global_seqlen/mean') AS seqlen_mean,
    MAX(value) FILTER(WHERE
      key = 'global_seqlen/balanced_max') AS balanced_max
  FROM step_metrics
  WHERE
    run_id = :run_id
    AND key IN (
      'global_seqlen/min',
      'global_seqlen/max',
      'global_seqlen/mean',
      'global_seqlen/balanced_max'
    )
  GROUP BY
    step
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
ORDER BY
  step NULLS LAST
