"""Live append: a followed file's new whole steps committed to its run, with the file's byte offset,
in one transaction (ingest/live.py decides which bytes are whole)."""
from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePath

import pyarrow as pa

from polytrace import store
from polytrace.ingest import live, registry, sources
from polytrace.ingest.contract import Format, IngestError, Parsed
from polytrace.ingest.formats import verl_console
from polytrace.ingest.live import Appended, Chunk
from polytrace.ingest.parsing import now, parse_input
from polytrace.ingest.run_facts import RUN_COLUMNS
from polytrace.ingest.writes import RunConflict, fill_missing, insert, name_the_format
from polytrace.store import vocabulary
from polytrace.store.aggregates import materialize
from polytrace.store.runs import changed, exists

WARNING_SEPARATOR = "; "
MAX_WARNINGS = 20
_MORE = "and "


def append_chunk(con, run_id: str, chunk: Chunk, *, name: str | None = None,
                 source: str | None = None) -> Appended:
    """Commit what is whole in `chunk` to the live run `run_id` (created on its first append, named
    `name`, following the directory `source`), in one transaction with the file's new committed
    offset: a log's whole lines, or a complete step file. Bytes before the committed offset are
    skipped, so sending them again changes nothing. Only the new steps' aggregates are computed,
    so a step costs the same in a long run as in a short one.

    Raises Gap when the chunk starts past the committed offset, IngestError when its bytes do not
    parse; then nothing changed.
    """
    with store.transaction(con):
        _forget_deleted(con, run_id)
        state = live.file_states(con, run_id).get(chunk.file_name, live.FileState())
        if chunk.reset and (state.committed or state.identity):
            state = live.FileState(0, state.format, note=f"{chunk.file_name} is a new file under the same name "
                                                         "(rotated or truncated): followed from its first byte")
        fmt = _live_format(state, chunk)
        how = live.mode(fmt.name, _chunk_gzipped(chunk))
        taken = _take_lines(con, run_id, chunk, state, fmt, source) if how == "lines" \
            else _take_whole(chunk, state, fmt, how)
        if isinstance(taken, live.Appended):
            return taken
        _new_live_run(con, run_id, name or run_id, source)
        changed(con, run_id)
        steps = sorted(_steps_of(taken.parsed))
        rows = _write_live(con, run_id, taken.parsed.tables, taken.replace)
        facts_changed = _live_facts(con, run_id, fmt, taken.parsed, source, chunk.file_name)
        state = live.FileState(taken.committed, fmt.name, chunk.identity or state.identity,
                               chunk.mtime, steps if how != "lines" else [], state.note,
                               (state.tail + taken.taken)[-live.TAIL_BYTES:] if how == "lines" else b"")
        _keep_state(con, run_id, chunk, state, fmt, taken.notes, rows, taken.parsed.warnings, source)
        _mark_live(con, run_id, steps)
        if facts_changed or steps:  # a run column the aggregates read (the cap) changes every step's
            materialize(con, run_id, None if facts_changed else steps)
    return live.Appended(taken.committed, steps, rows, taken.notes, taken.parsed.warnings)


@dataclass
class _Taken:
    """What an append takes of its chunk: the parsed rows, the file's new committed offset, the
    steps whose old rows they replace (a reloaded step file), and what to say."""

    parsed: Parsed
    committed: int
    replace: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    taken: bytes = b""  # a log's bytes taken, for the tail a resend is checked against


def _take_lines(con, run_id: str, chunk: Chunk, state: live.FileState, fmt: Format,
                source: str | None) -> _Taken | Appended:
    """A log's whole new lines; or, with none yet, the file's offset as it stands."""
    taken = _whole_lines(con, run_id, chunk, state, fmt)
    if not taken:
        if chunk.reset:  # the new file's identity, at byte 0
            _keep_state(con, run_id, chunk, live.FileState(0, fmt.name, chunk.identity, note=state.note),
                        fmt, [], source=source)
        return live.Appended(state.committed)
    return _Taken(_parse_chunk(fmt, chunk.file_name, taken, state.committed), state.committed + len(taken),
                  taken=taken)


def _take_whole(chunk: Chunk, state: live.FileState, fmt: Format, how: str) -> _Taken | Appended:
    """A complete step file or trace; nothing while it is not complete or unchanged since taken."""
    if not chunk.complete:
        return live.Appended(state.committed)
    if chunk.offset:
        raise live.Gap(chunk.file_name, 0)  # a whole file is sent whole
    size = chunk.size  # before parsing: a file that grows meanwhile is taken again later
    if state.committed and (state.committed, state.mtime) == (size, chunk.mtime):
        return live.Appended(state.committed, state.steps)
    if state.committed and how == "trace":
        raise IngestError(chunk.file_name, "changed after it was loaded; a trace is loaded once "
                                           "(ingest the directory again to take the new one)")
    replace = state.steps if state.committed else []
    notes = [f"{chunk.file_name} changed after it was loaded: its step(s) {replace[:5]} were reloaded"] \
        if replace else []
    parsed = _parse_chunk(fmt, chunk.file_name, chunk.data if chunk.path is None else chunk.path, 0)
    return _Taken(parsed, size, replace, notes)


