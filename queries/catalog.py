"""Reads queries/*.sql and their header contracts, inlines the shared views, lints; binds parameters."""
from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from polytrace import settings
from polytrace.store.aggregates import names as aggregate_names
from polytrace.store.migrate import schema_sql

# The catalog page, the run page and the compare page show sections in this order. Runs and
# Findings are what the run page says above its charts; Fidelity queries compare two runs.
SECTIONS = ("Runs", "Findings", "Budget", "Training health", "Lengths", "Rollout tail", "Imbalance", "Stages",
            "Multi-turn", "GPU", "What if", "Fidelity", "Other")
# The columns of every Findings-section query (queries/findings.py reads them as one list).
FINDING_COLUMNS = (("kind", "VARCHAR"), ("severity", "VARCHAR"), ("value", "DOUBLE"), ("unit", "VARCHAR"),
                   ("steps", "INTEGER[]"), ("stage", "VARCHAR"), ("text", "VARCHAR"),
                   ("evidence", "VARCHAR"))
CHART_KINDS = ("line", "band", "bar", "stacked", "heatmap", "hist", "timeline", "table")
CHART_KEYS = {"kind", "x", "y", "z", "color", "group", "shade", "xlabel", "ylabel", "title", "caveat"}
# How a number reads (headlines, chart axes and hover): pct is a 0-1 share, pct100 is already
# 0-100, x a ratio, s/ms/us durations, gpu_h GPU-hours; tokens and count are plain numbers.
FMT_KINDS = ("pct", "pct100", "x", "s", "ms", "us", "tokens", "bytes", "count", "gpu_h")
NUMERIC_TYPES = {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
                 "UINTEGER", "UBIGINT", "FLOAT", "REAL", "DOUBLE", "DECIMAL"}
PARAM_TYPES = ("VARCHAR", "INTEGER", "BIGINT", "DOUBLE", "BOOLEAN")
LIST_KEYS = {"y", "hover", "shade"}
PARAM_USE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
# A table reference: what follows FROM or JOIN, then each comma-separated item of a FROM list.
_FROM_ITEM = re.compile(r"\b(?:FROM|JOIN)\s+(\w+)", re.IGNORECASE)
_NEXT_ITEM = re.compile(r"\s*(?:AS\s+)?(?:(?!(?:WHERE|GROUP|ORDER|HAVING|LIMIT|WINDOW|QUALIFY|UNION|EXCEPT|"
                        r"INTERSECT|ON|USING|JOIN|LEFT|RIGHT|INNER|FULL|CROSS|NATURAL|POSITIONAL|ASOF|"
                        r"SEMI|ANTI|PIVOT|UNPIVOT)\b)\w+\s*)?,\s*(\w+)", re.IGNORECASE)
_CTE_NAME = re.compile(r"(?:\bWITH(?:\s+RECURSIVE)?|,)\s*(\w+)\s*(?:\([^()]*\)\s*)?AS\s*"
                       r"(?:NOT\s+)?(?:MATERIALIZED\s+)?\(", re.IGNORECASE)
_DIRECTIVE = re.compile(r"^(name|title|section|view|stored):")


class CatalogError(Exception):
    """A catalog file that breaks the header contract; one line naming the file."""


class ParamError(ValueError):
    """A missing or malformed query parameter; the message names the parameter."""


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    default: str | None
    description: str
    minimum: int | None = None  # an integer parameter's least value (`>= N`), e.g. a GPU count's 1

    @property
    def required(self) -> bool:
        return self.default is None


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    description: str
    fmt: str | None = None  # one of FMT_KINDS: how the number reads

    @property
    def numeric(self) -> bool:
        return self.type.split("(")[0] in NUMERIC_TYPES


@dataclass(frozen=True)
class View:
    """A shared SELECT over one run ($run_id), inlined as a CTE into the queries that read it."""
    name: str
    description: str
    columns: tuple[Column, ...]
    sql: str
    source: str


