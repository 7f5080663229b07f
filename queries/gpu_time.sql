-- name: gpu_time
-- title: GPU busy, compute and idle time per rank and step
-- section: GPU
-- HTA's temporal breakdown, per rank (one whole-trace row with step NULL) and per
-- profiler step. kernel_time_us is the last GPU event's end minus the first one's start;
-- busy_us is the union of GPU events over all streams; idle_us = kernel_time_us - busy_us;
-- compute_us is the union of compute kernels; non_compute_us = busy_us - compute_us
-- (communication and memory time not hidden under compute). A GPU event belongs to the
-- step whose ProfilerStep window holds its CPU launch. HTA's rule for the last step:
-- the last window is usually cut short, so when a rank has two or more ProfilerStep
-- windows, GPU events launched at or after the start of the last one are ignored
-- (then the last step has no row), and so are GPU events whose CPU launch is not in
-- the trace (queued before profiling began). include_last_step = true keeps them all.
-- @param run_id VARCHAR  Run to analyse.
-- @param include_last_step BOOLEAN = false  Keep the GPU events of the last ProfilerStep window (HTA drops them).
-- @column rank INTEGER  Global rank.
-- @column step INTEGER  Profiler step; NULL on the rank's whole-trace row.
-- @column kernel_time_us DOUBLE  Last GPU event end minus first GPU event start (us).
-- @column busy_us DOUBLE  Time at least one GPU event runs, on any stream (us).
-- @column idle_us DOUBLE  kernel_time_us - busy_us (us).
-- @column compute_us DOUBLE  Time at least one compute kernel runs (us).
-- @column non_compute_us DOUBLE  busy_us - compute_us: communication and memory not overlapped by compute (us).
-- @column idle_pct DOUBLE  100 * idle_us / kernel_time_us (%).
-- @column compute_pct DOUBLE  100 * compute_us / kernel_time_us (%).
-- @column non_compute_pct DOUBLE  100 * non_compute_us / kernel_time_us (%).
-- @chart table
WITH ev AS (
    SELECT rank, step, category = 'compute' AS compute, ts_us, ts_us + dur_us AS end_us
    FROM gpu_events
    WHERE run_id = $run_id AND ($include_last_step OR NOT hta_excluded)
),
scoped AS (
    SELECT rank, NULL::INTEGER AS step, compute, ts_us, end_us FROM ev
    UNION ALL
    SELECT rank, step, compute, ts_us, end_us FROM ev WHERE step IS NOT NULL
),
-- Sorted by start, each event adds only the part of it that ends past every earlier
-- event's end; summed, that is the length of the union.
reach AS (
    SELECT *,
        max(end_us) OVER w AS prev_end,
        max(end_us) FILTER (WHERE compute) OVER w AS prev_compute_end
    FROM scoped
    WINDOW w AS (PARTITION BY rank, step ORDER BY ts_us, end_us
                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
),
totals AS (
    SELECT
        rank,
        step,
        max(end_us) - min(ts_us) AS kernel_time_us,
        sum(greatest(end_us - greatest(ts_us, coalesce(prev_end, ts_us)), 0))::DOUBLE AS busy_us,
        coalesce(sum(greatest(end_us - greatest(ts_us, coalesce(prev_compute_end, ts_us)), 0))
                 FILTER (WHERE compute)::DOUBLE, 0) AS compute_us
    FROM reach
    GROUP BY rank, step
)
SELECT
    rank,
    step,
    kernel_time_us,
    busy_us,
    kernel_time_us - busy_us AS idle_us,
    compute_us,
    busy_us - compute_us AS non_compute_us,
    100 * (kernel_time_us - busy_us) / NULLIF(kernel_time_us, 0) AS idle_pct,
    100 * compute_us / NULLIF(kernel_time_us, 0) AS compute_pct,
    100 * (busy_us - compute_us) / NULLIF(kernel_time_us, 0) AS non_compute_pct
FROM totals
ORDER BY rank, step NULLS FIRST
