"""What reading a stored answer costs against the runs a database holds: the answers column kept
uncompressed (store/schema.sql, schema 5) beside the same column as DuckDB compressed it before
(schema 4's `answer BLOB`: ZSTD for answers of some size, FSST for small ones).

Takes one run's kept answers from --db (a database this tree summed up: bench/api.py's at 50M
samples, or any `polytrace ingest` output after `polytrace migrate`), copies them under --runs
run ids into two fresh databases (each copy's bytes made distinct, so that no compression shares
them), then times, on one run, answers.read of a light answer (metric_keys) and of a long one
(rollout_tail), and the findings list (findings.stored: every finding query's answer in one
lookup). Medians of --repeat calls, one after another, each side in turn; wall time of the
calling thread (DuckDB runs a lookup on it).
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
from polytrace.queries import answers, findings  # noqa: E402
from polytrace.queries.catalog import bind, digest, get_query  # noqa: E402

SCHEMA_4_ANSWERS = "CREATE TABLE run_answers (run_id VARCHAR, query VARCHAR, catalog VARCHAR, answer BLOB)"
LOOKUPS = ("metric_keys", "rollout_tail")


def kept_answers(db: str) -> list[tuple[str, bytes]]:
    con = store.open(db, "r")
    try:
        rows = con.execute("SELECT query, answer FROM run_answers WHERE catalog = ? AND run_id = "
                           "(SELECT min(run_id) FROM run_answers)", [digest()]).fetchall()
    finally:
        con.close()
    if not rows:
        sys.exit(f"{db} keeps no answer of this catalog: run `polytrace migrate --db {db}` first")
    return rows


def build(path: Path, kept: list[tuple[str, bytes]], runs: int, compressed: bool) -> None:
    con = store.open(str(path))
    try:
        if compressed:
            con.execute("DROP TABLE run_answers")
            con.execute(SCHEMA_4_ANSWERS)
        catalog = digest()
        for i in range(runs):
            # bytes after an Arrow stream's end are not read: a distinct tail per copy
            con.executemany("INSERT INTO run_answers VALUES (?, ?, ?, ?)",
                            [[f"run{i}", query, catalog, blob + os.urandom(16)] for query, blob in kept])
        con.execute("CHECKPOINT")
    finally:
        con.close()


def median_ms(fn, repeat: int) -> float:
    for _ in range(10):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def lookups(path: Path, repeat: int) -> dict[str, float]:
    con = store.open(str(path), "r")
    try:
        cur = con.cursor()
        timed = {}
        for name in LOOKUPS:
            query = get_query(name)
            bound = bind(query, {"run_id": "run0"})
            assert answers.read(cur, query, bound) is not None, name
            timed[name] = median_ms(lambda: answers.read(cur, query, bound), repeat)
        assert findings.stored(cur, "run0") is not None
        timed["findings"] = median_ms(lambda: findings.stored(cur, "run0"), repeat)
        return timed
    finally:
        con.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="a database with a run's kept answers")
    parser.add_argument("--runs", type=int, nargs="+", default=[1, 10, 50])
    parser.add_argument("--repeat", type=int, default=300)
    args = parser.parse_args()
    kept = kept_answers(args.db)
    size = sum(len(blob) for _, blob in kept)
    print(f"{len(kept)} answers of one run, {size / 1024:.0f} KiB; ms a call, median of {args.repeat}")
    print(f"{'runs':>5} {'answers MiB':>12}  " + "  ".join(f"{n + ' (zstd/unc)':>27}" for n in (*LOOKUPS, "findings")))
    with tempfile.TemporaryDirectory(prefix="polytrace-bench-answers-") as tmp:
        for runs in args.runs:
            timed = {}
            for compressed in (True, False):
                path = Path(tmp) / f"{runs}-{compressed}.duckdb"
                build(path, kept, runs, compressed)
                timed[compressed] = lookups(path, args.repeat)
                path.unlink()
            cells = [f"{timed[True][n]:7.2f} / {timed[False][n]:5.2f} = {timed[False][n] / timed[True][n]:4.2f}x"
                     for n in (*LOOKUPS, "findings")]
            print(f"{runs:>5} {runs * size / 1024**2:>12.1f}  " + "  ".join(f"{c:>27}" for c in cells))


if __name__ == "__main__":
    main()