@dataclass(frozen=True)
class Query:
    name: str
    title: str
    section: str
    description: str
    params: tuple[Param, ...]
    columns: tuple[Column, ...]
    chart: dict[str, Any] | None
    sql: str  # what runs: `text` with the views it reads inlined as CTEs
    used_params: frozenset[str] = field(default_factory=frozenset)
    text: str = ""  # the file's own SQL, as written (the query page shows it)
    views: tuple[str, ...] = ()  # views inlined into sql, in dependency order
    source: str = ""  # the file, for messages: queries/<name>.sql
    header: frozenset[str] = frozenset()  # the name:/title:/section: lines the file has
    stored: bool = False  # `stored: yes`: every writer keeps its answer per run (queries/answers.py)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "section": self.section,
            "description": self.description,
            "params": [
                {"name": p.name, "type": p.type, "default": p.default,
                 "required": p.required, "description": p.description}
                for p in self.params
            ],
            "columns": [{"name": c.name, "type": c.type, "description": c.description, "fmt": c.fmt}
                        for c in self.columns],
            "chart": self.chart,
            "stored": self.stored,
            "views": list(self.views),
            "sql": self.text,
        }


# ---- parsing ---------------------------------------------------------------------------------

def parse_chart(spec: str) -> dict[str, Any]:
    words = shlex.split(spec)
    chart: dict[str, Any] = {"kind": words[0]}
    for word in words[1:]:
        key, _, value = word.partition("=")
        chart[key] = value.split(",") if key in LIST_KEYS else value
    return chart


def _param(line: str) -> Param:
    head, _, desc = line.partition("  ")
    parts = head.split()
    minimum = None
    if len(parts) >= 4 and parts[-2] == ">=":
        if parts[1].upper() not in INT_RANGE or not re.fullmatch(r"-?\d+", parts[-1]):
            raise ValueError(f"@param {parts[0]}: `>= N` needs an integer type and an integer N")
        minimum, parts = int(parts[-1]), parts[:-2]
    if len(parts) not in (2, 4) or (len(parts) == 4 and parts[2] != "="):
        raise ValueError(f"`@param {line}`: expected `@param NAME TYPE [= DEFAULT] [>= N]  description`")
    if parts[1].upper() not in PARAM_TYPES:
        raise ValueError(f"@param {parts[0]}: type {parts[1]} is not one of {', '.join(PARAM_TYPES)}")
    return Param(parts[0], parts[1].upper(), parts[3] if len(parts) == 4 else None, desc.strip(), minimum)


def _column(line: str) -> Column:
    head, _, desc = line.partition("  ")
    parts = head.split()
    fmt = None
    if len(parts) == 3 and parts[2].startswith("fmt="):
        fmt = parts.pop()[4:]
        if fmt not in FMT_KINDS:
            raise ValueError(f"column {parts[0]}: fmt={fmt} is not one of {', '.join(FMT_KINDS)}")
    if len(parts) != 2:
        raise ValueError(f"`@column {line}`: expected `@column NAME TYPE [fmt=KIND]  description`")
    return Column(parts[0], parts[1].upper(), desc.strip(), fmt)


@dataclass
class _Parsed:
    meta: dict[str, str]
    description: str
    params: list[Param]
    columns: list[Column]
    chart: dict[str, Any] | None
    sql: str


