WITH counts AS (
  SELECT
    bin,
    CAST(SUM(responses) AS BIGINT) AS responses
  FROM step_length_bins
  WHERE
    run_id = :run_id
    AND (
      :step_from IS NULL OR step >= :step_from
    )
    AND (
      :step_to IS NULL OR step <= :step_to
    )
  GROUP BY
    bin
), bins AS (
  SELECT
    EXPLODE(
      CAST(IF(
        (
          MAX(bin) + 1 - 1
        ) < MIN(bin),
        ARRAY(),
        SEQUENCE(MIN(bin), (
          MAX(bin) + 1 - 1
        ))
      ) AS ARRAY<INT>)
    ) AS bin
  FROM counts
), filled AS (
  SELECT
    b.bin,
    CASE WHEN b.bin = 0 THEN 0 ELSE SHIFTLEFT(CAST(1 AS BIGINT), (
      b.bin - 1
    )) END AS bin_lo,
    SHIFTLEFT(CAST(1 AS BIGINT), b.bin) AS bin_hi,
    COALESCE(c.responses, 0) AS responses
  FROM bins AS b
  LEFT JOIN counts AS c
    USING (bin)
)
SELECT
  bin,
  bin_lo,
  bin_hi,
  CASE
    WHEN bin_hi - bin_lo = 1
    THEN CAST(bin_lo AS STRING)
    ELSE CAST(bin_lo AS STRING) || '-' || CAST((
      bin_hi - 1
    ) AS STRING)
  END AS label,
  responses,
  responses / NULLIF(CAST(SUM(responses) OVER () AS DOUBLE), 0) AS share,
  CAST(SUM(responses) OVER (ORDER BY bin NULLS LAST) AS DOUBLE) / NULLIF(CAST(SUM(responses) OVER () AS DOUBLE), 0) AS cum_share
FROM filled
ORDER BY
  bin NULLS LAST
