"""Golden tests per format: a tiny hand-made file in, canonical rows (derived by hand) out."""
from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from polytrace.ingest import registry
from polytrace.ingest.contract import IngestError
from polytrace.ingest.layout import run_facts
from polytrace.ingest.load import ingest_paths
from tests.conftest import FIXTURES
from tests.corpus.seeds import tar_gz, zip_of
from tests.ingest_settings import set_ingest_env

FORMATS = FIXTURES / "formats"


def rows(con, sql: str, run_id: str) -> list[tuple]:
    return con.execute(sql, [run_id]).fetchall()


def run_row(con, run_id: str) -> tuple:
    return con.execute("SELECT format, framework, task, max_response_len FROM runs WHERE run_id = ?",
                       [run_id]).fetchone()


@pytest.mark.parametrize("file, fmt", [
    ("reward_timings_step_3.jsonl", "polytrace-reward-timings"),
    ("dapo/dapo_filter_indices.jsonl", "polytrace-filter"),
    ("dapo/packed_lengths_step_0.jsonl", "polytrace-packed"),
    ("multiturn_workload_step_7.jsonl", "polytrace-multiturn"),
    ("polytrace_2025_nested.json", "polytrace-2025"),
    ("polytrace_2025_multiturn.json", "polytrace-2025"),
    ("samples.csv", "samples-table"),
])
def test_detect_claims_each_fixture(file, fmt):
    assert registry.detect(FORMATS / file).name == fmt


def test_reward_timings_golden(con):
    result = ingest_paths(con, [FORMATS / "reward_timings_step_3.jsonl"])
    assert result.format == "polytrace-reward-timings"
    # one row per line: reward_time_s -> seconds, response_sum -> tokens;
    # the validate=true line goes to stage val_reward, not reward
    assert rows(con, "SELECT step, rank, dp_rank, tp_rank, stage, seconds, batch_size, tokens "
                     "FROM rank_stage WHERE run_id = ? ORDER BY stage, rank", result.run_id) == [
        (3, 0, 0, 0, "reward", 12.5, 4, 4000),
        (3, 4, 1, 0, "reward", 20.25, 4, 6400),
        (3, 0, 0, 0, "val_reward", 1.0, 2, 50),
    ]


def test_filter_golden_sets_kept_and_used(con):
    result = ingest_paths(con, [FORMATS / "dapo"])
    assert result.format == "polytrace-filter+polytrace-packed"
    # step 0: prompts 0,1,2 in file order; kept [0, 2], used [2]
    # step 1: prompts 0,1; kept [1], used [1]. Every sample of a prompt shares its flags.
    got = rows(con, "SELECT step, prompt_id, sample_id, response_len, kept, used FROM samples "
                    "WHERE run_id = ? ORDER BY step, prompt_id, sample_id", result.run_id)
    assert got == [
        (0, 0, 0, 100, True, False), (0, 0, 1, 200, True, False),
        (0, 1, 0, 110, False, False), (0, 1, 1, 210, False, False),
        (0, 2, 0, 120, True, True), (0, 2, 1, 220, True, True),
        (1, 0, 0, 300, False, False), (1, 0, 1, 400, False, False),
        (1, 1, 0, 310, True, True), (1, 1, 1, 410, True, True),
    ]


def test_filter_alone_is_refused(con):
    with pytest.raises(IngestError, match="no packed lengths in the same ingest"):
        ingest_paths(con, [FORMATS / "dapo" / "dapo_filter_indices.jsonl"])


def test_filter_with_other_prompt_count_is_refused(con, tmp_path):
    # step 1's packed file holds 2 prompts; claim 3 and the positions no longer line up
    shutil.copytree(FORMATS / "dapo", tmp_path / "dapo")
    path = tmp_path / "dapo" / "dapo_filter_indices.jsonl"
    path.write_text(path.read_text().replace('"prompt_count": 2,', '"prompt_count": 3,'))
    with pytest.raises(IngestError, match="step 1 prompt_count 3 but its packed lengths hold 2"):
        ingest_paths(con, [tmp_path / "dapo"])


def test_filter_index_out_of_range_is_refused(con, tmp_path):
    shutil.copytree(FORMATS / "dapo", tmp_path / "dapo")
    path = tmp_path / "dapo" / "dapo_filter_indices.jsonl"
    path.write_text(path.read_text().replace('"kept_prompt_indices": [0, 2]', '"kept_prompt_indices": [0, 3]'))
    with pytest.raises(IngestError, match=r"kept index 3 of step 0 is outside 0\.\.2"):
        ingest_paths(con, [tmp_path / "dapo"])


