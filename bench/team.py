"""A team's lake: 1,000 synthetic runs, timed where the team meets them.

    python bench/team.py [--runs 1000] [--dir DIR] [--keep] [--skip spark,ingest,page]
                         [--screenshot PNG]

1. lake: --runs synthetic runs from workload/synth.py (a few steps each; models, tasks,
   frameworks, response caps and GPU counts varied, given as run facts) written into a Parquet
   lake by ingest_to_lake with the overview refresh `polytrace ingest --lake` passes.
2. queries: runs_overview and three per-run queries on DuckDB over the lake (open_lake and the
   runner, and `polytrace query --lake` end to end), then on a Spark standalone cluster through
   Spark Connect (tests/spark_cluster.py starts and stops it); both must give the same rows.
3. ingest: `polytrace ingest DIR --lake L --jobs 1` against `--jobs 2` on 64 Kineto rank files
   (bench/kineto_traces.py), each run in a lake of its own.
4. page: the runs page drawn in headless Chromium over `polytrace serve --lake`: the moment
   the table and the cross-run chart are first drawn (the page's data-drawn-ms, from
   navigation), a first visit and repeated ones; then a sort, a page turn and a filter.

Targets: runs_overview <= 1 s on DuckDB over the lake; the runs page drawn <= 1.5 s.
Every timing is repeated and reported as min / median / max. Everything is written under --dir
(default: a new temp dir) and removed at the end unless --keep; a trace folder lives only
while its run is ingested.
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from multiprocessing import get_context
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.compare import row_differences
from polytrace.queries.catalog import get_query
from polytrace.queries.runner import Limits, run

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
HOST = "127.0.0.1"
PER_RUN = ("run_summary", "length_stats", "rollout_tail")
LIMITS = Limits(timeout_ms=600_000)
# target (s) of each figure, met by its slowest (first, cold) measurement
TARGETS = {"runs_overview on DuckDB over the lake": 1.0, "runs page drawn": 1.5}
measured: dict[str, list[float]] = {}

MODELS = ("Qwen2.5-7B-Instruct", "Qwen2.5-32B-Instruct", "Qwen3-4B", "Qwen3-8B", "Qwen3-30B-A3B",
          "Llama-3.1-8B-Instruct", "DeepSeek-R1-Distill-Qwen-7B", "Mistral-Small-24B")
FRAMEWORKS = ("verl", "slime", "openrlhf", "areal")
CAPS = (2048, 4096, 8192, 12288, 16384, 20480, 32768)
DP_TP = ((2, 1), (2, 4), (4, 1), (4, 2), (8, 1), (8, 4), (16, 2))


# ---- 1. the lake ---------------------------------------------------------------------------------

def run_plan(i: int) -> dict:
    """Run i's shape and facts, the same for the same i."""
    import numpy as np

    rng = np.random.default_rng(1000 + i)
    agent = rng.random() < 0.15
    dp, tp = DP_TP[rng.integers(len(DP_TP))]
    model, cap = MODELS[rng.integers(len(MODELS))], int(CAPS[rng.integers(len(CAPS))])
    task = "agent" if agent else ("math", "code")[int(rng.random() < 0.3)]
    return {"i": i, "agent": agent, "steps": int(rng.integers(3, 6)), "dp": int(dp), "tp": int(tp),
            "prompts": int(rng.integers(2, 7)) * 8, "n": 8 if not agent else 4,
            "name": f"{model.lower()}-{task}-cap{cap // 1024}k-{i:04d}",
            "facts": {"model": model, "task": task, "framework": FRAMEWORKS[rng.integers(len(FRAMEWORKS))],
                      "max_response_len": cap, "n_gpus": int(dp * tp)}}


def write_run(plan: dict, folder: Path) -> None:
    from polytrace.workload.published import PUBLISHED_MATH, PUBLISHED_TOOL_USE
    from polytrace.workload.synth import write_math_steps, write_tool_use_steps

    cap = plan["facts"]["max_response_len"]
    if plan["agent"]:
        write_tool_use_steps(PUBLISHED_TOOL_USE, folder, plan["steps"], plan["prompts"] // 4, plan["n"],
                             cap, seed=plan["i"])
    else:
        write_math_steps(PUBLISHED_MATH, folder, plan["steps"], plan["prompts"], plan["n"], cap,
                         seed=plan["i"], dp=plan["dp"], tp=plan["tp"])


