"""A tiny deterministic two-run database with the edge cases that split SQL engines, and its lake.

Run ids look like trouble on purpose: `0001` is numeric-looking (a Hive reader that infers
partition types makes it the integer 1) and `run.b` has a dot. Every table of the catalog
gets rows: about 20 steps per run, tied timestamps, zero-length and fully contained GPU
intervals, single-event steps, NULLs in measured columns, NaN metrics and a step that only
verl metrics cover.
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import duckdb

from polytrace.ingest.gpu_time import fill_step_time
from polytrace.store.aggregates import materialize
from polytrace.store.lake import export_runs, open_lake
from polytrace.store.migrate import ensure as ensure_schema

RUNS = ("0001", "run.b")

ROWS = """
INSERT INTO runs (run_id, name, format, max_response_len, n_gpus, created_at) VALUES
    ('0001', 'edge numeric id', 'polytrace-packed', 64, 4, TIMESTAMP '2026-01-01 00:00:00'),
    ('run.b', 'edge dotted id', 'polytrace-packed', NULL, NULL, TIMESTAMP '2026-01-02 00:00:00');

-- 0001: 20 steps x 4 dp ranks x 3 prompts x 2 samples; lengths cycle through 0 and the cap.
-- run.b: 18 steps, dp_rank NULL on odd prompts, one sample in step 17 (a single-event step).
INSERT INTO samples (run_id, step, prompt_id, sample_id, rank, dp_rank, prompt_len, response_len,
                     truncated, kept, used)
SELECT '0001', s, p, j, d * 2, d, 10 + (s * 3 + p) % 7,
       (s * 7 + p * 13 + j * 5 + d * 3) % 70,
       CASE WHEN s % 5 = 0 THEN NULL ELSE (s * 7 + p * 13 + j * 5 + d * 3) % 70 >= 64 END,
       CASE WHEN s % 4 = 1 THEN p <> 2 END, CASE WHEN s % 4 = 1 THEN p = 0 END
FROM range(20) a(s), range(3) b(p), range(2) c(j), range(4) e(d)
UNION ALL
SELECT 'run.b', s, p, j, p, CASE WHEN p % 2 = 0 THEN p END, 5,
       CASE WHEN s = 3 AND j = 1 THEN NULL ELSE (s * 11 + p * 3 + j) % 40 END, NULL, NULL, NULL
FROM range(17) a(s), range(4) b(p), range(3) c(j)
UNION ALL
SELECT 'run.b', 17, 0, 0, 0, 0, 5, 9, NULL, NULL, NULL;

-- reward and gen seconds per rank: ties in every third step, NULL tokens on rank 1
INSERT INTO rank_stage (run_id, step, rank, dp_rank, stage, seconds, tokens)
SELECT r, s, k, k, stage,
       CASE WHEN s % 3 = 0 THEN 2.0 ELSE 1.0 + ((s * 5 + k * 3) % 7) / 4.0 END
           + CASE WHEN stage = 'gen' THEN 10 ELSE 0 END,
       CASE WHEN k = 1 THEN NULL ELSE 100 + s * 10 + k END
FROM (VALUES ('0001'), ('run.b')) t(r), range(12) a(s), range(4) b(k),
     (VALUES ('reward'), ('gen')) g(stage)
WHERE NOT (r = 'run.b' AND stage = 'gen' AND s % 2 = 1);

-- verl metrics: stage timings (with gaps), seqlen balance, NaN, and steps beyond the samples
INSERT INTO step_metrics (run_id, step, key, value)
SELECT r, s, k, CASE
        WHEN k = 'timing_s/step' THEN 30 + s + (r = 'run.b')::INT * 2
        WHEN k = 'timing_s/gen' THEN 10 + s % 4
        WHEN k = 'timing_s/reward' AND s % 3 = 0 THEN NULL
        WHEN k = 'timing_s/reward' THEN 2.5
        WHEN k = 'timing_s/update_actor' THEN 8 + s / 2
        WHEN k = 'global_seqlen/max' THEN 1000 + s * 10
        WHEN k = 'global_seqlen/mean' THEN CASE WHEN s = 21 THEN 0 ELSE 800 + s END
        WHEN k = 'global_seqlen/min' THEN 600 + s
        WHEN k = 'perf/throughput' THEN CASE WHEN s = 4 THEN 'NaN'::DOUBLE ELSE 1e4 + s END
        WHEN k = 'response_length/mean' THEN 20 + s
        WHEN k = 'response_length/max' THEN 60 + s
    END
