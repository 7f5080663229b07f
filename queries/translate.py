"""DuckDB catalog SQL -> Spark SQL: sqlglot's transpiler plus the project's own rewrite rules.

sqlglot gets most of the way; each rule below fixes one place where its Spark output is
rejected by Spark or, worse, runs and gives other numbers than DuckDB. Every rule has a
test in tests/test_spark.py, and `unsupported()` is the catalog lint for what no rule covers.
"""
from __future__ import annotations

from collections.abc import Callable

import sqlglot
from sqlglot import exp

Rule = Callable[[exp.Expression], exp.Expression]

# Functions sqlglot passes through by name that exist on Spark with DuckDB's meaning
# (checked by the differential tests). Any other unknown function is reported by unsupported().
# printf: Spark's is Java's String.format, which reads the catalog's %d (integers), %s, %,d,
# %.Nf and %% as DuckDB does; the findings' sentences use no other specifier.
SPARK_SAFE_FUNCTIONS = {"ISNAN", "PERCENTILE", "PERCENTILE_DISC", "RAISE_ERROR", "UNIX_MICROS", "GET",
                        "MONOTONICALLY_INCREASING_ID", "PRINTF"}


def _fn(name: str, *args: exp.Expression) -> exp.Anonymous:
    return exp.Anonymous(this=name, expressions=list(args))


def _ordered_aggregate(node: exp.Expression, kind: type) -> tuple[exp.Order, exp.Expression | None] | None:
    """(ORDER BY, FILTER condition) of `kind(x ORDER BY ...) [FILTER (WHERE ...)]`, else None."""
    agg, where = (node.this, node.expression) if isinstance(node, exp.Filter) else (node, None)
    if not isinstance(agg, kind) or not isinstance(agg.this, exp.Order):
        return None
    if where is None and isinstance(node.parent, exp.Filter):
        return None  # rewritten with its FILTER
    return agg.this, where


def _ordered_by(order: exp.Order, where: exp.Expression | None) -> exp.Expression:
    """Spark's `ORDER BY` cannot sit inside an aggregate: collect (key..., value) structs
    (under the same FILTER) and sort them with a comparator that follows each key's direction
    and NULLS placement."""
    keys = order.expressions
    fields = [exp.PropertyEQ(this=exp.to_identifier(f"k{i}"), expression=k.this)
              for i, k in enumerate(keys)]
    fields.append(exp.PropertyEQ(this=exp.to_identifier("v"), expression=order.this))
    collected: exp.Expression = exp.ArrayAgg(this=exp.Struct(expressions=fields))
    if where is not None:
        collected = exp.Filter(this=collected, expression=where)
    compare: exp.Expression = exp.Literal.number(0)
    for i, key in reversed(list(enumerate(keys))):
        left, right = exp.column(f"k{i}", "l"), exp.column(f"k{i}", "r")
        lower, higher = ("1", "-1") if key.args.get("desc") else ("-1", "1")
        null_side = "-1" if key.args.get("nulls_first") else "1"
        other_side = "1" if null_side == "-1" else "-1"
        compare = exp.Case(ifs=[
            exp.If(this=exp.and_(left.is_(exp.null()), right.is_(exp.null())), true=exp.Literal.number(0)),
            exp.If(this=left.is_(exp.null()), true=exp.Literal.number(null_side)),
            exp.If(this=right.is_(exp.null()), true=exp.Literal.number(other_side)),
            exp.If(this=exp.LT(this=left, expression=right), true=exp.Literal.number(lower)),
            exp.If(this=exp.GT(this=left, expression=right), true=exp.Literal.number(higher)),
        ], default=compare)
    comparator = exp.Lambda(this=compare, expressions=[exp.to_identifier("l"), exp.to_identifier("r")])
    ordered = exp.ArraySort(this=collected, expression=comparator)
    pick = exp.Lambda(this=exp.column("v", "s"), expressions=[exp.to_identifier("s")])
    return exp.Transform(this=ordered, expression=pick)


