"""GPU idle time from Kineto traces: HTA's TraceAnalysis + get_temporal_breakdown vs PolyTrace ingest + gpu_time.

Each side runs as its own subprocess on the same generated traces (bench/kineto_traces.py:
the shared trace_filter ranks replicated into more profiler steps). Prints wall time,
throughput in MB/s of uncompressed JSON, peak RSS, their ratios, and the idle-time
agreement. Both sides parse rank files in a process pool (PolyTrace forks one worker per
core), so peak RSS is shown two ways: the largest single process (getrusage) and the whole
process tree (sampled from /proc every 0.1 s; shared pages count once per process).
"""
from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from polytrace import store

ROOT = Path(__file__).resolve().parent.parent
# this script's folder must not shadow the project's packages
sys.path[0] = str(ROOT)


def peak_rss_mb() -> float:
    """Peak RSS of this process or of its largest waited-for child (HTA's parser pool), in MB."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, kids) / 1024


def child_hta(trace_dir: Path) -> dict:
    import logging
    import warnings

    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    from hta.trace_analysis import TraceAnalysis

    df = TraceAnalysis(trace_dir=str(trace_dir)).get_temporal_breakdown(visualize=False)
    return {"idle": {int(r["rank"]): [float(r["idle_time(us)"]), float(r["kernel_time(us)"])]
                     for _, r in df.iterrows()}}


def child_polytrace(trace_dir: Path) -> dict:
    from bench.cpu import cpu_s
    from polytrace.ingest.load import ingest_paths
    from polytrace.queries.catalog import bind, get_query
    from polytrace.queries.runner import run_bound

    with tempfile.TemporaryDirectory() as tmp:
        con = store.open(Path(tmp) / "bench.duckdb")
        started, cpu = time.perf_counter(), cpu_s()
        run = ingest_paths(con, [trace_dir]).run_id
        ingested, ingest_cpu = time.perf_counter(), cpu_s() - cpu
        query = get_query("gpu_time")
        rows = run_bound(con, query, bind(query, {"run_id": run})).rows
        con.close()
    return {"idle": {r[0]: [r[4], r[2]] for r in rows if r[1] is None},
            "ingest_s": ingested - started, "ingest_cpu_s": ingest_cpu,
            "query_s": time.perf_counter() - ingested}


def tree_rss_mb(root: int) -> float:
    """Resident memory of a process and all its descendants now (Linux /proc), in MB."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            pass
    return total * os.sysconf("SC_PAGE_SIZE") / 1e6


def run_child(side: str, trace_dir: Path) -> dict:
    """Run one side in a subprocess; wall time, and its process tree's RSS sampled every 0.1 s."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, __file__, "--child", side, str(trace_dir)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tree_peak = 0.0
    while proc.poll() is None:
        tree_peak = max(tree_peak, tree_rss_mb(proc.pid))
        time.sleep(0.1)
    wall = time.perf_counter() - started
    stdout, stderr = proc.communicate()
    if proc.returncode != 0:
        sys.exit(f"{side} failed:\n{stderr[-2000:]}")
    result = json.loads(stdout.strip().splitlines()[-1])
    result["wall_s"] = wall
    result["tree_mb"] = tree_peak
    result["idle"] = {int(k): v for k, v in result["idle"].items()}
    return result


def report(mb: float, hta: dict, ours: dict) -> None:
    print(f"input: {mb:.1f} MB of uncompressed Kineto JSON, {len(ours['idle'])} ranks")
    print(f"{'':12}{'wall s':>10}{'MB/s':>8}{'peak RSS, largest process MB':>31}{'peak RSS, process tree MB':>28}")
    for name, r in (("HTA 0.5", hta), ("PolyTrace", ours)):
        print(f"{name:12}{r['wall_s']:>10.2f}{mb / r['wall_s']:>8.1f}{r['rss_mb']:>31.0f}{r['tree_mb']:>28.0f}")
    print(f"PolyTrace inside the process: ingest {ours['ingest_s']:.2f} s wall ({mb / ours['ingest_s']:.1f} MB/s), "
          f"{ours['ingest_cpu_s']:.2f} s CPU over its processes ({mb / ours['ingest_cpu_s']:.1f} MB per CPU second; "
          f"target >= 100); "
          f"gpu_time {ours['query_s']:.2f} s")
    print(f"speed-up (HTA wall / PolyTrace wall): {hta['wall_s'] / ours['wall_s']:.1f}x  (target >= 10x)")
    print(f"memory (PolyTrace peak / HTA peak):   {ours['tree_mb'] / hta['tree_mb']:.2f} of the process trees, "
          f"{ours['rss_mb'] / hta['rss_mb']:.2f} of the largest processes  (target <= 0.5)")
    worst = 0.0
    for rank, (idle, span) in sorted(hta["idle"].items()):
        mine, my_span = ours["idle"][rank]
        rel = abs(mine - idle) / idle if idle else 0.0
        worst = max(worst, rel)
        print(f"rank {rank}: idle HTA {idle:.0f} us of {span:.0f}, PolyTrace {mine:.0f} us of {my_span:.0f} "
              f"(differ by {100 * rel:.3f}%)")
    print(f"idle-time agreement: worst rank differs by {100 * worst:.3f}%  (target <= 1%)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mb", type=int, default=60, help="uncompressed MB per rank trace (default 60)")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "polytrace-bench-kineto",
                    help="where the generated traces are kept between runs")
    ap.add_argument("--runs", type=int, default=2, help="runs of each side; the fastest is reported")
    ap.add_argument("--child", nargs=2, metavar=("SIDE", "DIR"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        side, trace_dir = args.child[0], Path(args.child[1])
        result = (child_hta if side == "hta" else child_polytrace)(trace_dir)
        result["rss_mb"] = peak_rss_mb()
        print(json.dumps(result))
        return
    from bench.kineto_traces import generate

    # HTA is an installed package with its bytecode; PolyTrace is installed editable, and with
    # PYTHONDONTWRITEBYTECODE set (as here) Python would compile its modules on every run.
    for package in ("ingest", "queries", "bench"):
        compileall.compile_dir(ROOT / package, quiet=1)
    trace_dir = args.work / f"{args.mb}mb-per-rank"
    paths = generate(trace_dir, args.mb)
    mb = sum(p.stat().st_size for p in paths) / 1e6
    runs = {"hta": [], "polytrace": []}
    for _ in range(args.runs):
        for side in runs:
            runs[side].append(run_child(side, trace_dir))
    hta, ours = (min(runs[side], key=lambda r: r["wall_s"]) for side in ("hta", "polytrace"))
    report(mb, hta, ours)


if __name__ == "__main__":
    main()
