-- view: staleness_steps
-- One row per step of $run_id with staleness information: from its trajectories when the run has
-- per-trajectory rows for the step with a consume version (basis 'per-sample'), else from the
-- framework's logged per-step aggregates (basis 'logged', async_logged). Staleness is the consuming
-- version minus the version of a trajectory's first token; in-flight is its last token's version
-- minus its first's; in-queue is the consuming version minus its last token's. Per-sample figures
-- are over the step's accepted trajectories; drops and tokens count every trajectory of the step.
-- @column step INTEGER fmt=count  Training step.
-- @column basis VARCHAR  'per-sample' (trajectories) or 'logged' (the framework's per-step aggregates).
-- @column trajectories BIGINT fmt=count  Accepted trajectories with a consume version (per-sample); NULL when logged.
-- @column staleness_min DOUBLE fmt=count  Least staleness (versions).
-- @column staleness_mean DOUBLE fmt=count  Mean staleness (versions).
-- @column staleness_p50 DOUBLE fmt=count  Median staleness (versions; per-sample only).
-- @column staleness_p90 DOUBLE fmt=count  90th percentile of staleness (versions; per-sample only).
-- @column staleness_max DOUBLE fmt=count  Largest staleness (versions).
-- @column in_flight_mean DOUBLE fmt=count  Mean in-flight span (versions); logged: staleness mean - in-queue mean, when both are logged.
-- @column in_flight_max DOUBLE fmt=count  Largest in-flight span (versions).
-- @column in_queue_mean DOUBLE fmt=count  Mean in-queue lag (versions).
-- @column in_queue_max DOUBLE fmt=count  Largest in-queue lag (versions).
-- @column partial BIGINT fmt=count  Trajectories whose generation spanned a weight update (in-flight > 0 or resumed).
-- @column resumes BIGINT fmt=count  Interruptions resumed, summed over the step's trajectories (per-sample, where logged).
-- @column generated BIGINT fmt=count  Trajectories (samples, logged) the step generated or dropped: every status.
-- @column dropped_stale BIGINT fmt=count  Trajectories (samples, logged) dropped as too stale.
-- @column tokens BIGINT fmt=tokens  Response tokens of every trajectory of the step (per-sample).
-- @column stale_tokens BIGINT fmt=tokens  Response tokens of those dropped as too stale (per-sample).
-- @column logged_staleness_mean DOUBLE fmt=count  The framework's own logged mean staleness, beside a per-sample step's (they agree when both count the same trajectories).
-- @column logged_staleness_max DOUBLE fmt=count  The framework's own logged largest staleness.
SELECT
    coalesce(t.step, l.step) AS step,
    CASE WHEN t.trajectories > 0 THEN 'per-sample' ELSE 'logged' END AS basis,
    CASE WHEN t.trajectories > 0 THEN t.trajectories END AS trajectories,
    CASE WHEN t.trajectories > 0 THEN t.staleness_min ELSE l.staleness_min END AS staleness_min,
    CASE WHEN t.trajectories > 0 THEN t.staleness_mean ELSE l.staleness_mean END AS staleness_mean,
    CASE WHEN t.trajectories > 0 THEN t.staleness_p50 END AS staleness_p50,
    CASE WHEN t.trajectories > 0 THEN t.staleness_p90 END AS staleness_p90,
    CASE WHEN t.trajectories > 0 THEN t.staleness_max ELSE l.staleness_max END AS staleness_max,
    CASE WHEN t.trajectories > 0 THEN t.in_flight_mean
         ELSE l.staleness_mean - l.in_queue_mean END AS in_flight_mean,
    CASE WHEN t.trajectories > 0 THEN t.in_flight_max ELSE l.in_flight_max END AS in_flight_max,
    CASE WHEN t.trajectories > 0 THEN t.in_queue_mean ELSE l.in_queue_mean END AS in_queue_mean,
    CASE WHEN t.trajectories > 0 THEN t.in_queue_max ELSE l.in_queue_max END AS in_queue_max,
    CASE WHEN t.trajectories > 0 THEN t.partial ELSE round(l.partial_resumed)::BIGINT END AS partial,
    CASE WHEN t.trajectories > 0 THEN t.resumes END AS resumes,
    CASE WHEN t.step IS NOT NULL THEN t.generated ELSE round(l.generated)::BIGINT END AS generated,
    CASE WHEN t.step IS NOT NULL THEN t.dropped_stale ELSE round(l.stale_dropped)::BIGINT END AS dropped_stale,
    t.tokens,
    t.stale_tokens,
    l.staleness_mean AS logged_staleness_mean,
    l.staleness_max AS logged_staleness_max
FROM (
    SELECT
        step,
        count(*) FILTER (WHERE status = 'accepted' AND consume_version IS NOT NULL) AS trajectories,
        min(consume_version - start_version) FILTER (WHERE status = 'accepted')::DOUBLE AS staleness_min,
        avg(consume_version - start_version) FILTER (WHERE status = 'accepted') AS staleness_mean,
        quantile_cont(consume_version - start_version, 0.5) FILTER (WHERE status = 'accepted') AS staleness_p50,
        quantile_cont(consume_version - start_version, 0.9) FILTER (WHERE status = 'accepted') AS staleness_p90,
        max(consume_version - start_version) FILTER (WHERE status = 'accepted')::DOUBLE AS staleness_max,
        avg(end_version - start_version) FILTER (WHERE status = 'accepted') AS in_flight_mean,
        max(end_version - start_version) FILTER (WHERE status = 'accepted')::DOUBLE AS in_flight_max,
        avg(consume_version - end_version) FILTER (WHERE status = 'accepted') AS in_queue_mean,
        max(consume_version - end_version) FILTER (WHERE status = 'accepted')::DOUBLE AS in_queue_max,
        count(*) FILTER (WHERE status = 'accepted'
                         AND (end_version > start_version OR resume_count > 0)) AS partial,
        sum(resume_count) FILTER (WHERE status = 'accepted')::BIGINT AS resumes,
        count(*) AS generated,
        count(*) FILTER (WHERE status = 'dropped_stale') AS dropped_stale,
        sum(tokens)::BIGINT AS tokens,
        coalesce(sum(tokens) FILTER (WHERE status = 'dropped_stale')::BIGINT, 0) AS stale_tokens
    FROM trajectories
    WHERE run_id = $run_id AND step IS NOT NULL
    GROUP BY step) AS t
FULL JOIN (
    SELECT * FROM async_logged
    WHERE coalesce(staleness_mean, staleness_max, staleness_min, in_queue_mean, in_queue_max,
                   in_flight_max, partial_resumed, stale_dropped, generated) IS NOT NULL) AS l
    ON l.step = t.step
