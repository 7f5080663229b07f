-- name: gpu_stage_time
-- title: GPU work per annotated range (RL stage) and rank
-- section: GPU
-- stored: yes
-- For annotated CPU ranges: NVTX ranges of an Nsight Systems export (verl's
-- global_profiler.tool=nsys names them after the worker method, e.g. update_actor, or the
-- trainer's timer, e.g. gen) and record_function ranges of a Kineto trace (e.g. ## backward ##,
-- nccl:all_reduce). Per rank and range name, the time on the CPU inside the ranges and the GPU work their process launched
-- inside them (CUDA runtime calls matched to kernels, memcpys and memsets by correlation id,
-- as nsys projects a range onto the GPU). gpu_us sums durations, so work overlapping on
-- several streams counts in full; a nested range's work also counts in its parent's.
-- gpu_span_us runs from the first launched event's start to the last one's end of each range,
-- summed: the range's length on the GPU. No rows for a run without annotated ranges.
-- @param run_id VARCHAR  Run to analyse.
-- @param rank INTEGER = NULL  Only this rank; NULL for every rank.
-- @param step INTEGER = NULL  Only ranges that start inside this profiler step's window; NULL for all.
-- @column rank INTEGER fmt=count  Global rank.
-- @column name VARCHAR  Range text.
-- @column stage VARCHAR  verl stage it serves (timing_s/<stage>), or NULL.
-- @column ranges BIGINT fmt=count  Ranges of this name on the rank.
-- @column range_us DOUBLE fmt=us  Their summed length on the CPU (us).
-- @column gpu_events BIGINT fmt=count  GPU events launched inside them.
-- @column gpu_us DOUBLE fmt=us  Summed duration of those events (us).
-- @column gpu_span_us DOUBLE fmt=us  Summed first-start-to-last-end span of each range's events (us).
-- @column communication_pct DOUBLE fmt=pct100  100 * NCCL/RCCL kernel time / gpu_us (%).
-- @column memory_pct DOUBLE fmt=pct100  100 * memcpy and memset time / gpu_us (%).
-- @column gpu_over_range_pct DOUBLE fmt=pct100  100 * gpu_us / range_us: GPU work per unit of the range's CPU time (%; above 100 with overlapping streams or work finishing after the range).
-- @chart table
SELECT
    rank,
    name,
    any_value(stage) AS stage,
    count(*) AS ranges,
    sum(dur_us)::DOUBLE AS range_us,
    sum(gpu_events)::BIGINT AS gpu_events,
    sum(gpu_us)::DOUBLE AS gpu_us,
    coalesce(sum(gpu_end_us - gpu_start_us)::DOUBLE, 0) AS gpu_span_us,
    100 * sum(communication_us)::DOUBLE / NULLIF(sum(gpu_us)::DOUBLE, 0) AS communication_pct,
    100 * sum(memory_us)::DOUBLE / NULLIF(sum(gpu_us)::DOUBLE, 0) AS memory_pct,
    100 * sum(gpu_us)::DOUBLE / NULLIF(sum(dur_us)::DOUBLE, 0) AS gpu_over_range_pct
FROM step_ranges
WHERE ($rank IS NULL OR rank = $rank) AND ($step IS NULL OR step = $step)
GROUP BY rank, name
ORDER BY rank, range_us DESC, name
