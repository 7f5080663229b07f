-- name: gpu_idle_gaps
-- title: Idle gaps between GPU events per rank and stream
-- section: GPU
-- stored: yes
-- On each stream, a gap is the time from the end of the events so far to the start of
-- the next one, when positive, within one trace file (the time between two files of a rank
-- was not profiled). Many small gaps point at launch overhead (CPU-bound);
-- a few long ones (over 1 ms) at waits: data loading, synchronisation, stragglers.
-- long_gap_share says which dominates. Same last-step rule as gpu_time (HTA's).
-- @param run_id VARCHAR  Run to analyse.
-- @param include_last_step BOOLEAN = false  Keep the GPU events of the last ProfilerStep window (HTA drops them).
-- @column rank INTEGER fmt=count  Global rank.
-- @column stream INTEGER fmt=count  CUDA/HIP stream.
-- @column events BIGINT fmt=count  GPU events on the stream.
-- @column gaps BIGINT fmt=count  Positive gaps between consecutive events.
-- @column gap_p50_us DOUBLE fmt=us  Median gap (us).
-- @column gap_p90_us DOUBLE fmt=us  90th percentile gap (us).
-- @column gap_max_us DOUBLE fmt=us  Longest gap (us).
-- @column idle_us DOUBLE fmt=us  Sum of the gaps (us).
-- @column long_gap_share DOUBLE fmt=pct  Share of idle_us in gaps over 1 ms (0-1).
-- @chart bar x=rank y=long_gap_share color=stream xlabel="rank" ylabel="share of idle time in gaps > 1 ms" title="Long idle gaps per rank and stream"
WITH ev AS (
    SELECT rank, stream, trace_start_us, ts_us, ts_us + dur_us AS end_us
    FROM gpu_events
    WHERE run_id = $run_id AND ($include_last_step OR NOT hta_excluded)
),
gaps AS (
    SELECT rank, stream,
        ts_us - max(end_us) OVER (PARTITION BY rank, trace_start_us, stream ORDER BY ts_us, end_us
                                  ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS gap_us
    FROM ev
)
SELECT
    rank,
    stream,
    count(*) AS events,
    count(*) FILTER (WHERE gap_us > 0) AS gaps,
    quantile_cont(gap_us, 0.5) FILTER (WHERE gap_us > 0) AS gap_p50_us,
    quantile_cont(gap_us, 0.9) FILTER (WHERE gap_us > 0) AS gap_p90_us,
    max(gap_us) FILTER (WHERE gap_us > 0) AS gap_max_us,
    coalesce(sum(gap_us) FILTER (WHERE gap_us > 0)::DOUBLE, 0) AS idle_us,
    coalesce(sum(gap_us) FILTER (WHERE gap_us > 1000)::DOUBLE, 0)
        / NULLIF(sum(gap_us) FILTER (WHERE gap_us > 0)::DOUBLE, 0) AS long_gap_share
FROM gaps
GROUP BY rank, stream
ORDER BY rank, stream
