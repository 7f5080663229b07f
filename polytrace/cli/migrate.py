"""`polytrace migrate`: bring an older database up to date."""
from __future__ import annotations

import sys
from pathlib import Path

from polytrace.cli.errors import CliError


def register(sub, db_option) -> None:
    p = sub.add_parser("migrate", help="bring a database written by an older PolyTrace up to date "
                       "(schema and per-step aggregates)")
    db_option(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from polytrace import service, store
    from polytrace.store import runs as store_runs
    from polytrace.store.migrate import SCHEMA_VERSION

    if not Path(args.db).is_file():  # the writer would create an empty database there
        raise CliError(f"no database at {args.db}")
    con = store.open(args.db, "w")  # the writer brings the schema and aggregates up to date
    try:
        stale = service.refresh_stale(con)
        runs = store_runs.count(con)
    finally:
        con.close()
    again = f"{len(stale)} of {runs} runs summed up again" if stale else f"all {runs} runs summed up already"
    print(f"{args.db} is current (schema {SCHEMA_VERSION}): {again}", file=sys.stderr)
    return 0

