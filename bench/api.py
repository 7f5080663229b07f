"""REST latency of every dashboard query: N concurrent loopback clients against in-process
threads, this tree side by side with a baseline, the result cache off.

Synthesizes one run with numpy (packed-shaped samples with lognormal lengths and DAPO
filter flags as a samples-table Parquet file, plus reward_timings JSONL per step) and ingests
it with ingest_paths (so per-step aggregates are materialized as in any ingest), then writes its
overview line, findings and stored answers as every writer does (overview.refresh); --samples sets
its size (5M by default; the issue's targets are at 5M and 50M). "Dashboard queries" are
every catalog query that needs only a run_id (run_summary, step_budget, the findings, what-if
...; all of them stored), plus GET /api/runs/{id}/findings, the findings list (all
Findings-section queries in one request).

Each query, round after round, is timed back to back for --seconds per side:
- in-process, 1 thread: the query alone on one cursor (runner.run_bound), computed even when it
  is stored: its own cost;
- in-process, N threads: N cursors of one connection at once, no HTTP: what the machine
  allows N concurrent clients;
- REST: `polytrace serve` of this tree (a subprocess) with the result cache off, so that
  every request runs the SQL, or for a stored query (`-- stored: yes`) reads the answer the
  run's last write kept (queries/answers.py), driven by N keep-alive HTTP/1.1 connections of a
  minimal asyncio client (Connection);
- baseline REST (unless --no-baseline): the same, served by this tree with the files issue 19
  changed as they are at --baseline (HEAD by default; bench.api.baseline_tree);
- with --cache-on, REST of this tree with the default result cache, for reference.
Every side reads its own copy of the database (DuckDB locks a file to one process). The
sides of one query run one after another, in an order that alternates by round, so that
the machine's other load hits them alike: compare figures of one run, not across runs.
Prints p50/p95 latency (median over rounds, and the spread of REST p95 over rounds), the
REST p50 over the in-process N-thread p50, and the targets: p95 < 50 ms at N clients with
the cache off, and REST p50 within 1.5x of in-process. Then where a request's CPU goes, in ms
per request: the in-process N threads (the query alone), each server's process (all its
threads: HTTP, routing, the query, JSON) and the HTTP client, which shares the machine's cores.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path[0] = str(ROOT)

from bench.cpu import cpu_of  # noqa: E402
from polytrace import store  # noqa: E402
from polytrace.ingest.load import ingest_paths  # noqa: E402
from polytrace.queries import overview  # noqa: E402
from polytrace.queries.catalog import bind, load_catalog  # noqa: E402
from polytrace.queries.runner import Limits, run_bound  # noqa: E402

N_SAMPLING = 8
TARGET_P95_MS = 50.0
TARGET_RATIO = 1.5


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


FINDINGS = "findings (endpoint)"  # GET /api/runs/{id}/findings


def finding_names() -> list[str]:
    from polytrace.queries.findings import finding_queries

    return [q.name for q in finding_queries()]


def in_process(con, name: str, params: dict, seconds: float, threads: int) -> list[float]:
    """The baseline: the query back to back on `threads` cursors of one connection, no HTTP
    (the findings list: every finding query in turn, as one request runs them)."""
    catalog = load_catalog()
    work = [(catalog[n], bind(catalog[n], params)) for n in (finding_names() if name == FINDINGS else [name])]
    times: list[float] = []
    stop = time.perf_counter() + seconds

    def client() -> None:
        cur = con.cursor()
        while time.perf_counter() < stop or len(times) < 3:
            start = time.perf_counter()
            for q, bound in work:
                run_bound(cur, q, bound, Limits(row_cap=100_000))
            times.append(time.perf_counter() - start)
        cur.close()

    workers = [threading.Thread(target=client) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return times


class Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection that sends a GET and reads its answer by its
    Content-Length: 0.06-0.17 ms of the client's CPU a request where httpx spent 1.2-1.9 ms on
    the two cores the server runs on, so that the latency is the server's."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.answer: asyncio.Future | None = None
        self.body_at: int | None = None  # where the body of the answer being read starts
        self.end = 0  # and ends, in the buffer
        self.status = 0

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.body_at is None:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            lines = bytes(self.buffer[:head_end]).decode("latin-1").lower().split("\r\n")
            self.status = int(lines[0].split()[1])
            length = next(int(line.split(":", 1)[1]) for line in lines if line.startswith("content-length:"))
            self.body_at = head_end + 4
            self.end = self.body_at + length
        if len(self.buffer) >= self.end:
            body = bytes(self.buffer[self.body_at:self.end])
            del self.buffer[:self.end]
            self.body_at = None
            self.answer.set_result((self.status, body))

    def connection_lost(self, exc) -> None:
        if self.answer and not self.answer.done():
            self.answer.set_exception(exc or ConnectionError("the server closed the connection"))

    async def get(self, request: bytes) -> tuple[int, bytes]:
        """The status and body of the answer to `request` (a whole GET, `get_request`)."""
        self.answer = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return await self.answer


def get_request(url: str, params: dict) -> bytes:
    parts = urlsplit(url)
    return f"GET {parts.path}?{urlencode(params)} HTTP/1.1\r\nHost: {parts.netloc}\r\n\r\n".encode()


async def connect(url: str) -> Connection:
    parts = urlsplit(url)
    return (await asyncio.get_running_loop().create_connection(Connection, parts.hostname, parts.port))[1]


async def hammer(url: str, params: dict, clients: int, seconds: float) -> tuple[list[float], int, float]:
    """`clients` keep-alive connections each sending the request back to back for `seconds`."""
    request = get_request(url, params)
    connections = [await connect(url) for _ in range(clients)]
    latencies: list[float] = []
    errors = 0

    async def one(connection: Connection) -> None:
        nonlocal errors
        while True:
            start = time.perf_counter()
            status, _ = await connection.get(request)
            latencies.append(time.perf_counter() - start)
            errors += status != 200
            if start > stop:
                return

    await connections[0].get(request)  # warm the page cache
    began = time.perf_counter()
    stop = began + seconds
    try:
        await asyncio.gather(*(one(c) for c in connections))
    finally:
        for c in connections:
            c.transport.close()
    return latencies, errors, time.perf_counter() - began


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Where each part of the `polytrace` namespace lives in a source tree (pyproject's package-dir).
PACKAGE_DIRS = ("store", "ingest", "queries", "server", "frontend", "workload")
# What a baseline takes from its git ref: the files issue 19's page and REST work changed (a
# file the ref lacks, like the vendored plotly bundle, is left out); everything else is this
# work tree's, so that the two sides differ only there while other files are being edited.
BASELINE_PATHS = ("server/routers/pages.py", "server/routers/api.py", "server/responses.py", "server/deps.py",
                  "polytrace/settings.py",
                  "server/app.py", "server/db.py", "server/watch.py", "queries/runner.py", "queries/findings.py",
                  "queries/overview.py", "queries/answers.py", "frontend/static/charts.js",
                  "frontend/templates/run.html", "frontend/templates/compare.html",
                  "frontend/templates/base.html", "frontend/templates/_preamble.html",
                  "frontend/static/plotly.min.js", "frontend/static/plotly.min.js.gz",
                  "frontend/static/plotly.min.js.br", "frontend/static/plotly.LICENSE.txt",
                  # which queries are stored is said in their files
                  "queries/catalog.py", *(f"queries/{p.name}" for p in sorted((ROOT / "queries").glob("*.sql"))))


def baseline_tree(ref: str, into: Path, paths: tuple[str, ...] = BASELINE_PATHS) -> Path:
    """A copy of this work tree with `paths` as they are at git `ref` (read with `git show`; the
    work tree and git are untouched), laid out as an importable `polytrace` package: the
    directory to put on PYTHONPATH to serve that version beside this one."""
    site = into / "site" / "polytrace"
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "polytrace", site, ignore=skip)
    for name in PACKAGE_DIRS:
        shutil.copytree(ROOT / name, site / name, ignore=skip)
    for path in paths:  # a path that `ref` does not have stays as this tree's
        old = subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:{path}"], capture_output=True)
        if old.returncode == 0:
            (site / path.removeprefix("polytrace/")).write_bytes(old.stdout)
    return site.parent


def start_server(db: Path, port: int, cache_rows: int, pythonpath: Path | None = None,
                 cwd: Path | None = None) -> subprocess.Popen:
    """`polytrace serve` on db in a subprocess: this tree's, or with pythonpath (baseline_tree)
    the version found there."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLYTRACE_")}
    env["POLYTRACE_RESULT_CACHE_ROWS"] = str(cache_rows)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    proc = subprocess.Popen([sys.executable, "-m", "polytrace", "serve", "--db", str(db),
                             "--port", str(port)], cwd=cwd or ROOT, env=env)
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
        if not con.execute("SELECT 1 FROM run_answers WHERE run_id = ?", [run_id]).fetchall():
            # what every writer does after it changes a run (`polytrace ingest` too)
            start = time.perf_counter()
            overview.refresh(con, [run_id])
            print(f"overview line, findings and stored answers written in {time.perf_counter() - start:.2f} s")
        n = con.execute("SELECT count(*) FROM samples WHERE run_id = ?", [run_id]).fetchone()[0]
        print(f"run {run_id}: {n:,} samples")
        return run_id
    finally:
        con.close()


