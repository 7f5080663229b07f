"""`polytrace query`: a catalog query on a database, a lake, or Spark over a lake."""
from __future__ import annotations

from polytrace.cli.errors import CliError
from polytrace.cli.output import CLI_FORMATS, limits, print_answer


def register(sub, db_option) -> None:
    p = sub.add_parser("query", help="run a catalog query")
    p.add_argument("name", help="a catalog query, e.g. run_summary (an unknown name lists them all; "
                                "a parameter error lists the query's parameters)")
    db_option(p)
    p.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--output", choices=CLI_FORMATS, default="table")
    p.add_argument("--lake", metavar="DIR", help="query this Parquet lake (a folder or s3://bucket/prefix) instead of --db")
    p.add_argument("--engine", choices=("duckdb", "spark"), default="duckdb",
                   help="spark: translate the query and run it on Spark over --lake (polytrace[spark])")
    p.add_argument("--spark-remote", metavar="sc://HOST:PORT",
                   help="a Spark Connect server (default: Spark in local mode)")
    p.set_defaults(func=run)


def run(args) -> int:
    from polytrace import store

    params = parse_params(args.param)
    # A query that asks for nothing but a run of the database may have its answer kept by the
    # run's last write: found by name, it serves without a parse of the catalog.
    con = store.open(args.db, "r") if not args.lake and args.engine == "duckdb" and set(params) == {"run_id"} \
        else None
    try:
        answer = _kept(con, args.name, params["run_id"]) if con is not None else None
        if answer is None:
            query = _query(args.name, params)
            con = con or _target(args)
            answer = _run(con, query, params)
    finally:
        if hasattr(con, "close"):  # a DuckDB connection; Spark's session outlives the command
            con.close()
    print_answer(answer, args.output)
    return 0


def _kept(con, name: str, run_id: str):
    from polytrace.queries.answers import read_printable

    return read_printable(con, run_id, name, limits().row_cap)


def _query(name: str, params: dict[str, str]):
    """The catalog query `name`, its parameters checked."""
    from polytrace.queries.catalog import ParamError, bind, get_query, load_catalog

    try:
        query = get_query(name)
    except KeyError:
        raise CliError(f"unknown query {name!r}; known: {', '.join(load_catalog())}") from None
    try:
        bind(query, params)
    except ParamError as e:
        raise CliError(f"{e}; {query.name} takes {_signature(query)}") from None
    return query


def _run(target, query, params: dict[str, str]):
    from polytrace.queries.runner import run

    return run(target, query, params, limits())


def _target(args):
    """What --lake and --engine name: Spark over a lake, DuckDB over a lake, or the database."""
    if args.engine == "spark":
        return _spark_engine(args)
    from polytrace import store
    from polytrace.store.lake import open_lake

    return open_lake(args.lake) if args.lake else store.open(args.db, "r")


def parse_params(pairs: list[str]) -> dict[str, str]:
    params = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CliError(f"-p expects key=value, got {pair!r}")
        params[key] = value
    return params


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
    from polytrace.store.lake import is_object_store

    if is_object_store(args.lake):
        raise CliError("--engine spark reads a lake in object storage through Hadoop's s3a connector "
                       "(hadoop-aws), which pyspark does not bundle: query it with --engine duckdb")
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

