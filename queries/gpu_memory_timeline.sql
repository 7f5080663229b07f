-- name: gpu_memory_timeline
-- title: GPU memory over time by category
-- section: GPU
-- stored: yes
-- Bytes live on one rank's device over the profiled time, by PyTorch's categories, from a
-- profiler memory timeline or a Kineto trace's [memory] events (uncategorised: all other). The
-- device is $device, or with 'auto' the rank's device that held the most at once. The timeline is cut into $bins equal spans and each span
-- shows the moment of its own peak (the first, where two moments tie), so no peak is lost to the drawing; a span
-- without an entry shows what was live at the end of the span before it (memory holds until the next entry changes it).
-- The peak is marked; gpu_memory_peak says it in numbers.
-- @param run_id VARCHAR  Run to analyse.
-- @param rank INTEGER = 0  Rank to draw.
-- @param device VARCHAR = auto  Device to draw (cuda:0, cpu), or 'auto' for the rank's device with the highest peak.
-- @param bins INTEGER = 400 >= 1  Spans the timeline is cut into.
-- @column time_ms DOUBLE fmt=ms  Start of the span, from the rank's first timeline entry (ms).
-- @column parameter_bytes DOUBLE fmt=bytes  Parameters (bytes).
-- @column optimizer_state_bytes DOUBLE fmt=bytes  Optimizer state (bytes).
-- @column gradient_bytes DOUBLE fmt=bytes  Gradients (bytes).
-- @column activation_bytes DOUBLE fmt=bytes  Activations (bytes).
-- @column other_bytes DOUBLE fmt=bytes  Inputs, temporaries, autograd buffers and unknown (bytes).
-- @column total_bytes DOUBLE fmt=bytes  All categories (bytes).
-- @chart stacked x=time_ms y=parameter_bytes,optimizer_state_bytes,gradient_bytes,activation_bytes,other_bytes xlabel="time (ms)" ylabel="memory live (bytes)" peak=total_bytes title="GPU memory over time, each span at its peak"
WITH chosen AS (
    SELECT device
    FROM gpu_memory
    WHERE run_id = $run_id AND rank = $rank AND ($device = 'auto' OR device = $device)
    ORDER BY total_bytes DESC, device NULLS FIRST
    LIMIT 1
),
timeline AS (
    SELECT m.*, min(ts_us) OVER () AS first_us, max(ts_us) OVER () AS last_us
    FROM gpu_memory m JOIN chosen c ON m.device IS NOT DISTINCT FROM c.device
    WHERE m.run_id = $run_id AND m.rank = $rank
),
binned AS (
    SELECT *, coalesce(least(floor((ts_us - first_us) * $bins / NULLIF(last_us - first_us, 0)), $bins - 1), 0) AS bin
    FROM timeline
),
ranked AS (
    SELECT *,
        row_number() OVER (PARTITION BY bin ORDER BY total_bytes DESC, ts_us) AS peak_place,
        row_number() OVER (PARTITION BY bin ORDER BY ts_us DESC, total_bytes DESC) AS end_place
    FROM binned
),
frame AS (
    SELECT max(bin)::BIGINT AS last_bin, min(first_us) AS first_us, min(last_us) AS last_us FROM binned
),
spans AS (
    SELECT unnest(range(0, last_bin + 1)) AS bin, first_us, last_us FROM frame
),
filled AS (
    -- each span's own entries, or else the latest span before it that has some
    SELECT s.*, b.bin IS NOT NULL AS own,
        max(b.bin) OVER (ORDER BY s.bin ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS source_bin
    FROM spans s LEFT JOIN (SELECT DISTINCT bin FROM binned) b ON b.bin = s.bin
)
SELECT
    coalesce(f.bin * (f.last_us - f.first_us) / NULLIF(1000.0 * $bins, 0), 0) AS time_ms,
    r.parameter_bytes::DOUBLE AS parameter_bytes,
    r.optimizer_state_bytes::DOUBLE AS optimizer_state_bytes,
    r.gradient_bytes::DOUBLE AS gradient_bytes,
    r.activation_bytes::DOUBLE AS activation_bytes,
    (coalesce(r.input_bytes, 0) + coalesce(r.temporary_bytes, 0) + coalesce(r.autograd_detail_bytes, 0) + r.unknown_bytes)::DOUBLE AS other_bytes,
    r.total_bytes::DOUBLE AS total_bytes
FROM filled f
JOIN ranked r ON r.bin = f.source_bin AND ((f.own AND r.peak_place = 1) OR (NOT f.own AND r.end_place = 1))
ORDER BY time_ms
