"""Loopback load: 32 readers on every dashboard query while 2 uploaders and 1 deleter write.

Every request must succeed, and no read may see a half-written run: a run that is listed
or found has exactly its final sample count, everywhere (runs list, run detail, length_stats).
Run with `pytest -s` to see the latency figures.
"""
from __future__ import annotations

import json
import queue
import random
import threading
import time

import httpx
import numpy as np

from polytrace import store
from polytrace.ingest.load import ingest_paths
from polytrace.queries.catalog import load_catalog
from polytrace.workload.demo import write_demo_traces

DURATION_S = 15.0
READERS = 32
PROMPTS, N_SAMPLING = 500, 8   # 4000 samples per upload


def dashboard_queries() -> list[str]:
    """Every catalog query that a run page runs: it takes run_id, and nothing else is required."""
    return [q.name for q in load_catalog().values()
            if any(p.name == "run_id" for p in q.params)
            and all(p.name == "run_id" or not p.required for p in q.params)]


def upload_payload(seed: int) -> bytes:
    """A packed-lengths file of PROMPTS prompts, unique per seed (so never a duplicate upload)."""
    rng = np.random.default_rng(seed)
    outputs = rng.lognormal(6, 1, (PROMPTS, N_SAMPLING)).astype(int) + 1
    inputs = rng.integers(16, 512, PROMPTS)
    return "".join(json.dumps({"step": seed, "rank": i % 8, "dp_rank": i % 4, "tp_rank": 0,
                               "input": int(inputs[i]), "output": outputs[i].tolist()}) + "\n"
                   for i in range(PROMPTS)).encode()


class Load:
    """Shared state of one load test: expected counts, latencies and every problem seen."""

    def __init__(self, url: str):
        self.url = url
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.expected: dict[str, int] = {}      # upload name -> its final samples count
        self.visible: list[str] = []            # run ids of finished uploads, for readers
        self.latencies: list[float] = []
        self.problems: list[str] = []
        self.counts = {"reads": 0, "uploads": 0, "deletes": 0}
        self.to_delete: queue.Queue = queue.Queue()

    def problem(self, text: str) -> None:
        with self.lock:
            self.problems.append(text)

    def timed(self, client: httpx.Client, method: str, path: str, **kw) -> httpx.Response:
        t = time.perf_counter()
        r = client.request(method, path, **kw)
        if method == "GET":
            with self.lock:
                self.latencies.append(time.perf_counter() - t)
                self.counts["reads"] += 1
        return r


def reader(load: Load, base_run: str, queries: list[str], seed: int) -> None:
    rng = random.Random(seed)
    with httpx.Client(base_url=load.url, timeout=60) as client:
        while not load.stop.is_set():
            with load.lock:
                uploads = list(load.visible)
            run_id = rng.choice(uploads) if uploads and rng.random() < 0.3 else base_run
            name = rng.choice(queries)
            r = load.timed(client, "GET", f"/api/queries/{name}", params={"run_id": run_id})
            if r.status_code != 200 and not gone(r, run_id != base_run):
                load.problem(f"GET {name} -> {r.status_code} {r.text[:200]}")
            check_runs_list(load, client)
            if run_id != base_run:
                check_upload(load, client, run_id)


def gone(r: httpx.Response, deletable: bool) -> bool:
    """A query about an upload the deleter took: an empty answer about a run not here is a 404."""
    return deletable and r.status_code == 404 and "unknown run" in r.json()["error"]


def check_runs_list(load: Load, client: httpx.Client) -> None:
    r = load.timed(client, "GET", "/api/runs")
    if r.status_code != 200:
        load.problem(f"GET /api/runs -> {r.status_code}")
        return
    for run in r.json()["runs"]:
        want = load.expected.get(run["name"])
        if want is not None and run["samples"] != want:
            load.problem(f"runs list shows {run['name']} with {run['samples']} samples, final {want}")