def ingest_runs(lake: Path, scratch: Path, indexes: list[int]) -> float:
    """Synthesize and ingest these runs one at a time, as `ingest --lake` does; seconds taken."""
    from polytrace.ingest.lake_ingest import ingest_to_lake
    from polytrace.queries import overview

    began = time.perf_counter()
    for i in indexes:
        plan = run_plan(i)
        folder = Path(tempfile.mkdtemp(prefix=f"run{i:04d}-", dir=scratch))
        try:
            write_run(plan, folder)
            ingest_to_lake([folder], lake, name=plan["name"], jobs=1, run_overrides=plan["facts"],
                           before_export=lambda con, run_id: overview.refresh(con, [run_id]))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return time.perf_counter() - began


def build_lake(lake: Path, scratch: Path, runs: int, jobs: int) -> None:
    """The lake's runs, ingested by `jobs` processes at once (each its own share of the runs)."""
    from polytrace.store.lake import lake_dataset, lake_tables

    have = 0
    if lake.is_dir() and "runs" in lake_tables(lake):
        have = lake_dataset(lake_tables(lake)["runs"]).count_rows()
    if have >= runs:
        print(f"lake: {have:,} runs already in {lake}", file=sys.stderr)
        return
    began = time.perf_counter()
    todo = list(range(have, runs))
    chunks = [todo[k:k + 50] for k in range(0, len(todo), 50)]
    with ProcessPoolExecutor(jobs, mp_context=get_context("spawn")) as pool:
        done = have
        for chunk, _ in zip(chunks, pool.map(partial(ingest_runs, lake, scratch), chunks)):
            done += len(chunk)
            if done % 200 == 0 or done == runs:
                print(f"lake: {done:,} runs after {time.perf_counter() - began:.0f} s", file=sys.stderr)
    size = sum(f.stat().st_size for f in lake.rglob("*") if f.is_file())
    files = sum(1 for _ in lake.rglob("*.parquet"))
    print(f"lake: {runs - have:,} runs ingested in {time.perf_counter() - began:.0f} s with {jobs} processes "
          f"({files:,} Parquet files, {size / 1e6:.0f} MB)", file=sys.stderr)


# ---- timing --------------------------------------------------------------------------------------

def repeated(fn, repeat: int) -> tuple[list[float], object]:
    """Seconds of each of `repeat` calls (the first one cold) and the last result."""
    times, result = [], None
    for _ in range(repeat):
        began = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - began)
    return times, result


def spread(times: list[float]) -> str:
    return (f"{min(times):7.3f} {statistics.median(times):7.3f} {max(times):7.3f}"
            f"  (first {times[0]:.3f}, n={len(times)})")


def section(title: str) -> None:
    """A section's header, with the machine's load (a shared machine's figures vary with it)."""
    print(f"\n## {title}  [load average {os.getloadavg()[0]:.1f}]", flush=True)


def row(label: str, times: list[float], extra: str = "") -> None:
    print(f"{label:<46} {spread(times)}{extra}", flush=True)