def _parse(text: str) -> _Parsed:
    """Header lines are `--` comments before the first SQL line; raises ValueError on a
    malformed one."""
    out = _Parsed({}, "", [], [], None, "")
    description: list[str] = []
    lines = text.splitlines()
    body_start = len(lines)
    for i, line in enumerate(lines):
        if not line.startswith("--"):
            body_start = i
            break
        content = line[2:].strip()
        tag, _, rest = content.partition(" ")
        rest = rest.strip()
        if tag == "@param":
            out.params.append(_param(rest))
        elif tag == "@column":
            out.columns.append(_column(rest))
        elif tag == "@chart":
            try:
                out.chart = parse_chart(rest)
            except (ValueError, IndexError) as e:
                problem = f"expected `@chart KIND key=value ...` ({e or 'empty'})"
                raise ValueError(f"`{content}`: {problem}") from None
        elif tag.startswith("@"):
            raise ValueError(f"unknown header line `{tag}` (use @param, @column or @chart)")
        elif _DIRECTIVE.match(content):
            key, _, value = content.partition(":")
            out.meta[key] = value.strip()
        elif content:
            description.append(content)
    out.description = " ".join(description)
    out.sql = "\n".join(lines[body_start:]).strip().rstrip(";").rstrip()
    return out


def _parse_file(text: str, source: str) -> _Parsed:
    try:
        return _parse(text)
    except ValueError as e:
        raise CatalogError(f"{source}: {e}") from None


def parse_query(name: str, text: str, source: str | None = None) -> Query:
    """One catalog file as written: its header and SQL, no view inlined yet."""
    source = source or f"queries/{name}.sql"
    p = _parse_file(text, source)
    if p.meta.get("name", name) != name:
        raise CatalogError(f"{source}: declares name {p.meta['name']!r}")
    if p.meta.get("stored", "yes") != "yes":
        raise CatalogError(f"{source}: `-- stored:` takes yes, got {p.meta['stored']!r}")
    return Query(
        name=name,
        title=p.meta.get("title", name.replace("_", " ").capitalize()),
        section=p.meta.get("section", "Other"),
        description=p.description,
        params=tuple(p.params),
        columns=tuple(p.columns),
        chart=p.chart,
        sql=p.sql,
        used_params=frozenset(PARAM_USE.findall(code_only(p.sql))),
        text=p.sql,
        source=source,
        header=frozenset(p.meta),
        stored="stored" in p.meta,
    )


def parse_view(name: str, text: str, source: str | None = None) -> View:
    source = source or f"queries/views/{name}.sql"
    p = _parse_file(text, source)
    if p.meta.get("view") != name:
        raise CatalogError(f"{source}: the header must say `-- view: {name}`")
    return View(name, p.description, tuple(p.columns), p.sql, source)


# ---- composition: views inlined as CTEs --------------------------------------------------------

def code_only(sql: str) -> str:
    """SQL with comments and string literals blanked, so their text is neither linted nor
    taken for table names or parameters."""
    sql = re.sub(r"--[^\n]*", "", sql)
    return re.sub(r"'(?:[^']|'')*'", "''", sql)


def table_references(sql: str) -> set[str]:
    """Names the SQL reads as tables: after FROM or JOIN, and each further item of a FROM list."""
    code = code_only(sql)
    names = set()
    for m in _FROM_ITEM.finditer(code):
        names.add(m.group(1).lower())
        end = m.end()
        while (more := _NEXT_ITEM.match(code, end)) is not None:
            names.add(more.group(1).lower())
            end = more.end()
    return names


def cte_names(sql: str) -> set[str]:
    return {m.group(1).lower() for m in _CTE_NAME.finditer(code_only(sql))}


def views_needed(sql: str, views: Mapping[str, View]) -> list[str]:
    """The views `sql` reads, directly or through other views, each after the views it reads."""
    order: list[str] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in path:
            raise CatalogError(f"{views[name].source}: views read each other in a cycle: "
                               + " -> ".join([*path[path.index(name):], name]))
        if name in order:
            return
        for used in sorted(table_references(views[name].sql) & views.keys()):
            visit(used, (*path, name))
        order.append(name)

    for name in sorted(table_references(sql) & views.keys()):
        visit(name, ())
    return order


