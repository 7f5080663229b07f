"""Catalog lint: every query file keeps its header contract and the SQL habits that keep it honest."""
from __future__ import annotations

import re
from importlib import resources

import duckdb
import pytest

from polytrace.queries.catalog import parse_query
from polytrace.store.aggregates import aggregates
from polytrace.store.migrate import ensure as ensure_schema
from tests.goldens import case_names, load_case

SECTIONS = {"Lengths", "Rollout tail", "Imbalance", "Stages", "Multi-turn", "GPU", "What if",
            "Runs", "Fidelity", "Other"}
CHART_KINDS = {"line", "band", "bar", "stacked", "heatmap", "hist", "timeline", "table"}
CHART_KEYS = {"kind", "x", "y", "z", "color", "group", "shade", "xlabel", "ylabel", "title"}
SAMPLE_VALUES = {"VARCHAR": "x", "INTEGER": "0", "BIGINT": "0", "DOUBLE": "0", "BOOLEAN": "false"}


def _files():
    return sorted((f for f in resources.files("polytrace.queries").iterdir() if f.name.endswith(".sql")),
                  key=lambda f: f.name)


TEXTS = {f.name[:-4]: f.read_text() for f in _files()}
QUERIES = [parse_query(name, text) for name, text in TEXTS.items()]
IDS = [q.name for q in QUERIES]


def sample_params(query) -> dict:
    """run_id r1 (the golden cases' run), a typed placeholder for any other required param."""
    from polytrace.queries.catalog import bind

    values = {p.name: "r1" if p.name == "run_id" else SAMPLE_VALUES.get(p.type, "x")
              for p in query.params if p.required}
    return bind(query, values)


@pytest.fixture(scope="module")
def databases():
    empty = duckdb.connect()
    ensure_schema(empty)
    cons = {"empty": empty, **{case: load_case(case) for case in case_names()}}
    yield cons
    for con in cons.values():
        con.close()


def test_there_are_queries():
    assert {"length_stats", "length_histogram", "rollout_tail", "dp_imbalance", "reward_imbalance",
            "multiturn", "filter_waste", "run_summary", "runs"} <= set(IDS)


@pytest.mark.parametrize("query", QUERIES, ids=IDS)
def test_header_is_complete(query):
    for key in ("name", "title", "section"):
        assert re.search(rf"^-- {key}:\s*\S", TEXTS[query.name], re.MULTILINE), f"no -- {key}:"
    assert query.section in SECTIONS
    assert len(query.description) > 20
    assert query.columns, "no @column"
    assert all(c.description for c in query.columns), "a @column lacks its description"
    assert all(p.description for p in query.params), "a @param lacks its description"
    assert len({c.name for c in query.columns}) == len(query.columns), "duplicate @column"


@pytest.mark.parametrize("query", QUERIES, ids=IDS)
def test_params_declared_and_used(query):
    declared = {p.name for p in query.params}
    assert query.used_params == declared


@pytest.mark.parametrize("query", QUERIES, ids=IDS)
def test_columns_match_what_the_query_returns(query, databases):
    declared = [(c.name, c.type) for c in query.columns]
    for db, con in databases.items():
        described = con.execute(query.sql, sample_params(query)).description
        assert [(d[0], str(d[1])) for d in described] == declared, db


@pytest.mark.parametrize("query", QUERIES, ids=IDS)
def test_chart_spec(query):
    chart = query.chart
    assert chart is not None, "no @chart (use `@chart table` for a table)"
    assert chart["kind"] in CHART_KINDS
    assert set(chart) <= CHART_KEYS, set(chart) - CHART_KEYS
    columns = {c.name for c in query.columns}
    named = [chart[k] for k in ("x", "z", "color", "group") if k in chart] + list(chart.get("y", []))
    assert set(named) <= columns, set(named) - columns
    assert set(chart.get("shade", [])) <= set(chart.get("y", [])), "shade names y columns"
    if "group" in chart or "shade" in chart:
        assert chart["kind"] in ("bar", "stacked"), "group and shade are for bar charts"
    if chart["kind"] == "table":
        assert not named
    else:
        assert "x" in chart and "xlabel" in chart and "ylabel" in chart and "title" in chart
        if chart["kind"] in ("heatmap", "timeline"):
            assert "y" in chart and "z" in chart
        elif chart["kind"] != "hist":
            assert "y" in chart


def code_only(sql: str) -> str:
    """SQL with comments and string literals blanked, so their text is not linted."""
    sql = re.sub(r"--[^\n]*", "", sql)
    return re.sub(r"'(?:[^']|'')*'", "''", sql)


def unguarded_divisions(sql: str) -> list[str]:
    code = code_only(sql)
    bad = []
    for m in re.finditer(r"//?", code):  # `//` is DuckDB's integer division
        after = code[m.end():].lstrip()
        if re.match(r"NULLIF\s*\(", after, re.IGNORECASE):
            continue
        literal = re.match(r"\d+(\.\d*)?", after)
        if literal and float(literal.group()) != 0:
            continue
        bad.append(code[max(0, m.start() - 40):m.end() + 20].replace("\n", " "))
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
            bad.append(code[m.start():end + 20].replace("\n", " "))
    return bad


SQL_TEXTS = [(q.name, q.sql) for q in QUERIES] + [(f"aggregates:{a.name}", a.select) for a in aggregates()]


@pytest.mark.parametrize("name,sql", SQL_TEXTS, ids=[n for n, _ in SQL_TEXTS])
def test_every_division_is_guarded(name, sql):
    assert unguarded_divisions(sql) == []


@pytest.mark.parametrize("name,sql", SQL_TEXTS, ids=[n for n, _ in SQL_TEXTS])
def test_every_sum_is_cast(name, sql):
    assert uncast_sums(sql) == []


def test_lints_catch_what_they_should():
    assert len(unguarded_divisions("SELECT a / b, c / NULLIF(d, 0), e / 2.0, 'x/y' -- p/q")) == 1
    assert unguarded_divisions("SELECT a / 0") != []
    assert unguarded_divisions("SELECT a // NULLIF(b, 0), c // 2") == []
    assert unguarded_divisions("SELECT a // b") != []
    assert uncast_sums("SELECT sum(a) FROM t") != []
    assert uncast_sums("SELECT sum(a) FILTER (WHERE b)::BIGINT, CAST(sum(c) AS DOUBLE),"
                       " sum(d) OVER (PARTITION BY e)::DOUBLE, count(*) FROM t") == []