def test_multiturn_golden(con):
    result = ingest_paths(con, [FORMATS / "multiturn_workload_step_7.jsonl"])
    assert result.rows == {"samples": 3, "tool_calls": 3, "turns": 5}
    # samples: prompt_group_id/sample_id as keys, final_response_len as response_len;
    # (0,1) is truncated (finish_reason length, and 100 >= max_response_len 100); no ranks
    assert rows(con, "SELECT step, prompt_id, sample_id, rank, dp_rank, prompt_len, response_len, "
                     "truncated, validate, turn_count, tool_call_count, finish_reason FROM samples "
                     "WHERE run_id = ? ORDER BY prompt_id, sample_id", result.run_id) == [
        (7, 0, 0, None, None, 50, 60, False, False, 2, 1, "stop"),
        (7, 0, 1, None, None, 50, 100, True, False, 1, 0, "length"),
        (7, 1, 0, None, None, 40, 60, False, True, 2, 2, "stop"),
    ]
    assert rows(con, "SELECT prompt_id, sample_id, turn, prompt_tokens, cached_tokens, "
                     "completion_tokens, engine_latency_s, finish_reason, tool_call_count FROM turns "
                     "WHERE run_id = ? ORDER BY prompt_id, sample_id, turn", result.run_id) == [
        (0, 0, 0, 50, 0, 10, 0.5, "tool_calls", 1),
        (0, 0, 1, 90, 59, 20, 1.5, "stop", 0),
        (0, 1, 0, 50, 49, 100, 3.0, "length", 0),
        (1, 0, 0, 40, 0, 5, 0.25, "tool_calls", 2),
        (1, 0, 1, 85, 44, 15, 0.75, "stop", 0),
    ]
    assert rows(con, "SELECT prompt_id, sample_id, turn, tool_name, latency_s, status, "
                     "response_tokens, query_count FROM tool_calls WHERE run_id = ? "
                     "ORDER BY prompt_id, latency_s", result.run_id) == [
        (0, 0, 0, "search", 0.25, "success", 30, 1),
        (1, 0, 0, "search", 0.5, "success", 20, 1),
        (1, 0, 0, "search", 2.0, "timeout", 20, 2),
    ]
    assert run_row(con, result.run_id) == ("polytrace-multiturn", None, "multi-turn", 100)


def test_2025_nested_outputs_golden(con):
    result = ingest_paths(con, [FORMATS / "polytrace_2025_nested.json"])
    # output[i][j] is sample j of prompt i, paired with input[i]
    assert rows(con, "SELECT step, prompt_id, sample_id, prompt_len, response_len FROM samples "
                     "WHERE run_id = ? ORDER BY ALL", result.run_id) == [
        (0, 0, 0, 10, 1), (0, 0, 1, 10, 2), (0, 0, 2, 10, 3),
        (0, 1, 0, 20, 4), (0, 1, 1, 20, 5), (0, 1, 2, 20, 6),
        (1, 0, 0, 30, 7), (1, 0, 1, 30, 8), (1, 0, 2, 30, 9),
    ]
    assert result.warnings == []


def test_2025_flat_outputs_golden(con):
    result = ingest_paths(con, [FORMATS / "polytrace_2025_flat.json"])
    # step 2: 4 outputs over 2 inputs -> k = 2 per prompt: [1, 2] for 10, [3, 4] for 20.
    # step 3: 2 outputs over 3 inputs does not divide -> one prompt per output, paired
    # with input[0] and input[1]; input[2] = 50 has no output (a warning).
    assert rows(con, "SELECT step, prompt_id, sample_id, prompt_len, response_len FROM samples "
                     "WHERE run_id = ? ORDER BY ALL", result.run_id) == [
        (2, 0, 0, 10, 1), (2, 0, 1, 10, 2), (2, 1, 0, 20, 3), (2, 1, 1, 20, 4),
        (3, 0, 0, 30, 5), (3, 1, 0, 40, 6),
    ]
    assert result.warnings == ["step 3: 3 inputs for 2 output groups"]


