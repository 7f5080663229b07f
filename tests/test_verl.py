"""verl logs: console/JSONL/W&B-CSV parsing, the verl stage queries, and replay fidelity."""
from __future__ import annotations

import csv
import math
import subprocess
import sys
from pathlib import Path

import pytest

from polytrace.ingest.contract import IngestError
from polytrace.ingest.formats import verl_console, verl_jsonl, wandb_csv
from polytrace.ingest.load import ingest_paths
from polytrace.ingest.registry import detect
from polytrace.queries.catalog import bind, get_query
from polytrace.queries.runner import run_bound

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "verl"
GOLDEN = Path(__file__).resolve().parent / "golden"
NAN, INF = math.nan, math.inf


def rows_of(parsed) -> list[tuple]:
    t = parsed.tables["step_metrics"]
    return list(zip(*(t.column(c).to_pylist() for c in ("step", "key", "value"))))


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def assert_rows(got: list[tuple], want: list[tuple]) -> None:
    assert len(got) == len(want), (got, want)
    for g, w in zip(sorted(got, key=str), sorted(want, key=str)):
        assert len(g) == len(w) and all(same(x, y) for x, y in zip(g, w)), (g, w)


def golden_cell(text: str):
    if text == "":
        return None
    if text in ("true", "false"):
        return text == "true"
    try:
        return float(text)
    except ValueError:
        return text


def assert_golden(columns: list[str], rows: list[tuple], name: str) -> None:
    with open(GOLDEN / f"{name}.csv", newline="") as f:
        header, *expected = list(csv.reader(f))
    assert columns == header
    assert len(rows) == len(expected), rows
    for got, want in zip(rows, expected):
        for col, g, w in zip(columns, got, map(golden_cell, want)):
            assert (g is None) == (w is None) and (g is None or same(g, w)), (name, got[0], col, g, w)


def run_query(con, name: str, **params):
    q = get_query(name)
    result = run_bound(con, q, bind(q, params))
    return result.columns, result.rows


def ingest(con, path: Path, **kw) -> str:
    return ingest_paths(con, [path], **kw).run_id


# --- verl-console ------------------------------------------------------------------------

def test_quirks_golden():
    parsed = verl_console.parse(FIXTURES / "quirks.log")
    long_key = "val-aux/" + "x" * (4096 - len("step:44 - timing_s/gen:7.0 - timing_s/step:14.0 - val-aux/")
                                   - len(":0.5 - val-core/c:0.12"))
    want = [
        # step 40: a validation-only step line; a resumed run, so the first step is 40.
        (40, "val-core/math/acc/mean@1", 0.5), (40, "val-aux/math/reward/mean@1", -0.25),
        # step 41: ANSI colour + (TaskRunner pid=...) prefix; np.float64/np.int32 wrappers, nan, +-inf,
        # negative and scientific values; `note:abc` and `flag:True` are not numbers and are skipped.
        (41, "timing_s/gen", 12.5), (41, "timing_s/old_log_prob", 2.0), (41, "timing_s/update_actor", 4.0),
        (41, "timing_s/step", 20.0), (41, "global_seqlen/min", 900.0), (41, "global_seqlen/max", 1200.0),
        (41, "global_seqlen/mean", 1000.0), (41, "global_seqlen/balanced_max", 1001.0),
        (41, "num_turns/min", 2.0), (41, "actor/ppo_kl", -5.5e-05), (41, "actor/pg_loss", -0.0015),
        (41, "critic/score/mean", NAN), (41, "perf/throughput", INF), (41, "critic/rewards/min", -INF),
        (41, "response_length/max", 1000.0),
        # step 42, logged twice: the old-style timing/gen and timing/step become timing_s/*; the second
        # (CRLF) line wins for timing_s/gen (9.0, not 8.0) and adds timing_s/ref; the rest is kept.
        (42, "timing_s/gen", 9.0), (42, "timing_s/step", 16.0), (42, "actor/lr", 1e-06), (42, "timing_s/ref", 3.0),
        # step 43 is inside a traceback line, not a step line. step 44: cut at exactly 4096 characters,
        # so the last piece `val-core/c:0.12` (really 0.1234...) is dropped and the step flagged.
        (44, "timing_s/gen", 7.0), (44, "timing_s/step", 14.0), (44, long_key, 0.5), (44, "log/truncated", 1.0),
        # step 45: the file's last line has no newline (the run died mid-write): `val-core/b:0.12` dropped.
        (45, "timing_s/gen", 5.0), (45, "timing_s/step", 9.5), (45, "log/truncated", 1.0),
    ]
    assert_rows(rows_of(parsed), want)
    assert parsed.run == {"framework": "verl", "model": "Qwen3-4B", "max_response_len": 8192}
    assert parsed.warnings == [
        "2 value(s) that are not numbers skipped: step(s) 41, e.g. note",  # note:abc and flag:True
        "1 step(s) logged more than once, later values win key by key: 42",
        "2 step line(s) cut short, their unfinished last pair dropped and log/truncated=1 set: step(s) 44, 45",
        "2 old-style timing/<stage> value(s) stored as timing_s/<stage>",
    ]


