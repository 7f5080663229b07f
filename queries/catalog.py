"""Reads queries/*.sql and their header contracts; binds parameters and runs a query."""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from polytrace import settings

LIST_KEYS = {"y", "hover", "shade"}
PARAM_USE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")


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

    @property
    def required(self) -> bool:
        return self.default is None


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    description: str


@dataclass(frozen=True)
class Query:
    name: str
    title: str
    section: str
    description: str
    params: tuple[Param, ...]
    columns: tuple[Column, ...]
    chart: dict[str, Any] | None
    sql: str
    used_params: frozenset[str] = field(default_factory=frozenset)

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
            "columns": [{"name": c.name, "type": c.type, "description": c.description}
                        for c in self.columns],
            "chart": self.chart,
        }


def parse_chart(spec: str) -> dict[str, Any]:
    words = shlex.split(spec)
    chart: dict[str, Any] = {"kind": words[0]}
    for word in words[1:]:
        key, _, value = word.partition("=")
        chart[key] = value.split(",") if key in LIST_KEYS else value
    return chart


def parse_query(name: str, text: str) -> Query:
    """Parse one catalog file. Header lines are `-- ` comments before the first SQL line."""
    meta: dict[str, str] = {}
    description: list[str] = []
    params: list[Param] = []
    columns: list[Column] = []
    chart = None
    lines = text.splitlines()
    body_start = len(lines)
    for i, line in enumerate(lines):
        if not line.startswith("--"):
            body_start = i
            break
        content = line[2:].strip()
        if content.startswith("@param "):
            head, _, desc = content[7:].partition("  ")
            parts = head.split()
            default = None
            if len(parts) >= 4 and parts[2] == "=":
                default = parts[3]
            params.append(Param(parts[0], parts[1].upper(), default, desc.strip()))
        elif content.startswith("@column "):
            head, _, desc = content[8:].partition("  ")
            cname, ctype = head.split()[:2]
            columns.append(Column(cname, ctype.upper(), desc.strip()))
        elif content.startswith("@chart "):
            chart = parse_chart(content[7:])
        elif re.match(r"^(name|title|section):", content):
            key, _, value = content.partition(":")
            meta[key] = value.strip()
        elif content:
            description.append(content)
    sql = "\n".join(lines[body_start:]).strip().rstrip(";")
    if meta.get("name", name) != name:
        raise CatalogError(f"queries/{name}.sql declares name {meta['name']!r}")
    return Query(
        name=name,
        title=meta.get("title", name.replace("_", " ").capitalize()),
        section=meta.get("section", "Other"),
        description=" ".join(description),
        params=tuple(params),
        columns=tuple(columns),
        chart=chart,
        sql=sql,
        used_params=frozenset(PARAM_USE.findall(_strip_sql_comments(sql))),
    )


def _strip_sql_comments(sql: str) -> str:
    return re.sub(r"--[^\n]*", "", sql)


def load_catalog() -> dict[str, Query]:
    """The bundled queries, plus any .sql files in $POLYTRACE_EXTRA_QUERIES (a site's own
    queries in the same format; tests use it for a deliberately slow query)."""
    extra = settings.get().extra_queries
    return _load_catalog(str(extra) if extra else None)


@lru_cache(maxsize=4)
def _load_catalog(extra: str | None) -> dict[str, Query]:
    folders = [resources.files("polytrace.queries")] + ([Path(extra)] if extra else [])
    catalog = {}
    for folder in folders:
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            if entry.name.endswith(".sql"):
                name = entry.name[:-4]
                catalog[name] = parse_query(name, entry.read_text())
    return catalog


def get_query(name: str) -> Query:
    catalog = load_catalog()
    if name not in catalog:
        raise KeyError(name)
    return catalog[name]


_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _coerce(param: Param, value: Any) -> Any:
    if value is None:
        return None
    try:
        if param.type in ("INTEGER", "BIGINT"):
            return int(value)
        if param.type == "DOUBLE":
            return float(value)
        if param.type == "BOOLEAN":
            if isinstance(value, bool):
                return value
            text = str(value).lower()
            if text in _TRUE | _FALSE:
                return text in _TRUE
            raise ValueError(value)
    except (TypeError, ValueError):
        raise ParamError(f"parameter {param.name!r} must be {param.type}, got {value!r}") from None
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