FROM (VALUES ('0001'), ('run.b')) t(r), range(23) a(s),
     (VALUES ('timing_s/step'), ('timing_s/gen'), ('timing_s/reward'), ('timing_s/update_actor'),
             ('global_seqlen/max'), ('global_seqlen/mean'), ('global_seqlen/min'),
             ('perf/throughput'), ('response_length/mean'), ('response_length/max')) m(k)
WHERE NOT (r = 'run.b' AND s = 7);
-- 0001's steps past the samples time their slowest and mean sample (verl's agent loop)
INSERT INTO step_metrics (run_id, step, key, value)
SELECT '0001', s, k, CASE k WHEN 'timing_s/agent_loop/slowest/generate_sequences' THEN 8 + s % 3
                             ELSE 2 + s % 2 END
FROM range(12, 23) a(s),
     (VALUES ('timing_s/agent_loop/slowest/generate_sequences'), ('timing_s/agent_loop/generate_sequences/mean')) m(k);

-- multi-turn rollouts of 0001: 1 to 3 turns, cached tokens unknown on step 2
INSERT INTO turns (run_id, step, prompt_id, sample_id, turn, prompt_tokens, cached_tokens,
                   completion_tokens, engine_latency_s, finish_reason, tool_call_count)
SELECT '0001', s, p, 0, t, 100 + t * 50, CASE WHEN s = 2 THEN NULL ELSE t * 40 END, 20 + p,
       CASE WHEN p = 1 AND t = 0 THEN NULL ELSE 0.5 + ((s + p + t) % 5) * 0.25 END, 'stop', t
FROM range(6) a(s), range(3) b(p), range(3) c(t)
WHERE t <= p;

INSERT INTO tool_calls (run_id, step, prompt_id, sample_id, turn, tool_name, latency_s, status)
SELECT '0001', s, p, 0, t, 'python', 0.1 * ((s * 3 + p + t) % 4), 'ok'
FROM range(6) a(s), range(3) b(p), range(3) c(t)
WHERE t <= p AND t > 0;

-- GPU events of ranks 0 and 1 in profiler steps 1..4 of each run: two streams, a tied start,
-- a zero-length event, one fully inside another, events outside any step (step NULL) and
-- HTA-excluded events in the last window.
INSERT INTO gpu_events (run_id, rank, step, stream, category, name_id, ts_us, dur_us, hta_excluded)
SELECT r, k, CASE WHEN i = 9 THEN NULL ELSE w END, 7 + i % 2,
       CASE i % 3 WHEN 0 THEN 'compute' WHEN 1 THEN 'communication' ELSE 'memory' END,
       i % 4, w * 1000 + k * 3 + CASE i WHEN 0 THEN 0 WHEN 1 THEN 0 WHEN 2 THEN 5 WHEN 3 THEN 7
                                         WHEN 4 THEN 40 WHEN 5 THEN 41 WHEN 6 THEN 300
                                         WHEN 7 THEN 300 WHEN 8 THEN 1500 ELSE 900 END,
       CASE i WHEN 0 THEN 50 WHEN 1 THEN 20 WHEN 2 THEN 0 WHEN 3 THEN 10 WHEN 4 THEN 100
              WHEN 5 THEN 2 WHEN 6 THEN 25.5 WHEN 7 THEN 25.5 WHEN 8 THEN 3 ELSE 12 END,
       w = 4
FROM (VALUES ('0001'), ('run.b')) t(r), range(2) a(k), range(1, 5) b(w), range(10) c(i)
WHERE NOT (r = 'run.b' AND k = 1 AND w = 2 AND i > 0);

INSERT INTO kernel_names (run_id, name_id, name)
SELECT r, i, CASE i WHEN 0 THEN 'gemm' WHEN 1 THEN 'ncclAllReduce' WHEN 2 THEN 'Memcpy HtoD'
                    ELSE 'softmax' END
FROM (VALUES ('0001'), ('run.b')) t(r), range(4) c(i);

INSERT INTO profiler_steps (run_id, rank, step, ts_us, dur_us)
SELECT r, k, w, w * 1000 + k * 3, 1000 - k * (w % 2) * 100
FROM (VALUES ('0001'), ('run.b')) t(r), range(2) a(k), range(1, 5) b(w);

