"""`polytrace serve`: the dashboard and REST API, optionally following directories."""
from __future__ import annotations

import sys

from polytrace.cli.errors import CliError, shown
from polytrace.cli.following import follow_options, watched


def register(sub, db_option) -> None:
    p = sub.add_parser("serve", help="serve the dashboard and REST API")
    db_option(p)
    p.add_argument("--lake", metavar="DIR", help="serve this Parquet lake (a folder or s3://bucket/prefix; read-only) instead of --db")
    p.add_argument("--host", help="address to bind (default: $POLYTRACE_HOST or 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default: $POLYTRACE_PORT or 8000)")
    follow_options(p, "--watch")
    p.set_defaults(func=run)


def run(args, listening=None) -> int:
    """Serve; `listening`, a socket the caller bound already (the demo binds before it
    synthesizes), else one bound here before anything is said or opened."""
    import uvicorn

    from polytrace import settings as polytrace_settings
    from polytrace.server.app import create_app

    overrides = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    settings = polytrace_settings.load(db=args.db, lake=getattr(args, "lake", None), **overrides)
    directories = watched(args.watch or [])
    if directories and settings.lake:
        raise CliError("--watch appends to a database: drop --lake")
    listening = listening or listen(settings.host, settings.port)
    app = create_app(settings)
    warning = settings.exposure_warning()
    if warning:
        print(warning, file=sys.stderr)
    print(f"PolyTrace serving {settings.lake or settings.db} at http://{settings.host}:{settings.port}/", file=sys.stderr)
    watching = None
    if directories:
        from polytrace.ingest.options import IngestOptions
        from polytrace.server.watch import Watching

        watching = app.state.watching = Watching(app.state.db, app.state.overview_lines, directories,
                                                 settle_s=args.settle, poll_s=args.poll,
                                                 say=lambda text: print(f"watch: {shown(text)}", file=sys.stderr),
                                                 options=IngestOptions.of(settings)).start()
        for run_id, d in watching.runs.items():
            print(f"following {shown(d)} as run {run_id}", file=sys.stderr)
    try:
        uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[listening])
    finally:
        if watching:
            watching.stop()
    return 0


def listen(host: str, port: int):
    """The server's socket, bound before anything is said or opened: a port in use is one line
    (it was uvicorn's error after "PolyTrace serving ... at" had been printed)."""
    import socket

    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise CliError(f"cannot listen on {host}:{port}: {e.strerror or e} (another server there? choose --port)") from None
    return sock

