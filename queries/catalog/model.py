"""The catalog's model: a query, a shared view, their parameters and columns, and the vocabulary
a header may use (sections, chart kinds, number formats, parameter types)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The catalog page, the run page and the compare page show sections in this order. Runs and
# Findings are what the run page says above its charts; Fidelity queries compare two runs.
SECTIONS = ("Runs", "Findings", "Budget", "Training health", "Lengths", "Rollout tail", "Imbalance", "Stages",
            "Multi-turn", "Async", "GPU", "What if", "Fidelity", "Other")
# The columns of every Findings-section query (queries/findings.py reads them as one list).
FINDING_COLUMNS = (("kind", "VARCHAR"), ("severity", "VARCHAR"), ("value", "DOUBLE"), ("unit", "VARCHAR"),
                   ("steps", "INTEGER[]"), ("stage", "VARCHAR"), ("text", "VARCHAR"),
                   ("evidence", "VARCHAR"))
CHART_KINDS = ("line", "band", "bar", "stacked", "heatmap", "hist", "timeline", "table")
CHART_KEYS = {"kind", "x", "y", "z", "color", "group", "shade", "xlabel", "ylabel", "title", "caveat", "peak"}
# How a number reads (headlines, chart axes and hover): pct is a 0-1 share, pct100 is already
# 0-100, x a ratio, s/ms/us durations, gpu_h GPU-hours; tokens and count are plain numbers.
FMT_KINDS = ("pct", "pct100", "x", "s", "ms", "us", "tokens", "bytes", "count", "gpu_h")
NUMERIC_TYPES = {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
                 "UINTEGER", "UBIGINT", "FLOAT", "REAL", "DOUBLE", "DECIMAL"}
PARAM_TYPES = ("VARCHAR", "INTEGER", "BIGINT", "DOUBLE", "BOOLEAN")
# what DuckDB's integer types hold: a value outside is the caller's mistake, not the query's
INT_RANGE = {"INTEGER": (-(2**31), 2**31 - 1), "BIGINT": (-(2**63), 2**63 - 1)}


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
    # `-- probed: yes`: the refresh asks whether the run has a row here, and takes a query that
    # reads it as reading it, not the tables under it (queries/overview.py)
    probed: bool = False
    # what it reads, as a Query's inputs: the store's tables, and each probed view it reads
    inputs: frozenset[str] = frozenset()


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
    # The store's tables sql reads, catalog and store views resolved to what they read (a probed
    # view as itself); empty where that is not vouched for (a site's own query): the refresh then
    # takes it to read everything (queries/overview.py)
    inputs: frozenset[str] = frozenset()

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