def compose(sql: str, views: Mapping[str, View]) -> tuple[str, tuple[str, ...]]:
    """`sql` with every view it reads inlined as a CTE ahead of its own, and the views' names."""
    needed = views_needed(sql, views)
    if not needed:
        return sql, ()
    ctes = ",\n".join(f"{name} AS (\n{views[name].sql}\n)" for name in needed)
    own = re.match(r"\s*WITH(\s+RECURSIVE)?\s", sql, re.IGNORECASE)
    if own:
        return f"WITH{own.group(1) or ''} {ctes},\n{sql[own.end():]}", tuple(needed)
    return f"WITH {ctes}\n{sql}", tuple(needed)


def composed(query: Query, views: Mapping[str, View]) -> Query:
    sql, used = compose(query.text, views)
    return replace(query, sql=sql, views=used, used_params=frozenset(PARAM_USE.findall(code_only(sql))))


# ---- lint: the header contract and the SQL habits, checked when the catalog loads -------------

def unguarded_divisions(sql: str) -> list[str]:
    """Divisions (`/`, and DuckDB's integer `//`) by anything but NULLIF(...) or a non-zero literal."""
    code = code_only(sql)
    bad = []
    for m in re.finditer(r"//?", code):
        after = code[m.end():].lstrip()
        if re.match(r"NULLIF\s*\(", after, re.IGNORECASE):
            continue
        literal = re.match(r"\d+(\.\d*)?", after)
        if literal and float(literal.group()) != 0:
            continue
        bad.append(" ".join(code[max(0, m.start() - 40):m.end() + 20].split()))
    return bad


def _close_paren(code: str, start: int) -> int:
    """Index just past the parenthesis group that opens at code[start]."""
    depth = 0
    for i in range(start, len(code)):
        depth += {"(": 1, ")": -1}.get(code[i], 0)
        if depth == 0:
            return i + 1
    raise ValueError("unbalanced parentheses")


def uncast_sums(sql: str) -> list[str]:
    """sum(...) calls whose result is not cast: after FILTER (...) / OVER (...), `::TYPE` or
    an enclosing CAST( ... AS TYPE). Strict on purpose: a sum of integers is HUGEINT unless
    cast, and the SQL alone does not say which sums are over integers."""
    code = code_only(sql)
    bad = []
    for m in re.finditer(r"\bsum\s*\(", code, re.IGNORECASE):
        if re.search(r"CAST\s*\(\s*$", code[:m.start()], re.IGNORECASE):
            continue
        end = _close_paren(code, m.end() - 1)
        while True:
            clause = re.match(r"\s*(FILTER|OVER)\s*\(", code[end:], re.IGNORECASE)
            if not clause:
                break
            end = _close_paren(code, end + clause.end() - 1)
        if not re.match(r"\s*::", code[end:]):
            bad.append(" ".join(code[m.start():end + 20].split()))
    return bad


def statement_problem(sql: str) -> str | None:
    """Why `sql` is not exactly one SELECT or WITH ... SELECT query; None when it is."""
    code = code_only(sql).strip()
    statements = [s for s in code.split(";") if s.strip()]
    if not statements:
        return "holds no SQL statement"
    if len(statements) > 1:
        return f"holds {len(statements)} SQL statements; a query is exactly one SELECT"
    words = re.match(r"\s*(\w+)", code)
    first = words.group(1).upper() if words else code[:1]
    if first == "WITH":
        main = _after_ctes(code, words.end())
        if main != "SELECT":
            return f"must be one SELECT or WITH query, not WITH ... {main or '(nothing)'}"
    elif first != "SELECT":
        return f"must be one SELECT or WITH query, not {first}"
    return None


def _after_ctes(code: str, pos: int) -> str:
    """The keyword after a WITH clause's CTE list (`name [(cols)] AS [NOT] [MATERIALIZED] (...)`, ...)."""
    cte = re.compile(r"\s*(?:RECURSIVE\s+)?\w+\s*(?:\([^()]*\)\s*)?AS\s+(?:NOT\s+)?(?:MATERIALIZED\s+)?\(",
                     re.IGNORECASE)
    while (m := cte.match(code, pos)) is not None:
        try:
            pos = _close_paren(code, m.end() - 1)
        except ValueError:
            return ""
        comma = re.match(r"\s*,", code[pos:])
        if not comma:
            break
        pos += comma.end()
    word = re.match(r"\s*(\w+)", code[pos:])
    return word.group(1).upper() if word else ""


