"""The single `polytrace` command: ingest, query, serve, demo and the workload tools.

One module per command (`register` adds its parser, `run` does it); parser.py assembles them.
"""
from __future__ import annotations

import os
import sys


# The errors a command reports in one line, by module and name. Each command imports only what it
# needs, in its run (so `--help` imports no DuckDB, Arrow or catalog): an error is looked up only
# once raised, and a module not loaded cannot have raised its own.
REPORTED = (("polytrace.store.errors", "StoreError"), ("polytrace.cli.errors", "CliError"),
            ("polytrace.ingest.contract", "IngestError"), ("polytrace.queries.catalog.model", "ParamError"),
            ("polytrace.queries.catalog.model", "CatalogError"), ("polytrace.queries.runner", "QueryError"),
            ("polytrace.settings", "SettingsError"), ("polytrace.workload", "WorkloadError"))


def main(argv: list[str] | None = None) -> int:
    from polytrace.cli.parser import build_parser

    argv = sys.argv[1:] if argv is None else argv
    try:
        args = build_parser(argv).parse_args(argv)
        return args.func(args)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader (e.g. `| head`) went away; stop quietly like other Unix tools.
        sys.stdout = open(os.devnull, "w")
        return 0
    except Exception as e:
        if not reported(e):
            raise
        from polytrace.cli.errors import shown

        print(f"error: {shown(e)}", file=sys.stderr)
        return 2


def reported(e: Exception) -> bool:
    return any(isinstance(e, getattr(sys.modules[module], name)) for module, name in REPORTED
               if module in sys.modules)


def build_parser():
    from polytrace.cli.parser import build_parser

    return build_parser()
