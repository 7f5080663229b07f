"""`polytrace export`: runs to a Hive-partitioned Parquet lake."""
from __future__ import annotations

import sys


def register(sub, db_option) -> None:
    p = sub.add_parser("export", help="write runs to a Hive-partitioned Parquet lake "
                       "(table=<name>/run_id=<id>/); `polytrace ingest DIR` reads it back")
    p.add_argument("run_ids", nargs="+", metavar="RUN_ID")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="lake directory or s3://bucket/prefix; other runs already in it are kept")
    db_option(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from polytrace import service, store

    con = store.open(args.db, "r")
    try:
        rows = service.export_runs(con, args.run_ids, args.out)
    finally:
        con.close()
    counts = ", ".join(f"{t}={n}" for t, n in rows.items() if n)
    print(f"exported {len(args.run_ids)} run(s): {counts}", file=sys.stderr)
    print(args.out)
    return 0

