"""Renderings of a query Answer: JSON-ready rows, CSV text, Parquet bytes, a terminal table, polars;
and the registry of output formats (RENDERERS) that REST, the CLI and the pages offer. The CLI's
formats read only an answer's columns and rows, so they print Rows as well, without Arrow."""
from __future__ import annotations

import csv
import io
import json
import math
import unicodedata
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from polytrace.queries.runner import Answer


@dataclass(frozen=True)
class Rows:
    """Rows printed as an answer is: a kept answer's JSON rows (queries/answers.py), or what a
    command computes that no catalog query does (simulate, synth)."""
    columns: list[str]
    rows: list[tuple]
    truncated: bool = False


def jsonable(value: Any) -> Any:
    """A value as JSON carries it: NaN and infinities as null, dates as ISO text, bytes as hex."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    return value


def json_body(answer: Answer) -> dict[str, Any]:
    """The REST body: {"ok", "columns", "rows", "truncated"}; the encoder writes NaN as null."""
    return {"ok": True, "columns": answer.columns, "rows": answer.rows, "truncated": answer.truncated}


def records(answer: Answer) -> list[dict[str, Any]]:
    return [{c: jsonable(v) for c, v in zip(answer.columns, r)} for r in answer.rows]


def csv_text(answer: Answer) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(answer.columns)
    writer.writerows([None if isinstance(v, float) and not math.isfinite(v) else v for v in row]
                     for row in answer.rows)
    return out.getvalue()


def parquet_bytes(answer: Answer) -> bytes:
    import pyarrow.parquet as pq  # where used: it is not needed to start up

    sink = io.BytesIO()
    pq.write_table(answer.table, sink)
    return sink.getvalue()


def significant(value: float, digits: int = 3) -> str:
    """`value` rounded to `digits` significant digits, written out in full with thousands
    separators as the pages' charts write it (999.5 reads 1,000 and 7.66e-06 reads 0.00000766),
    never in exponent notation."""
    if not math.isfinite(value):
        return str(value)
    rounded = float(f"{value:.{digits}g}")
    if rounded == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(rounded))))
    text = f"{rounded:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if decimals else text


def terminal_text(answer: Answer | Rows) -> str:
    """The terminal table, boxed as rich draws one and never cut or wrapped (a pager scrolls it):
    floats to 4 significant digits (whole from 1,000 up), never in exponent notation; NULL as
    blank; a control character in text escaped, so that a file's bytes cannot drive the terminal."""
    header = [printable(c) for c in answer.columns]
    body = [[_cell(v) for v in row] for row in answer.rows]
    widths = [max(map(_width, column)) for column in zip(header, *body)]

    def line(left: str, fill: str, middle: str, right: str) -> str:
        return left + middle.join(fill * (w + 2) for w in widths) + right

    def cells(edge: str, texts: list[str]) -> str:
        return edge + edge.join(f" {t}{' ' * (w - _width(t))} " for t, w in zip(texts, widths)) + edge

    return "\n".join([line("┏", "━", "┳", "┓"), cells("┃", header), line("┡", "━", "╇", "┩"),
                      *(cells("│", r) for r in body), line("└", "─", "┴", "┘")]) + "\n"


def _cell(value: Any) -> str:
    return "" if value is None else _float_cell(value) if isinstance(value, float) else printable(str(value))


def printable(text: str) -> str:
    """`text` with every control character escaped (\\x1b, \\n, ...): a file's name or bytes
    cannot move the cursor, clear the screen or start a second line of what a terminal shows."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def _width(text: str) -> int:
    """Terminal cells: an East Asian wide character takes two."""
    return len(text) + sum(unicodedata.east_asian_width(ch) in "WF" for ch in text if ord(ch) > 0x1100)


def _float_cell(value: float) -> str:
    return f"{value:,.0f}" if math.isfinite(value) and abs(value) >= 1000 else significant(value, 4)


def polars(answer: Answer):
    import polars as pl

    return pl.from_arrow(answer.table)


# --- the output formats: a new one is one entry here ------------------------------------------

@dataclass(frozen=True)
class Renderer:
    """An output format: its name (REST's ?format= and the CLI's --output), its media type over
    HTTP and the Accept types that ask for it (none: terminal only), whether the CLI offers it,
    and `render`, the whole output (a REST download, the CLI's stdout). REST's JSON is the query's
    body (json_body) rather than `render`."""

    name: str
    media_type: str | None
    accepts: tuple[str, ...]
    cli: bool
    render: Callable[[Answer], str | bytes]


RENDERERS: dict[str, Renderer] = {r.name: r for r in (
    Renderer("table", None, (), True, terminal_text),
    Renderer("json", "application/json", ("application/json",), True,
             lambda answer: json.dumps(records(answer)) + "\n"),
    Renderer("csv", "text/csv; charset=utf-8", ("text/csv",), True, csv_text),
    Renderer("parquet", "application/vnd.apache.parquet",
             ("application/vnd.apache.parquet", "application/x-parquet"), False, parquet_bytes),
)}
# The formats REST serves (json first: the default), and those the CLI's --output takes (table first).
HTTP_FORMATS = tuple(name for name, r in RENDERERS.items() if r.media_type)
CLI_FORMATS = tuple(name for name, r in RENDERERS.items() if r.cli)
