"""What the commands print: a query Answer (or rows like one) in the format of --output (the
registry in queries/render.py), and the settings the CLI runs queries and ingests under."""
from __future__ import annotations

import sys

# CLI_FORMATS: each command's --output choices
from polytrace.queries.render import CLI_FORMATS, RENDERERS, Rows  # noqa: F401


def print_answer(answer, output: str) -> None:
    """A query Answer (or Rows) on stdout as a table, JSON records or CSV; a cut at the row cap on stderr."""
    sys.stdout.write(RENDERERS[output].render(answer))
    if answer.truncated:
        print(f"truncated at {len(answer.rows):,} rows (raise POLYTRACE_ROW_CAP)", file=sys.stderr)


# The unit a column's name ends in, said in the terminal table's header
UNIT_SUFFIXES = {"_s": "s", "_pct": "%", "_pp": "pp", "_frac": "0–1"}


def print_result(columns: list[str], rows: list[tuple], output: str, units: dict[str, str] | None = None) -> None:
    """Rows that are not a catalog query's (simulate, synth) rendered like one; the terminal
    table's headers say each column's unit (`units` for names that do not end in one)."""
    shown = [_with_unit(c, units or {}) for c in columns] if output == "table" else columns
    print_answer(Rows(shown, rows), output)


def _with_unit(column: str, units: dict[str, str]) -> str:
    unit = units.get(column) or next((u for end, u in UNIT_SUFFIXES.items() if column.endswith(end)), None)
    return f"{column} ({unit})" if unit else column



def limits():
    """The runner's time limit and row cap, from the settings."""
    from polytrace import settings
    from polytrace.queries.limits import Limits

    s = settings.get()
    return Limits(timeout_ms=s.query_timeout_ms, row_cap=s.row_cap)


def ingest_options(tokenizer: str | None = None):
    """The ingest's options from the settings, with --tokenizer (a file) over POLYTRACE_TOKENIZER."""
    import dataclasses
    from pathlib import Path

    from polytrace import settings
    from polytrace.cli.errors import CliError
    from polytrace.ingest.options import IngestOptions

    options = IngestOptions.of(settings.get())
    if tokenizer is None:
        return options
    if not Path(tokenizer).is_file():
        raise CliError(f"--tokenizer {tokenizer}: no such file (give a tokenizer.json)")
    return dataclasses.replace(options, tokenizer=Path(tokenizer).resolve())