INSERT INTO gpu_ranks (run_id, rank, source, rank_from, world_size, gpu_events, profiler_steps)
SELECT r, k, 'rank' || k || '.json', 'file name', 2, 40, 4
FROM (VALUES ('0001'), ('run.b')) t(r), range(2) a(k);

-- Kineto [memory] events: run.b rank 0 on cuda:0 (with what was reserved) and on the CPU, no categories.
INSERT INTO gpu_memory (run_id, rank, ts_us, device, unknown_bytes, total_bytes, reserved_bytes)
SELECT 'run.b', 0, 1100 + 300 * i, d, 100 * i + (d = 'cpu')::INTEGER, 100 * i + (d = 'cpu')::INTEGER, 4096
FROM range(6) a(i), (VALUES ('cuda:0'), ('cpu')) b(d);

-- Critical paths: steps 1..3 of rank 0 and 1 of each run, one with no time on the GPU, and a
-- record_function window; each path's edges with two names tied in time and a weightless sync.
INSERT INTO critical_paths (run_id, rank, annotation, instance, step, ts_us, dur_us, length_us, span_us, cpu_us,
                            gpu_compute_us, gpu_communication_us, launch_overhead_us, kernel_kernel_overhead_us,
                            events, edges)
SELECT r, k, 'ProfilerStep', w - 1, w, 1000 * w, 1000, 800 - 50 * w, 900, 400, CASE w WHEN 2 THEN 0 ELSE 200 END,
       CASE w WHEN 2 THEN 250 - 50 * w ELSE 100 - 50 * w END, 50, 50, 10 + w, 4
FROM (VALUES ('0001'), ('run.b')) t(r), range(2) a(k), range(1, 4) b(w)
UNION ALL
SELECT 'run.b', 0, 'update_actor', 0, NULL, 1500, 300, 0, 0, 0, 0, 0, 0, 0, 0, 0;

INSERT INTO critical_path_edges (run_id, rank, annotation, instance, seq, type, bound, name, track, ts_us, dur_us)
SELECT r, k, 'ProfilerStep', w - 1, e, CASE e WHEN 3 THEN 'sync_dependency' ELSE 'operator' END,
       CASE e WHEN 0 THEN 'cpu' WHEN 1 THEN 'cpu' WHEN 2 THEN 'gpu_compute' END,
       CASE e WHEN 0 THEN 'aten::mm' WHEN 1 THEN 'aten::add' WHEN 2 THEN 'gemm' END,
       CASE WHEN e < 2 THEN 'thread 1' ELSE 'stream 7' END, 1000 * w + 100 * e,
       CASE e WHEN 3 THEN 0 WHEN 2 THEN 300 ELSE 200 END
FROM (VALUES ('0001'), ('run.b')) t(r), range(2) a(k), range(1, 4) b(w), range(4) c(e);

-- Memory timelines: rank 0 of each run over steps 1..4 with two moments of equal peak (the
-- first wins) and a drop; rank 1 of run.b a single moment (a timeline of no length).
INSERT INTO gpu_memory (run_id, rank, ts_us, parameter_bytes, optimizer_state_bytes, input_bytes, temporary_bytes,
                        activation_bytes, gradient_bytes, autograd_detail_bytes, unknown_bytes, total_bytes)
SELECT r, 0, 1000 + 250 * i, 4096, 1024, 0, CASE WHEN i % 4 = 1 THEN 512 ELSE 0 END,
       CASE WHEN i % 4 = 2 THEN 512 ELSE 0 END + 100 * (i % 3), 0, 0, 8,
       4096 + 1024 + 512 * (i % 4 IN (1, 2))::INTEGER + 100 * (i % 3) + 8
FROM (VALUES ('0001'), ('run.b')) t(r), range(16) a(i)
UNION ALL
SELECT 'run.b', 1, 2500, 1, 2, 3, 4, 5, 6, 7, 8, 36;

-- NVTX ranges: a stage with GPU work (communication and memory in it), one that launched
-- nothing (NULL GPU span, zero gpu_us), and an unnamed-stage range of zero length.
INSERT INTO gpu_ranges (run_id, rank, name, stage, ts_us, dur_us, gpu_events, gpu_us, communication_us,
                        memory_us, gpu_start_us, gpu_end_us)