def _forget_deleted(con, run_id: str) -> None:
    """A live run deleted while followed starts again from its files' first bytes; appends never
    reach a run that a batch ingest made."""
    if not exists(con, run_id):
        con.execute("DELETE FROM live_files WHERE live_run = ?", [run_id])
        con.execute("DELETE FROM live_runs WHERE live_run = ?", [run_id])
    elif not con.execute("SELECT 1 FROM live_runs WHERE live_run = ?", [run_id]).fetchall():
        raise RunConflict(None, f"run {run_id} was ingested whole, not followed: appends go to a live run")


def _live_format(state: live.FileState, chunk: Chunk) -> Format:
    name = state.format or chunk.format
    if name is None and chunk.offset == 0:
        head = (sources.without_bom(chunk.data[:sources.HEAD_BYTES]) if chunk.data is not None
                else sources.read_head(chunk.path))
        if head.startswith(sources.GZIP_MAGIC):
            head = _gunzipped_head(head)
        name = live.sniff_bytes(head, PurePath(chunk.file_name).name)
    if name is None:
        raise IngestError(chunk.file_name, "no format recognises its first bytes", name_the_format())
    fmt = registry.get(name)
    if not live.mode(fmt.name):
        raise IngestError(chunk.file_name, f"{fmt.name} is not followed live; "
                                           f"followed: {', '.join(live.FOLLOWED)}")
    return fmt


def _gunzipped_head(data: bytes) -> bytes:
    import zlib

    try:
        return zlib.decompressobj(wbits=31).decompress(data, sources.HEAD_BYTES)
    except zlib.error:
        return b""


def _chunk_gzipped(chunk: Chunk) -> bool:
    if chunk.data is not None:
        return chunk.offset == 0 and chunk.data[:2] == sources.GZIP_MAGIC
    return sources.is_gzip(chunk.path) if chunk.path else False


def _whole_lines(con, run_id: str, chunk: Chunk, state: live.FileState, fmt: Format) -> bytes:
    """The chunk's whole lines past the committed offset; a DAPO filter line only once its step's
    packed lengths are in the run."""
    if chunk.offset > state.committed:
        raise live.Gap(chunk.file_name, state.committed)
    data = chunk.data if chunk.data is not None else sources.read_bytes(chunk.path)
    _same_as_committed(chunk.file_name, data, chunk.offset, state)
    taken = live.whole_lines(data[state.committed - chunk.offset:])
    return _filter_ready(con, run_id, taken) if fmt.name == "polytrace-filter" else taken


def _same_as_committed(file_name: str, data: bytes, offset: int, state: live.FileState) -> None:
    """Raise Diverged when the bytes `data` (from `offset`) resends differ from the committed tail."""
    start = state.committed - len(state.tail)
    lo, hi = max(offset, start), min(offset + len(data), state.committed)
    if lo < hi and data[lo - offset:hi - offset] != state.tail[lo - start:hi - start]:
        raise live.Diverged(file_name, state.committed, offset)


def _filter_ready(con, run_id: str, data: bytes) -> bytes:
    """The filter lines, in order, up to the first whose step has no samples in the run yet."""
    import msgspec

    lines = data.splitlines(keepends=True)
    wanted = []
    for line in lines:
        try:
            step = msgspec.json.decode(line).get("workload_step") if line.strip() else None
        except (msgspec.DecodeError, AttributeError, RecursionError):
            step = None
        # a bad line (or a step out of range) waits for nothing: the parse says what is wrong with it
        wanted.append(step if isinstance(step, int) and -(2**31) <= step < 2**31 else None)
    present = {r[0] for r in con.execute(
        "SELECT DISTINCT step FROM samples WHERE run_id = $run AND list_contains($steps, step)",
        {"run": run_id, "steps": [s for s in wanted if s is not None]}).fetchall()}
    ready = 0
    for line, step in zip(lines, wanted):
        if step is not None and step not in present:
            break
        ready += len(line)
    return data[:ready]


