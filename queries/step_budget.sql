-- name: step_budget
-- title: Where each step's GPU time went
-- section: Budget
-- stored: yes
-- Each step's GPU-seconds (step_s x gpus) split into the rollout's busy time, its two kinds of
-- idle (the long tail, and the imbalance an equal split of the work would remove), the verl
-- stages and the rest; the columns add up to gpu_s. Every stage holds all the job's GPUs
-- (verl's colocated engine). A step is split by what it has (`basis`): engine times from samples
-- with a dp_rank (rollout_engines, busy in tokens or measured seconds), else the verl log's
-- slowest and mean sample times or response lengths, which cannot say when an engine sat idle,
-- so that run gets gen_long_tail instead of the two idle columns. Steps with no step time sum
-- their known stages (step_from); a packed trace with no time at all gets its gen time from a
-- stored simulation (gen_from). Column descriptions give each definition. include_total adds a
-- last row (step NULL) with the sums over the steps.
-- @param run_id VARCHAR  Run to analyse.
-- @param include_total BOOLEAN = false  Add the whole-run row (step NULL, the column sums over the steps); off by default so the chart keeps one bar per step.
-- @column step INTEGER fmt=count  Training step; NULL on the whole-run row (sums over the steps).
-- @column basis VARCHAR  What splits the gen stage: 'engine seconds' (every engine's rank_stage gen seconds), 'packed lengths' (each engine's longest response, tokens), 'verl log' (timing_s/agent_loop/* or response_length/*), 'none' (gen_busy holds the whole gen stage); 'mixed' on the whole-run row when steps differ.
-- @column step_from VARCHAR  'timing_s/step'; 'sum of stages' when the step logged no step time (step_s is then the sum of its known stages: a lower bound when they run one after another); NULL when nothing about the step is timed.
-- @column gen_from VARCHAR  The gen stage's time: 'timing_s/gen'; 'rank_stage gen' (the slowest engine's measured seconds); 'simulated: <calibration>' (the as-recorded policy of a stored simulation, for a step with no measured gen time); NULL without one.
-- @column gpus BIGINT fmt=count  GPUs counted: runs.n_gpus, else run_ranks.gpus_from_ranks (whatif_job), else 1.
-- @column gpus_from VARCHAR  'runs.n_gpus', 'run_ranks.gpus_from_ranks', or 'unknown: per GPU' when neither is known (gpus = 1: every figure is per GPU; ingest with --gpus N).
-- @column gpu_scope VARCHAR  What the GPU-seconds below are, for the chart's y axis: 'summed over GPUs', or 'per GPU' when the GPU count is unknown.
-- @column step_s DOUBLE fmt=s  Wall time of the step (s), from step_from.
-- @column gpu_s DOUBLE fmt=s  step_s x gpus: the GPU-seconds the columns below split (GPU-s).
-- @column gen_busy DOUBLE fmt=s  Rollout engines busy (GPU-s). Engines: window x gpus x sum(busy) / (engines x slowest). verl log: window x gpus minus gen_long_tail. none: gen_s x gpus.
-- @column gen_tail_idle DOUBLE fmt=s  Engines done, waiting for the longest sample, idle that no equal split of the work removes (GPU-s): window x gpus x (M - mean busy) / slowest. M = max(mean busy, busy of the engine holding the step's longest response): a lower bound of the makespan after an equal split of the work (tokens at the step's mean rate give each engine the mean busy; no engine can finish before its longest sample). On the 'packed lengths' basis M = slowest, so all idle is tail. NULL on the verl-log basis.
-- @column gen_imbalance_idle DOUBLE fmt=s  Idle an equal split of the work over the engines would remove (GPU-s): window x gpus x (slowest - M) / slowest; at most that, since M is a lower bound (What if simulates real dispatch). NULL on the verl-log basis.
-- @column gen_long_tail DOUBLE fmt=s  verl log only (GPU-s): window x gpus x tail share, the rollout after the mean sample finished and until the slowest did. Tail share: (slowest - mean sample time) / slowest, sample time = timing_s/agent_loop generate_sequences + tool_calls; without agent-loop timings, 1 - response_length/mean / response_length/max (decode-bound). Busy decoding the last long samples and idle engines together: the log cannot tell them apart.
-- @column gen_overhead DOUBLE fmt=s  gen_s minus the measured window (GPU-s): engine wake-up, weight load, scheduling and gathering around generation. The window is the slowest engine's measured seconds, else the verl log's slowest sample (generate_sequences + tool_calls), capped at gen_s; NULL without one (the split then covers all of gen_s).
-- @column reward DOUBLE fmt=s  timing_s/reward, else the slowest rank's rank_stage 'reward' seconds (reward_steps.max_s), x gpus (GPU-s).
-- @column logprob DOUBLE fmt=s  timing_s/old_log_prob + ref + values, x gpus (GPU-s).
-- @column update DOUBLE fmt=s  timing_s/update_actor + update_critic, x gpus (GPU-s).
-- @column weight_sync DOUBLE fmt=s  timing_s/update_weights + sync_rollout_weights, x gpus (GPU-s); NULL when neither is logged, as in verl's hybrid engine before them, where the sync runs as the rollout wakes up, inside gen_overhead.
-- @column checkpoint DOUBLE fmt=s  timing_s/save_checkpoint x gpus (GPU-s).
-- @column validation DOUBLE fmt=s  timing_s/testing x gpus (GPU-s).
-- @column other DOUBLE fmt=s  gpu_s minus every column above (GPU-s): timing_s/adv, the driver's own work and anything not logged; negative when logged stages overlap.
-- @column caveat VARCHAR  What the chart must say beside its bars: that the GPU count is unknown, so every figure is per GPU; that an async run's pools are split by async_budget, not here; NULL otherwise.
-- @chart stacked x=step y=gen_busy,gen_long_tail,gen_tail_idle,gen_imbalance_idle,gen_overhead,reward,logprob,update,other,validation,weight_sync,checkpoint shade=gen_long_tail,gen_tail_idle,gen_imbalance_idle xlabel="step" ylabel="GPU time, {gpu_scope}" caveat=caveat title="Where each step's GPU time went"
WITH metrics AS (
    -- stage keys step_timings and verl_steps do not pivot
    SELECT
        step,
        max(value) FILTER (WHERE key = 'timing_s/update_weights') AS update_weights_s,
        max(value) FILTER (WHERE key = 'timing_s/sync_rollout_weights') AS sync_weights_s
    FROM canonical_metrics
    WHERE run_id = $run_id
      AND key IN ('timing_s/update_weights', 'timing_s/sync_rollout_weights')
    GROUP BY step
), engines AS (
    SELECT
        step,
        CASE WHEN min(basis) = 'seconds' THEN 'engine seconds' ELSE 'packed lengths' END AS basis,
        count(*) AS engines,
        max(busy) AS slowest,
        sum(busy)::DOUBLE AS busy_sum,
        -- the least busy engine among those holding the step's longest response
        first(busy ORDER BY max_len DESC NULLS LAST, busy) AS longest_busy
    FROM rollout_engines
    GROUP BY step
), simulated AS (
    SELECT step, predicted_s, calibration
    FROM whatif
    WHERE run_id = $run_id AND engine IS NULL AND policy = 'as-recorded'
), steps AS (
    SELECT step FROM step_timings WHERE run_id = $run_id
    UNION SELECT step FROM engines
    UNION SELECT step FROM reward_steps
    UNION SELECT step FROM simulated
    UNION SELECT step FROM metrics WHERE coalesce(update_weights_s, sync_weights_s) IS NOT NULL
), stages AS (
    SELECT
        s.step,
        e.basis AS engine_basis,
        e.engines,
        e.slowest,
        e.busy_sum,
        e.longest_busy,
        t.step_s AS logged_step_s,
        coalesce(t.gen_s, CASE WHEN e.basis = 'engine seconds' THEN e.slowest END, w.predicted_s) AS gen_s,
        CASE WHEN t.gen_s IS NOT NULL THEN 'timing_s/gen'
             WHEN e.basis = 'engine seconds' THEN 'rank_stage gen'
             WHEN w.predicted_s IS NOT NULL THEN 'simulated: ' || w.calibration END AS gen_from,
        CASE WHEN e.basis = 'engine seconds' THEN e.slowest ELSE v.slowest_sample_s END AS measured_window_s,
        v.long_tail_share,
        coalesce(t.reward_s, r.max_s) AS reward_s,
        CASE WHEN coalesce(t.old_log_prob_s, t.ref_s, t.values_s) IS NOT NULL
             THEN coalesce(t.old_log_prob_s, 0) + coalesce(t.ref_s, 0) + coalesce(t.values_s, 0) END AS logprob_s,
        CASE WHEN coalesce(t.update_actor_s, t.update_critic_s) IS NOT NULL
             THEN coalesce(t.update_actor_s, 0) + coalesce(t.update_critic_s, 0) END AS update_s,
        CASE WHEN coalesce(m.update_weights_s, m.sync_weights_s) IS NOT NULL
             THEN coalesce(m.update_weights_s, 0) + coalesce(m.sync_weights_s, 0) END AS weight_sync_s,
        t.save_checkpoint_s AS checkpoint_s,
        t.testing_s AS validation_s,
        t.adv_s
    FROM steps s
    LEFT JOIN step_timings t ON t.run_id = $run_id AND t.step = s.step
    LEFT JOIN engines e ON e.step = s.step
    LEFT JOIN sample_times v ON v.step = s.step
    LEFT JOIN metrics m ON m.step = s.step
    LEFT JOIN reward_steps r ON r.step = s.step
    LEFT JOIN simulated w ON w.step = s.step
), shares AS (
    SELECT
        *,
        -- least() and greatest() skip NULLs: guard each operand
        CASE WHEN gen_s IS NOT NULL THEN least(coalesce(measured_window_s, gen_s), gen_s) END AS window_s,
        CASE WHEN coalesce(gen_s, reward_s, logprob_s, update_s, weight_sync_s, checkpoint_s,
                           validation_s, adv_s) IS NOT NULL
             THEN coalesce(gen_s, 0) + coalesce(reward_s, 0) + coalesce(logprob_s, 0)
                + coalesce(update_s, 0) + coalesce(weight_sync_s, 0) + coalesce(checkpoint_s, 0)
                + coalesce(validation_s, 0) + coalesce(adv_s, 0)
        END AS staged_s,
        busy_sum / NULLIF(engines * slowest, 0) AS busy_share,
        (slowest - greatest(busy_sum / NULLIF(engines, 0), longest_busy)) / NULLIF(slowest, 0)
            AS imbalance_share
    FROM stages
), split AS (
    SELECT
        step,
        CASE WHEN engine_basis IS NOT NULL THEN engine_basis
             WHEN long_tail_share IS NOT NULL THEN 'verl log'
             ELSE 'none' END AS basis,
        CASE WHEN logged_step_s IS NOT NULL THEN 'timing_s/step'
             WHEN staged_s IS NOT NULL THEN 'sum of stages' END AS step_from,
        gen_from,
        coalesce(logged_step_s, staged_s) AS step_s,
        CASE WHEN engine_basis IS NOT NULL THEN window_s * coalesce(busy_share, 1)
             ELSE window_s * (1 - coalesce(long_tail_share, 0)) END AS gen_busy_s,
        CASE WHEN engine_basis IS NOT NULL
             THEN window_s * (1 - busy_share - imbalance_share) END AS gen_tail_idle_s,
        CASE WHEN engine_basis IS NOT NULL THEN window_s * imbalance_share END AS gen_imbalance_idle_s,
        CASE WHEN engine_basis IS NULL THEN window_s * long_tail_share END AS gen_long_tail_s,
        CASE WHEN measured_window_s IS NOT NULL THEN gen_s - window_s END AS gen_overhead_s,
        gen_s,
        reward_s,
        logprob_s,
        update_s,
        weight_sync_s,
        checkpoint_s,
        validation_s
    FROM shares
), job AS (
    SELECT
        coalesce(gpus, 1) AS gpus,
        CASE WHEN (SELECT n_gpus FROM runs WHERE run_id = $run_id) IS NOT NULL THEN 'runs.n_gpus'
             WHEN gpus IS NOT NULL THEN 'run_ranks.gpus_from_ranks'
             ELSE 'unknown: per GPU' END AS gpus_from
    FROM whatif_job
), budget AS (
    SELECT
        p.step,
        p.basis,
        p.step_from,
        p.gen_from,
        j.gpus,
        j.gpus_from,
        CASE WHEN j.gpus_from LIKE 'unknown%' THEN 'per GPU' ELSE 'summed over GPUs' END AS gpu_scope,
        p.step_s,
        p.step_s * j.gpus AS gpu_s,
        p.gen_busy_s * j.gpus AS gen_busy,
        p.gen_tail_idle_s * j.gpus AS gen_tail_idle,
        p.gen_imbalance_idle_s * j.gpus AS gen_imbalance_idle,
        p.gen_long_tail_s * j.gpus AS gen_long_tail,
        p.gen_overhead_s * j.gpus AS gen_overhead,
        p.reward_s * j.gpus AS reward,
        p.logprob_s * j.gpus AS logprob,
        p.update_s * j.gpus AS update,
        p.weight_sync_s * j.gpus AS weight_sync,
        p.checkpoint_s * j.gpus AS checkpoint,
        p.validation_s * j.gpus AS validation,
        (p.step_s - coalesce(p.gen_s, 0) - coalesce(p.reward_s, 0) - coalesce(p.logprob_s, 0)
            - coalesce(p.update_s, 0) - coalesce(p.weight_sync_s, 0) - coalesce(p.checkpoint_s, 0)
            - coalesce(p.validation_s, 0)) * j.gpus AS other,
        NULLIF(concat_ws(' ',
            CASE WHEN j.gpus_from LIKE 'unknown%'
                 THEN 'GPU count unknown: every figure is per GPU (give the job''s GPU count at ingest).' END,
            CASE WHEN a.pools
                 THEN 'An async run: these bars split the trainer''s step as if every stage held every GPU; async_budget splits each pool.' END),
            '') AS caveat
    FROM split p
    CROSS JOIN job j
    CROSS JOIN (SELECT count(*) > 0 AS pools FROM async_pools) AS a
)
SELECT * FROM budget
UNION ALL
SELECT
    NULL::INTEGER AS step,
    CASE WHEN count(DISTINCT basis) = 1 THEN min(basis) ELSE 'mixed' END AS basis,
    CASE WHEN count(DISTINCT step_from) = 1 THEN min(step_from)
         WHEN count(DISTINCT step_from) > 1 THEN 'mixed' END AS step_from,
    CASE WHEN count(DISTINCT gen_from) = 1 THEN min(gen_from)
         WHEN count(DISTINCT gen_from) > 1 THEN 'mixed' END AS gen_from,
    min(gpus) AS gpus,
    min(gpus_from) AS gpus_from,
    min(gpu_scope) AS gpu_scope,
    sum(step_s)::DOUBLE AS step_s,
    sum(gpu_s)::DOUBLE AS gpu_s,
    sum(gen_busy)::DOUBLE AS gen_busy,
    sum(gen_tail_idle)::DOUBLE AS gen_tail_idle,
    sum(gen_imbalance_idle)::DOUBLE AS gen_imbalance_idle,
    sum(gen_long_tail)::DOUBLE AS gen_long_tail,
    sum(gen_overhead)::DOUBLE AS gen_overhead,
    sum(reward)::DOUBLE AS reward,
    sum(logprob)::DOUBLE AS logprob,
    sum(update)::DOUBLE AS update,
    sum(weight_sync)::DOUBLE AS weight_sync,
    sum(checkpoint)::DOUBLE AS checkpoint,
    sum(validation)::DOUBLE AS validation,
    sum(other)::DOUBLE AS other,
    min(caveat) AS caveat
FROM budget
HAVING count(*) > 0 AND $include_total
ORDER BY step NULLS LAST