def test_2025_multiturn_golden(con):
    result = ingest_paths(con, [FORMATS / "polytrace_2025_multiturn.json"])
    # turn k's input[i]/output[i] is turn k of rollout i. Rollout 0 has 3 turns
    # (outputs 3 + 5 + 7 = 15), rollout 1 two turns (4 + 6 = 10); prompt_len is turn 0's input.
    assert rows(con, "SELECT step, prompt_id, sample_id, prompt_len, response_len, turn_count "
                     "FROM samples WHERE run_id = ? ORDER BY ALL", result.run_id) == [
        (5, 0, 0, 10, 15, 3), (5, 1, 0, 20, 10, 2),
    ]
    assert rows(con, "SELECT prompt_id, turn, prompt_tokens, completion_tokens FROM turns "
                     "WHERE run_id = ? ORDER BY ALL", result.run_id) == [
        (0, 0, 10, 3), (0, 1, 15, 5), (0, 2, 22, 7), (1, 0, 20, 4), (1, 1, 26, 6),
    ]
    assert run_row(con, result.run_id)[2] == "multi-turn"


def test_2025_mixed_output_shapes_are_refused(con, tmp_path):
    path = tmp_path / "old.json"
    path.write_text('{"0": {"input": [1, 2], "output": [[1], 2]}}')
    with pytest.raises(IngestError, match="step 0: output mixes lists and numbers"):
        ingest_paths(con, [path])


CSV_EXPECTED = [
    # step, prompt_id, sample_id, dp_rank, prompt_len, response_len, finish_reason, truncated
    (0, 0, 0, 0, 10, 100, "stop", False),
    (0, 0, 1, 1, 10, 2048, "length", True),
    (1, 0, 0, 0, None, 7, "stop", None),
]
CSV_SQL = ("SELECT step, prompt_id, sample_id, dp_rank, prompt_len, response_len, finish_reason, "
           "truncated FROM samples WHERE run_id = ? ORDER BY step, sample_id")


def test_samples_csv_golden(con):
    result = ingest_paths(con, [FORMATS / "samples.csv"])
    assert result.format == "samples-table"
    assert rows(con, CSV_SQL, result.run_id) == CSV_EXPECTED


def test_samples_parquet_golden(con, tmp_path):
    cols = list(zip(*CSV_EXPECTED))
    names = ["step", "prompt_id", "sample_id", "dp_rank", "prompt_len", "response_len",
             "finish_reason", "truncated"]
    path = tmp_path / "samples.parquet"
    pq.write_table(pa.table({n: list(c) for n, c in zip(names, cols)}), path)
    result = ingest_paths(con, [path])
    assert result.format == "samples-table"
    assert rows(con, CSV_SQL, result.run_id) == CSV_EXPECTED


