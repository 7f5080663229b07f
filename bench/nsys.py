"""Nsight Systems export parse against the decode-only limit, per CPU-second, in one process.

Writes an export in nsys's schema (the format's sample tables) with --kernels kernels, as many
runtime launches, a memcpy per 10 kernels and an NVTX range per 100 kernels, then times, in
alternating rounds in this process:
- decode: the same rows read with sqlite3 (the same SELECTs and StringIds joins, fetchmany in
  batches, nothing kept): what reading the file costs at all;
- parse: `nsys.parse` (the rows into a RankTrace, the GPU tables and gpu_ranges built).
Prints CPU seconds of each (best of --rounds), rows per CPU-second and parse/decode.
"""
from __future__ import annotations

import argparse
import random
import sqlite3
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[0] = str(ROOT)
from polytrace.ingest.formats import nsys  # noqa: E402  (needs the project root on sys.path)

DECODE = (
    "SELECT k.start, k.end, k.deviceId, k.streamId, k.correlationId, k.globalPid, s.value "
    "FROM CUPTI_ACTIVITY_KIND_KERNEL k LEFT JOIN StringIds s ON s.id = k.demangledName",
    "SELECT start, end, deviceId, streamId, correlationId, globalPid, copyKind, srcKind, dstKind "
    "FROM CUPTI_ACTIVITY_KIND_MEMCPY",
    "SELECT start, correlationId, globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME",
    "SELECT n.start, n.end, n.globalTid, coalesce(n.text, s.value) FROM NVTX_EVENTS n "
    "LEFT JOIN StringIds s ON s.id = n.textId WHERE n.eventType IN (59, 60)",
)


def write(path: Path, kernels: int) -> int:
    rng = random.Random(7)
    names = [f"kernel_{i}<float, {i % 7}>(float const*, float*, int)" for i in range(200)]
    with closing(sqlite3.connect(path)) as con:
        con.executescript(nsys._SAMPLE_SQL)
        con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(100 + i, n) for i, n in enumerate(names)])
        t, rows, launches, copies, ranges = 1_000_000, [], [], [], []
        for i in range(kernels):
            dur = rng.randint(2_000, 200_000)
            corr = 1000 + i
            launches.append((t - 5_000, t - 1_000, 0, (1 << 24) + 1, corr, 3, 0, None))
            rows.append((t, t + dur, 0, 1, 7 + i % 3, corr, 1 << 24, 100 + rng.randrange(200), 100))
            if i % 10 == 0:
                copies.append((t + dur, t + dur + 3_000, 0, 1, 7, corr + 10**9, 1 << 24, 4096, 1, 0, 2))
            if i % 100 == 0:
                ranges.append((t - 10_000, t + 100 * 250_000, 60, None, None, None, "update_actor", (1 << 24) + 1,
                               None, None, 0))
            t += dur + rng.randint(0, 50_000)
        con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?, ?, ?, ?)", launches)
        con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", copies)
        con.executemany("INSERT INTO NVTX_EVENTS VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", ranges)
        con.commit()
    return kernels * 2 + len(copies) + len(ranges)


def decode(path: Path) -> None:
    with closing(sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)) as con:
        for sql in DECODE:
            cursor = con.execute(sql)
            while cursor.fetchmany(nsys.BATCH_ROWS):
                pass


def cpu(fn, path: Path) -> float:
    start = time.process_time()
    fn(path)
    return time.process_time() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="polytrace-bench-nsys-") as tmp:
        path = Path(tmp) / "report_rank0.sqlite"
        rows = write(path, args.kernels)
        mb = path.stat().st_size / 1e6
        times = {"decode": [], "parse": []}
        for _ in range(args.rounds):
            times["decode"].append(cpu(decode, path))
            times["parse"].append(cpu(nsys.parse, path))
        best = {k: min(v) for k, v in times.items()}
        print(f"export: {mb:,.0f} MB, {rows:,} rows ({args.kernels:,} kernels)")
        for k, v in best.items():
            print(f"{k:7s} {v:6.2f} CPU-s  {rows / v / 1e6:5.2f} M rows per CPU-s  {mb / v:6.1f} MB per CPU-s")
        print(f"parse / decode time: {best['parse'] / best['decode']:.2f}x "
              f"(parse at {best['decode'] / best['parse']:.2f} of the decode-only speed)")


if __name__ == "__main__":
    main()
