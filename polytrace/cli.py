"""The single `polytrace` command: ingest, query, serve, demo and the workload tools."""
from __future__ import annotations

import argparse
import json
import os
import sys
from contextlib import contextmanager
from pathlib import Path

from polytrace import default_db, store
from polytrace.ingest.run_facts import GIVEN_RUN_FACTS


class CliError(Exception):
    """A user-facing failure: printed as one line, exit status 2."""


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


def cmd_ingest(args) -> int:
    with _tokenizer(args.tokenizer):
        return _ingest(args)


@contextmanager
def _tokenizer(path: str | None):
    """--tokenizer for the ingest: the verl rollout dump reads it from POLYTRACE_TOKENIZER, which
    parse workers get from their caller like every POLYTRACE_* variable."""
    from polytrace.ingest.formats.verl_rollout_dump import TOKENIZER_VARIABLE

    if path is None:
        yield
        return
    if not Path(path).is_file():
        raise CliError(f"--tokenizer {path}: no such file (give a tokenizer.json)")
    before = os.environ.get(TOKENIZER_VARIABLE)
    os.environ[TOKENIZER_VARIABLE] = str(Path(path).resolve())
    try:
        yield
    finally:
        if before is None:
            del os.environ[TOKENIZER_VARIABLE]
        else:
            os.environ[TOKENIZER_VARIABLE] = before


def _ingest(args) -> int:
    from polytrace.ingest.load import ingest_paths

    if args.lake:
        return _ingest_to_lake(args)
    con = store.open(args.db)
    bar, update = _progress_bar()
    try:
        if bar:
            bar.start()
        result = ingest_paths(con, [Path(p) for p in args.paths], name=args.name,
                              format=args.format, force=args.force, progress=update,
                              run_overrides=_run_overrides(args))
        if not result.existing:
            _refresh_overview(con, result.run_ids)
    finally:
        if bar:
            bar.stop()
        con.close()
    _report(result, "already ingested" if result.existing else "ingested")
    print("\n".join(result.run_ids))
    return 0


def _refresh_overview(con, run_ids: list[str]) -> None:
    """These runs' lines in the runs overview, with their findings and stored answers."""
    from polytrace.queries import overview

    overview.refresh(con, run_ids)


def _report(result, state: str) -> None:
    """An ingest's warnings and row counts, on stderr: stdout carries only run ids."""
    for w in result.warnings:
        print(f"warning: {w}", file=sys.stderr)
    rows = ", ".join(f"{t}={n}" for t, n in result.rows.items())
    print(f"{state} {result.format}: {rows}", file=sys.stderr)


# The command-line flag of each given run fact (its argparse dest is the fact).
_FACT_FLAGS = {"max_response_len": "--max-response-len", "n_gpus": "--gpus"}


def _run_overrides(args) -> dict:
    """Run facts given on the command line, for inputs that do not carry them."""
    given = {fact: (flag, getattr(args, fact)) for fact, flag in _FACT_FLAGS.items()}
    top = 2**31 - 1  # the runs table's INTEGER columns, as the upload form checks them
    for flag, value in given.values():
        if value is not None and not 1 <= value <= top:
            raise CliError(f"{flag} must be an integer from 1 to {top}, got {value}")
    return {k: v for k, (_, v) in given.items() if v is not None}


def _ingest_to_lake(args) -> int:
    from polytrace.ingest.lake_ingest import ingest_to_lake

    if args.jobs is not None and args.jobs < 1:
        raise CliError(f"--jobs must be at least 1, got {args.jobs}")
    result = ingest_to_lake([Path(p) for p in args.paths], Path(args.lake), name=args.name,
                            format=args.format, force=args.force, jobs=args.jobs,
                            run_overrides=_run_overrides(args),
                            before_export=lambda con, run_id: _refresh_overview(con, [run_id]))
    _report(result, "already in the lake" if result.existing else f"ingested into {args.lake}")
    print(result.run_id)
    return 0


def parse_params(pairs: list[str]) -> dict[str, str]:
    params = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CliError(f"-p expects key=value, got {pair!r}")
        params[key] = value
    return params


