"""The `polytrace` parser, assembled from each command's module in the order `--help` lists them."""
from __future__ import annotations

import argparse
from importlib import import_module

from polytrace import default_db

DESCRIPTION = "The single `polytrace` command: ingest, query, serve, demo and the workload tools."
COMMANDS = ("ingest", "query", "export", "lake", "fidelity", "serve", "watch", "findings", "migrate", "demo",
            "synth", "simulate")


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The whole parser; given a command line that names a command, that command's alone: the
    others' modules and options would cost a light command a tenth of its time."""
    parser = argparse.ArgumentParser(prog="polytrace", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)

    def db_option(p):
        p.add_argument("--db", default=default_db(),
                       help="DuckDB file (default: $POLYTRACE_DB or ./polytrace.duckdb)")

    named = argv[0] if argv and argv[0] in COMMANDS else None
    for command in (named,) if named else COMMANDS:
        import_module(f"polytrace.cli.{command}").register(sub, db_option)
    return parser