def exact_percentile(node: exp.Expression) -> exp.Expression:
    """quantile_cont(x, q) / median(x): sqlglot writes PERCENTILE_CONT(x, q), which Spark rejects;
    Spark's exact interpolating aggregate is PERCENTILE(x, q) (never percentile_approx)."""
    if isinstance(node, exp.PercentileCont) and not isinstance(node.parent, exp.WithinGroup):
        return _fn("PERCENTILE", node.this, node.expression)
    if isinstance(node, exp.Median):
        return _fn("PERCENTILE", node.this, exp.Literal.number(0.5))
    return node


def within_group_percentile(node: exp.Expression) -> exp.Expression:
    """percentile_cont(q) WITHIN GROUP (ORDER BY x) silently becomes PERCENTILE_APPROX;
    keep it exact. DESC is left to unsupported()."""
    if not isinstance(node, exp.WithinGroup) or len(node.expression.expressions) != 1:
        return node
    key = node.expression.expressions[0]
    if key.args.get("desc"):
        return node
    if isinstance(node.this, exp.PercentileCont):
        return _fn("PERCENTILE", key.this, node.this.this)
    if isinstance(node.this, exp.PercentileDisc):
        return exp.WithinGroup(this=_fn("PERCENTILE_DISC", node.this.this), expression=node.expression)
    return node


def discrete_quantile(node: exp.Expression) -> exp.Expression:
    """DuckDB's quantile(x, q) and quantile_disc(x, q) return an element of the group; sqlglot
    turns the first into Spark's interpolating PERCENTILE. Spark's discrete aggregate is
    PERCENTILE_DISC(q) WITHIN GROUP (ORDER BY x)."""
    if isinstance(node, exp.Quantile):
        x, q = node.this, node.args["quantile"]
    elif isinstance(node, exp.PercentileDisc) and not isinstance(node.parent, exp.WithinGroup):
        x, q = node.this, node.expression
    else:
        return node
    if isinstance(q, exp.Array):
        return node  # a list of quantiles: left to unsupported()
    order = exp.Order(expressions=[exp.Ordered(this=x, nulls_first=False)])
    return exp.WithinGroup(this=_fn("PERCENTILE_DISC", q), expression=order)


def ordered_list(node: exp.Expression) -> exp.Expression:
    """list(x ORDER BY y) / array_agg(x ORDER BY y) loses its order as COLLECT_LIST(x)."""
    found = _ordered_aggregate(node, exp.ArrayAgg)
    return _ordered_by(*found) if found else node


def ordered_first(node: exp.Expression) -> exp.Expression:
    """first(x ORDER BY y) has no Spark spelling: the first element of the sorted list
    (NULL when the group, or its FILTER, is empty)."""
    found = _ordered_aggregate(node, exp.First)
    return _fn("GET", _ordered_by(*found), exp.Literal.number(0)) if found else node


def epoch_us(node: exp.Expression) -> exp.Expression:
    """epoch_us(ts) does not exist on Spark; unix_micros(ts) is the same number."""
    if isinstance(node, exp.Anonymous) and node.name.lower() == "epoch_us":
        return _fn("UNIX_MICROS", *node.expressions)
    return node


def hugeint(node: exp.Expression) -> exp.Expression:
    """::HUGEINT becomes INT128, which Spark rejects; DECIMAL(38, 0) holds the same integers."""
    if isinstance(node, exp.DataType) and node.this in (exp.DataType.Type.INT128,
                                                        exp.DataType.Type.UINT128):
        return exp.DataType.build("DECIMAL(38, 0)")
    return node


def raise_error(node: exp.Expression) -> exp.Expression:
    """DuckDB's error(msg) is Spark's raise_error(msg)."""
    if isinstance(node, exp.Anonymous) and node.name.lower() == "error":
        return _fn("RAISE_ERROR", *node.expressions)
    return node


def ordered_row_number(node: exp.Expression) -> exp.Expression:
    """row_number() OVER () numbers rows in no particular order; Spark insists on an ORDER BY."""
    if (isinstance(node, exp.Window) and isinstance(node.this, exp.RowNumber)
            and not node.args.get("order") and not node.args.get("partition_by")):
        order = exp.Order(expressions=[exp.Ordered(this=_fn("MONOTONICALLY_INCREASING_ID"))])
        return exp.Window(this=node.this, order=order)
    return node


