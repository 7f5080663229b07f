"""REST latency of every dashboard query on a 5M-sample run: 8 concurrent loopback clients vs in-process.

Synthesizes one run with numpy (packed-shaped samples with lognormal lengths and DAPO
filter flags as a samples-table Parquet file, plus reward_timings JSONL per step), ingests
it with ingest_paths (so per-step aggregates are materialized as in any ingest), times
each dashboard query in process (the baseline: alone on one cursor, and on N cursors at
once, which shows what the machine itself allows), then starts
`polytrace serve` in a subprocess and drives N concurrent httpx clients on loopback for a
bounded time per query, once with the result cache off (every request runs the SQL) and
once on (the default). Prints p50/p95 latency and throughput, and the target check
(p95 < 100 ms at 8 clients).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path[0] = str(ROOT)

from polytrace import store
from polytrace.ingest.load import ingest_paths  # noqa: E402
from polytrace.queries.catalog import bind, load_catalog  # noqa: E402
from polytrace.queries.runner import Limits, run_bound  # noqa: E402

N_SAMPLING = 8
TARGET_P95_MS = 100.0


def write_run(folder: Path, samples: int, steps: int, seed: int = 7) -> None:
    """samples.parquet (samples-table format) and reward_timings_step_N.jsonl for each step."""
    rng = np.random.default_rng(seed)
    prompts = samples // steps // N_SAMPLING
    step = np.repeat(np.arange(steps, dtype=np.int32), prompts)
    prompt_id = np.tile(np.arange(prompts, dtype=np.int32), steps)
    ranks = 2 + step % 7  # 2..8 dp ranks, drifting with the step
    dp_rank = (prompt_id.astype(np.int64) * ranks // prompts).astype(np.int32)
    kept = rng.random(step.size) < 0.4
    used = kept & (rng.random(step.size) < 0.8)
    n = step.size * N_SAMPLING
    response = np.minimum(rng.lognormal(6.5, 1.0, n), 16384).astype(np.int32)

    def each(a):
        return np.repeat(a, N_SAMPLING)

    pq.write_table(pa.table({
        "step": each(step), "prompt_id": each(prompt_id),
        "sample_id": np.tile(np.arange(N_SAMPLING, dtype=np.int32), step.size),
        "rank": each(dp_rank * 4), "dp_rank": each(dp_rank), "tp_rank": np.zeros(n, np.int32),
        "prompt_len": each(np.clip(rng.lognormal(5.0, 0.6, step.size), 1, 8192).astype(np.int32)),
        "response_len": response, "kept": each(kept), "used": each(used),
    }), folder / "samples.parquet")
    key = each(step).astype(np.int64) * 8 + each(dp_rank)
    tokens = np.bincount(key, weights=response, minlength=steps * 8)
    for s in range(steps):
        lines = [json.dumps({"step": s, "rank": int(d) * 4, "tp_rank": 0, "dp_rank": int(d),
                             "batch_size": prompts, "response_sum": int(tokens[s * 8 + d]),
                             "reward_time_s": float(tokens[s * 8 + d] * 2e-5 * rng.lognormal(0, 0.2)),
                             "validate": False})
                 for d in range(2 + s % 7)]
        (folder / f"reward_timings_step_{s}.jsonl").write_text("\n".join(lines) + "\n")


def dashboard_queries(run_id: str) -> list[tuple[str, dict]]:
    """Every catalog query that takes a run_id and nothing else required."""
    picked = []
    for q in load_catalog().values():
        names = {p.name for p in q.params}
        if "run_id" in names and all(p.name == "run_id" or not p.required for p in q.params):
            picked.append((q.name, {"run_id": run_id}))
    return picked


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))] * 1000


def in_process(db: Path, queries, seconds: float, threads: int) -> dict[str, list[float]]:
    """The baseline: each query back to back on `threads` cursors of one connection, no HTTP."""
    con = store.open(db)
    out = {}
    try:
        for name, params in queries:
            q = load_catalog()[name]
            bound = bind(q, params)
            times: list[float] = []
            stop = time.perf_counter() + seconds

            def client() -> None:
                cur = con.cursor()
                while time.perf_counter() < stop or len(times) < 3:
                    start = time.perf_counter()
                    run_bound(cur, q, bound, Limits(row_cap=100_000))
                    times.append(time.perf_counter() - start)
                cur.close()

            workers = [threading.Thread(target=client) for _ in range(threads)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            out[name] = times
    finally:
        con.close()
    return out


async def hammer(url: str, params: dict, clients: int, seconds: float) -> tuple[list[float], int, float]:
    """`clients` keep-alive connections each sending the request back to back for `seconds`."""
    latencies: list[float] = []
    errors = 0
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        async def one() -> None:
            nonlocal errors
            while True:
                start = time.perf_counter()
                r = await client.get(url, params=params)
                latencies.append(time.perf_counter() - start)
                errors += r.status_code != 200
                if start > stop:
                    return

        await client.get(url, params=params)  # warm the connection and the page cache
        began = time.perf_counter()
        stop = began + seconds
        await asyncio.gather(*(one() for _ in range(clients)))
    return latencies, errors, time.perf_counter() - began


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(db: Path, port: int, cache_rows: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLYTRACE_")}
    env["POLYTRACE_RESULT_CACHE_ROWS"] = str(cache_rows)
    proc = subprocess.Popen([sys.executable, "-m", "polytrace", "serve", "--db", str(db),
                             "--port", str(port)], cwd=ROOT, env=env)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/health").status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.2)
    proc.kill()
    sys.exit("polytrace serve did not come up")


def ensure_run(db: Path, tmp: Path, samples: int, steps: int) -> str:
    """The bench run's id, synthesizing and ingesting it unless the database already has it."""
    con = store.open(db)
    try:
        found = con.execute("SELECT run_id FROM runs WHERE name = 'bench-api' LIMIT 1").fetchone()
        if found:
            run_id = found[0]
        else:
            src = tmp / "run"
            src.mkdir()
            start = time.perf_counter()
            write_run(src, samples, steps)
            made = time.perf_counter()
            result = ingest_paths(con, [src], name="bench-api")
            run_id = result.run_id
            print(f"synthesized in {made - start:.1f} s, ingested {result.rows} "
                  f"in {time.perf_counter() - made:.1f} s")
        n = con.execute("SELECT count(*) FROM samples WHERE run_id = ?", [run_id]).fetchone()[0]
        print(f"run {run_id}: {n:,} samples")
        return run_id
    finally:
        con.close()