def check_upload(load: Load, client: httpx.Client, run_id: str) -> None:
    """A finished upload is whole or gone: its detail and length_stats agree with its final count."""
    r = load.timed(client, "GET", f"/api/runs/{run_id}")
    if r.status_code == 404:
        return
    if r.status_code != 200:
        load.problem(f"GET /api/runs/{run_id} -> {r.status_code}")
        return
    want = load.expected[r.json()["run"]["name"]]
    got = r.json()["rows"].get("samples", 0)
    if got != want:
        load.problem(f"run {run_id} shows {got} samples, final {want}")
    stats = load.timed(client, "GET", "/api/queries/length_stats", params={"run_id": run_id})
    if stats.status_code != 200 and not gone(stats, True):
        load.problem(f"GET length_stats of {run_id} -> {stats.status_code} {stats.text[:200]}")
        return
    body = stats.json()
    n = sum(row[body["columns"].index("n")] for row in body["rows"]) if stats.status_code == 200 else 0
    if n != want and (n != 0 or client.get(f"/api/runs/{run_id}").status_code != 404):
        load.problem(f"length_stats of {run_id} sums n={n}, final {want}")


def uploader(load: Load, index: int) -> None:
    k = 0
    with httpx.Client(base_url=load.url, timeout=120) as client:
        while not load.stop.is_set():
            name = f"load-{index}-{k}"
            with load.lock:
                load.expected[name] = PROMPTS * N_SAMPLING
            payload = upload_payload(1000 * index + k)
            r = client.post("/api/runs", files={"file": (f"packed_lengths_step_{k}.jsonl", payload)},
                            data={"name": name})
            if r.status_code != 201:
                load.problem(f"POST {name} -> {r.status_code} {r.text[:200]}")
                return
            with load.lock:
                load.visible.append(r.json()["run_id"])
                load.counts["uploads"] += 1
            load.to_delete.put(r.json()["run_id"])
            k += 1


def deleter(load: Load) -> None:
    with httpx.Client(base_url=load.url, timeout=120) as client:
        while not load.stop.is_set():
            try:
                run_id = load.to_delete.get(timeout=0.2)
            except queue.Empty:
                continue
            time.sleep(0.3)  # let readers see the run before it goes
            r = client.delete(f"/api/runs/{run_id}")
            if r.status_code != 200:
                load.problem(f"DELETE {run_id} -> {r.status_code} {r.text[:200]}")
            with load.lock:
                load.counts["deletes"] += 1


def base_run(db, tmp_path) -> str:
    """A realistic DAPO-style run (40 steps, ~30k samples, reward timings, filter) to read from."""
    write_demo_traces(tmp_path / "demo")
    con = store.open(db)
    try:
        return ingest_paths(con, [tmp_path / "demo"], name="base").run_id
    finally:
        con.close()


def test_readers_never_see_half_written_runs(make_server, tmp_path):
    db = tmp_path / "load.duckdb"
    base = base_run(db, tmp_path)
    srv = make_server(db=str(db))
    queries = dashboard_queries()
    assert len(queries) >= 10
    load = Load(srv.url)
    threads = [threading.Thread(target=reader, args=(load, base, queries, i)) for i in range(READERS)]
    threads += [threading.Thread(target=uploader, args=(load, i)) for i in range(2)]
    threads += [threading.Thread(target=deleter, args=(load,))]
    for t in threads:
        t.start()
    time.sleep(DURATION_S)
    load.stop.set()
    for t in threads:
        t.join(timeout=120)
    lat = np.array(load.latencies) * 1000
    print(f"\nload: {load.counts['reads']} reads by {READERS} readers over {len(queries)} queries, "
          f"{load.counts['uploads']} uploads, {load.counts['deletes']} deletes in {DURATION_S:.0f}s; "
          f"read latency p50 {np.percentile(lat, 50):.1f} ms, p99 {np.percentile(lat, 99):.1f} ms")
    assert not any(t.is_alive() for t in threads)
    assert not load.problems, "\n".join(load.problems[:20])
    assert load.counts["uploads"] >= 2 and load.counts["deletes"] >= 1
    assert load.counts["reads"] > READERS