def rest_url(base: str, name: str, params: dict) -> str:
    return f"{base}/api/runs/{params['run_id']}/findings" if name == FINDINGS else f"{base}/api/queries/{name}"


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):6.1f} [{min(values):.0f}-{max(values):.0f}]"


def print_table(queries, results: dict, sides: list[str], clients: int, rounds: int) -> None:
    def med(side: str, name: str, q: float) -> float:
        return statistics.median(pct(lat, q) for lat, _, _ in results[side, name])

    print(f"\nms; each cell the median over {rounds} rounds; REST p95 [min-max over rounds]")
    cols = [f"{'query':<24} {'1 thread':>8}  {f'{clients} threads p50':>14} {'p95':>6}  "
            f"{'REST p50':>8} {'REST p95 [spread]':>19} {'q/s':>6} {'REST/in-proc p50':>16}"]
    others = [s for s in sides if s not in ("alone", "threads", "rest")]
    cols += [f"  {s + ' p50':>16} {'p95':>6} {'p95 this/' + s:>17}" for s in others]
    print("".join(cols))
    slow, far = [], []
    for name, _ in queries:
        rest_p95 = [pct(lat, 0.95) for lat, _, _ in results["rest", name]]
        errors = sum(e for _, e, _ in results["rest", name])
        qps = statistics.median(len(lat) / wall for lat, _, wall in results["rest", name])
        ratio = med("rest", name, 0.5) / med("threads", name, 0.5)
        line = (f"{name:<24} {med('alone', name, 0.5):8.1f}  {med('threads', name, 0.5):14.1f} "
                f"{med('threads', name, 0.95):6.1f}  {med('rest', name, 0.5):8.1f} {spread(rest_p95):>19} "
                f"{qps:6.0f} {ratio:16.2f}")
        for s in others:
            ratios = [pct(a, 0.95) / pct(b, 0.95) for (a, _, _), (b, _, _) in
                      zip(results["rest", name], results[s, name])]
            line += f"  {med(s, name, 0.5):16.1f} {med(s, name, 0.95):6.1f} {statistics.median(ratios):17.2f}"
        print(line + (f"  ({errors} errors)" if errors else ""))
        if statistics.median(rest_p95) >= TARGET_P95_MS or errors:
            slow.append(name)
        if ratio > TARGET_RATIO:
            far.append(name)
    print(f"\np95 < {TARGET_P95_MS:g} ms at {clients} clients, cache off: "
          + (f"met by all {len(queries)}" if not slow else f"missed by {len(slow)} of {len(queries)}: {', '.join(slow)}"))
    print(f"REST p50 within {TARGET_RATIO:g}x of in-process {clients}-thread p50: "
          + (f"met by all {len(queries)}" if not far else f"missed by {len(far)} of {len(queries)}: {', '.join(far)}"))
    print("load average (1/5/15 min): {:.1f} {:.1f} {:.1f} on {} cores".format(*os.getloadavg(), os.cpu_count()))