def test_quirks_log_is_detected_and_loaded(con):
    path = FIXTURES / "quirks.log"
    assert detect(path).name == "verl-console"
    result = ingest_paths(con, [path])
    assert result.rows == {"step_metrics": 28}  # the 2 + 15 + 4 + 4 + 3 rows above
    assert con.execute("SELECT framework, model, max_response_len FROM runs WHERE run_id = ?",
                       [result.run_id]).fetchone() == ("verl", "Qwen3-4B", 8192)
    note, error = con.execute("SELECT warnings, error FROM ingests WHERE run_id = ?", [result.run_id]).fetchone()
    assert error is None  # a loaded file has warnings, not an error
    assert "later values win key by key: 42" in note


def test_a_schema_7_database_moves_a_loaded_files_warnings_out_of_error(db_path):
    from polytrace import store

    con = store.open(db_path)
    run_id = ingest_paths(con, [FIXTURES / "quirks.log"]).run_id
    with pytest.raises(IngestError):  # a failed file keeps its reason
        ingest_paths(con, [FIXTURES / "quirks.log"], format="verl-jsonl", force=True)
    con.execute("UPDATE ingests SET error = warnings WHERE status = 'ok'")  # as schema 7 kept them
    con.execute("ALTER TABLE ingests DROP COLUMN warnings")
    con.execute("UPDATE store_meta SET value = '7' WHERE key = 'schema_version'")
    con.close()
    con = store.open(db_path)
    try:
        got = con.execute("SELECT run_id, status, error IS NULL, warnings LIKE '%key by key: 42%' FROM ingests "
                          "ORDER BY ingest_id").fetchall()
        assert got == [(run_id, "ok", True, True), (None, "failed", False, None)]
    finally:
        con.close()


def independent_counts(path: Path) -> tuple[int, float, float, int]:
    """Step lines, and sums of timing_s/gen and timing_s/step, with plain string handling only."""
    steps, gen, step_s, with_gen = set(), 0.0, 0.0, 0
    for line in path.read_text().split("\n"):
        if not line.startswith("step:"):
            continue
        pieces = line.split(" - ")
        steps.add(int(pieces[0][len("step:"):]))
        if len(line) == 4096:  # W&B's cut: the last piece is unfinished
            pieces = pieces[:-1]
        for piece in pieces:
            key, _, value = piece.partition(":")
            if key == "timing_s/gen":
                gen += float(value)
                with_gen += 1
            elif key == "timing_s/step":
                step_s += float(value)
    return len(steps), gen, step_s, with_gen


@pytest.mark.parametrize("log", ["qwen3-4b-agent-run-i80f2v90.output.log",
                                 "qwen3-4b-agent-run-ry3hgbx5.output.log"])
