"""Dashboard query latency on a 5M-sample run: raw scans (before) vs per-step aggregates (after).

Builds one synthetic run straight into a DuckDB file: packed-shaped samples with lognormal
lengths over ~500 steps and 2-8 dp ranks, DAPO filter flags, reward and gen rank timings,
step timings, plus multi-turn turns and tool calls. Then it times every catalog query that
needs only a run_id, in process: `before` computes the per-step aggregates on the fly from
the raw tables (ingest.aggregates.on_the_fly, the same SQL the catalog ran before
materialization), `after` reads the materialized tables. Both must return the same rows.
Last, `after` again under N concurrent in-process clients (issue 3's target: p95 < 100 ms at 8).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path[0] = str(ROOT)

# noqa: E402
from polytrace import store
from polytrace.queries.catalog import bind, load_catalog  # noqa: E402
from polytrace.store.aggregates import materialize, on_the_fly  # noqa: E402
from polytrace.store.aggregates import names as aggregate_names

RUN = "bench5m"
N_SAMPLING = 8
MAX_RESPONSE = 16384


def samples_table(rng, samples: int, steps: int) -> pa.Table:
    prompts_per_step = samples // steps // N_SAMPLING
    step = np.repeat(np.arange(steps, dtype=np.int32), prompts_per_step)
    prompt_id = np.tile(np.arange(prompts_per_step, dtype=np.int32), steps)
    ranks = 2 + step % 7  # 2..8 dp ranks, changing with the step
    dp_rank = (prompt_id.astype(np.int64) * ranks // prompts_per_step).astype(np.int32)
    prompt_len = np.clip(rng.lognormal(5.0, 0.6, step.size), 1, 8192).astype(np.int32)
    kept = rng.random(step.size) < 0.4
    used = kept & (rng.random(step.size) < 0.8)
    n = step.size * N_SAMPLING
    response_len = np.minimum(rng.lognormal(6.5, 1.0, n), MAX_RESPONSE).astype(np.int32)

    def per_sample(a):
        return np.repeat(a, N_SAMPLING)

    return pa.table({
        "step": per_sample(step), "prompt_id": per_sample(prompt_id),
        "sample_id": np.tile(np.arange(N_SAMPLING, dtype=np.int32), step.size),
        "rank": per_sample(dp_rank * 4), "dp_rank": per_sample(dp_rank),
        "tp_rank": np.zeros(n, np.int32), "prompt_len": per_sample(prompt_len),
        "response_len": response_len, "truncated": response_len >= MAX_RESPONSE,
        "validate": np.zeros(n, bool), "kept": per_sample(kept), "used": per_sample(used),
    })


def turns_tables(rng, steps: int, rollouts: int) -> tuple[pa.Table, pa.Table]:
    counts = rng.integers(1, 5, steps * rollouts)  # 1-4 turns per rollout
    rollout = np.repeat(np.arange(counts.size), counts)
    turn = np.arange(rollout.size) - np.repeat(np.cumsum(counts) - counts, counts)
    step = (rollout // rollouts).astype(np.int32)
    prompt_tokens = (300 + 600 * turn + rng.integers(0, 200, turn.size)).astype(np.int32)
    last = turn == np.repeat(counts - 1, counts)
    turns = pa.table({
        "step": step, "prompt_id": (rollout % rollouts // 8).astype(np.int32),
        "sample_id": (rollout % 8).astype(np.int32), "turn": turn.astype(np.int32),
        "prompt_tokens": prompt_tokens,
        "cached_tokens": np.where(turn == 0, 0, prompt_tokens * 0.6).astype(np.int32),
        "completion_tokens": rng.integers(20, 400, turn.size).astype(np.int32),
        "engine_latency_s": rng.lognormal(4.0, 0.8, turn.size),
        "tool_call_count": (~last).astype(np.int32),
    })
    calls = turns.filter(pa.array(~last))
    tool_calls = pa.table({
        "step": calls["step"], "prompt_id": calls["prompt_id"], "sample_id": calls["sample_id"],
        "turn": calls["turn"], "tool_name": pa.array(["search"] * calls.num_rows),
        "latency_s": rng.lognormal(-1.5, 1.0, calls.num_rows),
    })
    return turns, tool_calls


def rank_stage_table(rng, samples: pa.Table) -> pa.Table:
    step = samples["step"].to_numpy()
    dp = samples["dp_rank"].to_numpy()
    key = step.astype(np.int64) * 8 + dp
    tokens = np.bincount(key, weights=samples["response_len"].to_numpy())
    longest = np.zeros(tokens.size)
    np.maximum.at(longest, key, samples["response_len"].to_numpy())
    keys = np.nonzero(np.bincount(key))[0]
    k_step, k_dp = (keys // 8).astype(np.int32), (keys % 8).astype(np.int32)
    reward = tokens[keys] * 2e-5 * rng.lognormal(0, 0.2, keys.size)
    gen = longest[keys] * 3e-3 * rng.lognormal(0, 0.05, keys.size)
    timed = k_step % 2 == 0  # measured gen times on even steps only
    stage = np.where(np.arange(2 * keys.size) < keys.size, "reward", "gen")
    table = pa.table({
        "step": np.concatenate([k_step, k_step]), "rank": np.concatenate([k_dp * 4, k_dp * 4]),
        "dp_rank": np.concatenate([k_dp, k_dp]), "tp_rank": np.zeros(2 * keys.size, np.int32),
        "stage": stage, "seconds": np.concatenate([reward, gen]),
        "tokens": np.concatenate([tokens[keys], np.zeros(keys.size)]).astype(np.int64),
    })
    return table.filter(pa.array(np.concatenate([np.ones(keys.size, bool), timed])))


def step_metrics_table(rng, steps: int) -> pa.Table:
    gen = rng.uniform(100, 300, steps)
    step_s = gen + rng.uniform(100, 200, steps)
    return pa.table({
        "step": np.tile(np.arange(steps, dtype=np.int32), 2),
        "key": ["timing_s/gen"] * steps + ["timing_s/step"] * steps,
        "value": np.concatenate([gen, step_s]),
    })


def insert(con, table: str, data: pa.Table) -> None:
    data = data.append_column("run_id", pa.array([RUN] * data.num_rows, pa.string()))
    con.register("_incoming", data)
    con.execute(f'INSERT INTO "{table}" BY NAME SELECT * FROM _incoming')
    con.unregister("_incoming")


def build(db: Path, samples: int, steps: int, rollouts: int) -> tuple[float, float]:
    """Write the run; return (seconds to load raw tables, seconds to materialize)."""
    rng = np.random.default_rng(7)
    con = store.open(db)
    start = time.perf_counter()
    con.execute("BEGIN TRANSACTION")
    con.execute("INSERT INTO runs (run_id, name, format, max_response_len, created_at) "
                "VALUES (?, 'bench 5M', 'synthetic', ?, now())", [RUN, MAX_RESPONSE])
    sample_rows = samples_table(rng, samples, steps)
    insert(con, "samples", sample_rows)
    insert(con, "rank_stage", rank_stage_table(rng, sample_rows))
    insert(con, "step_metrics", step_metrics_table(rng, steps))
    turns, tool_calls = turns_tables(rng, steps, rollouts)
    insert(con, "turns", turns)
    insert(con, "tool_calls", tool_calls)
    con.execute("COMMIT")
    loaded = time.perf_counter()
    con.execute("BEGIN TRANSACTION")
    materialize(con, RUN)
    con.execute("COMMIT")
    done = time.perf_counter()
    con.close()
    return loaded - start, done - loaded


def timed_query(con, sql: str, params: dict) -> tuple[float, list]:
    cur = con.cursor()
    try:
        start = time.perf_counter()
        rows = cur.execute(sql, params).fetchall()
        return time.perf_counter() - start, rows
    finally:
        cur.close()


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)] * 1000


def same_rows(a: list, b: list) -> bool:
    def close(x, y):
        if isinstance(x, float) and isinstance(y, float):
            return math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9) or (x != x and y != y)
        return x == y
    return len(a) == len(b) and all(len(r) == len(s) and all(map(close, r, s)) for r, s in zip(a, b))


def concurrent(con, queries: list, clients: int, seconds: float) -> dict[str, list[float]]:
    """Each client loops over the queries on its own cursor for `seconds`."""
    latencies: dict[str, list[float]] = {q.name: [] for q in queries}
    lock = threading.Lock()
    stop = time.perf_counter() + seconds

    def client(offset: int) -> None:
        i = offset
        while time.perf_counter() < stop:
            q = queries[i % len(queries)]
            elapsed, _ = timed_query(con, q.sql, bind(q, {"run_id": RUN}))
            with lock:
                latencies[q.name].append(elapsed)
            i += 1

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=5_000_000)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--rollouts", type=int, default=1000, help="multi-turn rollouts per step")
    parser.add_argument("--repeat", type=int, default=30, help="sequential runs per query (after)")
    parser.add_argument("--repeat-before", type=int, default=5, help="sequential runs per query (before)")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the concurrent phase")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="polytrace-bench-") as tmp:
        db = Path(tmp) / "bench.duckdb"
        load_s, agg_s = build(db, args.samples, args.steps, args.rollouts)
        con = store.open(db)
        n = con.execute("SELECT count(*) FROM samples").fetchone()[0]
        t = con.execute("SELECT count(*) FROM turns").fetchone()[0]
        print(f"run: {n:,} samples, {args.steps} steps, 2-8 dp ranks, {t:,} turns; "
              f"raw load {load_s:.1f} s, materialize {agg_s:.1f} s; db {db.stat().st_size / 1e6:.0f} MB")
        queries = [q for q in load_catalog().values()
                   if {p.name for p in q.params if p.required} == {"run_id"}]
        print(f"\n{'query':20s} {'before p50':>10s} {'p95':>8s} {'after p50':>10s} {'p95':>8s} "
              f"{'p95 ratio':>9s}  same rows")
        for q in queries:
            params = bind(q, {"run_id": RUN})
            after = [timed_query(con, q.sql, params) for _ in range(args.repeat)]
            uses_aggregates = any(table in q.sql for table in aggregate_names())
            if uses_aggregates:
                before = [timed_query(con, on_the_fly(q.sql), params)
                          for _ in range(args.repeat_before)]
                b = [x for x, _ in before]
                same = "yes" if same_rows(before[0][1], after[0][1]) else "NO"
                head = f"{p(b, 0.5):10.1f} {p(b, 0.95):8.1f}"
                ratio = f"{p(b, 0.95) / p([x for x, _ in after], 0.95):8.0f}x"
            else:
                same, head, ratio = "(no aggregates)", f"{'-':>10s} {'-':>8s}", f"{'-':>9s}"
            a = [x for x, _ in after]
            print(f"{q.name:20s} {head} {p(a, 0.5):10.1f} {p(a, 0.95):8.1f} {ratio}  {same}")
        print(f"\nafter, {args.clients} concurrent in-process clients for {args.seconds:.0f} s "
              "(ms; target p95 < 100):")
        lat = concurrent(con, queries, args.clients, args.seconds)
        for name, xs in lat.items():
            flag = "" if p(xs, 0.95) < 100 else "  OVER TARGET"
            print(f"{name:20s} n={len(xs):5d} p50 {p(xs, 0.5):7.1f} p95 {p(xs, 0.95):7.1f}{flag}")
        total = sum(len(xs) for xs in lat.values())
        print(f"throughput: {total / args.seconds:.0f} queries/s")
        print("load average (1/5/15 min): {:.1f} {:.1f} {:.1f} on {} cores".format(
            *os.getloadavg(), os.cpu_count()))
        con.close()


if __name__ == "__main__":
    main()
