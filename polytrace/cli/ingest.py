"""`polytrace ingest`: trace files or directories as one run, into a database or a Parquet lake."""
from __future__ import annotations

import sys

from polytrace.cli.errors import CliError, shown
from polytrace.cli.output import ingest_options
from polytrace.ingest.run_facts import GIVEN_FRAMEWORK, GIVEN_RUN_FACTS

# The command-line flag of each given run fact (its argparse dest is the fact).
_FACT_FLAGS = {"max_response_len": "--max-response-len", "n_gpus": "--gpus", "trainer_gpus": "--trainer-gpus",
               "rollout_gpus": "--rollout-gpus", "max_staleness": "--max-staleness"}



def register(sub, db_option) -> None:
    p = sub.add_parser("ingest", help="load trace files or directories as one run; prints the run_id "
                       "(a Parquet lake from `export` restores each of its runs)")
    p.add_argument("paths", nargs="+", metavar="PATH", help="a file, folder or archive, or s3://bucket/prefix "
                   "(its objects, streamed to a temporary folder first)")
    db_option(p)
    p.add_argument("--name", help="run name (default: the file or directory name)")
    p.add_argument("--format", help="skip detection and parse as this format")
    p.add_argument("--force", action="store_true", help="ingest again even if the same content exists")
    for fact, flag in _FACT_FLAGS.items():
        p.add_argument(flag, dest=fact, type=int, metavar="N", help=GIVEN_RUN_FACTS[fact])
    p.add_argument("--framework", type=str.lower, metavar="NAME", help=f"{GIVEN_FRAMEWORK} (an unknown name lists them)")
    p.add_argument("--lake", metavar="DIR", help="write the run into this Parquet lake (a folder or "
                   "s3://bucket/prefix) instead of --db, parsing the input files in parallel processes")
    p.add_argument("--jobs", type=int, metavar="N",
                   help="with --lake: parsing processes (default: one per CPU)")
    p.add_argument("--tokenizer", metavar="PATH", help="a local tokenizer.json: lengths of text-only "
                   "inputs (verl rollout dumps) in its tokens instead of characters; needs the "
                   "tokenizers package (pip install 'polytrace[tokenizers]')")
    p.set_defaults(func=run)


def run(args) -> int:
    from polytrace import service, store

    overrides = _run_overrides(args)  # a bad flag is said before any file is opened
    options = ingest_options(args.tokenizer)
    if args.lake:
        return _ingest_to_lake(args, options, overrides)
    con = store.open(args.db)
    bar, update = _progress_bar()
    try:
        if bar:
            bar.start()
        with service.fetched(args.paths, options) as (paths, names):
            result = service.ingest_run(con, paths, options=options, name=args.name, format=args.format,
                                        force=args.force, progress=update, run_overrides=overrides,
                                        names=names)
    finally:
        if bar:
            bar.stop()
        con.close()
    _report(result, "already ingested" if result.existing else "ingested")
    print("\n".join(result.run_ids))
    return 0


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


def _report(result, state: str) -> None:
    """An ingest's warnings and row counts, on stderr: stdout carries only run ids."""
    for w in result.warnings:
        print(f"warning: {shown(w)}", file=sys.stderr)
    rows = ", ".join(f"{t}={n}" for t, n in result.rows.items())
    print(f"{state} {result.format}: {rows}", file=sys.stderr)


def _run_overrides(args) -> dict:
    """Run facts given on the command line, for inputs that do not carry them."""
    given = {fact: (flag, getattr(args, fact)) for fact, flag in _FACT_FLAGS.items()}
    top = 2**31 - 1  # the runs table's INTEGER columns, as the upload form checks them
    for flag, value in given.values():
        if value is not None and not 1 <= value <= top:
            raise CliError(f"{flag} must be an integer from 1 to {top}, got {value}")
    if args.framework is not None:
        from polytrace.store import vocabulary

        if args.framework not in vocabulary.frameworks():
            raise CliError(f"--framework: unknown {args.framework!r}; known: {', '.join(sorted(vocabulary.frameworks()))}")
    return {k: v for k, (_, v) in {**given, "framework": ("--framework", args.framework)}.items() if v is not None}



def _ingest_to_lake(args, options, overrides: dict) -> int:
    from polytrace import service

    if args.jobs is not None and args.jobs < 1:
        raise CliError(f"--jobs must be at least 1, got {args.jobs}")
    with service.fetched(args.paths, options) as (paths, names):
        result = service.ingest_into_lake(paths, args.lake, options=options, name=args.name, format=args.format,
                                          force=args.force, jobs=args.jobs, run_overrides=overrides,
                                          names=names)
    _report(result, "already in the lake" if result.existing else f"ingested into {args.lake}")
    print(result.run_id)
    return 0

