-- name: gpu_critical_path_top
-- title: What the critical path spends its time on, per rank and window
-- section: GPU
-- stored: yes
-- The events the critical path of each window charges its time to (see gpu_critical_path),
-- summed by name and what bounds them: the CPU operators, runtime calls and kernels to shorten
-- first, since only time on the path shortens the step. A launch delay is named after the
-- kernel launched. The $top longest per window.
-- @param run_id VARCHAR  Run to analyse.
-- @param top INTEGER = 10 >= 1  Names kept per rank and window.
-- @column rank INTEGER fmt=count  Global rank.
-- @column annotation VARCHAR  The window, as gpu_critical_path.
-- @column instance INTEGER fmt=count  Which window of that name.
-- @column name VARCHAR  The event the time is charged to.
-- @column bound VARCHAR  cpu, gpu_compute, gpu_communication, launch_overhead or kernel_kernel_overhead.
-- @column time_us DOUBLE fmt=us  Its time on the path (us).
-- @column share_pct DOUBLE fmt=pct100  Share of the path's length (%).
-- @column edges BIGINT fmt=count  Path edges charged to it.
-- @chart table
WITH charged AS (
    SELECT rank, annotation, instance, name, bound, sum(dur_us)::DOUBLE AS time_us, count(*) AS edges
    FROM critical_path_edges
    WHERE run_id = $run_id AND bound IS NOT NULL
    GROUP BY rank, annotation, instance, name, bound
),
ranked AS (
    SELECT c.*, p.length_us,
        row_number() OVER (PARTITION BY c.rank, c.annotation, c.instance ORDER BY c.time_us DESC, c.name, c.bound) AS place
    FROM charged c
    JOIN critical_paths p ON p.run_id = $run_id AND p.rank = c.rank AND p.annotation = c.annotation
        AND p.instance = c.instance
)
SELECT rank, annotation, instance, name, bound, time_us, 100 * time_us / NULLIF(length_us, 0) AS share_pct, edges
FROM ranked
WHERE place <= $top
ORDER BY rank, annotation, instance, time_us DESC, name, bound