SELECT r, k, n, CASE n WHEN 'generate_sequences' THEN 'gen' WHEN 'update_actor' THEN 'update_actor' END,
       1000 * w + k, CASE n WHEN 'forward' THEN 0 ELSE 400 + 10 * w END,
       CASE n WHEN 'update_actor' THEN 3 ELSE 0 END, CASE n WHEN 'update_actor' THEN 250.5 ELSE 0 END,
       CASE n WHEN 'update_actor' THEN 100 ELSE 0 END, CASE n WHEN 'update_actor' THEN 0.5 ELSE 0 END,
       CASE n WHEN 'update_actor' THEN 1000 * w + k + 20 END, CASE n WHEN 'update_actor' THEN 1000 * w + k + 600 END
FROM (VALUES ('0001'), ('run.b')) t(r), range(2) a(k), range(1, 4) b(w),
     (VALUES ('update_actor'), ('generate_sequences'), ('forward')) c(n);

INSERT INTO whatif (run_id, step, policy, engine, n, tokens, max_len, predicted_s, idle_frac,
                    speedup, calibration)
SELECT '0001', s, p, e, 6, 100, 50, 10.0 + s + e - CASE p WHEN 'as-recorded' THEN 0 ELSE 2 END,
       0.1 * e, CASE WHEN e IS NULL THEN 1.25 END, 'calib.json'
FROM range(5) a(s), (VALUES ('as-recorded'), ('length-balanced')) b(p),
     (VALUES (NULL), (0), (1)) c(e);
-- rewards for group_waste: every third prompt of 0001 all-equal, NaN on one sample of run.b
UPDATE samples SET reward = CASE WHEN run_id = '0001' AND prompt_id = 0 THEN 1.0
                                 WHEN run_id = 'run.b' AND step = 2 AND sample_id = 0 THEN 'NaN'::DOUBLE
                                 ELSE (sample_id % 2)::DOUBLE END;
-- Ray calls: two workers over 4 steps of 0001, calls outside any step, a plain task on run.b
INSERT INTO ray_spans (run_id, step, node, worker, actor, name, stage, ts_us, dur_us)
SELECT '0001', CASE WHEN s = 0 THEN NULL ELSE s END, '10.0.0.1', 'worker:' || w, 'WorkerDict',
       'actor_rollout_' || m, CASE m WHEN 'generate_sequences' THEN 'gen' WHEN 'update_actor'
       THEN 'update_actor' END, s * 1e6 + k * 1e5 + w, 1e4 * (1 + (s + w + k) % 3)
FROM range(5) a(s), range(2) b(w), (VALUES (0, 'generate_sequences'), (1, 'update_actor'),
     (2, 'init_model')) c(k, m)
UNION ALL
SELECT 'run.b', NULL, '10.0.0.2', 'worker:9', NULL, 'compute_reward_async', 'reward', 5, 0;
-- run.b's log goes on past its samples: lengths collapse to 1 token for 6 steps, a checkpoint
-- step takes 10x the step time, throughput falls; 0001 logs training-health metrics
INSERT INTO step_metrics (run_id, step, key, value)
SELECT 'run.b', s, k, CASE
        WHEN k = 'response_length/mean' THEN CASE WHEN s < 30 THEN 50 ELSE 1 END
        WHEN k = 'timing_s/step' THEN CASE WHEN s = 33 THEN 400 ELSE 40 END
        WHEN k = 'timing_s/save_checkpoint' THEN CASE WHEN s = 33 THEN 350 END
        WHEN k = 'perf/throughput' THEN 10.0 END
FROM range(25, 37) a(s), (VALUES ('response_length/mean'), ('timing_s/step'),
                                 ('timing_s/save_checkpoint'), ('perf/throughput')) m(k)
WHERE NOT (k = 'timing_s/save_checkpoint' AND s <> 33);
INSERT INTO step_metrics (run_id, step, key, value)
SELECT '0001', s, k, CASE WHEN k = 'actor/kl_loss' AND s % 2 = 1 THEN 'NaN'::DOUBLE
                          ELSE (s + 1) / length(k) END
FROM range(8) a(s), (VALUES ('critic/score/mean'), ('critic/rewards/mean'), ('actor/entropy'),
                            ('actor/ppo_kl'), ('actor/kl_loss'), ('actor/grad_norm'),
                            ('actor/pg_clipfrac')) m(k);
