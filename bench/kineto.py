"""GPU idle time from Kineto traces: HTA's TraceAnalysis + get_temporal_breakdown vs PolyTrace ingest + gpu_time.

Each side runs as its own subprocess on the same generated traces (bench/kineto_traces.py:
the shared trace_filter ranks replicated into more profiler steps, copied under more ranks).
Prints wall time (interpreter start to exit), throughput in MB/s of uncompressed JSON, peak
RSS, their ratios, and the idle-time agreement. Peak RSS is shown two ways: the largest
single process (getrusage) and the whole process tree (sampled from /proc every 0.1 s;
shared pages count once per process). CPU seconds count every process of a side, the
parse workers a forkserver forks included (bench/cpu.py).

With --baseline REF a third side runs PolyTrace with the Kineto parser's files as they are at
git REF (BASELINE_PATHS; everything else this tree's), in the same rounds.

Inside the PolyTrace process it also times a decode-only msgspec loop over the same bytes
(each file's events decoded into typed structs, nothing kept): the reference decode limit.

`--ranks 64 --gb 10` generates a big job (checking the disk first, deleting it afterwards
unless --keep), ingests it, times gpu_time, gpu_stragglers and gpu_idle_heatmap through the
query runner, and runs HTA on a ladder of smaller two-rank jobs up to --hta-max-gb, stopping
at the first it cannot finish within --hta-max-rss-gb of process-tree RSS.
"""
from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from polytrace import store

ROOT = Path(__file__).resolve().parent.parent
# this script's folder must not shadow the project's packages
sys.path[0] = str(ROOT)
from bench.cpu import cpu_s, descendants, tree_rss_mb  # noqa: E402  (needs the project root on sys.path)

QUERIES = ("gpu_time", "gpu_stragglers", "gpu_idle_heatmap")
# What a --baseline side takes from its git ref: the Kineto parser and what it builds on.
# (polytrace/columns.py was ingest/columns.py before 2026-12-07)
BASELINE_PATHS = ("ingest/formats/kineto.py", "ingest/trace_events.py", "polytrace/columns.py", "ingest/columns.py",
                  "ingest/gpu_time.py", "ingest/critical_path.py", "ingest/longest_path.py")


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
    from polytrace.ingest.load import ingest_paths
    from polytrace.queries.catalog import get_query
    from polytrace.queries.runner import run

    with tempfile.TemporaryDirectory(dir=trace_dir.parent) as tmp:
        con = store.open(Path(tmp) / "bench.duckdb")
        started, cpu = time.perf_counter(), cpu_s()
        run_id = ingest_paths(con, [trace_dir]).run_id
        ingested, ingest_cpu = time.perf_counter(), cpu_s() - cpu
        query_s, rows = {}, {}
        for name in QUERIES:
            at = time.perf_counter()
            rows[name] = run(con, get_query(name), {"run_id": run_id}).rows
            query_s[name] = time.perf_counter() - at
        con.close()
    return {"idle": {r[0]: [r[4], r[2]] for r in rows["gpu_time"] if r[1] is None},
            "ingest_s": ingested - started, "ingest_cpu_s": ingest_cpu, "query_s": query_s}


def child_decode(trace_dir: Path) -> dict:
    """CPU seconds of decoding each file's events into the parser's typed structs with msgspec
    and keeping nothing: the reference decode limit (run in a process of its own)."""
    import msgspec

    from polytrace.ingest.formats.kineto import Event

    decoder = msgspec.json.Decoder(msgspec.defstruct("Doc", [("traceEvents", list[Event], [])]))
    cpu = 0.0
    for path in sorted(trace_dir.glob("*.json")):
        data = path.read_bytes()
        at = time.process_time()
        decoder.decode(data)
        cpu += time.process_time() - at
    return {"decode_cpu_s": cpu, "idle": {}}


