-- name: gpu_breakdown
-- title: GPU time per rank: compute, non-compute, idle
-- section: GPU
-- The whole-trace rows of gpu_time as shares of each rank's kernel time (the span from
-- its first GPU event's start to its last one's end), for a stacked bar per rank. Same
-- rule as gpu_time for the last profiler step: by default GPU events launched at or after
-- the last ProfilerStep window's start (rank with two or more windows), or whose launch
-- is not in the trace, are ignored, as HTA does.
-- @param run_id VARCHAR  Run to analyse.
-- @param include_last_step BOOLEAN = false  Keep the GPU events of the last ProfilerStep window (HTA drops them).
-- @column rank INTEGER  Global rank.
-- @column kernel_time_us DOUBLE  Last GPU event end minus first GPU event start (us).
-- @column compute_pct DOUBLE  Time some compute kernel runs, over kernel_time_us (%).
-- @column non_compute_pct DOUBLE  Time only communication or memory runs, over kernel_time_us (%).
-- @column idle_pct DOUBLE  Time no GPU event runs, over kernel_time_us (%).
-- @chart stacked x=rank y=compute_pct,non_compute_pct,idle_pct xlabel="rank" ylabel="share of kernel time (%)" title="GPU time per rank"
WITH ev AS (
    SELECT rank, category = 'compute' AS compute, ts_us, ts_us + dur_us AS end_us
    FROM gpu_events
    WHERE run_id = $run_id AND ($include_last_step OR NOT hta_excluded)
),
-- Sorted by start, each event adds the part of it past every earlier event's end.
reach AS (
    SELECT *,
        max(end_us) OVER w AS prev_end,
        max(end_us) FILTER (WHERE compute) OVER w AS prev_compute_end
    FROM ev
    WINDOW w AS (PARTITION BY rank ORDER BY ts_us, end_us
                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
),
totals AS (
    SELECT
        rank,
        max(end_us) - min(ts_us) AS kernel_time_us,
        sum(greatest(end_us - greatest(ts_us, coalesce(prev_end, ts_us)), 0))::DOUBLE AS busy_us,
        coalesce(sum(greatest(end_us - greatest(ts_us, coalesce(prev_compute_end, ts_us)), 0))
                 FILTER (WHERE compute)::DOUBLE, 0) AS compute_us
    FROM reach
    GROUP BY rank
)
SELECT
    rank,
    kernel_time_us,
    100 * compute_us / NULLIF(kernel_time_us, 0) AS compute_pct,
    100 * (busy_us - compute_us) / NULLIF(kernel_time_us, 0) AS non_compute_pct,
    100 * (kernel_time_us - busy_us) / NULLIF(kernel_time_us, 0) AS idle_pct
FROM totals
ORDER BY rank
