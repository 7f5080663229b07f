WITH ev AS (
  SELECT
    rank,
    stream,
    ts_us,
    ts_us + dur_us AS end_us
  FROM gpu_events
  WHERE
    run_id = :run_id AND (
      :include_last_step OR NOT hta_excluded
    )
), gaps AS (
  SELECT
    rank,
    stream,
    ts_us - MAX(end_us) OVER (
      PARTITION BY rank, stream
      ORDER BY ts_us NULLS LAST, end_us NULLS LAST
      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
    ) AS gap_us
  FROM ev
)
SELECT
  rank,
  stream,
  COUNT(*) AS events,
  COUNT(*) FILTER(WHERE
    gap_us > 0) AS gaps,
  PERCENTILE(gap_us, 0.5) FILTER(WHERE
    gap_us > 0) AS gap_p50_us,
  PERCENTILE(gap_us, 0.9) FILTER(WHERE
    gap_us > 0) AS gap_p90_us,
  MAX(gap_us) FILTER(WHERE
    gap_us > 0) AS gap_max_us,
  COALESCE(CAST(SUM(gap_us) FILTER(WHERE
    gap_us > 0) AS DOUBLE), 0) AS idle_us,
  COALESCE(CAST(SUM(gap_us) FILTER(WHERE
    gap_us > 1000) AS DOUBLE), 0) / NULLIF(CAST(SUM(gap_us) FILTER(WHERE
    gap_us > 0) AS DOUBLE), 0) AS long_gap_share
FROM gaps
GROUP BY
  rank,
  stream
ORDER BY
  rank NULLS LAST,
  stream NULLS LAST