def test_real_logs_match_an_independent_count(shared_data, con, log):
    path = shared_data / "verl-logs" / log
    n_steps, gen, step_s, with_gen = independent_counts(path)
    assert n_steps > 100 and with_gen > 100
    assert detect(path).name == "verl-console"
    run_id = ingest(con, path)
    got = con.execute(
        "SELECT count(DISTINCT step), sum(value) FILTER (WHERE key = 'timing_s/gen'),"
        " sum(value) FILTER (WHERE key = 'timing_s/step'),"
        " count(*) FILTER (WHERE key = 'timing_s/gen') FROM step_metrics WHERE run_id = ?",
        [run_id]).fetchone()
    assert got[0] == n_steps and got[3] == with_gen
    assert math.isclose(got[1], gen, rel_tol=1e-12) and math.isclose(got[2], step_s, rel_tol=1e-12)
    cut = con.execute("SELECT count(*) FROM step_metrics WHERE run_id = ? AND key = 'log/truncated'",
                      [run_id]).fetchone()[0]
    assert cut == sum(1 for line in path.read_text().split("\n")
                      if line.startswith("step:") and len(line) == 4096)
    # In these logs every line with a stage timing has timing_s/gen, so the stage rows are those lines.
    columns, rows = run_query(con, "stage_breakdown", run_id=run_id)
    assert len(rows) == with_gen
    assert math.isclose(sum(r[columns.index("gen_s")] for r in rows), gen, rel_tol=1e-12)


def test_no_step_line_is_rejected(con, tmp_path):
    noise = tmp_path / "noise.log"
    noise.write_text("wandb: Detected [openai] in use.\nactor_rollout_ref.model.path=/m/Qwen\nTraceback\n")
    with pytest.raises(IngestError, match=r"^noise\.log: no verl step line \('step:N - key:value - \.\.\.'\) found$"):
        ingest_paths(con, [noise])
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM step_metrics").fetchone()[0] == 0
    assert con.execute("SELECT status FROM ingests").fetchall() == [("failed",)]


def test_binary_file_is_rejected(con, tmp_path):
    blob = tmp_path / "output.log"
    blob.write_bytes(b"step:1 - a:1\x00\x01\x02" * 100)
    with pytest.raises(IngestError, match=r"^output\.log: unknown format"):
        ingest_paths(con, [blob])
    with pytest.raises(IngestError, match=r"^output\.log: binary data, not a verl console log$"):
        ingest_paths(con, [blob], format="verl-console")
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0


def test_last_line_cut_mid_pair_loads_everything_before(tmp_path):
    log = tmp_path / "cut.log"
    log.write_text("step:1 - timing_s/gen:1.0 - timing_s/step:2.0\n"
                   "step:2 - timing_s/gen:3.0 - timing_s/step:np.float64(4.2")
    parsed = verl_console.parse(log)
    assert rows_of(parsed) == [(1, "timing_s/gen", 1.0), (1, "timing_s/step", 2.0),
                               (2, "timing_s/gen", 3.0), (2, "log/truncated", 1.0)]


# --- verl-jsonl and wandb-csv ------------------------------------------------------------

def test_verl_jsonl_golden():
    path = FIXTURES / "metrics.jsonl"
    assert detect(path).name == "verl-jsonl"
    parsed = verl_jsonl.parse(path)
    # Booleans, strings and nested dicts are not metrics; NaN/Infinity literals (Python's json
    # writes them) are kept; step 2's second line adds timing_s/step; timing/gen is renamed.
    assert_rows(rows_of(parsed), [
        (1, "timing_s/gen", 6.0), (1, "timing_s/step", 10.0), (1, "actor/lr", 1e-06),
        (2, "timing_s/gen", 4.0), (2, "critic/score/mean", NAN), (2, "perf/throughput", INF),
        (2, "timing_s/step", 8.0),
    ])
    assert parsed.run == {"framework": "verl"}
    assert len(parsed.warnings) == 2 and "key by key: 2" in parsed.warnings[0]


def test_verl_jsonl_cut_last_line_and_bad_line(tmp_path):
    cut = tmp_path / "cut.jsonl"
    cut.write_text('{"step": 1, "data": {"a": 1}}\n{"step": 2, "data": {"a": 2, "b"')
    parsed = verl_jsonl.parse(cut)
    assert rows_of(parsed) == [(1, "a", 1.0)]
    assert parsed.warnings == ["last line 2 is cut off (no newline) and was skipped"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"step": "one", "data": {}}\n{"step": 2, "data": {"a": 2}}\n')
    with pytest.raises(IngestError, match=r"^bad\.jsonl: line 1: "):
        verl_jsonl.parse(bad)


