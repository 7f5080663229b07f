"""The lint: a catalog file's header contract and SQL habits, checked when the catalog loads."""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from polytrace.queries.catalog.compose import cte_names
from polytrace.queries.catalog.model import (
    CHART_KEYS,
    CHART_KINDS,
    FINDING_COLUMNS,
    FMT_KINDS,
    SECTIONS,
    CatalogError,
    Column,
    Query,
    View,
)
from polytrace.queries.catalog.parse import PARAM_USE, code_only


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
    named = [chart[k] for k in ("x", "z", "color", "group", "caveat", "peak") if k in chart] + list(chart.get("y", []))
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