@pytest.mark.parametrize("text, reason", [
    ("step,response_len,colour\n0,1,red\n", "unknown column(s) colour"),
    ("step,response_len\n0,-1\n", "column response_len has a negative length"),
    ("step,response_len\n0,\n", "column response_len has empty values"),
    ("step,response_len\n0,abc\n", "invalid value 'abc'"),
])
def test_samples_csv_defects(con, tmp_path, text, reason):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(IngestError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        ingest_paths(con, [path])


@pytest.mark.parametrize("path, facts", [
    ("/x/verl/profile/packed_length_log/20260614_023133/packed_lengths_step_0.jsonl", {"framework": "verl"}),
    ("/x/verl-video/profile/packed_length_log/1/packed_lengths_step_0.jsonl", {"framework": "verl"}),
    ("/x/rllm/profile/packed_length_log/1/reward_timings_step_0.jsonl", {"framework": "rllm"}),
    ("/x/search_r1/profile/multiturn_workload_log/0617/multiturn_workload_step_0.jsonl", {}),
    ("/x/verl/packed_lengths_step_0.jsonl", {}),
    ("/x/verl/profile/other/packed_lengths_step_0.jsonl", {}),
])
def test_run_facts_from_the_polytrace_layout(path, facts):
    # <repo>/profile/<kind>_log/<stamp>/<file>: the repo names the framework when it is a known one
    assert run_facts(Path(path)) == facts


def test_a_file_named_twice_is_one_input(con):
    dapo = FORMATS / "dapo"
    result = ingest_paths(con, [dapo / "packed_lengths_step_0.jsonl", dapo, dapo / "packed_lengths_step_0.jsonl"])
    # 3 + 2 prompts of 2 samples each, not 3 more for each repeated mention
    assert result.rows["samples"] == 10


def test_multiturn_truncation_is_unknown_without_reason_or_cap(con, tmp_path):
    path = tmp_path / "multiturn_workload_step_0.jsonl"
    path.write_text(
        '{"step": 0, "prompt_group_id": 0, "sample_id": 0, "final_response_len": 9, "turns": []}\n'
        '{"step": 0, "prompt_group_id": 0, "sample_id": 1, "final_response_len": 9, "turns": [], "max_response_len": 9}\n'
        '{"step": 0, "prompt_group_id": 0, "sample_id": 2, "final_response_len": 9, "turns": [], "finish_reason": "stop"}\n')
    result = ingest_paths(con, [path])
    # no reason, no cap -> NULL; 9 >= cap 9 -> true; 'stop' without a cap -> false
    assert rows(con, "SELECT sample_id, truncated, turn_count, tool_call_count FROM samples "
                     "WHERE run_id = ? ORDER BY sample_id", result.run_id) == [
        (0, None, 0, 0), (1, True, 0, 0), (2, False, 0, 0)]


def test_2025_output_groups_win_over_output(con, tmp_path):
    # the suite's generator reads output_groups first; the flat output beside it is ignored
    path = tmp_path / "old.json"
    path.write_text('{"4": {"input": [10], "output": [99], "output_groups": [[1, 2]]}}')
    result = ingest_paths(con, [path])
    assert rows(con, "SELECT step, prompt_id, sample_id, prompt_len, response_len FROM samples "
                     "WHERE run_id = ? ORDER BY ALL", result.run_id) == [(4, 0, 0, 10, 1), (4, 0, 1, 10, 2)]


# --- every format is self-contained ------------------------------------------------------------

def write_sample(fmt, root: Path) -> list[Path]:
    """The format's sample written under `root`; its path arguments."""
    sample = fmt.sample()
    for rel, data in sample.files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return [root / a for a in sample.args]


@pytest.mark.parametrize("name", [f.name for f in registry.FORMATS])
def test_every_format_has_a_sample_that_detects_as_it_and_ingests(con, tmp_path, name):
    fmt = registry.get(name)
    args = write_sample(fmt, tmp_path)
    claimed = [registry.claiming(p) if p.is_dir() else registry.detect(p) for p in args]
    assert fmt in claimed
    result = ingest_paths(con, args)
    assert name in result.format.split("+")
    assert sum(result.rows.values()) > 0


def test_no_format_module_imports_another():
    import ast

    import polytrace.ingest.formats as formats

    folder = Path(formats.__file__).parent
    names = {p.stem for p in folder.glob("*.py")} - {"__init__"}
    imports = {}
    for name in sorted(names):
        tree = ast.parse((folder / f"{name}.py").read_text())
        found = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                 for alias in node.names}
        found |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        found |= {f"{node.module}.{alias.name}" for node in ast.walk(tree)
                  if isinstance(node, ast.ImportFrom) for alias in node.names}
        # a relative import can only reach a sibling format
        found |= {"polytrace.ingest.formats (relative)" for node in ast.walk(tree)
                  if isinstance(node, ast.ImportFrom) and node.level}
        imports[name] = sorted(m for m in found if m.startswith("polytrace.ingest.formats"))
    assert len(imports) == len(registry.FORMATS)
    assert imports == {name: [] for name in names}


# --- containers, opened at the source layer for every format -------------------------------------

def test_a_zip_of_packed_files_ingests_like_the_files(tmp_path, capsys):
    from polytrace import store
    from polytrace.cli import main

    dapo = FORMATS / "dapo"
    members = {f"logs/{p.name}": p.read_bytes() for p in sorted(dapo.iterdir())}
    archive = tmp_path / "run.zip"
    archive.write_bytes(zip_of({**members, "logs/.DS_Store": b"\0\1", "logs/README.md": b"notes\n"}))
    db = tmp_path / "pt.duckdb"
    assert main(["ingest", str(archive), "--db", str(db)]) == 0
    run_id = capsys.readouterr().out.split()[-1]
    con = store.open(db)
    try:
        got = rows(con, "SELECT step, prompt_id, sample_id, response_len, kept, used FROM samples "
                        "WHERE run_id = ? ORDER BY step, prompt_id, sample_id", run_id)
        assert len(got) == 10 and got[4] == (0, 2, 0, 120, True, True)  # as the golden above
        # each member is an input named archive!member; what was skipped is said once
        log = rows(con, "SELECT file_name, format, warnings FROM ingests WHERE run_id = ? "
                        "ORDER BY file_name", run_id)
        assert [(name, fmt) for name, fmt, _ in log] == [
            (f"{archive}!logs/dapo_filter_indices.jsonl", "polytrace-filter"),
            (f"{archive}!logs/packed_lengths_step_0.jsonl", "polytrace-packed"),
            (f"{archive}!logs/packed_lengths_step_1.jsonl", "polytrace-packed")]
        assert sorted(e for _, _, e in log if e) == [
            "run.zip: skipped 1 hidden member(s): logs/.DS_Store; "
            "run.zip: skipped 1 member(s) no format recognises: logs/README.md"]
        # the same content as the files themselves: the same run
        assert ingest_paths(con, [dapo]).existing
        # the archive again: the same run, and what it skipped is said again, not dropped
        again = ingest_paths(con, [archive])
        assert again.existing and again.warnings == [
            "run.zip: skipped 1 hidden member(s): logs/.DS_Store",
            "run.zip: skipped 1 member(s) no format recognises: logs/README.md"]
    finally:
        con.close()