def _sql_problems(sql: str) -> list[str]:
    problems = [f"divide only by NULLIF(x, 0) or a non-zero literal: {d}" for d in unguarded_divisions(sql)]
    problems += [f"cast every sum(...) (::BIGINT or ::DOUBLE): {s}" for s in uncast_sums(sql)]
    return problems


def _column_problems(columns: Iterable[Column], strict: bool) -> list[str]:
    problems = []
    names = [c.name for c in columns]
    problems += [f"@column {n} is declared twice" for n in sorted({n for n in names if names.count(n) > 1})]
    for c in columns:
        if c.fmt and not c.numeric:
            problems.append(f"@column {c.name}: fmt={c.fmt} on a {c.type} column (fmt is for numbers)")
        if strict and c.numeric and not c.fmt:
            problems.append(f"@column {c.name} {c.type}: tag it with fmt=KIND ({', '.join(FMT_KINDS)})")
        if strict and not c.description:
            problems.append(f"@column {c.name} has no description")
    return problems


def _chart_problems(chart: dict[str, Any] | None, columns: set[str]) -> list[str]:
    if chart is None:
        return []
    kind = chart["kind"]
    if kind not in CHART_KINDS:
        return [f"@chart kind {kind!r} is not one of {', '.join(CHART_KINDS)}"]
    problems = [f"@chart key {k!r} is unknown" for k in sorted(set(chart) - CHART_KEYS)]
    named = [chart[k] for k in ("x", "z", "color", "group", "caveat") if k in chart] + list(chart.get("y", []))
    problems += [f"@chart names {c!r}, which is no @column" for c in named if c not in columns]
    if not set(chart.get("shade", [])) <= set(chart.get("y", [])):
        problems.append("@chart shade must name y columns")
    if ("group" in chart or "shade" in chart) and kind not in ("bar", "stacked"):
        problems.append("@chart group and shade are for bar and stacked charts")
    if kind == "table":
        if named:
            problems.append("@chart table names no columns")
        return problems
    needs = ["x", "xlabel", "ylabel", "title"] + (["y", "z"] if kind in ("heatmap", "timeline") else
                                                  [] if kind == "hist" else ["y"])
    problems += [f"@chart {kind} needs {k}=" for k in needs if k not in chart]
    return problems


def _finding_problems(query: Query) -> list[str]:
    """A Findings query answers in the findings' columns, so that every reader can list them, and
    is stored, so that a reader collects the list from the answers each write kept."""
    if query.section != "Findings":
        return []
    have = tuple((c.name, c.type) for c in query.columns)
    if have != FINDING_COLUMNS:
        return ["a Findings query returns exactly "
                + ", ".join(f"{n} {t}" for n, t in FINDING_COLUMNS) + " (in that order)"]
    if [p.name for p in query.params] != ["run_id"]:
        return ["a Findings query takes run_id alone"]
    if not query.stored:
        return ["a Findings query is stored (-- stored: yes)"]
    return []


def _stored_problems(query: Query) -> list[str]:
    """A stored answer is the one for a run_id and the other parameters' defaults."""
    if not query.stored:
        return []
    if "run_id" not in {p.name for p in query.params}:
        return ["a stored query takes run_id"]
    return [f"a stored query's @param {p.name} needs a default" for p in query.params
            if p.name != "run_id" and p.required]


def _shadowing(own_ctes: set[str], views: Mapping[str, View]) -> list[str]:
    return [f"its CTE {n!r} shadows the view queries/views/{n}.sql; rename the CTE"
            for n in sorted(own_ctes & views.keys())]


