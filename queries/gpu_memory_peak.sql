-- name: gpu_memory_peak
-- title: GPU memory peak per rank, device and profiler step, and what was live at it
-- section: GPU
-- stored: yes
-- From a PyTorch profiler memory timeline (profile_memory=True, export_memory_timeline) or a
-- Kineto trace's [memory] events: the most bytes live at once on each rank's device, when, and
-- how they split by category at that moment (parameters, optimizer state, activations,
-- gradients, ...). One whole-trace row per rank and device (step NULL) and, where the run has
-- the rank's ProfilerStep windows on the same clock (the same Kineto trace), one row per step
-- with the peak inside its window. Categories are PyTorch's own (torch/profiler/_memory_profiler.py);
-- memory it could not place, and all of a Kineto trace's (its events name none), is in other_bytes.
-- @param run_id VARCHAR  Run to analyse.
-- @column rank INTEGER fmt=count  Global rank.
-- @column device VARCHAR  Device the bytes are on (cuda:0, cpu); NULL for a memory timeline, which names none.
-- @column step INTEGER fmt=count  Profiler step whose window holds the peak; NULL on the whole-timeline row.
-- @column peak_bytes BIGINT fmt=bytes  Most bytes live at once (bytes).
-- @column peak_at_ms DOUBLE fmt=ms  When it was first reached, from the rank's first timeline entry (ms).
-- @column parameter_bytes BIGINT fmt=bytes  Parameters live at the peak (bytes); NULL where the source names no categories (Kineto).
-- @column optimizer_state_bytes BIGINT fmt=bytes  Optimizer state live at the peak (bytes).
-- @column activation_bytes BIGINT fmt=bytes  Activations live at the peak (bytes); NULL where the source names no categories (Kineto).
-- @column gradient_bytes BIGINT fmt=bytes  Gradients live at the peak (bytes).
-- @column other_bytes BIGINT fmt=bytes  Inputs, temporaries, autograd buffers and unknown memory live at the peak (bytes).
-- @column low_bytes BIGINT fmt=bytes  Fewest bytes live in the same span (bytes): peak_bytes - low_bytes is what the step itself allocated at most.
-- @column reserved_bytes BIGINT fmt=bytes  Reserved by the caching allocator at the peak (bytes); NULL for a memory timeline.
-- @chart table
WITH timeline AS (
    SELECT m.*, min(ts_us) OVER (PARTITION BY rank, device) AS first_us
    FROM gpu_memory m
    WHERE run_id = $run_id
),
windows AS (
    SELECT rank, step, ts_us AS start_us, ts_us + dur_us AS end_us
    FROM profiler_steps
    WHERE run_id = $run_id
),
spans AS (
    SELECT t.*, NULL::INTEGER AS step FROM timeline t
    UNION ALL
    SELECT t.*, w.step
    FROM timeline t JOIN windows w ON t.rank = w.rank AND t.ts_us >= w.start_us AND t.ts_us < w.end_us
),
ranked AS (
    SELECT s.*,
        row_number() OVER (PARTITION BY rank, device, step ORDER BY total_bytes DESC, ts_us) AS place,
        min(total_bytes) OVER (PARTITION BY rank, device, step) AS low_bytes
    FROM spans s
)
SELECT
    rank,
    device,
    step,
    total_bytes AS peak_bytes,
    (ts_us - first_us) / 1000 AS peak_at_ms,
    parameter_bytes,
    optimizer_state_bytes,
    activation_bytes,
    gradient_bytes,
    coalesce(input_bytes, 0) + coalesce(temporary_bytes, 0) + coalesce(autograd_detail_bytes, 0) + unknown_bytes AS other_bytes,
    low_bytes,
    reserved_bytes
FROM ranked
WHERE place = 1
ORDER BY rank, device NULLS FIRST, step NULLS FIRST
