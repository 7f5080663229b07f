-- view: gpu_shares
-- HTA's temporal breakdown of $run_id's GPU time as gpu_time reports it, one row per rank
-- (step NULL: the whole trace) and per profiler step, with and without the last ProfilerStep
-- window (include_last_step): the unions of gpu_step_time (computed at ingest, per trace file)
-- and their shares of the kernel time.
-- @column rank INTEGER fmt=count  Global rank.
-- @column step INTEGER fmt=count  Profiler step; NULL on the rank's whole-trace row.
-- @column include_last_step BOOLEAN  Whether the last ProfilerStep window's GPU events count (HTA drops them).
-- @column kernel_time_us DOUBLE fmt=us  Last GPU event end minus first GPU event start, summed over the rank's trace files (us).
-- @column busy_us DOUBLE fmt=us  Time at least one GPU event runs, on any stream (us).
-- @column idle_us DOUBLE fmt=us  kernel_time_us - busy_us (us).
-- @column compute_us DOUBLE fmt=us  Time at least one compute kernel runs (us).
-- @column non_compute_us DOUBLE fmt=us  busy_us - compute_us: communication and memory not overlapped by compute (us); never below 0 (HTA's rounding inward to whole us can leave compute's union a us over busy's, where HTA 0.5 stops on an assertion).
-- @column idle_pct DOUBLE fmt=pct100  100 * idle_us / kernel_time_us (%).
-- @column compute_pct DOUBLE fmt=pct100  100 * compute_us / kernel_time_us (%).
-- @column non_compute_pct DOUBLE fmt=pct100  100 * non_compute_us / kernel_time_us (%).
SELECT
    rank,
    step,
    include_last_step,
    kernel_time_us,
    busy_us,
    kernel_time_us - busy_us AS idle_us,
    compute_us,
    greatest(busy_us - compute_us, 0) AS non_compute_us,
    100 * (kernel_time_us - busy_us) / NULLIF(kernel_time_us, 0) AS idle_pct,
    100 * compute_us / NULLIF(kernel_time_us, 0) AS compute_pct,
    100 * greatest(busy_us - compute_us, 0) / NULLIF(kernel_time_us, 0) AS non_compute_pct
FROM (
    -- A rank profiled in several trace files (a profiler schedule that repeats writes one per
    -- cycle) has one row of each: their times add up, the time between two files not profiled.
    SELECT rank, step, include_last_step, sum(kernel_time_us)::DOUBLE AS kernel_time_us,
           sum(busy_us)::DOUBLE AS busy_us, sum(compute_us)::DOUBLE AS compute_us
    FROM gpu_step_time
    WHERE run_id = $run_id
    GROUP BY rank, step, include_last_step)
