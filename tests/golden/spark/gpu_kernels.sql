WITH names AS (
  SELECT DISTINCT
    name_id,
    name
  FROM kernel_names
  WHERE
    run_id = :run_id
), per_kernel AS (
  SELECT
    rank,
    category,
    name_id,
    COUNT(*) AS calls,
    CAST(SUM(dur_us) AS DOUBLE) AS total_us
  FROM gpu_events
  WHERE
    run_id = :run_id
    AND (
      :include_last_step OR NOT hta_excluded
    )
    AND (
      :rank IS NULL OR rank = :rank
    )
  GROUP BY
    rank,
    category,
    name_id
), ranked AS (
  SELECT
    p.*,
    n.name,
    ROW_NUMBER() OVER (PARTITION BY rank, category ORDER BY total_us DESC, n.name NULLS LAST) AS place,
    CAST(SUM(total_us) OVER (PARTITION BY rank) AS DOUBLE) AS rank_total_us,
    CAST(SUM(total_us) OVER (PARTITION BY rank, category) AS DOUBLE) AS category_total_us
  FROM per_kernel AS p
  JOIN names AS n
    USING (name_id)
)
SELECT
  rank,
  category,
  place,
  name,
  calls,
  total_us,
  total_us / NULLIF(calls, 0) AS mean_us,
  100 * total_us / NULLIF(rank_total_us, 0) AS share_pct,
  100 * total_us / NULLIF(category_total_us, 0) AS category_share_pct
FROM ranked
WHERE
  place <= :top
ORDER BY
  rank NULLS LAST,
  category NULLS LAST,
  place NULLS LAST
