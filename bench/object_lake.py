"""A team's lake in object storage against the same runs in a local folder, in one process.

    python bench/object_lake.py [--runs 1000] [--template-runs 20] [--repeat 3] [--dir DIR] [--skip-published]

The runs: --template-runs synthetic runs (bench/team.py's plans, ingested as `ingest --lake`
does) copied under new run ids up to --runs (run_id is a lake's partition key, not a column),
into a local-folder lake and, by 8 publishing threads, into moto's S3 server on loopback. Then,
each timed: opening the lake (views over every table) and runs_overview and run_summary on
DuckDB, over the local lake, the S3 lake as published (every commit read) and the S3 lake after
`polytrace lake compact` (one index, a file per table). Both must give the same rows.
Timings are min / median / max of --repeat calls, the first one cold.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.compare import row_differences  # noqa: E402
from bench.team import LIMITS, build_lake, free_port, repeated, row, section  # noqa: E402
from polytrace.queries.catalog import get_query  # noqa: E402
from polytrace.queries.runner import run  # noqa: E402

BUCKET = "bench"


def expand(template: Path, lake: Path, runs: int) -> list[str]:
    """The template lake's runs copied under new ids into `lake` until it holds `runs`."""
    from polytrace.store.lake import lake_tables, partitions

    tables = lake_tables(template)
    originals = sorted(partitions(tables["runs"]))
    ids = [f"r{i:05d}" for i in range(runs)]
    for i, run_id in enumerate(ids):
        source = originals[i % len(originals)]
        for name, folder in tables.items():
            if source in partitions(folder):
                shutil.copytree(folder / f"run_id={source}", lake / f"table={name}" / f"run_id={run_id}")
    return ids


def moto() -> str:
    import logging

    from moto.server import ThreadedMotoServer
    from pyarrow.fs import S3FileSystem

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
    port = free_port()
    ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False).start()
    endpoint = f"http://127.0.0.1:{port}"
    os.environ.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                      AWS_REGION="us-east-1")
    S3FileSystem(endpoint_override=endpoint, allow_bucket_creation=True).create_dir(BUCKET)
    return endpoint


def publish(lake: Path, ids: list[str], url: str) -> float:
    from polytrace.store import object_lake

    where = object_lake.location(url)
    began = time.perf_counter()
    chunks = [ids[k::8] for k in range(8)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda chunk: object_lake.publish(lake, chunk, where), chunks))
    return time.perf_counter() - began


def queries(label: str, location, repeat: int) -> dict:
    from polytrace.store.lake import open_lake

    opened, con = repeated(lambda: open_lake(location), repeat)
    row(f"{label}: open_lake", opened)
    try:
        times, overview = repeated(lambda: run(con, get_query("runs_overview"), {}, LIMITS), repeat)
        row(f"{label}: runs_overview", times, f"  {len(overview.rows):,} rows")
        run_id = overview.rows[len(overview.rows) // 2][0]
        times, summary = repeated(lambda: run(con, get_query("run_summary"), {"run_id": run_id}, LIMITS), repeat)
        row(f"{label}: run_summary ({run_id})", times)
    finally:
        con.close()
    return {"runs_overview": overview.rows, "run_summary": summary.rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--template-runs", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", type=Path, help="work directory (default: a new temp dir, removed)")
    ap.add_argument("--skip-published", action="store_true",
                    help="time no queries on the S3 lake as published (at 10,000 runs they take 10 minutes)")
    args = ap.parse_args()
    work = args.dir or Path(tempfile.mkdtemp(prefix="polytrace-objlake-"))
    try:
        template, lake = work / "template", work / "lake"
        build_lake(template, work, args.template_runs, jobs=2)
        ids = expand(template, lake, args.runs)
        files = sum(1 for _ in lake.rglob("*.parquet"))
        moto()
        url = f"s3://{BUCKET}/lake"
        section(f"{args.runs:,} runs ({files:,} Parquet files locally), load {os.getloadavg()[0]:.1f}")
        row("publish to S3 (8 threads; empty tables left out)", [publish(lake, ids, url)])
        local = queries("local folder", lake, args.repeat)
        published = {} if args.skip_published else queries("S3 as published", url, args.repeat)
        from polytrace.store import object_lake

        began = time.perf_counter()
        object_lake.compact(url)
        row("lake compact", [time.perf_counter() - began])
        compacted = queries("S3 compacted", url, args.repeat)
        for name in local:
            assert name not in published or row_differences(local[name], published[name]) == [], name
            assert row_differences(local[name], compacted[name]) == [], name
        print(f"same rows on all {2 + bool(published)}", file=sys.stderr)
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