def print_cpu(queries, cpu: dict, sides: list[str], clients: int) -> None:
    """Where a request's CPU goes: the query in-process, the server process, the HTTP client."""
    servers = [s for s in sides if s not in ("alone", "threads")]
    print(f"\nCPU ms per request, median over rounds: in-process on {clients} threads (the query alone); "
          "per server: its process (all threads) and the HTTP client's")
    print(f"{'query':<24} {'in-process':>10}" + "".join(f"  {s + ' server':>16} {'client':>6}" for s in servers))
    for name, _ in queries:
        line = f"{name:<24} {statistics.median(own for own, _ in cpu['threads', name]):10.2f}"
        for s in servers:
            line += (f"  {statistics.median(srv for _, srv in cpu[s, name]):16.2f}"
                     f" {statistics.median(own for own, _ in cpu[s, name]):6.2f}")
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=5_000_000)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=2.0, help="per query, per side, per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--baseline", default="HEAD", help="git ref the baseline's serving code comes from")
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--cache-on", action="store_true", help="also time this tree with the result cache on")
    parser.add_argument("--only", nargs="*", help="time only these queries (names, or 'findings')")
    parser.add_argument("--db", help="reuse (or keep) this database instead of a temporary one")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="polytrace-bench-api-") as tmp:
        tmp = Path(tmp)
        db = Path(args.db) if args.db else tmp / "bench.duckdb"
        run_id = ensure_run(db, tmp, args.samples, args.steps)
        queries = [*dashboard_queries(run_id), (FINDINGS, {"run_id": run_id})]
        if args.only:
            queries = [(n, p) for n, p in queries if n in args.only or (n == FINDINGS and "findings" in args.only)]
        servers = {"rest": (None, 0)}
        if not args.no_baseline:
            servers["baseline"] = (baseline_tree(args.baseline, tmp / "baseline"), 0)
        if args.cache_on:
            servers["cached"] = (None, 100_000)
        print(f"{len(queries)} dashboard queries; {args.clients} clients, {args.seconds:g} s per query "
              f"and side, {args.rounds} rounds; sides: in-process 1 and {args.clients} threads, "
              + ", ".join(servers))
        urls, procs = {}, {}
        try:
            for side, (site, cache_rows) in servers.items():
                copy = tmp / f"{side}.duckdb"
                shutil.copy(db, copy)
                port = free_port()
                procs[side] = start_server(copy, port, cache_rows, site, cwd=tmp)
                urls[side] = f"http://127.0.0.1:{port}"
            shutil.copy(db, tmp / "in-process.duckdb")
            con = store.open(tmp / "in-process.duckdb", "r")
            sides = ["alone", "threads", *servers]
            results = {(side, name): [] for side in sides for name, _ in queries}
            # CPU ms per request: this process (the in-process threads, or the HTTP client), and
            # the server's process, all threads
            cpu = {(side, name): [] for side in sides for name, _ in queries}
            for r in range(args.rounds):
                for name, params in queries:
                    for side in (sides if r % 2 == 0 else sides[::-1]):
                        own, served = time.process_time(), cpu_of(procs[side].pid) if side in procs else 0.0
                        if side in ("alone", "threads"):
                            lat = in_process(con, name, params, args.seconds, 1 if side == "alone" else args.clients)
                            results[side, name].append((lat, 0, args.seconds))
                        else:
                            results[side, name].append(asyncio.run(hammer(
                                rest_url(urls[side], name, params), params, args.clients, args.seconds)))
                        n = len(results[side, name][-1][0])
                        served = cpu_of(procs[side].pid) - served if side in procs else 0.0
                        cpu[side, name].append(((time.process_time() - own) * 1000 / n, served * 1000 / n))
            con.close()
        finally:
            for proc in procs.values():
                proc.terminate()
                proc.wait(timeout=30)
    print_table(queries, results, sides, args.clients, args.rounds)
    print_cpu(queries, cpu, sides, args.clients)


if __name__ == "__main__":
    main()