def run_child(side: str, trace_dir: Path, rss_limit_mb: float | None = None,
              site: Path | None = None) -> dict | None:
    """Run one side in a subprocess; wall time, and its process tree's RSS sampled every 0.1 s.
    None when it fails, or is killed for passing rss_limit_mb. With `site` (bench.api.baseline_tree)
    the child imports the polytrace found there. This thread blocks in wait() so that the wall
    ends when the child does (a poll every 0.1 s added up to 0.1 s, a tenth of a PolyTrace run),
    not when its forkserver lets go of a pipe: the child writes to files. Another thread samples
    the RSS meanwhile."""
    env = {**os.environ, "PYTHONPATH": str(site)} if site else None
    exited, peak = threading.Event(), {"mb": 0.0, "killed": False}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, __file__, "--child", side, str(trace_dir)],
                                stdout=out, stderr=err, text=True, env=env)

        def sample() -> None:
            while not exited.wait(0.1):
                peak["mb"] = max(peak["mb"], tree_rss_mb(proc.pid))
                if rss_limit_mb and peak["mb"] > rss_limit_mb:
                    peak["killed"] = True
                    for pid in [proc.pid, *descendants(proc.pid)]:  # HTA's parser pool too
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except OSError:
                            pass
                    return

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        proc.wait()
        wall = time.perf_counter() - started
        exited.set()
        sampler.join()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if peak["killed"]:
        print(f"  {side}: killed at {peak['mb']:.0f} MB of process-tree RSS", file=sys.stderr)
        return None
    if proc.returncode != 0:
        print(f"  {side} failed:\n{stderr[-2000:]}", file=sys.stderr)
        return None
    result = json.loads(stdout.strip().splitlines()[-1])
    result["wall_s"] = wall
    result["tree_mb"] = peak["mb"]
    result["idle"] = {int(k): v for k, v in result["idle"].items()}
    return result


def report(mb: float, hta: dict | None, ours: dict) -> None:
    print(f"input: {mb:.1f} MB of uncompressed Kineto JSON, {len(ours['idle'])} ranks")
    print(f"{'':12}{'wall s':>10}{'MB/s':>8}{'peak RSS, largest process MB':>31}{'peak RSS, process tree MB':>28}")
    for name, r in (("HTA 0.5", hta), ("PolyTrace", ours)):
        if r:
            print(f"{name:12}{r['wall_s']:>10.2f}{mb / r['wall_s']:>8.1f}{r['rss_mb']:>31.0f}{r['tree_mb']:>28.0f}")
    decode = mb / ours["decode_cpu_s"]
    print(f"PolyTrace inside the process: ingest {ours['ingest_s']:.2f} s wall ({mb / ours['ingest_s']:.1f} MB/s), "
          f"{ours['ingest_cpu_s']:.2f} s CPU over its processes ({mb / ours['ingest_cpu_s']:.1f} MB per CPU "
          f"second; target >= 150)")
    print(f"decode-only msgspec loop over the same bytes: {decode:.1f} MB per CPU second; ingest / decode-only: "
          f"{mb / ours['ingest_cpu_s'] / decode:.2f}")
    print("queries through the runner: " + ", ".join(f"{q} {s:.3f} s" for q, s in ours["query_s"].items())
          + "  (target < 1 s each)")
    if not hta:
        return
    print(f"speed-up (HTA wall / PolyTrace wall): {hta['wall_s'] / ours['wall_s']:.1f}x  (target >= 20x)")
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


def report_baseline(mb: float, ref: str, base: list[dict], ours: list[dict]) -> None:
    """This tree against the parser at `ref`, run by run (each pair back to back, same load)."""
    def line(name: str, rs: list[dict]) -> str:
        cpu = statistics.median(r["ingest_cpu_s"] for r in rs)
        return (f"{name:24} wall {statistics.median(r['wall_s'] for r in rs):5.2f} s, ingest "
                f"{statistics.median(r['ingest_s'] for r in rs):5.2f} s wall, {cpu:5.2f} s CPU "
                f"({mb / cpu:.1f} MB per CPU second)")
    print("medians over the runs:")
    print(line(f"PolyTrace at {ref}", base))
    print(line("PolyTrace, this tree", ours))
    for key, what in (("wall_s", "wall"), ("ingest_cpu_s", "ingest CPU")):
        ratios = sorted(o[key] / b[key] for b, o in zip(base, ours))
        print(f"this tree / {ref}, {what}, run by run: {' '.join(f'{r:.2f}' for r in ratios)} "
              f"(median {statistics.median(ratios):.2f}x)")


