-- name: gpu_time
-- title: GPU busy, compute and idle time per rank and step
-- section: GPU
-- stored: yes
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
-- A rank profiled in several trace files (one per cycle of a repeating profiler schedule)
-- counts each file's times: the time between two files was not profiled, so it is not idle.
-- The unions are computed once at ingest, per file, into gpu_step_time (ingest/gpu_time.py).
-- @param run_id VARCHAR  Run to analyse.
-- @param include_last_step BOOLEAN = false  Keep the GPU events of the last ProfilerStep window (HTA drops them).
-- @column rank INTEGER fmt=count  Global rank.
-- @column step INTEGER fmt=count  Profiler step; NULL on the rank's whole-trace row.
-- @column kernel_time_us DOUBLE fmt=us  Last GPU event end minus first GPU event start, summed over the rank's trace files (us).
-- @column busy_us DOUBLE fmt=us  Time at least one GPU event runs, on any stream (us).
-- @column idle_us DOUBLE fmt=us  kernel_time_us - busy_us (us).
-- @column compute_us DOUBLE fmt=us  Time at least one compute kernel runs (us).
-- @column non_compute_us DOUBLE fmt=us  busy_us - compute_us: communication and memory not overlapped by compute (us).
-- @column idle_pct DOUBLE fmt=pct100  100 * idle_us / kernel_time_us (%).
-- @column compute_pct DOUBLE fmt=pct100  100 * compute_us / kernel_time_us (%).
-- @column non_compute_pct DOUBLE fmt=pct100  100 * non_compute_us / kernel_time_us (%).
-- @chart table
SELECT
    rank,
    step,
    kernel_time_us,
    busy_us,
    idle_us,
    compute_us,
    non_compute_us,
    idle_pct,
    compute_pct,
    non_compute_pct
FROM gpu_shares
WHERE include_last_step = $include_last_step
ORDER BY rank, step NULLS FIRST
