"""Composition: the shared views a query reads, inlined as CTEs ahead of its own SQL."""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace

from polytrace.queries.catalog.model import CatalogError, Query, View
from polytrace.queries.catalog.parse import PARAM_USE, code_only

# A table reference: what follows FROM or JOIN, then each comma-separated item of a FROM list.
_FROM_ITEM = re.compile(r"\b(?:FROM|JOIN)\s+(\w+)", re.IGNORECASE)
_NEXT_ITEM = re.compile(r"\s*(?:AS\s+)?(?:(?!(?:WHERE|GROUP|ORDER|HAVING|LIMIT|WINDOW|QUALIFY|UNION|EXCEPT|"
                        r"INTERSECT|ON|USING|JOIN|LEFT|RIGHT|INNER|FULL|CROSS|NATURAL|POSITIONAL|ASOF|"
                        r"SEMI|ANTI|PIVOT|UNPIVOT)\b)\w+\s*)?,\s*(\w+)", re.IGNORECASE)
_CTE_NAME = re.compile(r"(?:\bWITH(?:\s+RECURSIVE)?|,)\s*(\w+)\s*(?:\([^()]*\)\s*)?AS\s*"
                       r"(?:NOT\s+)?(?:MATERIALIZED\s+)?\(", re.IGNORECASE)


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


def inputs(sql: str, views: Mapping[str, View], store: Mapping[str, frozenset[str]]) -> frozenset[str]:
    """What `sql` (as written: no view inlined) reads: each catalog view as its inputs (a probed
    view as itself), each of `store`'s relations as the tables it reads."""
    read = table_references(sql) - cte_names(sql)
    through_views = ({name} if views[name].probed else views[name].inputs for name in read if name in views)
    return frozenset().union(*through_views, *(store[name] for name in read if name in store))

