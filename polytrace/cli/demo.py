"""`polytrace demo`: synthesize realistic runs into a fresh database and serve them."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from polytrace.cli import serve
from polytrace.cli.errors import CliError


def register(sub, db_option) -> None:
    p = sub.add_parser("demo", help="synthesize realistic runs into a fresh database and serve them")
    p.add_argument("--db", help="database file to create (default: a new temp file; "
                   "an existing file is replaced only if it holds nothing but demo runs)")
    p.add_argument("--host", help="address to bind (default: 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default: 8000)")
    p.add_argument("--seed", type=int, default=0, help="synthesis seed (default: 0)")
    p.add_argument("--write", metavar="DIR", help="only write the demo's trace files into DIR "
                   "(math/ and agent/) and print how to ingest them; serve nothing")
    p.set_defaults(func=run)


def run(args) -> int:
    from polytrace.demo import DemoDbError, build, fresh_db_path, math_facts, write_traces

    if args.write:
        folders = write_traces(Path(args.write), seed=args.seed)
        facts = math_facts()
        print(f"wrote the demo's trace files (seed {args.seed}); ingest them with:", file=sys.stderr)
        print(f"polytrace ingest {folders['math']} --max-response-len {facts['max_response_len']} "
              f"--gpus {facts['n_gpus']}\npolytrace ingest {folders['agent']}")
        return 0
    host = args.host or "127.0.0.1"
    port = args.port or 8000
    listening = serve.listen(host, port)  # a port in use is said before anything is synthesized or written
    try:
        db = fresh_db_path(args.db)
    except DemoDbError as e:
        listening.close()
        raise CliError(str(e)) from None
    print(f"synthesizing demo runs (seed {args.seed}) into {db}", file=sys.stderr)
    run_ids = build(db, seed=args.seed)
    print(f"PolyTrace demo at http://{host}:{port}/ with its database at {db}: uploads there land in it")
    for run_id in run_ids:
        print(f"  http://{host}:{port}/runs/{run_id}")
    sys.stdout.flush()
    return serve.run(argparse.Namespace(db=str(db), host=host, port=port, watch=None), listening)