def print_table(queries, alone, crowded, rest, clients: int, baseline_s: float) -> None:
    print(f"\n{'':<22} {'in-process, 1 thread':>20}   {f'in-process, {clients} threads':>26}   "
          f"{'REST, cache off':>26}   {'REST, cache on':>26}")
    print(f"{'query':<22} {'p50':>8} {'p95':>8}   " + "   ".join([f"{'p50':>8} {'p95':>8} {'q/s':>8}"] * 3))
    missed: dict[int, list[str]] = {cache: [] for cache in rest}
    for name, _ in queries:
        busy = crowded[name]
        cells = [f"{pct(alone[name], 0.5):>6.1f}ms {pct(alone[name], 0.95):>6.1f}ms",
                 f"{pct(busy, 0.5):>6.1f}ms {pct(busy, 0.95):>6.1f}ms {len(busy) / baseline_s:>8.1f}"]
        for cache, answers in rest.items():
            lat, errors, wall = answers[name]
            if pct(lat, 0.95) >= TARGET_P95_MS or errors:
                missed[cache].append(name)
            cells.append(f"{pct(lat, 0.5):>6.1f}ms {pct(lat, 0.95):>6.1f}ms {len(lat) / wall:>8.1f}"
                         + (f" ({errors} errors)" if errors else ""))
        print(f"{name:<22} " + "   ".join(cells))
    for cache, names in missed.items():
        print(f"p95 < {TARGET_P95_MS:g} ms at {clients} clients, cache {'on' if cache else 'off'}: "
              + (f"met by all {len(queries)} queries" if not names
                 else f"missed by {len(names)} of {len(queries)}: {', '.join(names)}"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=5_000_000)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=4.0, help="per query, per side")
    parser.add_argument("--db", help="reuse (or keep) this database instead of a temporary one")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="polytrace-bench-api-") as tmp:
        db = Path(args.db) if args.db else Path(tmp) / "bench.duckdb"
        queries = dashboard_queries(ensure_run(db, Path(tmp), args.samples, args.steps))
        print(f"{len(queries)} dashboard queries; {args.clients} clients, {args.seconds:g} s per query")
        baseline_s = min(args.seconds, 2.0)
        alone = in_process(db, queries, baseline_s, 1)
        crowded = in_process(db, queries, baseline_s, args.clients)
        rest = {cache: serve_and_hammer(db, queries, args, cache) for cache in (0, 100_000)}
    print_table(queries, alone, crowded, rest, args.clients, baseline_s)


def serve_and_hammer(db: Path, queries, args, cache_rows: int) -> dict:
    port = free_port()
    server = start_server(db, port, cache_rows)
    try:
        return {name: asyncio.run(hammer(f"http://127.0.0.1:{port}/api/queries/{name}", params,
                                         args.clients, args.seconds))
                for name, params in queries}
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
