"""GPU idle time from Kineto traces: HTA's TraceAnalysis + get_temporal_breakdown vs PolyTrace ingest + gpu_time.

Each side runs as its own subprocess on the same generated traces (bench/kineto_traces.py:
the shared trace_filter ranks replicated into more profiler steps). Prints wall time,
peak RSS, throughput in MB/s of uncompressed JSON, their ratios, and the idle-time agreement.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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
    from ingest.load import ingest_paths, open_db
    from queries.catalog import bind, execute, get_query

    with tempfile.TemporaryDirectory() as tmp:
        con = open_db(Path(tmp) / "bench.duckdb")
        started = time.perf_counter()
        run = ingest_paths(con, [trace_dir]).run_id
        ingested = time.perf_counter()
        query = get_query("gpu_time")
        rows = execute(con, query, bind(query, {"run_id": run})).rows
        con.close()
    return {"idle": {r[0]: [r[4], r[2]] for r in rows if r[1] is None},
            "ingest_s": ingested - started, "query_s": time.perf_counter() - ingested}


def run_child(side: str, trace_dir: Path) -> dict:
    started = time.perf_counter()
    out = subprocess.run([sys.executable, __file__, "--child", side, str(trace_dir)],
                         capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if out.returncode != 0:
        sys.exit(f"{side} failed:\n{out.stderr[-2000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["wall_s"] = wall
    result["idle"] = {int(k): v for k, v in result["idle"].items()}
    return result


def report(mb: float, hta: dict, ours: dict) -> None:
    print(f"input: {mb:.1f} MB of uncompressed Kineto JSON, {len(ours['idle'])} ranks")
    print(f"{'':12}{'wall s':>10}{'peak RSS MB':>14}{'MB/s':>10}")
    for name, r in (("HTA 0.5", hta), ("PolyTrace", ours)):
        print(f"{name:12}{r['wall_s']:>10.2f}{r['rss_mb']:>14.0f}{mb / r['wall_s']:>10.1f}")
    print(f"PolyTrace inside the process: ingest {ours['ingest_s']:.2f} s "
          f"({mb / ours['ingest_s']:.1f} MB/s), gpu_time {ours['query_s']:.2f} s")
    print(f"speed-up (HTA wall / PolyTrace wall): {hta['wall_s'] / ours['wall_s']:.1f}x  (target >= 10x)")
    print(f"memory (PolyTrace peak / HTA peak):   {ours['rss_mb'] / hta['rss_mb']:.2f}   (target <= 0.5)")
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
    ap.add_argument("--child", nargs=2, metavar=("SIDE", "DIR"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        side, trace_dir = args.child[0], Path(args.child[1])
        result = (child_hta if side == "hta" else child_polytrace)(trace_dir)
        result["rss_mb"] = peak_rss_mb()
        print(json.dumps(result))
        return
    from bench.kineto_traces import generate

    paths = generate(args.work, args.mb)
    mb = sum(p.stat().st_size for p in paths) / 1e6
    hta = run_child("hta", args.work)
    ours = run_child("polytrace", args.work)
    report(mb, hta, ours)


if __name__ == "__main__":
    main()
