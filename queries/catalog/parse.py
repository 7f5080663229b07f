"""The header parser: a catalog file's `--` header lines (the contract) and its SQL, as written."""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any

from polytrace.queries.catalog.model import (
    FMT_KINDS,
    INT_RANGE,
    PARAM_TYPES,
    CatalogError,
    Column,
    Param,
    Query,
    View,
)

# @chart keys whose value is a comma-separated list
LIST_KEYS = {"y", "hover", "shade"}
PARAM_USE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
_DIRECTIVE = re.compile(r"^(name|title|section|view|stored|probed):")


def code_only(sql: str) -> str:
    """SQL with comments and string literals blanked, so their text is neither linted nor
    taken for table names or parameters."""
    sql = re.sub(r"--[^\n]*", "", sql)
    return re.sub(r"'(?:[^']|'')*'", "''", sql)



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
    if "probed" in p.meta:
        raise CatalogError(f"{source}: `-- probed:` is for a view (queries/views/), not a query")
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
    if p.meta.get("probed", "yes") != "yes":
        raise CatalogError(f"{source}: `-- probed:` takes yes, got {p.meta['probed']!r}")
    return View(name, p.description, tuple(p.columns), p.sql, source, probed="probed" in p.meta)

