"""The `polytrace` parser, assembled from each command's module in the order `--help` lists them."""
from __future__ import annotations

import argparse

from polytrace import default_db
from polytrace.cli import (
    demo,
    export,
    fidelity,
    findings,
    ingest,
    lake,
    migrate,
    query,
    serve,
    simulate,
    synth,
    watch,
)

DESCRIPTION = "The single `polytrace` command: ingest, query, serve, demo and the workload tools."
COMMANDS = (ingest, query, export, lake, fidelity, serve, watch, findings, migrate, demo, synth, simulate)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="polytrace", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)

    def db_option(p):
        p.add_argument("--db", default=default_db(),
                       help="DuckDB file (default: $POLYTRACE_DB or ./polytrace.duckdb)")

    for command in COMMANDS:
        command.register(sub, db_option)
    return parser