def hta_ladder(work: Path, max_gb: float, rss_limit_gb: float) -> None:
    """HTA on two-rank jobs of growing size until one fails, passes the RSS limit or max_gb."""
    from bench.kineto_traces import generate

    gb, finished = 0.25, None
    while gb <= max_gb:
        trace_dir = work / f"hta-{gb:g}gb"
        paths = generate(trace_dir, gb * 1000 / 2, 2)
        mb = sum(p.stat().st_size for p in paths) / 1e6
        result = run_child("hta", trace_dir, rss_limit_gb * 1000)
        shutil.rmtree(trace_dir, ignore_errors=True)
        if result is None:
            print(f"HTA at {mb / 1000:.2f} GB (2 ranks): did not finish within {rss_limit_gb:g} GB of RSS")
            break
        finished = mb
        print(f"HTA at {mb / 1000:.2f} GB (2 ranks): {result['wall_s']:.1f} s wall ({mb / result['wall_s']:.1f} MB/s), "
              f"peak RSS of the process tree {result['tree_mb'] / 1000:.2f} GB")
        gb *= 2
    if max_gb >= 0.25:
        print(f"largest job HTA finished here: {finished / 1000:.2f} GB" if finished else "HTA finished no job")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=60, help="uncompressed MB per rank trace (default 60)")
    ap.add_argument("--ranks", type=int, default=2, help="rank traces (default 2)")
    ap.add_argument("--gb", type=float, help="total uncompressed GB over all ranks (instead of --mb); "
                                             "HTA then runs on a ladder of smaller jobs")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "polytrace-bench-kineto",
                    help="where the generated traces are written")
    ap.add_argument("--keep", action="store_true", help="keep the generated traces of a --gb run")
    ap.add_argument("--runs", type=int, default=2, help="runs of each side; the fastest is reported")
    ap.add_argument("--hta-max-gb", type=float, default=4, help="largest HTA job tried with --gb (default 4)")
    ap.add_argument("--hta-max-rss-gb", type=float, default=16, help="HTA is stopped past this RSS (default 16)")
    ap.add_argument("--baseline", metavar="REF", help="also run PolyTrace with the parser's files at git REF")
    ap.add_argument("--child", nargs=2, metavar=("SIDE", "DIR"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        side, trace_dir = args.child[0], Path(args.child[1])
        result = {"hta": child_hta, "polytrace": child_polytrace, "decode": child_decode}[side](trace_dir)
        result["rss_mb"] = peak_rss_mb()
        print(json.dumps(result))
        return
    from bench.kineto_traces import generate

    # HTA is an installed package with its bytecode; PolyTrace is installed editable, and with
    # PYTHONDONTWRITEBYTECODE set (as here) Python would compile its modules on every run.
    for package in ("ingest", "queries", "bench", "store", "polytrace"):
        compileall.compile_dir(ROOT / package, quiet=1)
    mb_per_rank = args.gb * 1000 / args.ranks if args.gb else args.mb
    args.work.mkdir(parents=True, exist_ok=True)
    if args.gb:
        free = shutil.disk_usage(args.work).free / 1e9
        if free < 1.5 * args.gb + 2:
            sys.exit(f"{free:.1f} GB free under {args.work}: a {args.gb:g} GB job needs {1.5 * args.gb + 2:.0f}")
    trace_dir = args.work / f"{mb_per_rank:g}mb-x{args.ranks}"
    paths = generate(trace_dir, mb_per_rank, args.ranks)
    mb = sum(p.stat().st_size for p in paths) / 1e6
    sites = {}
    if args.baseline:
        from bench.api import baseline_tree

        sites["baseline"] = baseline_tree(args.baseline, Path(tempfile.mkdtemp(dir=args.work)), BASELINE_PATHS)
        compileall.compile_dir(sites["baseline"], quiet=1)
    try:
        sides = (("polytrace",) if args.gb else ("hta", "polytrace")) + tuple(sites)
        runs = {side: [] for side in sides}
        for _ in range(args.runs):
            for side in sides:
                result = run_child("polytrace" if side in sites else side, trace_dir, site=sites.get(side))
                if result is None:
                    sys.exit(f"{side} failed")
                runs[side].append(result)
        best = {side: min(rs, key=lambda r: r["wall_s"]) for side, rs in runs.items()}
        best["polytrace"]["decode_cpu_s"] = run_child("decode", trace_dir)["decode_cpu_s"]
        spread = {side: [round(r["wall_s"], 2) for r in rs] for side, rs in runs.items()}
        report(mb, best.get("hta"), best["polytrace"])
        print(f"wall of every run (s): {spread}")
        if "hta" in runs:  # each round ran both sides back to back, under the same load
            ratios = sorted(h["wall_s"] / o["wall_s"] for h, o in zip(runs["hta"], runs["polytrace"]))
            print(f"HTA wall / PolyTrace wall, round by round: {' '.join(f'{r:.1f}' for r in ratios)} "
                  f"(median {ratios[len(ratios) // 2]:.1f}x)")
        if sites:
            report_baseline(mb, args.baseline, runs["baseline"], runs["polytrace"])
    finally:
        for site in sites.values():
            shutil.rmtree(site.parent, ignore_errors=True)
        if args.gb and not args.keep:
            shutil.rmtree(trace_dir, ignore_errors=True)
    if args.gb:
        hta_ladder(args.work, args.hta_max_gb, args.hta_max_rss_gb)


if __name__ == "__main__":
    main()
