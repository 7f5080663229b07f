"""`polytrace findings`: what a run's numbers say, one sentence each."""
from __future__ import annotations

import json
import sys

from polytrace.cli.errors import CliError
from polytrace.cli.output import limits


def register(sub, db_option) -> None:
    p = sub.add_parser("findings", help="what a run's numbers say: one sentence each, most severe first")
    p.add_argument("run_id", metavar="RUN_ID")
    db_option(p)
    p.add_argument("--output", choices=("text", "json"), default="text")
    p.set_defaults(func=run)


def run(args) -> int:
    from polytrace import store
    from polytrace.queries.findings import findings
    from polytrace.store.runs import exists

    con = store.open(args.db, "r")
    try:
        if not exists(con, args.run_id):
            raise CliError(f"no run {args.run_id!r} in {args.db}")
        found = findings(con, args.run_id, limits())
    finally:
        con.close()
    if args.output == "json":
        print(json.dumps(found))
    elif not found:
        print(f"nothing to report on run {args.run_id}", file=sys.stderr)
    for f in found if args.output == "text" else []:
        print(f"{f['severity'].upper():8} {f['kind']}: {f['text']}\n{'':9}evidence: {f['evidence']}")
    return 0

