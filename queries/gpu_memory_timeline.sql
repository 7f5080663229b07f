-- name: gpu_memory_timeline
-- title: GPU memory over time by category
-- section: GPU
-- stored: yes
-- Bytes live on one rank's device over the profiled time, by PyTorch's categories, from a
-- profiler memory timeline or a Kineto trace's [memory] events (uncategorised: all other). The
-- device is $device, or with 'auto' the rank's device that held the most at once. The timeline is cut into $bins equal spans per rank and each span
-- shows the moment of its own peak (the first, where two moments tie), so no peak is lost to the drawing; gpu_memory_peak says
-- the peak in numbers.
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
-- @chart stacked x=time_ms y=parameter_bytes,optimizer_state_bytes,gradient_bytes,activation_bytes,other_bytes xlabel="time (ms)" ylabel="memory live (bytes)" title="GPU memory over time, each span at its peak"
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
    SELECT *, least(floor((ts_us - first_us) * $bins / NULLIF(last_us - first_us, 0)), $bins - 1) AS bin
    FROM timeline
),
peaks AS (
    SELECT *, row_number() OVER (PARTITION BY bin ORDER BY total_bytes DESC, ts_us) AS place
    FROM binned
)
SELECT
    coalesce(bin, 0) * (last_us - first_us) / NULLIF(1000.0 * $bins, 0) AS time_ms,
    parameter_bytes::DOUBLE AS parameter_bytes,
    optimizer_state_bytes::DOUBLE AS optimizer_state_bytes,
    gradient_bytes::DOUBLE AS gradient_bytes,
    activation_bytes::DOUBLE AS activation_bytes,
    (coalesce(input_bytes, 0) + coalesce(temporary_bytes, 0) + coalesce(autograd_detail_bytes, 0) + unknown_bytes)::DOUBLE AS other_bytes,
    total_bytes::DOUBLE AS total_bytes
FROM peaks
WHERE place = 1
ORDER BY time_ms
