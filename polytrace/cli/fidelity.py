"""`polytrace fidelity`: replay accuracy of a benchmark run against the run it replays."""
from __future__ import annotations

import sys

from polytrace.cli.errors import CliError
from polytrace.cli.output import CLI_FORMATS, limits, print_answer


def register(sub, db_option) -> None:
    p = sub.add_parser("fidelity", help="replay accuracy of a benchmark run against the run it replays")
    p.add_argument("bench_run", metavar="BENCH_RUN", help="run_id of the replay")
    p.add_argument("formal_run", metavar="FORMAL_RUN", help="run_id of the original run")
    db_option(p)
    p.add_argument("--by", choices=("index", "step"), default="index",
                   help="pair steps by position (as the PolyTrace suite does) or by step number")
    p.add_argument("--output", choices=CLI_FORMATS, default="table")
    p.set_defaults(func=run)


def run(args) -> int:
    from polytrace import store
    from polytrace.queries.catalog import get_query
    from polytrace.queries.runner import run
    from polytrace.store.runs import exists

    con = store.open(args.db, "r")
    try:
        for run_id in (args.bench_run, args.formal_run):
            if not exists(con, run_id):
                raise CliError(f"no run {run_id!r} in {args.db}")
        answer = run(con, get_query("fidelity"), {
            "bench_run": args.bench_run, "formal_run": args.formal_run, "align": args.by}, limits())
    finally:
        con.close()
    if not answer.rows:
        raise CliError(f"runs {args.bench_run} and {args.formal_run} share no step with stage "
                       f"timings (aligned by {args.by})")
    print_answer(answer, args.output)
    accuracy = answer.rows[0][answer.columns.index("accuracy")]
    steps = len({r[answer.columns.index("bench_step")] for r in answer.rows})
    shown = "n/a" if accuracy is None else f"{accuracy:.2f}%"
    print(f"accuracy {shown} over {steps} step(s), {len(answer.rows)} stage pair(s), "
          f"aligned by {args.by}", file=sys.stderr)
    return 0

