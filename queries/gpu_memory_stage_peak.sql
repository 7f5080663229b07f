-- name: gpu_memory_stage_peak
-- title: GPU memory peak per RL stage (annotated range) and rank
-- section: GPU
-- stored: yes
-- A run with both memory over time and annotated ranges on the same clock (a Kineto trace's
-- [memory] events and its record_function ranges; a memory timeline beside the NVTX ranges of an
-- Nsight Systems export, both on the epoch clock): per rank, device and range name, the most bytes live at once inside any of its ranges,
-- when, how much of it were activations, and the peak's rise over the fewest bytes live inside
-- the same ranges (what the stage itself allocated at most). A nested range counts in its
-- parent's too. No rows for a run without both.
-- @param run_id VARCHAR  Run to analyse.
-- @column rank INTEGER fmt=count  Global rank.
-- @column device VARCHAR  Device the bytes are on (cuda:0, cpu); NULL for a memory timeline, which names none.
-- @column name VARCHAR  Range name, e.g. update_actor.
-- @column stage VARCHAR  verl stage it serves (timing_s/<stage>), or NULL.
-- @column ranges BIGINT fmt=count  Ranges of this name holding at least one timeline entry.
-- @column peak_bytes BIGINT fmt=bytes  Most bytes live at once inside them (bytes).
-- @column peak_at_ms DOUBLE fmt=ms  When it was first reached, from the rank's first timeline entry (ms).
-- @column activation_bytes BIGINT fmt=bytes  Activations live at the peak (bytes); NULL where the source names no categories (Kineto).
-- @column rise_bytes BIGINT fmt=bytes  peak_bytes minus the fewest bytes live inside the same ranges (bytes).
-- @chart table
WITH timeline AS (
    SELECT m.*, min(ts_us) OVER (PARTITION BY rank, device) AS first_us
    FROM gpu_memory m
    WHERE run_id = $run_id
),
inside AS (
    SELECT t.*, r.name, r.stage, r.ts_us AS range_us
    FROM timeline t
    JOIN gpu_ranges r ON r.run_id = $run_id AND r.rank = t.rank
        AND t.ts_us >= r.ts_us AND t.ts_us < r.ts_us + r.dur_us
),
spans AS (
    SELECT rank, device, name, count(DISTINCT range_us) AS ranges, min(total_bytes) AS low_bytes
    FROM inside
    GROUP BY rank, device, name
),
ranked AS (
    SELECT i.*, row_number() OVER (PARTITION BY rank, device, name ORDER BY total_bytes DESC, ts_us) AS place
    FROM inside i
)
SELECT
    r.rank,
    r.device,
    r.name,
    r.stage,
    s.ranges,
    r.total_bytes AS peak_bytes,
    (r.ts_us - r.first_us) / 1000 AS peak_at_ms,
    r.activation_bytes,
    r.total_bytes - s.low_bytes AS rise_bytes
FROM ranked r JOIN spans s ON r.rank = s.rank AND r.device IS NOT DISTINCT FROM s.device AND r.name = s.name
WHERE r.place = 1
ORDER BY r.rank, r.device NULLS FIRST, peak_bytes DESC, r.name