def _parse_chunk(fmt: Format, file_name: str, data: bytes | Path, offset: int) -> Parsed:
    """Parse whole lines (or a whole file) with the format's own parse, as a file of their own
    named like the followed one (a trace's rank may come from its name)."""
    label = sources.short(file_name)
    if isinstance(data, Path):
        return parse_input(data, fmt.name, label)[0]
    if fmt.name == "verl-console" and not verl_console.STEP_LINE_IN_HEAD.search(data):
        # a log's preamble before its first step: only the run facts it names
        return Parsed(run=verl_console.run_facts(data.decode("utf-8", errors="replace")))
    if not data.strip():
        return Parsed()
    with tempfile.TemporaryDirectory(prefix="polytrace-live-") as tmp:
        path = Path(tmp) / label
        path.write_bytes(data)
        try:
            return parse_input(path, fmt.name, label)[0]
        except IngestError as e:
            where = f"in the bytes from {offset}: " if offset else ""
            raise IngestError(label, where + e.reason, e.hint) from None


def _steps_of(parsed: Parsed) -> set[int]:
    import pyarrow.compute as pc

    steps: set[int] = set()
    for data in [*parsed.tables.values(), parsed.deferred]:
        if isinstance(data, pa.Table) and "step" in data.column_names and data.num_rows:
            steps.update(s for s in pc.unique(data.column("step")).to_pylist() if s is not None)
    return steps


def _write_live(con, run_id: str, tables: dict[str, pa.Table], replace: list[int]) -> int:
    """Insert an append's rows; the net change in rows. The steps in `replace` (a reloaded step
    file) lose their old rows first, and a step's metric logged again replaces its old value
    (as a batch ingest keeps the last value of a step logged twice)."""
    rows = 0
    for table, data in tables.items():
        if not data.num_rows:
            continue
        flags = _filter_flags(con, run_id, replace) if replace and table == "samples" else None
        if replace:
            rows -= _deleted(con, f'DELETE FROM "{table}" WHERE run_id = $run AND step BETWEEN $lo AND $hi '
                                  "AND list_contains($steps, step)",
                             {"run": run_id, "lo": min(replace), "hi": max(replace), "steps": replace})
        if table == "step_metrics":
            rows -= _overridden(con, run_id, data)
        insert(con, table, run_id, data)
        if flags is not None and flags.num_rows:
            with store.registered(con, "_flags", flags):
                con.execute("UPDATE samples SET kept = f.kept, used = f.used FROM _flags f WHERE samples.run_id = ? "
                            "AND samples.step = f.step AND samples.prompt_id = f.prompt_id", [run_id])
        rows += data.num_rows
    return rows


def _filter_flags(con, run_id: str, steps: list[int]) -> pa.Table:
    """The kept/used flags a DAPO filter line set on these steps' prompts: a reloaded step file
    keeps them, as the filter's lines were taken already (a batch ingest applies them last)."""
    return con.sql("SELECT DISTINCT step, prompt_id, kept, used FROM samples WHERE run_id = $run "
                   "AND list_contains($steps, step) AND (kept IS NOT NULL OR used IS NOT NULL)",
                   params={"run": run_id, "steps": steps}).to_arrow_table()


def _deleted(con, sql: str, params: dict) -> int:
    return con.execute(sql, params).fetchall()[0][0]


def _overridden(con, run_id: str, data: pa.Table) -> int:
    """Delete the stored values the new step metrics replace; how many."""
    import pyarrow.compute as pc

    lo, hi = pc.min_max(data.column("step")).values()
    with store.registered(con, "_logged_again", data.select(["step", "key"])):
        # the step range lets the scan skip the run's older row groups
        return _deleted(con, "DELETE FROM step_metrics WHERE run_id = $run AND step BETWEEN $lo AND $hi "
                             "AND EXISTS (SELECT 1 FROM _logged_again n WHERE n.step = step_metrics.step "
                             "AND n.key = step_metrics.key)", {"run": run_id, "lo": lo.as_py(), "hi": hi.as_py()})


def _new_live_run(con, run_id: str, name: str, source: str | None) -> None:
    if exists(con, run_id):
        return
    con.execute("INSERT INTO runs (run_id, name, format, created_at) VALUES (?, ?, '', ?)", [run_id, name, now()])
    con.execute("INSERT INTO live_runs (live_run, source, facts) VALUES (?, ?, '{}')", [run_id, source])