def lint(query: Query, views: Mapping[str, View], *, strict: bool = True) -> None:
    """Raise CatalogError("<file>: <problem>") for the first way the file breaks the contract.

    Every file: one SELECT or WITH statement; declared params exactly the ones used (views
    included); guarded divisions; cast sums; no CTE named like a view; known section, chart
    kind and fmt kinds; a chart over declared columns. `strict` (the bundled catalog) also
    wants a complete header: name, title, section, description, a chart, and every numeric
    column tagged with its fmt.
    """
    problems = [p for p in [statement_problem(query.text)] if p]
    declared = {p.name for p in query.params}
    problems += [f"@param {n} is declared but the SQL never uses ${n}"
                 for n in sorted(declared - query.used_params)]
    problems += [f"${n} is used but not declared with @param" for n in sorted(query.used_params - declared)]
    problems += _sql_problems(query.text)
    problems += _shadowing(cte_names(query.text), views)
    if query.section not in SECTIONS:
        problems.append(f"section {query.section!r} is not one of {', '.join(SECTIONS)}")
    problems += _column_problems(query.columns, strict)
    problems += _chart_problems(query.chart, {c.name for c in query.columns})
    problems += _finding_problems(query)
    problems += _stored_problems(query)
    if strict:
        problems += [f"no `-- {k}:` line" for k in ("name", "title", "section") if k not in query.header]
        if len(query.description) <= 20:
            problems.append("a description of what it shows and why is missing")
        if not query.columns:
            problems.append("no @column")
        if query.chart is None:
            problems.append("no @chart (use `@chart table` for a table)")
        problems += [f"@param {p.name} has no description" for p in query.params if not p.description]
    if problems:
        raise CatalogError(f"{query.source}: {problems[0]}")


def lint_view(view: View, views: Mapping[str, View], tables: Iterable[str] = ()) -> None:
    """A view is one SELECT over $run_id alone, with a complete, fmt-tagged header."""
    problems = []
    if not re.match(r"\s*SELECT\b", code_only(view.sql), re.IGNORECASE) or statement_problem(view.sql):
        problems.append("a view is one SELECT (no WITH: it becomes a CTE itself; read other views instead)")
    others = set(PARAM_USE.findall(code_only(view.sql))) - {"run_id"}
    problems += [f"a view reads only $run_id, not ${n}" for n in sorted(others)]
    if view.name in set(tables):
        problems.append(f"the view {view.name!r} would shadow the canonical table of that name")
    problems += _sql_problems(view.sql)
    problems += _shadowing(cte_names(view.sql), views)
    problems += _column_problems(view.columns, strict=True)
    if not view.columns:
        problems.append("no @column")
    if len(view.description) <= 20:
        problems.append("a description of what each row is is missing")
    if problems:
        raise CatalogError(f"{view.source}: {problems[0]}")


# ---- loading ----------------------------------------------------------------------------------

def _sql_files(folder) -> list:
    return sorted((e for e in folder.iterdir() if e.name.endswith(".sql")), key=lambda e: e.name)


def _canonical_tables() -> set[str]:
    """Tables and views of the store's schema, aggregates included: names no view may take."""
    created = re.findall(r"CREATE\s+(?:OR\s+REPLACE\s+)?(?:TABLE|VIEW)\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)",
                         schema_sql(), re.IGNORECASE)
    return {n.lower() for n in created} | set(aggregate_names())


@lru_cache(maxsize=1)
def load_views() -> dict[str, View]:
    """queries/views/*.sql, linted."""
    folder = resources.files("polytrace.queries").joinpath("views")
    views = {e.name[:-4]: parse_view(e.name[:-4], e.read_text()) for e in _sql_files(folder)}
    tables = _canonical_tables()
    for view in views.values():
        lint_view(view, views, tables)
    for view in views.values():
        views_needed(view.sql, views)  # a cycle is a CatalogError
    return views