def test_wandb_csv_golden():
    path = FIXTURES / "history.csv"
    assert detect(path).name == "wandb-csv"
    parsed = wandb_csv.parse(path)
    # Empty cells are missing, not 0; the `note` text column yields nothing; NaN/inf are kept;
    # the last row has no _step and is skipped with a warning.
    assert_rows(rows_of(parsed), [
        (1, "_runtime", 10.5), (1, "timing_s/gen", 6.0), (1, "response_length/mean", 1000.0),
        (2, "_runtime", 20.5), (2, "response_length/mean", NAN),
        (3, "_runtime", 30.0), (3, "timing_s/gen", INF), (3, "response_length/mean", -1000.0),
    ])
    assert parsed.warnings == ["1 row(s) without a whole-number _step skipped"]


def test_sniffing_does_not_steal_other_formats(tmp_path):
    packed = tmp_path / "packed_lengths_step_0.jsonl"
    packed.write_text('{"step": 0, "rank": 0, "dp_rank": 0, "tp_rank": 0, "local_index": 0, '
                      '"input": 10, "output": [1, 3], "n_sampling": 2, "validate": false}\n')
    samples = tmp_path / "samples.csv"
    samples.write_text("step,prompt_id,sample_id,prompt_len,response_len\n0,0,0,10,5\n")
    mine = (verl_console.FORMAT, verl_jsonl.FORMAT, wandb_csv.FORMAT)
    for path in (packed, samples):
        head = path.read_bytes()
        assert not any(f.sniff(head, path.name) for f in mine), path.name
    assert detect(packed).name == "polytrace-packed"


def test_sniffing_ignores_the_other_shared_traces(shared_data):
    from polytrace.ingest.sources import read_head

    mine = (verl_console.FORMAT, verl_jsonl.FORMAT, wandb_csv.FORMAT)
    checked = 0
    for path in sorted(shared_data.rglob("*")):
        if not path.is_file() or "verl-logs" in path.parts or path.name.startswith("LICENSE"):
            continue
        head = read_head(path)
        claimed = [f.name for f in mine if f.sniff(head, path.name)]
        assert not claimed, (path, claimed)
        checked += 1
    assert checked > 20


# --- queries -----------------------------------------------------------------------------

@pytest.fixture
def small_run(con) -> str:
    return ingest(con, FIXTURES / "small.log")


@pytest.mark.parametrize("name", ["stage_breakdown", "verl_imbalance", "rollout_tail_verl", "throughput"])
def test_stage_query_goldens(con, small_run, name):
    # small.log by hand. Step 1: stages 6+1+1+0.5+0.5+0.5 = 9.5 of a 10 s step, other 0.5, shares /10;
    # seqlen max/mean 1500/1000 = 1.5, balanced 1100/1000 = 1.1; slowest 5.4/gen 6 = 0.9, 5.4 > 3*1.5
    # so long_tail; response 4000/1000 = 4. Step 2: only gen 4 and update_actor 2 of 8 s (missing
    # stages stay empty, never 0), other 2; slowest from generation_timing/max 3/4 = 0.75, no mean
    # so no flag; response 1000/500 = 2. Step 3 is validation-only: no row anywhere. Step 4:
    # old-style timing/gen 3 of timing/step 4, other 1; seqlen mean 0 and response mean 0 give
    # NULL ratios (guarded division); slowest 2/3, 2 > 3*0.5 so long_tail. Step 5: gen 2 and no
    # step time, so other and every share are NULL.
    assert_golden(*run_query(con, name, run_id=small_run), name)