def print_answer(answer, output: str) -> None:
    """A query Answer on stdout as a table, JSON records or CSV; a cut at the row cap on stderr."""
    from polytrace.queries import render

    if output == "json":
        print(json.dumps(render.records(answer)))
    elif output == "csv":
        sys.stdout.write(render.csv_text(answer))
    else:
        from rich.console import Console

        Console(width=max(100, 14 * len(answer.columns))).print(render.terminal_table(answer))
    if answer.truncated:
        print(f"truncated at {answer.table.num_rows:,} rows (raise POLYTRACE_ROW_CAP)", file=sys.stderr)


def print_result(columns: list[str], rows: list[tuple], output: str) -> None:
    """Rows that are not a catalog query's (simulate, synth) rendered like one."""
    import pyarrow as pa

    from polytrace.queries.runner import Answer

    table = pa.Table.from_pylist([dict(zip(columns, r)) for r in rows]) if rows else \
        pa.table({c: pa.array([], pa.null()) for c in columns})
    print_answer(Answer(table.select(columns), False), output)


def _limits():
    from polytrace import settings
    from polytrace.queries.runner import Limits

    s = settings.get()
    return Limits(timeout_ms=s.query_timeout_ms, row_cap=s.row_cap)


def cmd_query(args) -> int:
    from polytrace.queries.catalog import ParamError, bind, get_query, load_catalog
    from polytrace.queries.runner import run

    try:
        query = get_query(args.name)
    except KeyError:
        raise CliError(f"unknown query {args.name!r}; known: {', '.join(load_catalog())}") from None
    params = parse_params(args.param)
    try:
        bind(query, params)
    except ParamError as e:
        raise CliError(f"{e}; {query.name} takes {_signature(query)}") from None
    if args.engine == "spark":
        print_answer(run(_spark_engine(args), query, params, _limits()), args.output)
        return 0
    from polytrace.store.lake import open_lake

    con = open_lake(args.lake) if args.lake else store.open(args.db, "r")
    try:
        answer = run(con, query, params, _limits())
    finally:
        con.close()
    print_answer(answer, args.output)
    return 0


def _signature(query) -> str:
    """A query's parameters as `-p` takes them: name=TYPE, then its default or that it is required,
    and its least value if it has one."""
    return ", ".join(f"{p.name}={p.type} ({'required' if p.required else f'default {p.default}'}"
                     f"{'' if p.minimum is None else f', at least {p.minimum}'})"
                     for p in query.params) or "no parameters"


def _spark_engine(args):
    if not args.lake:
        raise CliError("--engine spark reads a Parquet lake: add --lake DIR "
                       "(write one with `polytrace export`)")
    try:
        from polytrace.queries import spark
    except ImportError:
        raise CliError("--engine spark needs the spark extra: pip install 'polytrace[spark]'") from None
    try:
        session = spark.session(args.spark_remote)
    except spark.SparkUnavailable as e:
        raise CliError(str(e)) from None
    spark.register_lake(session, args.lake)
    return spark.Spark(session)


def cmd_export(args) -> int:
    from polytrace.store.lake import export_runs
    
    con = store.open(args.db, "r")
    try:
        rows = export_runs(con, args.run_ids, Path(args.out))
    finally:
        con.close()
    counts = ", ".join(f"{t}={n}" for t, n in rows.items() if n)
    print(f"exported {len(args.run_ids)} run(s): {counts}", file=sys.stderr)
    print(args.out)
    return 0


def cmd_fidelity(args) -> int:
    from polytrace.queries.catalog import get_query
    from polytrace.queries.runner import run
    from polytrace.store.runs import exists

    con = store.open(args.db, "r")
    try:
        for run_id in (args.bench_run, args.formal_run):
            if not exists(con, run_id):
                raise CliError(f"no run {run_id!r} in {args.db}")
        answer = run(con, get_query("fidelity"), {
            "bench_run": args.bench_run, "formal_run": args.formal_run, "align": args.by}, _limits())
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


def cmd_serve(args) -> int:
    import uvicorn

    from polytrace import settings as polytrace_settings
    from polytrace.server.app import create_app

    overrides = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    settings = polytrace_settings.load(db=args.db, lake=getattr(args, "lake", None), **overrides)
    directories = _watched(args.watch or [])
    if directories and settings.lake:
        raise CliError("--watch appends to a database: drop --lake")
    listening = _listen(settings.host, settings.port)
    app = create_app(settings)
    warning = settings.exposure_warning()
    if warning:
        print(warning, file=sys.stderr)
    print(f"PolyTrace serving {settings.lake or settings.db} at http://{settings.host}:{settings.port}/", file=sys.stderr)
    watching = None
    if directories:
        from polytrace.server.watch import Watching

        watching = app.state.watching = Watching(app.state.db, app.state.overview_lines, directories,
                                                 settle_s=args.settle, poll_s=args.poll).start()
        for run_id, d in watching.runs.items():
            print(f"following {d} as run {run_id}", file=sys.stderr)
    try:
        uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[listening])
    finally:
        if watching:
            watching.stop()
    return 0