def load_catalog() -> dict[str, Query]:
    """The bundled queries, plus any .sql files in $POLYTRACE_EXTRA_QUERIES (a site's own
    queries in the same format; tests use it for a deliberately slow query)."""
    return _load_catalog(_extra())


def _extra() -> str | None:
    extra = settings.get().extra_queries
    return str(extra) if extra else None


def load_query(name: str, text: str, views: Mapping[str, View], *, source: str | None = None,
               strict: bool = True) -> Query:
    """Parse one query file, inline the views it reads and lint it."""
    query = composed(parse_query(name, text, source), views)
    lint(query, views, strict=strict)
    return query


@lru_cache(maxsize=4)
def _load_catalog(extra: str | None) -> dict[str, Query]:
    views = load_views()
    catalog = {}
    for entry in _sql_files(resources.files("polytrace.queries")):
        name = entry.name[:-4]
        catalog[name] = load_query(name, entry.read_text(), views)
    if extra:
        folder = Path(extra)
        if not folder.is_dir():
            raise CatalogError(f"POLYTRACE_EXTRA_QUERIES: {folder} is not a directory")
        for entry in _sql_files(folder):
            name = entry.name[:-4]
            catalog[name] = load_query(name, entry.read_text(), views, source=str(entry), strict=False)
    return catalog


def digest() -> str:
    """Changes whenever any query of the catalog does, or which are stored: what a stored result
    was computed by, and which answers a run's last refresh kept."""
    return _digest(_extra())


@lru_cache(maxsize=4)
def _digest(extra: str | None) -> str:
    return digest_of(_load_catalog(extra))


def digest_of(catalog: Mapping[str, Query]) -> str:
    queries = sorted((q.name, q.sql, q.stored) for q in catalog.values())
    return hashlib.sha256(repr(queries).encode()).hexdigest()[:16]


def get_query(name: str) -> Query:
    catalog = load_catalog()
    if name not in catalog:
        raise KeyError(name)
    return catalog[name]


_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}
# what DuckDB's integer types hold: a value outside is the caller's mistake, not the query's
INT_RANGE = {"INTEGER": (-(2**31), 2**31 - 1), "BIGINT": (-(2**63), 2**63 - 1)}


def _coerce(param: Param, value: Any) -> Any:
    if value is None:
        return None
    try:
        typed = _typed(param.type, value)
    except (TypeError, ValueError):
        raise ParamError(f"parameter {param.name!r} must be {param.type}, got {value!r}") from None
    if param.type in INT_RANGE:
        lo, hi = INT_RANGE[param.type]
        if not lo <= typed <= hi:
            raise ParamError(f"parameter {param.name!r} must be between {lo} and {hi}, got {typed}")
        if param.minimum is not None and typed < param.minimum:
            raise ParamError(f"parameter {param.name!r} must be at least {param.minimum}, got {typed}")
    return typed


def _typed(sql_type: str, value: Any) -> Any:
    if sql_type in INT_RANGE:
        return int(value)
    if sql_type == "DOUBLE":
        return float(value)
    if sql_type == "BOOLEAN":
        if isinstance(value, bool):
            return value
        text = str(value).lower()
        if text in _TRUE | _FALSE:
            return text in _TRUE
        raise ValueError(value)
    return str(value)


def bind(query: Query, values: dict[str, Any]) -> dict[str, Any]:
    """Typed values for every declared parameter, defaults filled in."""
    unknown = sorted(set(values) - {p.name for p in query.params})
    if unknown:
        raise ParamError(f"unknown parameter {unknown[0]!r} for query {query.name!r}")
    bound = {}
    for p in query.params:
        raw = values.get(p.name)
        if raw is None or raw == "":
            if p.required:
                raise ParamError(f"missing required parameter {p.name!r}")
            raw = None if p.default.upper() == "NULL" else p.default
        bound[p.name] = _coerce(p, raw)
    return {k: v for k, v in bound.items() if k in query.used_params}
