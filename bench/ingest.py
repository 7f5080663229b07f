"""Ingest throughput on >= 200 MB of multi-turn PolyTrace JSONL vs DuckDB read_json and polars.read_ndjson."""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import polars as pl

from polytrace import store

ROOT = Path(__file__).resolve().parent.parent
# this script's own name would shadow the `ingest` package
sys.path[0] = str(ROOT)
from bench.cpu import cpu_s  # noqa: E402  (needs the project root on sys.path)

SOURCE = ROOT.parent / "shared" / "data" / "polytrace" / "search_r1" / "profile" / "multiturn_workload_log" / "0617_0223"
_STEP = re.compile(rb'^\{"step": \d+,', re.MULTILINE)


def generate(out: Path, target_bytes: int) -> int:
    """Copies of the shared search-R1 step files under new step numbers until target_bytes."""
    sources = [p.read_bytes() for p in sorted(SOURCE.glob("multiturn_workload_step_*.jsonl"))]
    if not sources:
        sys.exit(f"no multi-turn files under {SOURCE}")
    total, step = 0, 0
    while total < target_bytes:
        for data in sources:
            body = _STEP.sub(b'{"step": %d,' % step, data)
            (out / f"multiturn_workload_step_{step}.jsonl").write_bytes(body)
            total += len(body)
            step += 1
    return total


def timed(fn) -> tuple[float, float]:
    """Wall seconds, and CPU seconds of this process over all its threads, its children and the
    parse workers its forkserver forks (bench/cpu.py)."""
    wall, cpu = time.perf_counter(), cpu_s()
    fn()
    return time.perf_counter() - wall, cpu_s() - cpu


def polytrace_ingest(src: Path, db: Path) -> None:
    from polytrace.ingest.load import ingest_paths

    con = store.open(db)
    try:
        ingest_paths(con, [src])
    finally:
        con.close()


def duckdb_read_json(src: Path, db: Path) -> None:
    con = duckdb.connect(str(db))
    try:
        con.execute("CREATE TABLE raw AS SELECT * FROM read_json(?, format = 'newline_delimited')",
                    [str(src / "*.jsonl")])
    finally:
        con.close()


def polars_read_ndjson(src: Path, db: Path) -> None:
    pl.read_ndjson(sorted(src.glob("*.jsonl")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=int, default=200, help="size of the generated input (MB)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; each contender's best counts")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="polytrace-bench-") as tmp:
        src = Path(tmp) / "multiturn"
        src.mkdir()
        size = generate(src, args.mb * 10**6)
        files = len(list(src.glob("*.jsonl")))
        print(f"input: {files} multi-turn JSONL files, {size / 1e6:.1f} MB")
        contenders = {"polytrace ingest": polytrace_ingest, "duckdb read_json": duckdb_read_json,
                      "polars read_ndjson": polars_read_ndjson}
        # rounds interleave the contenders so that load from other processes hits them alike;
        # CPU seconds (all threads) show the work done, whatever the machine's load
        best = {label: (float("inf"), float("inf")) for label in contenders}
        ratios = []  # duckdb wall / polytrace wall, round by round (side by side, same load)
        for i in range(args.repeat):
            walls = {}
            for label, fn in contenders.items():
                db = Path(tmp) / f"{label.split()[0]}-{i}.duckdb"
                wall, cpu = timed(lambda: fn(src, db))
                walls[label] = wall
                best[label] = (min(best[label][0], wall), min(best[label][1], cpu))
                db.unlink(missing_ok=True)
            ratios.append(walls["duckdb read_json"] / walls["polytrace ingest"])
        mb = size / 1e6
        for label, (wall, cpu) in best.items():
            print(f"{label:20s} {wall:6.2f} s wall {mb / wall:7.1f} MB/s   "
                  f"{cpu:6.2f} s CPU {mb / cpu:7.1f} MB/CPU-s")
        ours, base = best["polytrace ingest"], best["duckdb read_json"]
        print(f"ratio polytrace ingest / duckdb read_json: {base[0] / ours[0]:.2f}x wall of the best runs "
              f"(target >= 1.5x), {base[1] / ours[1]:.2f}x per CPU-second")
        ratios.sort()
        print(f"round by round: {' '.join(f'{r:.2f}' for r in ratios)} (median {ratios[len(ratios) // 2]:.2f}x)")


if __name__ == "__main__":
    main()
