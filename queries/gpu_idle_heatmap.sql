-- name: gpu_idle_heatmap
-- title: GPU idle share per rank and profiler step
-- section: GPU
-- stored: yes
-- The per-step idle_pct of gpu_time as a rank x step grid: within each step, the share
-- of the span from its first GPU event's start to its last one's end when no GPU event
-- runs on any stream. A GPU event belongs to the step whose ProfilerStep window holds its
-- CPU launch. By default the last step of a rank with two or more windows is left out
-- (HTA's rule, see gpu_time); include_last_step = true shows it.
-- @param run_id VARCHAR  Run to analyse.
-- @param include_last_step BOOLEAN = false  Show the last ProfilerStep window too (HTA drops it).
-- @column rank INTEGER fmt=count  Global rank.
-- @column step INTEGER fmt=count  Profiler step.
-- @column kernel_time_us DOUBLE fmt=us  The step's last GPU event end minus its first start (us).
-- @column idle_us DOUBLE fmt=us  Time in that span when no GPU event runs (us).
-- @column idle_pct DOUBLE fmt=pct100  100 * idle_us / kernel_time_us (%).
-- @chart heatmap x=step y=rank z=idle_pct xlabel="profiler step" ylabel="rank" title="GPU idle % per rank and step"
SELECT rank, step, kernel_time_us, idle_us, idle_pct
FROM gpu_shares
WHERE include_last_step = $include_last_step AND step IS NOT NULL
ORDER BY rank, step