def some_run(con) -> str:
    """A run in the middle of the overview, for the per-run queries."""
    rows = run(con, get_query("runs_overview"), {}, LIMITS).rows
    return rows[len(rows) // 2][0]


# ---- 2. queries: DuckDB over the lake, and a Spark cluster -----------------------------------------

def duckdb_queries(lake: Path, repeat: int) -> dict:
    from polytrace.store.lake import open_lake

    section("DuckDB over the lake (s: min median max)")
    opened, con = repeated(lambda: open_lake(lake), 1)
    row("open_lake (views over every table)", opened)
    answers = {}
    try:
        times, answer = repeated(lambda: run(con, get_query("runs_overview"), {}, LIMITS), repeat)
        row("runs_overview", times, f"  {len(answer.rows):,} rows")
        answers["runs_overview"] = answer.rows
        measured["runs_overview on DuckDB over the lake"] = times
        run_id = some_run(con)
        for name in PER_RUN:
            times, answer = repeated(partial(run, con, get_query(name), {"run_id": run_id}, LIMITS), repeat)
            row(f"{name} (run {run_id})", times, f"  {len(answer.rows):,} rows")
            answers[name] = answer.rows
    finally:
        con.close()
    cli = [str(Path(sys.executable).with_name("polytrace")), "query", "runs_overview", "--lake", str(lake),
           "--output", "csv"]
    times, _ = repeated(lambda: subprocess.run(cli, check=True, capture_output=True), max(2, repeat // 2))
    row("polytrace query runs_overview --lake (process)", times)
    return {"run_id": run_id, "answers": answers}


def spark_queries(lake: Path, work: Path, repeat: int, duck: dict) -> None:
    from polytrace.queries.spark import Spark, register_lake, session
    from tests.spark_cluster import ClusterUnavailable, SparkCluster

    section("Spark standalone cluster (2 workers x 1 core, Spark Connect) over the lake")
    try:
        cluster = SparkCluster(work / "spark-cluster")
    except ClusterUnavailable as e:
        print(f"skipped: {e}")
        return
    cluster.start()
    try:
        print(f"cluster started in {cluster.startup_s:.1f} s {cluster.phases}")
        began = time.perf_counter()
        spark = session(remote=cluster.remote)
        registered, _ = repeated(lambda: register_lake(spark, lake), 1)
        row("session + register_lake", [time.perf_counter() - began], f"  (register {registered[0]:.1f} s)")
        engine = Spark(spark)
        for name in ("runs_overview", *PER_RUN):
            params = {} if name == "runs_overview" else {"run_id": duck["run_id"]}
            times, answer = repeated(partial(run, engine, get_query(name), params, LIMITS), repeat)
            same = row_differences(duck["answers"][name], answer.rows) == []
            row(name, times, f"  {len(answer.rows):,} rows, same as DuckDB: {'yes' if same else 'NO'}")
        spark.stop()
    finally:
        cluster.stop()
        print(f"cluster stopped; still running: {', '.join(cluster.left_running) or 'none'}")


# ---- 3. ingest --jobs 1 against --jobs 2 -------------------------------------------------------------

def ingest_jobs(work: Path, mb: float, repeat: int) -> None:
    from bench.kineto_traces import generate

    section(f"polytrace ingest --lake --jobs N: 64 Kineto rank files of {mb:g} MB")
    traces = work / "kineto64"
    began = time.perf_counter()
    files = generate(traces, mb, ranks=64)
    total = sum(f.stat().st_size for f in files)
    print(f"generated {len(files)} files, {total / 1e6:,.0f} MB in {time.perf_counter() - began:.0f} s")
    polytrace = str(Path(sys.executable).with_name("polytrace"))
    times: dict[int, list[float]] = {1: [], 2: []}
    try:
        for _ in range(repeat):
            for jobs in (1, 2):  # alternated, so that a busy spell of the machine hits both
                lake = work / f"kineto-lake-{jobs}"
                shutil.rmtree(lake, ignore_errors=True)
                began = time.perf_counter()
                subprocess.run([polytrace, "ingest", str(traces), "--lake", str(lake), "--jobs", str(jobs)],
                               check=True, capture_output=True)
                times[jobs].append(time.perf_counter() - began)
                shutil.rmtree(lake, ignore_errors=True)
        for jobs, ts in times.items():
            row(f"--jobs {jobs}", ts, f"  {total / 1e6 / statistics.median(ts):,.0f} MB/s")
        print(f"--jobs 2 / --jobs 1: {statistics.median(times[2]) / statistics.median(times[1]):.2f}")
    finally:
        shutil.rmtree(traces, ignore_errors=True)


# ---- 4. the runs page in Chromium --------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def serve(lake: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([str(Path(sys.executable).with_name("polytrace")), "serve", "--lake", str(lake),
                             "--host", HOST, "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    url = f"http://{HOST}:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{url}/api/health", timeout=2).close()
            return proc, url
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"polytrace serve exited: {proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("polytrace serve did not answer in 60 s")


# In the page: ms from a click (or typing a filter) to the next frame after the table changed.
IN_PAGE = """async ([selector, filter]) => {
    const settle = () => new Promise(r => requestAnimationFrame(() => setTimeout(r)));
    const began = performance.now();
    if (filter) {
        const f = document.getElementById('runs-filter'), c = document.getElementById('runs-count');
        const counted = new Promise(r => new MutationObserver((_, o) => { o.disconnect(); r(); })
            .observe(c, {childList: true}));
        f.value = filter;
        f.dispatchEvent(new Event('input'));
        await counted;
    } else {
        document.querySelector(selector).click();
    }
    document.body.offsetHeight;
    await settle();
    return performance.now() - began;
}"""


def page_times(lake: Path, repeat: int, screenshot: Path | None) -> None:
    from playwright.sync_api import sync_playwright

    section("the runs page over `polytrace serve --lake` in headless Chromium (s)")
    proc, url = serve(lake)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            ctx = browser.new_context(viewport={"width": 1366, "height": 900})
            drawn, wall, errors = [], [], []
            for _ in range(repeat):
                pg = ctx.new_page()
                pg.on("console", lambda m: m.type == "error" and errors.append(m.text))
                pg.on("pageerror", lambda e: errors.append(str(e)))
                began = time.perf_counter()
                pg.goto(url + "/")
                pg.wait_for_selector("#runs[data-drawn-ms]", timeout=120_000)
                wall.append(time.perf_counter() - began)
                drawn.append(int(pg.get_attribute("#runs", "data-drawn-ms")) / 1000)
                shown = pg.locator("#runs tbody tr").count()
                points = pg.get_attribute("#chart-across", "data-points")
                if len(drawn) < repeat:
                    pg.close()
            row("drawn (data-drawn-ms, from navigation)", drawn, f"  {shown} rows shown, {points} markers")
            measured["runs page drawn"] = drawn
            row("drawn (goto to drawn, wall)", wall)
            sort = '#runs th[data-col="rollout_idle_frac_mean"] button'
            interactions = {"sort by rollout idle": (sort, ""),
                            "next page": ("#page-next", ""),
                            "filter 'qwen3' (120 ms debounce, chart too)": (None, "qwen3")}
            for label, (selector, text) in interactions.items():
                row(label, [pg.evaluate(IN_PAGE, [selector, text]) / 1000])
            print(f"URL after them: {pg.url.removeprefix(url)}; console errors: {errors or 'none'}")
            if screenshot:
                pg.goto(url + "/")
                pg.wait_for_selector("#runs[data-drawn-ms]")
                pg.wait_for_timeout(500)
                screenshot.parent.mkdir(parents=True, exist_ok=True)
                pg.screenshot(path=str(screenshot), full_page=True)
                print(f"screenshot: {screenshot}")
            browser.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--dir", type=Path, help="work directory (default: a new temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (the lake) afterwards")
    ap.add_argument("--build-jobs", type=int, default=2, help="processes ingesting the synthetic runs")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--kineto-mb", type=float, default=8.5,
                    help="MB per rank file (64 of them; 8.5 MB passes the 128 MiB below which "
                         "the parse stays in one process)")
    ap.add_argument("--skip", default="", help="comma-separated: spark, ingest, page")
    ap.add_argument("--screenshot", type=Path, help="save the runs page over the lake here")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    work = args.dir or Path(tempfile.mkdtemp(prefix="polytrace-team-"))
    work.mkdir(parents=True, exist_ok=True)
    lake, scratch = work / "lake", work / "scratch"
    scratch.mkdir(exist_ok=True)
    try:
        build_lake(lake, scratch, args.runs, args.build_jobs)
        duck = duckdb_queries(lake, args.repeat)
        if "spark" not in skip:
            spark_queries(lake, work, max(3, args.repeat // 2), duck)
        if "ingest" not in skip:
            ingest_jobs(work, args.kineto_mb, max(2, args.repeat // 2))
        if "page" not in skip:
            page_times(lake, args.repeat, args.screenshot)
        print()
        for name, target in TARGETS.items():
            times = measured.get(name)
            if not times:
                print(f"target {name} <= {target:g} s: not measured")
                continue
            verdict = "met" if max(times) <= target else "MISSED"
            print(f"target {name} <= {target:g} s: {verdict} (slowest {max(times):.3f} s, "
                  f"median {statistics.median(times):.3f} s)")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