def _listen(host: str, port: int):
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


def _watched(paths: list[str]) -> list[Path]:
    for p in paths:
        if not Path(p).is_dir():
            raise CliError(f"--watch {p}: no such directory (give the folder a training job writes)")
    return [Path(p) for p in paths]


def cmd_watch(args) -> int:
    """Follow directories as a training job writes them: into --db, or pushed to --server."""
    import threading

    from polytrace import settings as polytrace_settings
    from polytrace.server import watch

    directories = _watched(args.directories)
    if args.server and not _http_url(args.server):
        raise CliError(f"--server {args.server!r}: expected the server's address as http://HOST:PORT")

    def say(text: str) -> None:
        print(f"watch: {text}", file=sys.stderr)

    lines = None
    if args.server:  # the server keeps the overview lines of what it is sent
        def sink_for(run_id, name, source):
            return watch.ServerSink(args.server, run_id, name, source, args.token or polytrace_settings.get().token)
        con = None
    else:
        con = store.open(args.db)
        lines = watch.OverviewLines(lambda fn, runs: fn(con))
        sink_for = watch.sinks_into(con, lines)
    try:
        followers = [watch.follower(d, sink_for, settle_s=args.settle, final=args.once, say=say)
                     for d in directories]
        for f, d in zip(followers, directories):
            print(f"following {d} as run {f.sink.run_id}", file=sys.stderr)
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


def cmd_demo(args) -> int:
    from polytrace.demo import DemoDbError, build, fresh_db_path, math_facts, write_traces

    if args.write:
        folders = write_traces(Path(args.write), seed=args.seed)
        facts = math_facts()
        print(f"wrote the demo's trace files (seed {args.seed}); ingest them with:", file=sys.stderr)
        print(f"polytrace ingest {folders['math']} --max-response-len {facts['max_response_len']} "
              f"--gpus {facts['n_gpus']}\npolytrace ingest {folders['agent']}")
        return 0
    try:
        db = fresh_db_path(args.db)
    except DemoDbError as e:
        raise CliError(str(e)) from None
    print(f"synthesizing demo runs (seed {args.seed}) into {db}", file=sys.stderr)
    run_ids = build(db, seed=args.seed)
    host = args.host or "127.0.0.1"
    port = args.port or 8000
    print(f"PolyTrace demo at http://{host}:{port}/ with its database at {db}: uploads there land in it")
    for run_id in run_ids:
        print(f"  http://{host}:{port}/runs/{run_id}")
    sys.stdout.flush()
    return cmd_serve(argparse.Namespace(db=str(db), host=host, port=port, watch=None))


def cmd_synth(args) -> int:
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


SIMULATE_COLUMNS = ["step", "policy", "engine", "n", "tokens", "max_len", "predicted_s", "idle_frac",
                    "speedup", "oracle"]
FORECAST_COLUMNS = ["step", "stage", "measured_s", "predicted_s"]


def _engine_count(value: str) -> tuple[str, float]:
    """--engines E (a count) or xK (K times the recorded engines)."""
    text = value.strip().lower()
    try:
        number = float(text[1:]) if text.startswith("x") else int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a count E or a multiple xK, got {value!r}") from None
    return ("x" if text.startswith("x") else "=", number)


def _multiple(engines: tuple[str, float]) -> float:
    if not engines[1] > 0:
        raise CliError(f"--engines x{engines[1]:g}: the multiple must be positive")
    return engines[1]


