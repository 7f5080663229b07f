"""`polytrace watch`: follow a training run as it writes, into a database or pushed to a server."""
from __future__ import annotations

import sys

from polytrace.cli.errors import CliError, shown
from polytrace.cli.following import follow_options, watched
from polytrace.cli.output import ingest_options


def register(sub, db_option) -> None:
    p = sub.add_parser("watch", help="follow a training run as it writes: each directory is one run "
                       "whose new steps are appended (into --db, or pushed to --server)")
    p.add_argument("directories", nargs="+", metavar="DIR")
    db_option(p)
    p.add_argument("--server", metavar="URL", help="push to this PolyTrace server "
                   "(POST /api/runs/{id}/append) instead of writing --db")
    p.add_argument("--token", help="the server's bearer token (default: $POLYTRACE_TOKEN)")
    p.add_argument("--once", action="store_true", help="load what there is, taking every file as "
                   "complete (the job is over), and stop")
    follow_options(p)
    p.set_defaults(func=run)


def run(args) -> int:
    """Follow directories as a training job writes them: into --db, or pushed to --server."""
    import threading

    from polytrace import settings as polytrace_settings
    from polytrace import store
    from polytrace.server import watch

    directories = watched(args.directories)
    if args.server and not _http_url(args.server):
        raise CliError(f"--server {args.server!r}: expected the server's address as http://HOST:PORT")

    def say(text: str) -> None:
        print(f"watch: {shown(text)}", file=sys.stderr)

    lines = None
    if args.server:  # the server keeps the overview lines of what it is sent
        def sink_for(run_id, name, source):
            return watch.ServerSink(args.server, run_id, name, source, args.token or polytrace_settings.get().token)
        con = None
    else:
        con = store.open(args.db)
        lines = watch.OverviewLines(lambda fn, runs: fn(con))
        sink_for = watch.sinks_into(con, lines, ingest_options())
    try:
        followers = [watch.follower(d, sink_for, settle_s=args.settle, final=args.once, say=say)
                     for d in directories]
        for f, d in zip(followers, directories):
            print(f"following {shown(d)} as run {f.sink.run_id}", file=sys.stderr)
            if lines:  # a watcher killed between an append and its line: the line, again
                lines.mark(f.sink.run_id)
        went_through = watch.follow(followers, threading.Event(), args.poll, say, once=args.once, lines=lines)
    finally:
        if con is not None:
            con.close()
    return 0 if went_through else 1


def _http_url(text: str) -> bool:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 (reading it checks it: a port that is no number is a ValueError)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)

