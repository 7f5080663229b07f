"""Times every catalog query on DuckDB native, DuckDB over the Parquet lake and Spark local, in one run.

    python bench/lake.py [--samples 5000000] [--gpu-events 5000000] [--dir /tmp/polytrace-bench-lake]

Builds one synthetic run (samples over 100 steps x 64 dp ranks, GPU events of 8 ranks), exports
it to a lake, then runs each query once to warm up and times the best of --repeat runs per engine.
Ratios are against DuckDB native. Spark local is expected to be slower on one machine; the
point is that the answers agree (the `same` column) and the path is real.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.compare import row_differences
from polytrace import store
from polytrace.ingest.gpu_time import fill_step_time
from polytrace.queries.catalog import bind, load_catalog
from polytrace.queries.runner import run_bound
from polytrace.store.aggregates import materialize
from polytrace.store.lake import export_runs, open_lake

RUN = "bench0001"

FILL = """
INSERT INTO runs (run_id, name, format, max_response_len, n_gpus, created_at)
VALUES ($run, 'bench', 'synthetic', 8192, 64, TIMESTAMP '2026-01-01');
INSERT INTO samples (run_id, step, prompt_id, sample_id, rank, dp_rank, prompt_len, response_len, truncated)
SELECT $run, (i // $per_step)::INTEGER, ((i % $per_step) // 8)::INTEGER, (i % 8)::INTEGER,
       (i % 64)::INTEGER, (i % 64)::INTEGER, (100 + hash(i) % 900)::INTEGER,
       least(8192, (exp(5 + (hash(i * 7) % 1000) / 300.0))::INTEGER), NULL
FROM range($samples) t(i);
INSERT INTO rank_stage (run_id, step, rank, dp_rank, stage, seconds)
SELECT $run, s, k, k, 'reward', 1 + (hash(s * 64 + k) % 1000) / 500.0 FROM range(100) a(s), range(64) b(k);
INSERT INTO step_metrics (run_id, step, key, value)
SELECT $run, s, k, 10 + (hash(s) % 100) FROM range(100) a(s),
       (VALUES ('timing_s/step'), ('timing_s/gen'), ('timing_s/reward'), ('timing_s/update_actor'),
               ('global_seqlen/max'), ('global_seqlen/mean'), ('perf/throughput')) m(k);
INSERT INTO gpu_events (run_id, rank, step, stream, category, name_id, ts_us, dur_us, hta_excluded)
SELECT $run, (i % 8)::INTEGER, (1 + (i // 8) // $per_window)::INTEGER, (7 + hash(i) % 3)::INTEGER,
       CASE hash(i) % 4 WHEN 0 THEN 'communication' WHEN 1 THEN 'memory' ELSE 'compute' END,
       hash(i) % 50, (i // 8) * 10.0 + (hash(i * 3) % 7), 3 + (hash(i * 5) % 20), false
FROM range($gpu_events) t(i);
INSERT INTO kernel_names (run_id, name_id, name)
SELECT $run, k, 'kernel_' || k FROM range(50) t(k);
INSERT INTO profiler_steps (run_id, rank, step, ts_us, dur_us)
SELECT $run, k, w, (w - 1) * $per_window * 10.0, $per_window * 10.0
FROM range(8) a(k), range(1, 1 + $gpu_events // 8 // $per_window) b(w);
"""


def build(db: Path, lake: Path, samples: int, gpu_events: int) -> None:
    con = store.open(db)
    values = {"run": RUN, "samples": samples, "per_step": samples // 100,
              "gpu_events": gpu_events, "per_window": gpu_events // 8 // 10}
    for statement in filter(str.strip, FILL.split(";")):
        con.execute(statement, {k: v for k, v in values.items() if f"${k}" in statement})
    fill_step_time(con, RUN)
    materialize(con, RUN)
    con.execute("CHECKPOINT")
    export_runs(con, [RUN], lake)
    con.close()


def params(query) -> dict:
    values = {p.name: RUN if p.name in ("run_id", "bench_run", "formal_run") else
              "timing_s/gen" if p.name == "key" else None for p in query.params if p.required}
    return bind(query, values)


def best(fn, repeat: int) -> tuple[float, object]:
    fn()
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=5_000_000)
    ap.add_argument("--gpu-events", type=int, default=5_000_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--dir", help="work directory (default: a temp dir, removed afterwards)")
    args = ap.parse_args()
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="polytrace-bench-lake-"))
    work.mkdir(parents=True, exist_ok=True)
    db, lake = work / "native.duckdb", work / "lake"
    try:
        start = time.perf_counter()
        if not lake.exists():
            build(db, lake, args.samples, args.gpu_events)
        print(f"built {args.samples:,} samples + {args.gpu_events:,} GPU events "
              f"in {time.perf_counter() - start:.1f} s", file=sys.stderr)
        from polytrace.queries.spark import Spark, register_lake, session

        start = time.perf_counter()
        spark = session(master="local[2]")
        register_lake(spark, lake)
        print(f"Spark session and lake views: {time.perf_counter() - start:.1f} s", file=sys.stderr)
        native, over_lake = store.open(db), open_lake(lake)
        print(f"{'query':<20} {'native s':>9} {'lake s':>8} {'spark s':>8} {'lake/nat':>9} "
              f"{'spark/nat':>10} {'same':>5} {'rows':>6}")
        for query in load_catalog().values():
            bound = params(query)
            t_native, want = best(partial(run_bound, native, query, bound), args.repeat)
            t_lake, got_lake = best(partial(run_bound, over_lake, query, bound), args.repeat)
            t_spark, got_spark = best(partial(run_bound, Spark(spark), query, bound), args.repeat)
            same = not row_differences(want.rows, got_lake.rows) and \
                not row_differences(want.rows, got_spark.rows)
            print(f"{query.name:<20} {t_native:9.3f} {t_lake:8.3f} {t_spark:8.3f} "
                  f"{t_lake / t_native:9.1f} {t_spark / t_native:10.1f} {'yes' if same else 'NO':>5} "
                  f"{len(want.rows):6d}",
                  flush=True)
        spark.stop()
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
