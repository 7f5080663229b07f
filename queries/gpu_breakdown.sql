-- name: gpu_breakdown
-- title: GPU time per rank: compute, non-compute, idle
-- section: GPU
-- stored: yes
-- The whole-trace rows of gpu_time as shares of each rank's kernel time (the span from
-- its first GPU event's start to its last one's end), for a stacked bar per rank. Same
-- rule as gpu_time for the last profiler step: by default GPU events launched at or after
-- the last ProfilerStep window's start (rank with two or more windows), or whose launch
-- is not in the trace, are ignored, as HTA does.
-- @param run_id VARCHAR  Run to analyse.
-- @param include_last_step BOOLEAN = false  Keep the GPU events of the last ProfilerStep window (HTA drops them).
-- @column rank INTEGER fmt=count  Global rank.
-- @column kernel_time_us DOUBLE fmt=us  Last GPU event end minus first GPU event start, summed over the rank's trace files (us).
-- @column compute_pct DOUBLE fmt=pct100  Time some compute kernel runs, over kernel_time_us (%).
-- @column non_compute_pct DOUBLE fmt=pct100  Time only communication or memory runs, over kernel_time_us (%).
-- @column idle_pct DOUBLE fmt=pct100  Time no GPU event runs, over kernel_time_us (%).
-- @chart stacked x=rank y=compute_pct,non_compute_pct,idle_pct xlabel="rank" ylabel="share of kernel time (%)" title="GPU time per rank"
SELECT rank, kernel_time_us, compute_pct, non_compute_pct, idle_pct
FROM gpu_shares
WHERE include_last_step = $include_last_step AND step IS NULL
ORDER BY rank
