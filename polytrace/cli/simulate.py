"""`polytrace simulate`: rollout time per engine and step under dispatch policies, as the one
simulation policy (workload/whatif.py) plans it; the database is opened read-only unless --store."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from polytrace.cli.errors import CliError
from polytrace.cli.output import CLI_FORMATS, print_result

SIMULATE_COLUMNS = ["step", "policy", "engine", "n", "tokens", "max_len", "predicted_s", "idle_frac",
                    "speedup", "oracle"]
# the units of the columns whose names do not end in one (output.UNIT_SUFFIXES)
SIMULATE_UNITS = {"n": "samples", "tokens": "tokens", "max_len": "tokens", "speedup": "×"}


FORECAST_COLUMNS = ["step", "stage", "measured_s", "predicted_s"]



def register(sub, db_option) -> None:
    p = sub.add_parser("simulate", help="predict rollout time per engine and step under dispatch policies")
    p.add_argument("run_id", metavar="RUN_ID")
    db_option(p)
    p.add_argument("--calibration", required=True, metavar="FILE|log",
                   help="calib.json (grid), iters.jsonl[.gz] (per-iteration measurements), or log: "
                        "fit the gen time to the run's own steps (verl timing_s/gen and lengths, or "
                        "rank_stage gen per engine), validated forward")
    p.add_argument("--policy", action="append", metavar="P",
                   help="as-recorded, round-robin, length-balanced (oracle), predicted-balanced, "
                        "partial-rollout:q, cap:C (repeatable; default: all but cap, q=0.9; with "
                        "--calibration log also cap:C at half the run's cap)")
    p.add_argument("--engines", type=_engine_count, metavar="E|xK",
                   help="rollout engines: a count, or a multiple of the recorded ones (default: the "
                        "run's dp ranks; with a per-step log fit: the what-if x2)")
    p.add_argument("--validate", choices=("forward",),
                   help="with --calibration log: print each validated step's measured and predicted "
                        "gen time instead of the what-if rows")
    p.add_argument("--engine-speed", choices=("uniform", "measured"), default="uniform",
                   help="measured: apply each engine's speed from an iters calibration")
    p.add_argument("--compare", metavar="ENGINES_JSONL", help="error against measured engine times")
    p.add_argument("--iterations", metavar="ITERS_JSONL",
                   help="with --compare: split each measured time into prefill, decode iterations near "
                        "the model, slow iterations and time outside iterations (a replay's iters.jsonl)")
    p.add_argument("--requests", metavar="REQUESTS_JSONL",
                   help="with --compare: error of each sample's predicted finish time against the "
                        "measured one, per engine (a replay's requests.jsonl)")
    p.add_argument("--store", action="store_true", help="save results in the whatif table (and, with "
                   "--calibration log, the forward validation in gen_forecast)")
    p.add_argument("--output", choices=CLI_FORMATS, default="table")
    p.set_defaults(func=run)


def run(args) -> int:
    from polytrace import service, store
    from polytrace.workload import whatif

    if (args.iterations or args.requests) and not args.compare:
        raise CliError("--iterations and --requests need --compare ENGINES_JSONL")
    if args.validate and args.calibration != "log":
        raise CliError("--validate forward checks a model fitted to the run's own log: "
                       "it needs --calibration log")
    plan = {"calibration": args.calibration, "policies": args.policy, "engines": args.engines,
            "engine_speed": args.engine_speed}
    if args.calibration != "log":  # a bad calibration file is said before the database is opened
        from polytrace.workload import costmodel

        plan["model"] = costmodel.load(Path(args.calibration))
    con = store.open(args.db, "w" if args.store else "r")  # only --store writes
    try:
        done = service.simulate_run(con, args.run_id, **plan) if args.store else \
            whatif.simulation(con, args.run_id, **plan)
    finally:
        con.close()
    if args.compare:
        return _print_comparison(done.rows, done.model, args)
    if args.calibration != "log":
        _print_simulation(done.rows, args.output)
        return 0
    _report_log_fit(done.log_fit)
    _report_overlap(done.overlap)
    if args.validate:
        print_result(FORECAST_COLUMNS, [tuple(r[c] for c in FORECAST_COLUMNS) for r in done.log_fit.forecast],
                     args.output)
    else:
        _print_simulation(done.rows, args.output)
    return 0


def _engine_count(value: str) -> tuple[str, float]:
    """--engines E (a count) or xK (K times the recorded engines)."""
    text = value.strip().lower()
    try:
        number = float(text[1:]) if text.startswith("x") else int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a count E or a multiple xK, got {value!r}") from None
    return ("x" if text.startswith("x") else "=", number)


def _print_simulation(rows: list[dict], output: str) -> None:
    if output == "table":
        rows = [dict(r, policy=r["policy"] + (" (oracle)" if r["oracle"] else "")) for r in rows
                if r["engine"] is None]
    print_result(SIMULATE_COLUMNS, [tuple(r.get(c) for c in SIMULATE_COLUMNS) for r in rows], output,
                 SIMULATE_UNITS)


def _report_log_fit(cal) -> None:
    """The fitted model, its forward accuracy and the naive baseline, on stderr."""
    print(f"model ({cal.kind}): {cal.describe}", file=sys.stderr)
    print(f"forward validation: MAPE {cal.forward_mape:.1f}% over {len(cal.forecast)} step(s), each "
          f"predicted from the steps before it; naive baseline (a line of gen on the longest response, "
          f"fitted on the first half): {cal.baseline_mape:.1f}%", file=sys.stderr)


def _report_overlap(rows: list[dict] | None) -> None:
    """The async what-if (workload/overlap.py) in a line per mode, on stderr: an estimate."""
    from polytrace.workload import overlap

    for mode, _ in overlap.MODES if rows else ():
        mine = [r for r in rows if r["mode"] == mode]
        split = (f"{mine[0]['rollout_gpus']} of {mine[0]['gpus']} GPUs" if mine[0]["gpus"]
                 else f"{100 * mine[0]['rollout_share']:.0f}% of the GPUs")
        change = 1 - sum(r["predicted_s"] for r in mine) / sum(r["predicted_sync_s"] for r in mine)
        print(f"async what-if (an estimate), {mode} with {split} generating: "
              f"{100 * abs(change):.1f}% {'less' if change >= 0 else 'more'} step time than the model's "
              f"synchronous steps", file=sys.stderr)


def _print_comparison(rows: list[dict], model, args) -> int:
    from polytrace.workload import replay, whatif

    engines = replay.read_engines(Path(args.compare))
    table, accuracy = whatif.compare(rows, {key: e["total_s"] for key, e in engines.items()})
    columns = ["step", "engine", "measured_s", "predicted_s", "error_pct", "measured_idle_frac",
               "predicted_idle_frac", "idle_error_pp"]
    if args.iterations:
        parts = replay.explain(engines, replay.read_iterations(Path(args.iterations)), model)
        undisturbed, steady = whatif.compare(rows, {key: p["undisturbed_s"] for key, p in parts.items()})
        for row, calm in zip(table, undisturbed):
            row.update(parts.get((row["step"], row["engine"]), {}), undisturbed_s=calm["measured_s"],
                       undisturbed_error_pct=calm["error_pct"],
                       undisturbed_idle_frac=calm.get("measured_idle_frac"),
                       undisturbed_idle_error_pp=calm.get("idle_error_pp"))
        columns += [*replay.EXPLAIN_COLUMNS[:-1], "undisturbed_s", "undisturbed_error_pct",
                    "undisturbed_idle_frac", "undisturbed_idle_error_pp"]
    if args.requests:
        errors = replay.finish_errors(replay.read_requests(Path(args.requests)), model)
        for row in table:
            row.update(errors.get((row["step"], row["engine"]), {}))
        columns += list(replay.FINISH_COLUMNS)
    print_result(columns, [tuple(r.get(c) for c in columns) for r in table], args.output)
    print(f"accuracy: {accuracy:.1f}% (100 - mean |error %| over engines)", file=sys.stderr)
    if args.iterations:
        print(f"accuracy against the undisturbed time: {steady:.1f}% (measured, less time outside "
              f"decode iterations and the excess of iterations over {replay.SLOW:g}x the model)",
              file=sys.stderr)
    return 0

