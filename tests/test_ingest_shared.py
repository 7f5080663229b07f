"""Every PolyTrace file and directory in ../shared/data/polytrace ingests, with counts checked against the source."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from polytrace.ingest.load import ingest_paths

pytestmark = pytest.mark.shared_data

LOGS = "polytrace/{repo}/profile/packed_length_log/{stamp}"
DAPO = [LOGS.format(repo="verl", stamp="20260614_023133"), LOGS.format(repo="verl", stamp="20260610_092349")]
RLLM = LOGS.format(repo="rllm", stamp="20260616_024512")
VIDEO = LOGS.format(repo="verl-video", stamp="20260609_033329")
SEARCH = "polytrace/search_r1/profile/multiturn_workload_log/0617_0223"


def source_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_every_polytrace_jsonl_file_ingests_on_its_own(con, shared_data):
    # the filter file alone has no samples to update, so it is checked with its directory
    files = [p for p in sorted((shared_data / "polytrace").rglob("*.jsonl"))
             if p.name != "dapo_filter_indices.jsonl"]
    assert len(files) >= 30
    for path in files:
        result = ingest_paths(con, [path])
        assert result.rows, path


@pytest.mark.parametrize("log", DAPO)
def test_dapo_steps_have_96_prompts_of_8_split_over_two_dp_ranks(con, shared_data, log):
    result = ingest_paths(con, [shared_data / log])
    per_step = con.execute(
        "SELECT step, count(*), count(DISTINCT prompt_id), count(*) FILTER (WHERE dp_rank = 0), "
        "count(*) FILTER (WHERE dp_rank = 1), max(sample_id) FROM samples WHERE run_id = ? "
        "GROUP BY step ORDER BY step", [result.run_id]).fetchall()
    assert per_step == [(step, 768, 96, 384, 384, 7) for step in range(6)]
    assert con.execute("SELECT framework FROM runs WHERE run_id = ?", [result.run_id]).fetchone() == ("verl",)


def test_dapo_filter_sets_kept_and_used_as_the_filter_file_counts(con, shared_data):
    log = shared_data / DAPO[0]
    result = ingest_paths(con, [log])
    assert result.format == "polytrace-filter+polytrace-packed"
    got = con.execute(
        "SELECT step, count(DISTINCT prompt_id) FILTER (WHERE kept), "
        "count(DISTINCT prompt_id) FILTER (WHERE used), count(*) FILTER (WHERE kept IS NULL), "
        "count(*) FILTER (WHERE used AND NOT kept) FROM samples WHERE run_id = ? "
        "GROUP BY step ORDER BY step", [result.run_id]).fetchall()
    want = [(f["workload_step"], f["kept_prompt_count"], f["used_prompt_count"], 0, 0)
            for f in source_lines(log / "dapo_filter_indices.jsonl")]
    assert got == want
    # the flags sit on the very prompts the indices name (file order within the step)
    first = source_lines(log / "dapo_filter_indices.jsonl")[1]
    kept = con.execute("SELECT DISTINCT prompt_id FROM samples WHERE run_id = ? AND step = ? AND kept "
                       "ORDER BY 1", [result.run_id, first["workload_step"]]).fetchall()
    assert [k for (k,) in kept] == first["kept_prompt_indices"]


def test_rllm_gives_samples_and_reward_rows(con, shared_data):
    log = shared_data / RLLM
    result = ingest_paths(con, [log])
    assert result.format == "polytrace-packed+polytrace-reward-timings"
    assert con.execute("SELECT framework FROM runs WHERE run_id = ?", [result.run_id]).fetchone() == ("rllm",)
    want = [(r["step"], r["rank"], r["dp_rank"], r["reward_time_s"], r["batch_size"], r["response_sum"])
            for p in sorted(log.glob("reward_timings_step_*.jsonl")) for r in source_lines(p)]
    got = con.execute("SELECT step, rank, dp_rank, seconds, batch_size, tokens FROM rank_stage "
                      "WHERE run_id = ? AND stage = 'reward' ORDER BY step, rank", [result.run_id]).fetchall()
    assert got == sorted(want) and len(got) == 6
    n_samples = sum(len(r["output"]) for p in log.glob("packed_lengths_step_*.jsonl")
                    for r in source_lines(p))
    assert result.rows["samples"] == n_samples
    # the reward rank's batch is its samples: batch_size = samples on that dp rank
    mismatch = con.execute(
        "SELECT count(*) FROM rank_stage r WHERE run_id = ? AND batch_size <> (SELECT count(*) "
        "FROM samples s WHERE s.run_id = r.run_id AND s.step = r.step AND s.dp_rank = r.dp_rank)",
        [result.run_id]).fetchone()[0]
    assert mismatch == 0


def test_search_r1_rollouts_turns_and_tool_calls_match_an_independent_count(con, shared_data):
    log = shared_data / SEARCH
    result = ingest_paths(con, [log])
    want = {}
    for path in sorted(log.glob("multiturn_workload_step_*.jsonl")):
        lines = source_lines(path)
        want[lines[0]["step"]] = (len(lines), sum(len(r["turns"]) for r in lines),
                                  sum(len(r["tool_calls"]) for r in lines),
                                  sum(r["final_response_len"] for r in lines))
    per_step = {table: dict(con.execute(
        f"SELECT step, count(*) FROM {table} WHERE run_id = ? GROUP BY step", [result.run_id]).fetchall())
        for table in ("samples", "turns", "tool_calls")}
    responses = dict(con.execute("SELECT step, sum(response_len)::BIGINT FROM samples "
                                 "WHERE run_id = ? GROUP BY step", [result.run_id]).fetchall())
    got = {step: (n, per_step["turns"][step], per_step["tool_calls"][step], responses[step])
           for step, n in per_step["samples"].items()}
    assert got == want
    assert all(n == 2048 for n, *_ in got.values())
    assert con.execute("SELECT task, max_response_len FROM runs WHERE run_id = ?",
                       [result.run_id]).fetchone() == ("multi-turn", 3000)


def test_verl_video_has_ten_steps(con, shared_data):
    result = ingest_paths(con, [shared_data / VIDEO])
    steps = con.execute("SELECT DISTINCT step FROM samples WHERE run_id = ? ORDER BY 1",
                        [result.run_id]).fetchall()
    assert [s for (s,) in steps] == list(range(1, 11))
