"""`polytrace lake compact|vacuum`: a lake in object storage compacted into a file per table, and
rid of the files no commit or index names."""
from __future__ import annotations

import sys

from polytrace.cli.errors import CliError


def register(sub, db_option) -> None:
    p = sub.add_parser("lake", help="look after a lake in object storage (s3://bucket/prefix)")
    actions = p.add_subparsers(dest="action", required=True)
    v = actions.add_parser("vacuum", help="delete data files that no published run names (a publisher "
                           "killed halfway, a run published again), once older than the grace period")
    v.add_argument("url", metavar="s3://BUCKET/PREFIX")
    v.add_argument("--grace-hours", type=float, default=24.0, metavar="H",
                   help="keep orphans younger than this: a publisher may still be uploading them (default 24)")
    v.set_defaults(func=vacuum)
    c = actions.add_parser("compact", help="every published run's rows into one file per table and an "
                           "index, so that opening the lake costs one listing and a file per table")
    c.add_argument("url", metavar="s3://BUCKET/PREFIX")
    c.set_defaults(func=compact)


def vacuum(args) -> int:
    from polytrace.store import object_lake

    if not args.grace_hours >= 0:
        raise CliError(f"--grace-hours must be 0 or more, got {args.grace_hours}")
    deleted = object_lake.vacuum(args.url, args.grace_hours * 3600)
    print(f"deleted {len(deleted)} orphaned data file(s) from {object_lake.location(args.url)}", file=sys.stderr)
    for key in deleted:
        print(key)
    return 0


def compact(args) -> int:
    from polytrace.store import object_lake

    seen = object_lake.compact(args.url)
    print(f"compacted {seen.runs} run(s) of {object_lake.location(args.url)} into one file per table",
          file=sys.stderr)
    return 0
