"""`polytrace synth`: a workload from published parameters or an ingested run."""
from __future__ import annotations

import sys
from pathlib import Path

from polytrace.cli.errors import CliError
from polytrace.cli.output import CLI_FORMATS, print_result


def register(sub, db_option) -> None:
    p = sub.add_parser("synth", help="synthesize a workload from published parameters or an ingested run")
    p.add_argument("--params", help="enhanced_task_distribution_parameters.json")
    p.add_argument("--task", choices=("math", "tool_use"))
    p.add_argument("--from", dest="source_run", metavar="RUN_ID", help="fit to this ingested run instead")
    db_option(p)
    p.add_argument("--out", required=True, metavar="DIR", help="directory for the step files")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--prompts", type=int, default=64, help="prompt groups per step")
    p.add_argument("--n", type=int, default=8, help="samples per prompt")
    p.add_argument("--max-response-len", type=int, default=16384, help="response cap (tokens)")
    p.add_argument("--seed", type=int, default=0, help="same seed, byte-identical files")
    p.add_argument("--output", choices=CLI_FORMATS, default="table",
                   help="format of the --from fit report")
    p.set_defaults(func=run)


def run(args) -> int:
    from polytrace import store
    from polytrace.workload import published, synth

    out = Path(args.out)
    if args.source_run:
        con = store.open(args.db, "r")
        try:
            report = synth.write_from_run(con, args.source_run, out, args.seed)
        finally:
            con.close()
        print_result(list(report[0]), [tuple(r.values()) for r in report], args.output)
        return 0
    if not args.params or not args.task:
        raise CliError("synth needs --params FILE --task math|tool_use, or --from RUN_ID")
    math, tool_use = published.read_params(Path(args.params))
    if args.task == "math":
        paths = synth.write_math_steps(math, out, args.steps, args.prompts, args.n,
                                       args.max_response_len, args.seed)
    else:
        paths = synth.write_tool_use_steps(tool_use, out, args.steps, args.prompts, args.n,
                                           args.max_response_len, args.seed)
    print(f"wrote {len(paths)} step files to {out}", file=sys.stderr)
    return 0