def _live_facts(con, run_id: str, fmt: Format, parsed: Parsed, source: str | None, file_name: str) -> bool:
    """Fill the run's columns as a batch ingest of the same files would: the facts files give,
    first mention wins, then what the format's after_load derives from the run so far. Whether a
    column changed (the per-step aggregates read some, such as max_response_len)."""
    (stored,) = con.execute("SELECT facts FROM live_runs WHERE live_run = ?", [run_id]).fetchone()
    facts = json.loads(stored or "{}")
    origin = Path(source) / file_name if source else None
    fill_missing(facts, {**(fmt.run_facts(origin) if fmt.run_facts and origin else {}), **parsed.run})
    derived: dict = {}
    if fmt.after_load and (parsed.tables or parsed.deferred is not None):
        after = fmt.after_load(con, run_id, [parsed.deferred])
        derived = after.run
        parsed.warnings.extend(after.warnings)
    columns = ("format", *RUN_COLUMNS, "length_unit")
    before = con.execute(f"SELECT {', '.join(columns)} FROM runs WHERE run_id = ?", [run_id]).fetchone()
    current = dict(zip(columns, before))
    if facts.get("framework") is None and derived.get("framework") is None and current["framework"] is None:
        derived["framework"] = vocabulary.detected(con, run_id)
    run = {k: facts[k] if facts.get(k) is not None else derived.get(k, current[k]) for k in RUN_COLUMNS}
    con.execute(f"UPDATE runs SET {', '.join(f'{k} = ?' for k in RUN_COLUMNS)}, format = ? WHERE run_id = ?",
                [*(run[k] for k in RUN_COLUMNS), _live_formats(con, run_id, fmt.name), run_id])
    con.execute("UPDATE live_runs SET facts = ? WHERE live_run = ?", [json.dumps(facts), run_id])
    after = con.execute(f"SELECT {', '.join(columns)} FROM runs WHERE run_id = ?", [run_id]).fetchone()
    return tuple(before[1:]) != tuple(after[1:])


def _live_formats(con, run_id: str, adding: str) -> str:
    """The run's formats as a batch ingest names them: every followed file's, sorted, joined by '+'."""
    have = {r[0] for r in con.execute("SELECT format FROM live_files WHERE live_run = ? AND committed > 0 "
                                      "AND format IS NOT NULL", [run_id]).fetchall()}
    return "+".join(sorted(have | {adding}))


def _keep_state(con, run_id: str, chunk: Chunk, state: live.FileState, fmt: Format, notes: list[str],
                rows: int = 0, warnings: list[str] | None = None, source: str | None = None) -> None:
    """The file's committed offset (live_files) and its line in the ingest log, beside its rows."""
    when = now()
    notes = [*([state.note] if state.note else []), *notes]
    con.execute("DELETE FROM live_files WHERE live_run = ? AND file_name = ?", [run_id, chunk.file_name])
    con.execute("INSERT INTO live_files (live_run, file_name, format, committed, identity, mtime, steps, note, "
                "updated_at, tail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [run_id, chunk.file_name, fmt.name, state.committed, state.identity, state.mtime,
                 state.steps, "; ".join(notes) or None, when, state.tail or None])
    if not exists(con, run_id):
        return
    shown = f"{source}/{chunk.file_name}" if source else chunk.file_name
    logged = con.execute("SELECT ingest_id, warnings FROM ingests WHERE run_id = ? AND file_name = ?",
                         [run_id, shown]).fetchall()
    said = _said_so_far(logged[0][1] if logged else None, [*notes, *(warnings or [])])
    if logged:
        con.execute("UPDATE ingests SET bytes = ?, rows = rows + ?, warnings = ?, finished_at = ? "
                    "WHERE ingest_id = ?", [state.committed, rows, said, when, logged[0][0]])
    else:
        con.execute("INSERT INTO ingests (run_id, file_name, format, bytes, rows, status, warnings, started_at, "
                    "finished_at) VALUES (?, ?, ?, ?, ?, 'ok', ?, ?, ?)",
                    [run_id, shown, fmt.name, state.committed, rows, said, when, when])


def _said_so_far(before: str | None, new: list[str]) -> str | None:
    """A followed file's warnings over all its appends: each append's own (every cut-short line is
    in one of them), the first MAX_WARNINGS kept, then how many more there were."""
    kept = before.split(WARNING_SEPARATOR) if before else []
    more = 0
    if kept and kept[-1].startswith(_MORE):
        more = int(kept.pop()[len(_MORE):].split(" ", 1)[0])
    for text in new:
        if text in kept:
            continue
        if len(kept) < MAX_WARNINGS:
            kept.append(text)
        else:
            more += 1
    return WARNING_SEPARATOR.join([*kept, *([f"{_MORE}{more} more warning(s)"] if more else [])]) or None


def _mark_live(con, run_id: str, steps: list[int]) -> None:
    when = now()
    con.execute("UPDATE live_runs SET last_append_at = $when, "
                "last_step = CASE WHEN $top IS NULL THEN last_step ELSE greatest(coalesce(last_step, $top), $top) END, "
                "last_step_at = CASE WHEN $top IS NULL THEN last_step_at ELSE $when END WHERE live_run = $run",
                {"when": when, "top": max(steps) if steps else None, "run": run_id})
