-- name: gpu_kernels
-- title: Top GPU kernels per rank and category
-- section: GPU
-- stored: yes
-- The kernels (and memcpys, memsets) with the most total GPU time on each rank, the top
-- few of each category: compute, communication (NCCL/RCCL) and memory. Times are summed
-- durations, so kernels overlapping on several streams count in full. Same last-step
-- rule as gpu_time (HTA's).
-- @param run_id VARCHAR  Run to analyse.
-- @param include_last_step BOOLEAN = false  Keep the GPU events of the last ProfilerStep window (HTA drops them).
-- @param rank INTEGER = NULL  Only this rank; NULL for every rank.
-- @param top INTEGER = 10 >= 1  Kernels kept per rank and category.
-- @column rank INTEGER fmt=count  Global rank.
-- @column category VARCHAR  compute, communication or memory.
-- @column place BIGINT fmt=count  1 for the kernel with the most total time in the rank's category.
-- @column name VARCHAR  Kernel name as the profiler wrote it.
-- @column calls BIGINT fmt=count  Times it ran.
-- @column total_us DOUBLE fmt=us  Summed duration (us).
-- @column mean_us DOUBLE fmt=us  total_us / calls (us).
-- @column share_pct DOUBLE fmt=pct100  Its share of the rank's summed GPU event time (%).
-- @column category_share_pct DOUBLE fmt=pct100  Its share of the rank's summed time in its category (%).
-- @chart table
WITH names AS (
    SELECT DISTINCT name_id, name FROM kernel_names WHERE run_id = $run_id
),
per_kernel AS (
    SELECT rank, category, name_id, count(*) AS calls, sum(dur_us)::DOUBLE AS total_us
    FROM gpu_events
    WHERE run_id = $run_id AND ($include_last_step OR NOT hta_excluded)
      AND ($rank IS NULL OR rank = $rank)
    GROUP BY rank, category, name_id
),
ranked AS (
    SELECT p.*, n.name,
        row_number() OVER (PARTITION BY rank, category ORDER BY total_us DESC, n.name) AS place,
        sum(total_us) OVER (PARTITION BY rank)::DOUBLE AS rank_total_us,
        sum(total_us) OVER (PARTITION BY rank, category)::DOUBLE AS category_total_us
    FROM per_kernel p JOIN names n USING (name_id)
)
SELECT
    rank,
    category,
    place,
    name,
    calls,
    total_us,
    total_us / NULLIF(calls, 0) AS mean_us,
    100 * total_us / NULLIF(rank_total_us, 0) AS share_pct,
    100 * total_us / NULLIF(category_total_us, 0) AS category_share_pct
FROM ranked
WHERE place <= $top
ORDER BY rank, category, place