def _engines_for_samples(engines, con, run_id: str) -> int | None:
    """An absolute engine count for the per-sample simulation; xK scales the run's dp ranks. An
    engine beyond the largest step's samples would only sit idle (and cost the simulation its
    time and memory), so a count past them is refused."""
    if engines is None:
        return None
    if engines[0] == "=":
        count = int(engines[1])
        if count < 1:
            raise CliError(f"--engines must be at least 1, got {count}")
    else:
        recorded = con.execute("SELECT 1 + max(dp_rank) FROM samples WHERE run_id = ?", [run_id]).fetchone()[0]
        count = max(1, round(_multiple(engines) * (recorded or 1)))
    most = con.execute("SELECT max(n) FROM (SELECT count(*) AS n FROM samples WHERE run_id = ? GROUP BY step)",
                       [run_id]).fetchone()[0]
    if most is not None and count > most:
        given = f"{count:,} engines" if engines[0] == "=" else f"x{engines[1]:g} means {count:,} engines"
        raise CliError(f"--engines {given}, more than the {most:,} samples of the run's largest step: an "
                       "engine without a sample only sits idle")
    return count


def cmd_simulate(args) -> int:
    import dataclasses

    from polytrace.workload import costmodel, simulate, whatif

    if (args.iterations or args.requests) and not args.compare:
        raise CliError("--iterations and --requests need --compare ENGINES_JSONL")
    if args.validate and args.calibration != "log":
        raise CliError("--validate forward checks a model fitted to the run's own log: "
                       "it needs --calibration log")
    if args.calibration == "log":
        return _simulate_from_log(args)
    model = costmodel.load(Path(args.calibration))
    if args.engine_speed == "uniform":
        model = dataclasses.replace(model, speed={})
    policies = args.policy or list(whatif.DEFAULT_POLICIES)
    con = store.open(args.db)
    try:
        engines = _engines_for_samples(args.engines, con, args.run_id)
        rows = simulate.simulate(simulate.load_steps(con, args.run_id), model, policies, engines)
        if args.store:
            whatif.store(con, args.run_id, rows, args.calibration)
            _refresh_overview(con, [args.run_id])
    finally:
        con.close()
    if args.compare:
        return _print_comparison(rows, model, args)
    _print_simulation(rows, args.output)
    return 0


def _print_simulation(rows: list[dict], output: str) -> None:
    if output == "table":
        rows = [dict(r, policy=r["policy"] + (" (oracle)" if r["oracle"] else "")) for r in rows
                if r["engine"] is None]
    print_result(SIMULATE_COLUMNS, [tuple(r.get(c) for c in SIMULATE_COLUMNS) for r in rows], output)


def _simulate_from_log(args) -> int:
    """--calibration log: fit the gen time to the run's own steps, validate it forward, ask what if."""
    from polytrace.workload import genfit, simulate, whatif

    con = store.open(args.db)
    try:
        cal = genfit.calibrate(con, args.run_id)
        if cal.kind == "engine":
            engines = _engines_for_samples(args.engines, con, args.run_id)
            policies = args.policy or [*whatif.DEFAULT_POLICIES, _half_cap(con, args.run_id)]
            rows = simulate.simulate(simulate.load_steps(con, args.run_id), cal.cost_model, policies, engines)
        else:
            rows = _step_whatif(cal, args)
        if args.store:
            whatif.store(con, args.run_id, rows, "log", cal.forecast)
            _refresh_overview(con, [args.run_id])
    finally:
        con.close()
    if args.compare:
        return _print_comparison(rows, cal.cost_model, args)
    _report_log_fit(cal)
    if args.validate:
        print_result(FORECAST_COLUMNS, [tuple(r[c] for c in FORECAST_COLUMNS) for r in cal.forecast],
                     args.output)
    else:
        _print_simulation(rows, args.output)
    return 0


def _half_cap(con, run_id: str) -> str:
    """The default cap what-if of a per-sample run: half its cap (or half its longest response)."""
    cap = con.execute("SELECT coalesce((SELECT max_response_len FROM runs WHERE run_id = ?), "
                      "(SELECT max(response_len) FROM samples WHERE run_id = ?))", [run_id, run_id]).fetchone()[0]
    return f"cap:{max(1, int(cap or 2) // 2)}"


