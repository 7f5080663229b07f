"""What the refresh after an ingest costs against the parse it follows (issue 42: "never costs more
than the parse itself on a real trace"), and against the refresh as it was at d28a549 (every
needed query planned and run, one after another).

For each real shared run (a verl console log, a PolyTrace DAPO run, a Kineto trace, a memory
timeline, an nsys export), in this process, --repeat rounds, each into a fresh database:
  parse    ingest_paths alone (detect, parse, the write and its aggregates; no refresh)
  refresh  overview.refresh of the run, as every writer calls it
  every    the same refresh with no query skipped (overview.silent answering no) and one query at
           a time (runner.WORKERS = 1)
Medians of wall and CPU time of this process; prints each side and the ratios refresh/parse and
refresh/every.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[0] = str(ROOT)

from polytrace import store  # noqa: E402
from polytrace.ingest.load import ingest_paths  # noqa: E402
from polytrace.queries import overview, runner  # noqa: E402

DATA = Path(os.environ.get("POLYTRACE_TEST_DATA", ROOT.parent / "shared" / "data"))
RUNS = {
    "verl console log": "verl-logs/qwen3-4b-agent-run-i80f2v90.output.log",
    "PolyTrace DAPO run": "polytrace/verl/profile/packed_length_log/20260614_023133",
    "Kineto trace": "kineto/negative_queue_length_values_check/rank0.json.gz",
    "memory timeline": "kineto/memory_analysis/memory_timeline.raw.gz",
    "nsys export": "nsys",
}


def nsys_export(folder: Path) -> Path:
    return sorted(folder.rglob("*.sqlite"))[0]


def clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def since(start: tuple[float, float]) -> tuple[float, float]:
    wall, cpu = clock()
    return wall - start[0], cpu - start[1]


def every_query(query, holding) -> bool:
    return False


def one_round(path: Path, tmp: Path, i: int) -> dict[str, tuple[float, float]]:
    con = store.open(tmp / f"round{i}.duckdb")
    try:
        start = clock()
        run_id = ingest_paths(con, [path]).run_ids[0]
        took = {"parse": since(start)}
        sides = (("refresh", overview.silent, runner.WORKERS), ("every", every_query, 1))
        for side, silent, workers in sides:
            kept = overview.silent, runner.WORKERS
            overview.silent, runner.WORKERS = silent, workers
            try:
                start = clock()
                overview.refresh(con, [run_id])
                took[side] = since(start)
            finally:
                overview.silent, runner.WORKERS = kept
        return took
    finally:
        con.close()


def measured(path: Path, repeat: int) -> dict[str, tuple[float, float]]:
    with tempfile.TemporaryDirectory() as tmp:
        rounds = [one_round(path, Path(tmp), i) for i in range(repeat + 1)][1:]  # the first warms imports
    return {side: tuple(statistics.median(r[side][i] for r in rounds) for i in (0, 1)) for side in rounds[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(f"{'run':20s} {'parse s':>14s} {'refresh s':>14s} {'every s':>14s} {'refresh/parse':>14s} "
          f"{'refresh/every':>14s}   (wall, CPU)")
    for label, rel in RUNS.items():
        path = DATA / rel
        if label == "nsys export" and path.is_dir():
            path = nsys_export(path)
        if not path.exists():
            sys.exit(f"no {label} at {path}: set POLYTRACE_TEST_DATA to the shared data folder")
        t = measured(path, args.repeat)
        cell = {side: f"{w:.3f} {c:.3f}" for side, (w, c) in t.items()}
        print(f"{label:20s} {cell['parse']:>14s} {cell['refresh']:>14s} {cell['every']:>14s} "
              f"{t['refresh'][0] / t['parse'][0]:>14.2f} {t['refresh'][0] / t['every'][0]:>14.2f}")


if __name__ == "__main__":
    main()
