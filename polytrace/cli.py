"""The single `polytrace` command: ingest, query, serve, demo and the workload tools."""
from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

from polytrace import default_db


class CliError(Exception):
    """A user-facing failure: printed as one line, exit status 2."""


def _progress_bar():
    """A rich progress callback when stderr is a terminal; None (quiet) otherwise."""
    if not sys.stderr.isatty():
        return None, None
    from rich.progress import Progress

    bar = Progress(transient=True)
    task = bar.add_task("parsing", total=None)

    def update(done: int, total: int, label: str) -> None:
        bar.update(task, completed=done, total=total, description=label)

    return bar, update


def cmd_ingest(args) -> int:
    from ingest.load import ingest_paths, open_db

    con = open_db(args.db)
    bar, update = _progress_bar()
    try:
        if bar:
            bar.start()
        result = ingest_paths(con, [Path(p) for p in args.paths], name=args.name,
                              format=args.format, force=args.force, progress=update)
    finally:
        if bar:
            bar.stop()
        con.close()
    for w in result.warnings:
        print(f"warning: {w}", file=sys.stderr)
    rows = ", ".join(f"{t}={n}" for t, n in result.rows.items())
    state = "already ingested" if result.existing else "ingested"
    print(f"{state} {result.format}: {rows}", file=sys.stderr)
    print(result.run_id)
    return 0


def parse_params(pairs: list[str]) -> dict[str, str]:
    params = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CliError(f"-p expects key=value, got {pair!r}")
        params[key] = value
    return params


def _jsonable(value):
    if isinstance(value, float) and value != value:
        return None
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def print_result(columns: list[str], rows: list[tuple], output: str) -> None:
    if output == "json":
        print(json.dumps([{c: _jsonable(v) for c, v in zip(columns, r)} for r in rows]))
    elif output == "csv":
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(columns)
        w.writerows(rows)
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(*columns)
        for r in rows:
            table.add_row(*("" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)
                            for v in r))
        Console(width=max(100, 14 * len(columns))).print(table)


def cmd_query(args) -> int:
    from ingest.load import open_db
    from queries.catalog import bind, execute, get_query

    try:
        query = get_query(args.name)
    except KeyError:
        from queries.catalog import load_catalog

        raise CliError(f"unknown query {args.name!r}; known: {', '.join(load_catalog())}") from None
    bound = bind(query, parse_params(args.param))
    con = open_db(args.db)
    try:
        result = execute(con, query, bound)
    finally:
        con.close()
    print_result(result.columns, result.rows, args.output)
    return 0


def cmd_serve(args) -> int:
    import uvicorn

    from server.app import create_app
    from server.settings import Settings

    settings = Settings(db=args.db, host=args.host, port=args.port)
    app = create_app(settings)
    print(f"PolyTrace serving {args.db} at http://{args.host}:{args.port}/", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="polytrace", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def db_option(p):
        p.add_argument("--db", default=default_db(),
                       help="DuckDB file (default: $POLYTRACE_DB or ./polytrace.duckdb)")

    p = sub.add_parser("ingest", help="load trace files or directories as one run; prints the run_id")
    p.add_argument("paths", nargs="+", metavar="PATH")
    db_option(p)
    p.add_argument("--name", help="run name (default: the file or directory name)")
    p.add_argument("--format", help="skip detection and parse as this format")
    p.add_argument("--force", action="store_true", help="ingest again even if the same content exists")
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("query", help="run a catalog query")
    p.add_argument("name")
    db_option(p)
    p.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--output", choices=("table", "json", "csv"), default="table")
    p.set_defaults(func=cmd_query)

    p = sub.add_parser("serve", help="serve the dashboard and REST API")
    db_option(p)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.set_defaults(func=cmd_serve)
    return parser


def main(argv: list[str] | None = None) -> int:
    from ingest.contract import IngestError
    from queries.catalog import ParamError

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (IngestError, ParamError, CliError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