def _step_whatif(cal, args) -> list[dict]:
    """What-if rows of a per-step (verl log) fit: as-recorded, each cap:C, and the engines."""
    from polytrace.workload import genfit, simulate

    caps, unsupported = [], []
    for name in args.policy or ["as-recorded", f"cap:{max(1, int(cal.steps.span) // 2)}"]:
        if name.startswith("cap:"):
            caps.append(simulate.parse_cap(name))
        elif name != "as-recorded":
            unsupported.append(name)
    if unsupported:
        raise CliError(f"{', '.join(unsupported)}: dispatch policies need per-sample lengths with dp ranks, "
                       "and this run has step metrics only; with --calibration log it simulates "
                       "as-recorded, cap:C and --engines xK")
    engines = args.engines or ("x", 2.0)
    if engines[0] == "=":
        raise CliError("the log does not say how many rollout engines the run used: give --engines "
                       "as a multiple of them, e.g. --engines x2")
    return genfit.step_whatif(cal.steps, cal.step_model, caps, [(f"x{engines[1]:g}", _multiple(engines))])


def _report_log_fit(cal) -> None:
    """The fitted model, its forward accuracy and the naive baseline, on stderr."""
    print(f"model ({cal.kind}): {cal.describe}", file=sys.stderr)
    print(f"forward validation: MAPE {cal.forward_mape:.1f}% over {len(cal.forecast)} step(s), each "
          f"predicted from the steps before it; naive baseline (a line of gen on the longest response, "
          f"fitted on the first half): {cal.baseline_mape:.1f}%", file=sys.stderr)


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


def _follow_options(p, watch_flag: str | None = None) -> None:
    from polytrace.ingest.live import POLL_S, SETTLE_S

    if watch_flag:
        p.add_argument(watch_flag, action="append", metavar="DIR",
                       help="follow this directory as a training job writes it, as one run "
                       "(repeat for several)")
    p.add_argument("--settle", type=float, default=SETTLE_S, metavar="S",
                   help=f"a step file or trace unchanged this long is complete (default {SETTLE_S:g} s; "
                   "a later step's file completes it at once)")
    p.add_argument("--poll", type=float, default=POLL_S, metavar="S",
                   help=f"look for new bytes this often (default {POLL_S:g} s)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="polytrace", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def db_option(p):
        p.add_argument("--db", default=default_db(),
                       help="DuckDB file (default: $POLYTRACE_DB or ./polytrace.duckdb)")

    p = sub.add_parser("ingest", help="load trace files or directories as one run; prints the run_id "
                       "(a Parquet lake from `export` restores each of its runs)")
    p.add_argument("paths", nargs="+", metavar="PATH")
    db_option(p)
    p.add_argument("--name", help="run name (default: the file or directory name)")
    p.add_argument("--format", help="skip detection and parse as this format")
    p.add_argument("--force", action="store_true", help="ingest again even if the same content exists")
    for fact, flag in _FACT_FLAGS.items():
        p.add_argument(flag, dest=fact, type=int, metavar="N", help=GIVEN_RUN_FACTS[fact])
    p.add_argument("--lake", metavar="DIR", help="write the run into this Parquet lake instead of --db, "
                   "parsing the input files in parallel processes")
    p.add_argument("--jobs", type=int, metavar="N",
                   help="with --lake: parsing processes (default: one per CPU)")
    p.add_argument("--tokenizer", metavar="PATH", help="a local tokenizer.json: lengths of text-only "
                   "inputs (verl rollout dumps) in its tokens instead of characters; needs the "
                   "tokenizers package (pip install 'polytrace[tokenizers]')")
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("query", help="run a catalog query")
    p.add_argument("name", help="a catalog query, e.g. run_summary (an unknown name lists them all; "
                                "a parameter error lists the query's parameters)")
    db_option(p)
    p.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--output", choices=("table", "json", "csv"), default="table")
    p.add_argument("--lake", metavar="DIR", help="query this Parquet lake instead of --db")
    p.add_argument("--engine", choices=("duckdb", "spark"), default="duckdb",
                   help="spark: translate the query and run it on Spark over --lake (polytrace[spark])")
    p.add_argument("--spark-remote", metavar="sc://HOST:PORT",
                   help="a Spark Connect server (default: Spark in local mode)")
    p.set_defaults(func=cmd_query)

    p = sub.add_parser("export", help="write runs to a Hive-partitioned Parquet lake "
                       "(table=<name>/run_id=<id>/); `polytrace ingest DIR` reads it back")
    p.add_argument("run_ids", nargs="+", metavar="RUN_ID")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="lake directory; other runs already in it are kept")
    db_option(p)
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("fidelity", help="replay accuracy of a benchmark run against the run it replays")
    p.add_argument("bench_run", metavar="BENCH_RUN", help="run_id of the replay")
    p.add_argument("formal_run", metavar="FORMAL_RUN", help="run_id of the original run")
    db_option(p)
    p.add_argument("--by", choices=("index", "step"), default="index",
                   help="pair steps by position (as the PolyTrace suite does) or by step number")
    p.add_argument("--output", choices=("table", "json", "csv"), default="table")
    p.set_defaults(func=cmd_fidelity)

    p = sub.add_parser("serve", help="serve the dashboard and REST API")
    db_option(p)
    p.add_argument("--lake", metavar="DIR", help="serve this Parquet lake (read-only) instead of --db")
    p.add_argument("--host", help="address to bind (default: $POLYTRACE_HOST or 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default: $POLYTRACE_PORT or 8000)")
    _follow_options(p, "--watch")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("watch", help="follow a training run as it writes: each directory is one run "
                       "whose new steps are appended (into --db, or pushed to --server)")
    p.add_argument("directories", nargs="+", metavar="DIR")
    db_option(p)
    p.add_argument("--server", metavar="URL", help="push to this PolyTrace server "
                   "(POST /api/runs/{id}/append) instead of writing --db")
    p.add_argument("--token", help="the server's bearer token (default: $POLYTRACE_TOKEN)")
    p.add_argument("--once", action="store_true", help="load what there is, taking every file as "
                   "complete (the job is over), and stop")
    _follow_options(p)
    p.set_defaults(func=cmd_watch)

    p = sub.add_parser("findings", help="what a run's numbers say: one sentence each, most severe first")
    p.add_argument("run_id", metavar="RUN_ID")
    db_option(p)
    p.add_argument("--output", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_findings)

    p = sub.add_parser("migrate", help="bring a database written by an older PolyTrace up to date "
                       "(schema and per-step aggregates)")
    db_option(p)
    p.set_defaults(func=cmd_migrate)

    p = sub.add_parser("demo", help="synthesize realistic runs into a fresh database and serve them")
    p.add_argument("--db", help="database file to create (default: a new temp file; "
                   "an existing file is replaced only if it holds nothing but demo runs)")
    p.add_argument("--host", help="address to bind (default: 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default: 8000)")
    p.add_argument("--seed", type=int, default=0, help="synthesis seed (default: 0)")
    p.add_argument("--write", metavar="DIR", help="only write the demo's trace files into DIR "
                   "(math/ and agent/) and print how to ingest them; serve nothing")
    p.set_defaults(func=cmd_demo)

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
    p.add_argument("--output", choices=("table", "json", "csv"), default="table",
                   help="format of the --from fit report")
    p.set_defaults(func=cmd_synth)

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
    p.add_argument("--output", choices=("table", "json", "csv"), default="table")
    p.set_defaults(func=cmd_simulate)
    return parser


