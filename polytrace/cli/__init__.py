"""The single `polytrace` command: ingest, query, serve, demo and the workload tools.

One module per command (`register` adds its parser, `run` does it); parser.py assembles them.
"""
from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> int:
    from polytrace import store
    from polytrace.cli.errors import CliError, shown
    from polytrace.cli.parser import build_parser
    from polytrace.ingest.contract import IngestError
    from polytrace.queries.catalog import CatalogError, ParamError
    from polytrace.queries.runner import QueryError
    from polytrace.settings import SettingsError
    from polytrace.workload import WorkloadError

    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except (IngestError, ParamError, CliError, WorkloadError, store.StoreError, QueryError,
            SettingsError, CatalogError) as e:
        print(f"error: {shown(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader (e.g. `| head`) went away; stop quietly like other Unix tools.
        sys.stdout = open(os.devnull, "w")
        return 0


def build_parser():
    from polytrace.cli.parser import build_parser

    return build_parser()
