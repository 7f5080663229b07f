WITH chosen_rank AS (
  SELECT
    COALESCE(:rank, MIN(rank)) AS rank
  FROM gpu_events
  WHERE
    run_id = :run_id
), chosen AS (
  SELECT
    c.rank,
    COALESCE(
      :step,
      (
        SELECT
          MIN(step)
        FROM gpu_events AS e
        WHERE
          e.run_id = :run_id AND e.rank = c.rank
      )
    ) AS step
  FROM chosen_rank AS c
), ev AS (
  SELECT
    e.stream,
    e.category,
    e.name_id,
    e.ts_us,
    e.dur_us
  FROM gpu_events AS e, chosen AS c
  WHERE
    e.run_id = :run_id AND e.rank = c.rank AND e.step IS NOT DISTINCT FROM c.step
), frame AS (
  SELECT
    COUNT(*) AS n,
    COUNT(DISTINCT stream) AS lanes,
    MIN(ts_us) AS first_us,
    GREATEST(MAX(ts_us + dur_us) - MIN(ts_us), 1e-9) AS span_us,
    COALESCE(
      (
        SELECT
          MIN(p.ts_us)
        FROM profiler_steps AS p, chosen AS c
        WHERE
          p.run_id = :run_id AND p.rank = c.rank AND p.step = c.step
      ),
      MIN(ts_us)
    ) AS origin_us
  FROM ev
), binned AS (
  SELECT
    ev.*,
    f.origin_us,
    CASE
      WHEN f.n <= :max_bars
      THEN ROW_NUMBER() OVER (ORDER BY MONOTONICALLY_INCREASING_ID() NULLS LAST)
      ELSE FLOOR(
        (
          ev.ts_us - f.first_us
        ) * GREATEST(:max_bars DIV NULLIF(f.lanes, 0), 1) / NULLIF(f.span_us, 0)
      )
    END AS bin
  FROM ev, frame AS f
)
SELECT
  c.rank,
  c.step,
  b.stream,
  MIN(b.ts_us) - ANY_VALUE(b.origin_us) IGNORE NULLS AS start_us,
  MAX(b.ts_us + b.dur_us) - MIN(b.ts_us) AS dur_us,
  CAST(SUM(b.dur_us) AS DOUBLE) AS busy_us,
  COUNT(*) AS events,
  GET(
    TRANSFORM(
      ARRAY_SORT(
        COLLECT_LIST(STRUCT(b.dur_us AS k0, b.category AS k1, b.category AS v)),
        (l, r) -> CASE
          WHEN l.k0 IS NULL AND r.k0 IS NULL
          THEN 0
          WHEN l.k0 IS NULL
          THEN 1
          WHEN r.k0 IS NULL
          THEN -1
          WHEN l.k0 < r.k0
          THEN 1
          WHEN l.k0 > r.k0
          THEN -1
          ELSE CASE
            WHEN l.k1 IS NULL AND r.k1 IS NULL
            THEN 0
            WHEN l.k1 IS NULL
            THEN 1
            WHEN r.k1 IS NULL
            THEN -1
            WHEN l.k1 < r.k1
            THEN -1
            WHEN l.k1 > r.k1
            THEN 1
            ELSE 0
          END
        END
      ),
      s -> s.v
    ),
    0
  ) AS category,
  CASE
    WHEN COUNT(*) = 1
    THEN ANY_VALUE(k.name) IGNORE NULLS
    ELSE COUNT(*) || ' events'
  END AS name
FROM binned AS b
CROSS JOIN chosen AS c
LEFT JOIN (
  SELECT DISTINCT
    name_id,
    name
  FROM kernel_names
  WHERE
    run_id = :run_id
) AS k
  USING (name_id)
GROUP BY
  c.rank,
  c.step,
  b.stream,
  b.bin
ORDER BY
  b.stream NULLS LAST,
  start_us NULLS LAST