def cmd_findings(args) -> int:
    from polytrace.queries.findings import findings
    from polytrace.store.runs import exists

    con = store.open(args.db, "r")
    try:
        if not exists(con, args.run_id):
            raise CliError(f"no run {args.run_id!r} in {args.db}")
        found = findings(con, args.run_id, _limits())
    finally:
        con.close()
    if args.output == "json":
        print(json.dumps(found))
    elif not found:
        print(f"nothing to report on run {args.run_id}", file=sys.stderr)
    for f in found if args.output == "text" else []:
        print(f"{f['severity'].upper():8} {f['kind']}: {f['text']}\n{'':9}evidence: {f['evidence']}")
    return 0


def cmd_migrate(args) -> int:
    from polytrace.queries import overview
    from polytrace.store.migrate import SCHEMA_VERSION

    if not Path(args.db).is_file():  # the writer would create an empty database there
        raise CliError(f"no database at {args.db}")
    con = store.open(args.db, "w")  # the writer brings the schema and aggregates up to date
    try:
        stale = overview.stale(con)
        overview.refresh(con, stale)
        runs = con.execute("SELECT count(*) FROM runs").fetchall()[0][0]
    finally:
        con.close()
    again = f"{len(stale)} of {runs} runs summed up again" if stale else f"all {runs} runs summed up already"
    print(f"{args.db} is current (schema {SCHEMA_VERSION}): {again}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
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
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader (e.g. `| head`) went away; stop quietly like other Unix tools.
        sys.stdout = open(os.devnull, "w")
        return 0