def test_a_directory_says_what_it_skipped_and_hashes_only_what_it_reads(con, tmp_path, monkeypatch):
    """A job's output folder: logs beside a checkpoint. The checkpoint is named in a warning and
    never read whole (hashing it would cost seconds a GB)."""
    from polytrace.ingest import sources

    job = tmp_path / "job"
    shutil.copytree(FORMATS / "dapo", job / "logs")
    (job / "global_step_10").mkdir()
    (job / "global_step_10" / "model.pt").write_bytes(b"\x80\x02" + bytes(4096))
    hashed = []
    sha256_file = sources.sha256_file
    monkeypatch.setattr(sources, "sha256_file", lambda path: hashed.append(path.name) or sha256_file(path))
    result = ingest_paths(con, [job])
    assert result.warnings == ["job: skipped 1 file(s) no format recognises: global_step_10/model.pt"]
    assert sorted(hashed) == sorted(p.name for p in (FORMATS / "dapo").iterdir())


def test_archive_members_share_one_inflate_limit(con, tmp_path, monkeypatch):
    # two members of 60 kB each, within a 100 kB limit one by one but not together
    line = b'{"step": 0, "input": 10, "output": [1, 3]}\n'
    member = line * (60_000 // len(line))
    archive = tmp_path / "two.zip"
    archive.write_bytes(zip_of({"packed_lengths_step_0.jsonl": member,
                                "packed_lengths_step_1.jsonl": member.replace(b'"step": 0', b'"step": 1')}))
    set_ingest_env(monkeypatch, "POLYTRACE_MAX_INFLATE_BYTES", "100000")
    with pytest.raises(IngestError) as e:
        ingest_paths(con, [archive])
    assert str(e.value) == ("two.zip!packed_lengths_step_1.jsonl: inflates past 100000 bytes "
                            "(limit POLYTRACE_MAX_INFLATE_BYTES)")
    set_ingest_env(monkeypatch, "POLYTRACE_MAX_INFLATE_BYTES", "200000")
    assert ingest_paths(con, [archive]).rows == {"samples": 2 * 2 * (60_000 // len(line))}


def test_a_tar_gz_of_a_csv_is_detected_member_by_member(con, tmp_path):
    archive = tmp_path / "tables.tgz"
    archive.write_bytes(tar_gz({"exports/samples.csv": (FORMATS / "samples.csv").read_bytes()}))
    result = ingest_paths(con, [archive])
    assert result.format == "samples-table"
    assert rows(con, CSV_SQL, result.run_id) == CSV_EXPECTED


BOM = b"\xef\xbb\xbf"


@pytest.mark.parametrize("name,text,table,rows", [
    # the first step line hid behind the byte order mark: one step of two was stored
    ("bom.log", b"step:1 - timing_s/step:2.0\nstep:2 - timing_s/step:3.0\n", "step_metrics", 2),
    # the packed file was not recognised at all
    ("packed_lengths_step_0.jsonl",
     b'{"step": 0, "rank": 0, "dp_rank": 0, "tp_rank": 0, "local_index": 0, "input": 10, "output": [1, 3], '
     b'"n_sampling": 2, "validate": false}\n', "samples", 2),
])
def test_a_utf8_byte_order_mark_hides_nothing(con, tmp_path, name, text, table, rows):
    path = tmp_path / name
    path.write_bytes(BOM + text)
    result = ingest_paths(con, [path])
    assert result.rows[table] == rows
    # the same text without the mark is the same run, row for row
    plain = tmp_path / "plain" / name
    plain.parent.mkdir()
    plain.write_bytes(text)
    fresh = ingest_paths(con, [plain], force=True)
    assert fresh.rows == result.rows


def test_what_was_skipped_is_named_in_full_up_to_ten_then_counted():
    from polytrace.ingest.sources import listed

    assert listed(["a"]) == "a"
    assert listed([f"f{i}" for i in range(10)]) == ", ".join(f"f{i}" for i in range(10))
    assert listed([f"f{i}" for i in range(13)]) == ", ".join(f"f{i}" for i in range(10)) + " and 3 more"
