WITH windows AS (
  SELECT
    step,
    rank,
    MAX(dur_us) AS dur_us
  FROM profiler_steps
  WHERE
    run_id = :run_id
  GROUP BY
    step,
    rank
), last_comm AS (
  SELECT
    step,
    rank,
    MAX(ts_us) AS last_comm_ts
  FROM gpu_events
  WHERE
    run_id = :run_id AND category = 'communication' AND NOT step IS NULL
  GROUP BY
    step,
    rank
), rows AS (
  SELECT
    w.step,
    w.rank,
    w.dur_us,
    c.last_comm_ts
  FROM windows AS w
  LEFT JOIN last_comm AS c
    USING (step, rank)
), steps AS (
  SELECT
    step,
    COUNT(*) AS ranks,
    MAX(dur_us) AS max_dur_us,
    AVG(dur_us) AS mean_dur_us,
    MIN(last_comm_ts) AS first_comm_ts,
    MAX(last_comm_ts) AS latest_comm_ts
  FROM rows
  GROUP BY
    step
), slowest AS (
  SELECT
    r.step,
    MIN(r.rank) AS slowest_rank
  FROM rows AS r
  JOIN steps AS s
    ON r.step = s.step AND r.dur_us = s.max_dur_us
  GROUP BY
    r.step
)
SELECT
  r.step,
  r.rank,
  r.dur_us,
  s.ranks,
  s.max_dur_us,
  s.mean_dur_us,
  s.max_dur_us / NULLIF(s.mean_dur_us, 0) AS max_over_mean,
  w.slowest_rank,
  r.last_comm_ts - s.first_comm_ts AS last_comm_lag_us,
  s.latest_comm_ts - s.first_comm_ts AS last_comm_spread_us
FROM rows AS r
JOIN steps AS s
  USING (step)
JOIN slowest AS w
  USING (step)
ORDER BY
  r.step NULLS LAST,
  r.rank NULLS LAST