-- Async. 0001, per-sample: two pools and a staleness bound of 1; 6 trajectories a step whose
-- staleness grows with the step (start versions fall behind), one partial (resumed), one dropped
-- stale and one filtered a step, timestamps on all but the last (NULL in every column).
UPDATE runs SET trainer_gpus = 2, rollout_gpus = 2, max_staleness = 1 WHERE run_id = '0001';
INSERT INTO trajectories (run_id, step, trajectory_id, prompt_id, sample_id, start_version, end_version,
                          consume_version, enqueue_ts, gen_start_ts, gen_end_ts, ready_ts, consume_ts,
                          status, reason, resume_count, tokens)
SELECT '0001', s, s || ':' || t, t // 2, t % 2,
       greatest(0, s - 1 - (s // 5) - t % 2), greatest(0, s - 1 - (t = 1)::INT), CASE WHEN t < 5 THEN s - 1 + (s = 0)::INT END,
       CASE WHEN t < 5 THEN s * 10.0 + t END, CASE WHEN t < 5 THEN s * 10.0 + t + 0.5 END,
       CASE WHEN t < 5 THEN s * 10.0 + t + 4 END, CASE WHEN t < 5 THEN s * 10.0 + t + 4.5 END,
       CASE WHEN t < 4 THEN s * 10.0 + 9 END,
       CASE t WHEN 4 THEN 'dropped_stale' WHEN 5 THEN 'filtered' ELSE 'accepted' END,
       CASE t WHEN 4 THEN 'too stale' WHEN 5 THEN 'all rewards equal' END,
       (t = 1)::INT, 10 + t * 5 + s
FROM range(12) a(s), range(6) b(t);
-- run.b, logged: verl fully-async keys; the trainer waits, the rollouter idles, the weight sync is
-- long, and the staleness is 0 (on-policy); step 7 logs nothing, as for its other metrics.
INSERT INTO step_metrics (run_id, step, key, value)
SELECT 'run.b', s, k, CASE k
        WHEN 'fully_async/total_wait_time' THEN 5 + s % 3
        WHEN 'rollouter/active_time' THEN 20 + s
        WHEN 'rollouter/version_time' THEN 30 + s
        WHEN 'timing_s/param_sync' THEN 12 + s % 2
        WHEN 'fully_async/monitor/queue/mq_queue_size' THEN s % 4
        WHEN 'fully_async/partial/partial_ratio' THEN 0.1 * (s % 3)
        WHEN 'fully_async/partial/total_partial_num' THEN s % 3
        WHEN 'fully_async/partial/max_partial_span' THEN s % 2
        WHEN 'training/off_policy/dropped_samples' THEN s % 2
        WHEN 'fully_async/count/dropped_stale_samples' THEN s
        WHEN 'fully_async/count/total_generated_samples' THEN 16 * (s + 1)
        ELSE 0 END
FROM range(12) a(s),
     (VALUES ('fully_async/total_wait_time'), ('rollouter/active_time'), ('rollouter/version_time'),
             ('timing_s/param_sync'), ('fully_async/monitor/queue/mq_queue_size'),
             ('fully_async/partial/partial_ratio'), ('fully_async/partial/total_partial_num'),
             ('fully_async/partial/max_partial_span'), ('training/off_policy/dropped_samples'),
             ('fully_async/count/dropped_stale_samples'), ('fully_async/count/total_generated_samples'),
             ('training/off_policy/trajectory_staleness_worst/mean'),
             ('training/off_policy/trajectory_staleness_worst/max'),
             ('training/off_policy/trajectory_staleness_worst/min')) m(k)
WHERE s <> 7;
-- run.b's simulation: the dispatches and a partial rollout, whose carry is stored
INSERT INTO whatif (run_id, step, policy, engine, n, tokens, max_len, predicted_s, idle_frac,
                    speedup, calibration)
SELECT 'run.b', s, p, NULL, 6 + CASE WHEN p LIKE 'partial%' AND s > 0 THEN 2 ELSE 0 END, 100, 50,
       CASE p WHEN 'as-recorded' THEN 10.0 + s WHEN 'round-robin' THEN 11.5 + s
              WHEN 'predicted-balanced' THEN 9.0 + s WHEN 'length-balanced' THEN 8.5 + s ELSE 7.0 + s END,
       0.2, NULL, 'calib.json'
FROM range(5) a(s), (VALUES ('as-recorded'), ('round-robin'), ('predicted-balanced'),
                            ('length-balanced'), ('partial-rollout:0.9')) b(p);
INSERT INTO whatif_carry (run_id, step, policy, carried, carried_tokens)
SELECT 'run.b', s, 'partial-rollout:0.9', CASE WHEN s < 4 THEN 2 ELSE 0 END, CASE WHEN s < 4 THEN 40 ELSE 0 END
FROM range(5) a(s);
-- run.b's async what-if: one step off gains at 2 of 8 GPUs, fully async (a share: no count) more
INSERT INTO whatif_async (run_id, step, mode, staleness, rollout_share, rollout_gpus, gpus, measured_s,
                          gen_s, train_s, predicted_sync_s, predicted_s, speedup, limited_by)
SELECT 'run.b', s, m, k, 0.25, CASE WHEN k = 1 THEN 2 END, CASE WHEN k = 1 THEN 8 END, 20.0 + s, 12.0, 8.0,
       20.0 + s, 16.0 + s / k, (20.0 + s) / (16.0 + s / k), CASE WHEN k = 1 THEN 'slowest sample' ELSE 'training' END
FROM range(5) a(s), (VALUES ('one-step-off', 1), ('fully-async:2', 2), ('fully-async:4', 4)) b(m, k);
"""


def build_database() -> duckdb.DuckDBPyConnection:
    """The two runs in a fresh in-memory database, aggregates materialized."""
    con = duckdb.connect()
    ensure_schema(con)
    con.execute(ROWS)
    for run_id in RUNS:
        fill_step_time(con, run_id)
        materialize(con, run_id)
    return con


def build_lake(con: duckdb.DuckDBPyConnection, root: Path) -> Path:
    export_runs(con, list(RUNS), root)
    return root


@contextmanager
def edge_engines(spark, root: Path) -> Iterator[tuple[duckdb.DuckDBPyConnection, Path, duckdb.DuckDBPyConnection]]:
    """The edge runs three ways: a database, DuckDB over its lake at root, and that lake
    registered in the Spark session (local or through Spark Connect)."""
    from polytrace.queries.spark import register_lake  # pyspark: only where a test has it

    native = build_database()
    build_lake(native, root)
    register_lake(spark, root)
    over_lake = open_lake(root)
    try:
        yield native, root, over_lake
    finally:
        over_lake.close()
        native.close()


# Values that walk the catalog's branches on the edge runs, by parameter name; every query
# gets them from its declared params alone, so a new query needs nothing here.
RUN_VALUES = {"run_id": RUNS, "bench_run": ("run.b",), "formal_run": ("0001",)}
VALUES = {
    "align": ("index", "step"), "key": ("timing_s/gen",), "include_last_step": ("true",),
    "rank": ("1", "0"), "step": ("2", "4"), "top": ("2",), "max_bars": ("4",),
    "step_from": ("3",), "step_to": ("9",), "gpus": ("8",),
}
BY_TYPE = {"VARCHAR": ("x",), "INTEGER": ("1",), "BIGINT": ("1",), "DOUBLE": ("0.5",), "BOOLEAN": ("true",)}


def params_for(query) -> list[dict]:
    """Parameter sets for a query from its declared params alone: each run (and each value of
    any other required param); on each of those, every optional param at its first value at
    once; then each value of each optional param alone, on the first run."""
    from polytrace.queries.catalog import bind

    def values(p) -> tuple[str, ...]:
        return RUN_VALUES.get(p.name) or VALUES.get(p.name) or BY_TYPE.get(p.type, ("x",))

    required = [p for p in query.params if p.required]
    optional = [p for p in query.params if not p.required]
    base = {p.name: values(p)[0] for p in required}
    bases = [base] + [{**base, p.name: v} for p in required for v in values(p)[1:]]
    sets = bases + ([{**b, **{p.name: values(p)[0] for p in optional}} for b in bases] if optional else [])
    sets += [{**base, p.name: v} for p in optional for v in values(p)]
    bound = []
    for s in sets:
        if (b := bind(query, s)) not in bound:
            bound.append(b)
    return bound