def cast_inside_unnest(node: exp.Expression) -> exp.Expression:
    """unnest(list)::T: Spark refuses a generator nested in an expression, so cast the list
    to ARRAY<T> and explode that."""
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Explode):
        array_type = exp.DataType(this=exp.DataType.Type.ARRAY, expressions=[node.to], nested=True)
        return exp.Explode(this=exp.Cast(this=node.this.this, to=array_type))
    return node


def nan_correlation(node: exp.Expression) -> exp.Expression:
    """corr(x, y) over pairs where x or y does not vary: DuckDB answers NaN, Spark NULL.
    Keep DuckDB's NaN whenever the group has a pair (Spark's NULL then means no variance)."""
    agg, where = (node.this, node.expression) if isinstance(node, exp.Filter) else (node, None)
    if not isinstance(agg, exp.Corr) or (where is None and isinstance(node.parent, exp.Filter)):
        return node
    both = exp.and_(agg.this.copy().is_(exp.null()).not_(), agg.expression.copy().is_(exp.null()).not_())
    pairs: exp.Expression = exp.Count(this=exp.Case(ifs=[exp.If(this=both, true=exp.Literal.number(1))]))
    if where is not None:
        pairs = exp.Filter(this=pairs, expression=where.copy())
    nan = exp.Cast(this=exp.Literal.string("NaN"), to=exp.DataType.build("DOUBLE"))
    guard = exp.Case(ifs=[exp.If(this=exp.GT(this=pairs, expression=exp.Literal.number(0)), true=nan)])
    return exp.Coalesce(this=node.copy(), expressions=[guard])


RULES: list[Rule] = [exact_percentile, within_group_percentile, discrete_quantile, ordered_list,
                     ordered_first, epoch_us, hugeint, raise_error, ordered_row_number,
                     cast_inside_unnest, nan_correlation]


def parse(sql: str) -> exp.Expression:
    return sqlglot.parse_one(sql, read="duckdb")


def rewrite(tree: exp.Expression) -> exp.Expression:
    for rule in RULES:
        tree = tree.transform(rule)
    return tree


def to_spark(sql: str) -> str:
    """The Spark SQL text of a DuckDB catalog query; `$name` parameters become `:name` markers."""
    return rewrite(parse(sql)).sql(dialect="spark", pretty=True,
                                   unsupported_level=sqlglot.ErrorLevel.RAISE)


def view_body(create_view_sql: str) -> str:
    """The SELECT of a `CREATE VIEW name AS SELECT ...` statement."""
    return parse(create_view_sql).expression.sql(dialect="duckdb")


def unsupported(sql: str) -> list[str]:
    """Constructs of a DuckDB query that neither sqlglot nor a rule translates faithfully."""
    problems = []
    tree = parse(sql)
    for node in tree.walk():
        if isinstance(node, exp.ApproxQuantile):
            problems.append("approx_quantile: approximate, no exact Spark counterpart")
        elif isinstance(node, exp.WithinGroup) and any(
                k.args.get("desc") for k in node.expression.expressions):
            problems.append("percentile ... WITHIN GROUP (ORDER BY ... DESC)")
        elif isinstance(node, (exp.Quantile, exp.PercentileDisc)) and isinstance(
                node.args.get("quantile") or node.expression, exp.Array):
            problems.append("discrete quantile of a list of fractions")
        elif isinstance(node, exp.Order) and isinstance(node.parent, exp.AggFunc) and not isinstance(
                node.parent, (exp.ArrayAgg, exp.First)):
            problems.append(f"ORDER BY inside {node.parent.sql_name()}()")
        elif isinstance(node, exp.UnixToTime):
            problems.append("epoch_ms/epoch_s: DuckDB's meaning depends on the argument type")
    rewritten = rewrite(tree)
    for node in rewritten.walk():
        if isinstance(node, exp.Anonymous) and node.name.upper() not in SPARK_SAFE_FUNCTIONS:
            problems.append(f"function {node.name}() is not known to mean the same on Spark")
    try:
        rewritten.sql(dialect="spark", unsupported_level=sqlglot.ErrorLevel.RAISE)
    except sqlglot.errors.UnsupportedError as e:
        problems.append(f"sqlglot: {e}")
    return problems