def test_metric_and_metric_keys_goldens(con, small_run):
    # timing_s/gen per step in small.log: 6, 4, old-style 3 (step 4), 2; step 3 has none.
    assert_golden(*run_query(con, "metric", run_id=small_run, key="timing_s/gen"), "metric")
    # keys.log: a/x = 1, 3, -1 over steps 1..3; b/y = NaN (ignored by min/max), 2 over steps 1..2;
    # timing_s/gen once, read by the catalog under that canonical name (verl: identity).
    keys_run = ingest(con, FIXTURES / "keys.log")
    assert_golden(*run_query(con, "metric_keys", run_id=keys_run), "metric_keys")


def test_step_timings_view_keeps_missing_stages_null(con, small_run):
    row = con.execute("SELECT gen_s, ref_s, step_s FROM step_timings WHERE run_id = ? AND step = 2",
                      [small_run]).fetchone()
    assert row == (4.0, None, 8.0)
    assert con.execute("SELECT count(*) FROM step_timings WHERE run_id = ? AND step = 3",
                       [small_run]).fetchone()[0] == 0


# --- fidelity ----------------------------------------------------------------------------

@pytest.fixture
def fidelity_runs(con) -> tuple[str, str]:
    return ingest(con, FIXTURES / "bench.log"), ingest(con, FIXTURES / "formal.log")


def test_fidelity_by_index_golden(con, fidelity_runs):
    # Timed steps: bench 0,1,2; formal 1,2,4 (3 is validation-only), paired by position.
    # (0,1): gen (11-10)/10 = +10%, update_actor (4-5)/5 = -20%, step (21-20)/20 = +5%
    #        -> 100 - (10+20+5)/3 = 88.333
    # (1,2): gen (8.4-8)/8 = +5%, reward formal 0 -> error NULL (left out), step 0% -> 100 - 5/2 = 97.5
    # (2,4): gen 0%, ref only in bench (no pair), step (9-10)/10 = -10% -> 100 - 10/2 = 95
    # overall: 100 - (10+20+5+5+0+0+10)/7 = 100 - 50/7 = 92.857
    bench, formal = fidelity_runs
    assert_golden(*run_query(con, "fidelity", bench_run=bench, formal_run=formal), "fidelity_index")


def test_fidelity_by_step_golden(con, fidelity_runs):
    # Common step numbers: 1 and 2. (1,1): gen (8.4-10)/10 = -16%, step (16-20)/20 = -20% -> 82;
    # reward and update_actor are logged by one side only. (2,2): gen (4-8)/8 = -50%,
    # step (9-16)/16 = -43.75% -> 53.125. Overall 100 - (16+20+50+43.75)/4 = 67.5625.
    bench, formal = fidelity_runs
    assert_golden(*run_query(con, "fidelity", bench_run=bench, formal_run=formal, align="step"),
                  "fidelity_step")


def test_fidelity_rejects_unknown_alignment(con, fidelity_runs):
    from polytrace.queries.runner import BadValue

    with pytest.raises(BadValue, match="align must be index or step"):
        run_query(con, "fidelity", bench_run=fidelity_runs[0], formal_run=fidelity_runs[1], align="time")


def cli(*args):
    return subprocess.run([sys.executable, "-m", "polytrace", *args], capture_output=True, text=True)


def test_fidelity_cli(tmp_path):
    db = str(tmp_path / "f.duckdb")
    bench = cli("ingest", str(FIXTURES / "bench.log"), "--db", db).stdout.strip()
    formal = cli("ingest", str(FIXTURES / "formal.log"), "--db", db).stdout.strip()
    out = cli("fidelity", bench, formal, "--db", db, "--output", "csv")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "idx,bench_step,formal_step,stage,bench_s,formal_s,error_pct,step_accuracy,accuracy"
    assert len(out.stdout.splitlines()) == 9
    assert out.stderr.strip() == "accuracy 92.86% over 3 step(s), 8 stage pair(s), aligned by index"
    by_step = cli("fidelity", bench, formal, "--db", db, "--by", "step", "--output", "json")
    assert by_step.stderr.strip() == "accuracy 67.56% over 2 step(s), 4 stage pair(s), aligned by step"
    missing = cli("fidelity", bench, "nope", "--db", db)
    assert missing.returncode == 2 and missing.stderr.strip() == f"error: no run 'nope' in {db}"
