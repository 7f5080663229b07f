"""verl rollout dumps, Ray timelines and offline W&B runs: files as their writers write them, in and out.

The rollout dumps are written by `verl_dump` below, verl's own writer logic; the Ray timeline and
the W&B run come from the real packages (a local Ray job, a run in WANDB_MODE=offline) when the
`ray` and `wandb` extras are installed, and those tests skip with the reason otherwise.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import httpx
import pytest

from polytrace import store
from polytrace.ingest import registry
from polytrace.ingest.contract import IngestError
from polytrace.ingest.formats import wandb_offline
from polytrace.ingest.load import ingest_paths
from polytrace.queries.catalog import bind, load_catalog
from polytrace.queries.findings import findings
from polytrace.queries.runner import run_bound
from polytrace.store import migrate
from tests.corpus.test_corpus import run_cli


def answer(con, name: str, **params) -> list[dict]:
    query = load_catalog()[name]
    result = run_bound(con, query, bind(query, params))
    return [dict(zip(result.columns, r)) for r in result.rows]


def rows(con, sql: str, run_id: str) -> list[tuple]:
    return con.execute(sql, [run_id]).fetchall()


# --- verl rollout dumps ---------------------------------------------------------------------

def verl_dump(folder: Path, step: int, inputs, outputs, scores, extra: dict, gts=None,
              version: tuple = (0, 6, 1)) -> Path:
    """What RayPPOTrainer._dump_generations (verl/trainer/ppo/ray_trainer.py) writes into
    trainer.rollout_data_dir for one step: verl 0.4.1 and 0.5.0 write input, output, score, step;
    0.6.1 and 0.7.1 put gts after output; 0.9.1 writes line by line with json.dumps(default=str).
    Each then adds every reward_extra_infos_dict list as long as the batch, one JSON object per
    sample with ensure_ascii=False, into `{global_steps}.jsonl`."""
    n = len(inputs)
    columns = {"input": inputs, "output": outputs}
    if version >= (0, 6):
        columns["gts"] = gts if gts is not None else [None] * n  # reward_model.ground_truth per sample
    columns.update(score=scores, step=[step] * n)
    columns.update({k: v for k, v in extra.items() if len(v) == n})
    options = {"default": str} if version >= (0, 9) else {}
    lines = [json.dumps({k: v[i] for k, v in columns.items()}, ensure_ascii=False, **options)
             for i in range(n)]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{step}.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# Step 5 of a GRPO run with 3 samples per prompt, in the DP-balanced order verl dumps it.
PROMPTS = ["Q: 2+3?", "Q: 7*6?", "Q: 日本の首都?"]
DUMP = [  # (prompt, response, score)
    (0, "five is 5", 1.0), (1, "42", 0.0), (2, "東京", 0.0),
    (0, "5", 1.0), (1, "it is 42 then", 1.0), (2, "大阪 of course", 0.0),
    (0, "2 + 3 = 5", 1.0), (1, "13", 0.0), (2, "京都", 0.0),
]


def write_dump(folder: Path, version: tuple = (0, 6, 1), step: int = 5) -> Path:
    inputs = [PROMPTS[p] for p, _, _ in DUMP]
    extra = {"acc": [s > 0 for _, _, s in DUMP], "pred": [o.split()[-1] for _, o, _ in DUMP],
             "format_score": [0.1 * i for i in range(len(DUMP))], "too_short": [1.0]}
    return verl_dump(folder, step, inputs, [o for _, o, _ in DUMP], [s for _, _, s in DUMP], extra,
                     gts=["5", "42", "東京"] * 3, version=version)


@pytest.mark.parametrize("version", [(0, 4, 1), (0, 6, 1), (0, 9, 1)], ids=lambda v: ".".join(map(str, v)))
def test_rollout_dump_of_each_writer_groups_samples_by_prompt(con, tmp_path, version):
    path = write_dump(tmp_path / "rollout_data", version)
    assert registry.detect(path).name == "verl-rollout-dump"
    result = ingest_paths(con, [path])
    assert result.format == "verl-rollout-dump"
    assert result.rows == {"sample_metrics": 18, "samples": 9}  # acc and format_score per sample
    # prompts numbered by first appearance; lengths in characters (日本の首都 is 5 of them)
    assert rows(con, "SELECT step, prompt_id, sample_id, prompt_len, response_len, reward FROM samples "
                     "WHERE run_id = ? ORDER BY prompt_id, sample_id", result.run_id) == [
        (5, 0, 0, 7, 9, 1.0), (5, 0, 1, 7, 1, 1.0), (5, 0, 2, 7, 9, 1.0),
        (5, 1, 0, 7, 2, 0.0), (5, 1, 1, 7, 13, 1.0), (5, 1, 2, 7, 2, 0.0),
        (5, 2, 0, 9, 2, 0.0), (5, 2, 1, 9, 12, 0.0), (5, 2, 2, 9, 2, 0.0)]
    # bools as 1/0, text (pred) and lists of another length (too_short) left out
    assert rows(con, "SELECT key, sum(value), count(*) FROM sample_metrics WHERE run_id = ? "
                     "GROUP BY key ORDER BY key", result.run_id) == [
        ("acc", 4.0, 9), ("format_score", pytest.approx(3.6), 9)]
    assert rows(con, "SELECT framework, length_unit FROM runs WHERE run_id = ?", result.run_id) == [
        ("verl", "chars")]
    assert result.warnings == [("sample lengths are characters: no tokenizer given "
                                "(--tokenizer PATH to a tokenizer.json)")]


def test_batches_of_a_few_lines_give_the_same_groups(con, tmp_path, monkeypatch):
    from functools import partial

    from polytrace.ingest import sources
    from polytrace.ingest.formats import verl_rollout_dump

    path = write_dump(tmp_path / "d")
    whole = verl_rollout_dump.parse(path).tables
    # ~2 lines a batch: prompt groups and sample ids carry over from batch to batch
    monkeypatch.setattr(verl_rollout_dump, "line_blocks", partial(sources.line_blocks, size=200))
    assert sum(1 for _ in verl_rollout_dump.line_blocks(path)) >= 4
    assert verl_rollout_dump.parse(path).tables == whole


def test_group_waste_and_its_finding_on_a_dump(con, tmp_path):
    run_id = ingest_paths(con, [write_dump(tmp_path / "d")]).run_id
    # prompt 0 scored 1, 1, 1 and prompt 2 scored 0, 0, 0: flat; prompt 1 (0, 1, 0) is not.
    # Response characters: prompt 0 9+1+9 = 19, prompt 2 2+12+2 = 16, prompt 1 2+13+2 = 17.
    assert answer(con, "group_waste", run_id=run_id) == [{
        "step": 5, "groups": 3, "zero_variance_groups": 2, "samples": 9, "wasted_samples": 6,
        "wasted_share": 6 / 9, "wasted_tokens": 35, "wasted_token_share": 35 / 52}]
    (found,) = [f for f in findings(con, run_id) if f["kind"] == "group_waste"]
    assert (found["severity"], found["value"], found["steps"]) == ("warn", 35 / 52, [5])
    assert found["text"].startswith("67% of the generated response characters (35 of 52) went to 2 of 3 "
                                    "prompt groups whose samples all got the same reward")


def test_a_nan_score_and_a_cut_first_line_over_the_head(con, tmp_path):
    long_prompt = "x" * 70_000  # past the 64 KiB head: sniffed by its start and its file name
    path = verl_dump(tmp_path / "d", 2, [long_prompt, long_prompt], ["a", "bb"], [math.nan, 1.0], {})
    assert b"NaN" in path.read_bytes()  # Python's json writes the bare literal
    assert registry.detect(path).name == "verl-rollout-dump"
    run_id = ingest_paths(con, [path]).run_id
    got = rows(con, "SELECT prompt_id, sample_id, prompt_len, response_len, reward FROM samples "
                    "WHERE run_id = ? ORDER BY sample_id", run_id)
    assert got[1] == (0, 1, 70_000, 2, 1.0) and got[0][:4] == (0, 0, 70_000, 1) and math.isnan(got[0][4])
    # the NaN is no reward to compare: a group of one, not a flat pair
    assert answer(con, "group_waste", run_id=run_id)[0]["zero_variance_groups"] == 0


@pytest.mark.parametrize("text, reason", [
    ('{"input": "a", "output": "b", "score": 1.0}\n', "record 1: Object missing required field `step`"),
    ('{"input": "a", "output": "b", "score": "high", "step": 1}\n', "record 1: Expected `bool | float | null`, got `str` - at `$.score`"),
    ('{"input": "a", "output": "b", "score": 1, "step": 1}\n{"input": 3, "output": "b", "score": 1, "step": 1}\n',
     "record 2: Expected `str`, got `int` - at `$.input`"),
    ('{"input": "a", "output": "b", "score": 1, "step": 1}\n{"input": "a", "output"\n', "line 2: not JSON"),
    ('[1, 2]\n', "line 1: not a JSON object"),
])
def test_rollout_dump_defects_are_one_line(con, tmp_path, text, reason):
    path = tmp_path / "1.jsonl"
    path.write_text(text)
    with pytest.raises(IngestError) as e:
        ingest_paths(con, [path], format="verl-rollout-dump")
    assert reason in str(e.value) and "\n" not in str(e.value)


def word_tokenizer(path: Path) -> Path:
    """A real tokenizer.json, written by the tokenizers package: one token per whitespace-separated word."""
    tokenizers = pytest.importorskip("tokenizers", reason="the tokenizers extra is not installed")
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({"[UNK]": 0, "5": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok.save(str(path))
    return path


def test_cli_tokenizer_gives_lengths_in_tokens(tmp_path):
    tok = word_tokenizer(tmp_path / "tokenizer.json")
    folder = tmp_path / "rollout_data"
    write_dump(folder, step=5)
    write_dump(folder, step=6)
    db = tmp_path / "pt.duckdb"
    rc, out, err = run_cli(["ingest", str(folder), "--db", str(db), "--tokenizer", str(tok)])
    assert (rc, err.splitlines()[-1]) == (0, "ingested verl-rollout-dump: sample_metrics=36, samples=18"), err
    assert "POLYTRACE_TOKENIZER" not in os.environ  # set for the ingest only
    con = store.open(db, "r")
    try:
        run_id = out.split()[-1]
        # words: "Q: 2+3?" 2, "five is 5" 3, "it is 42 then" 4, "大阪 of course" 3
        assert rows(con, "SELECT step, prompt_id, sample_id, prompt_len, response_len FROM samples "
                         "WHERE run_id = ? AND step = 6 ORDER BY prompt_id, sample_id", run_id) == [
            (6, 0, 0, 2, 3), (6, 0, 1, 2, 1), (6, 0, 2, 2, 5), (6, 1, 0, 2, 1), (6, 1, 1, 2, 4),
            (6, 1, 2, 2, 1), (6, 2, 0, 2, 1), (6, 2, 1, 2, 3), (6, 2, 2, 2, 1)]
        assert rows(con, "SELECT length_unit FROM runs WHERE run_id = ?", run_id) == [("tokens",)]
    finally:
        con.close()


def test_a_drift_of_lengths_in_characters_is_said_in_characters(con, tmp_path):
    """A rollout dump read without a tokenizer counts characters; its length_drift says so."""
    # five steps, a drift needs them; one response each, so the median is that response
    for step, output in enumerate(("x" * 40, "x" * 30, "x" * 30, "x" * 30, "x" * 10), start=1):
        (tmp_path / f"{step}.jsonl").write_text(json.dumps(
            {"input": "q", "output": output, "score": 1.0, "step": step}) + "\n")
    run_id = ingest_paths(con, sorted(tmp_path.glob("*.jsonl"))).run_id
    q = load_catalog()["finding_length_drift"]
    answer = run_bound(con, q, bind(q, {"run_id": run_id}))
    (text,) = [dict(zip(answer.columns, r))["text"] for r in answer.rows]
    assert text.startswith("Median response length fell to 0.25× of its start over the run, from 40 characters "
                           "(first step) to 10 (last step)")


def test_cli_tokenizer_that_is_not_a_file_is_one_line(tmp_path):
    path = write_dump(tmp_path / "d")
    rc, _, err = run_cli(["ingest", str(path), "--db", str(tmp_path / "x.duckdb"),
                          "--tokenizer", str(tmp_path / "missing.json")])
    assert (rc, err) == (2, (f"error: --tokenizer {tmp_path / 'missing.json'}: no such file "
                             "(give a tokenizer.json)\n"))
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    pytest.importorskip("tokenizers", reason="the tokenizers extra is not installed")
    rc, _, err = run_cli(["ingest", str(path), "--db", str(tmp_path / "x.duckdb"), "--tokenizer", str(bad)])
    assert rc == 2 and err.startswith(f"error: 5.jsonl: tokenizer {bad} cannot be read (") and err.count("\n") == 1


def test_a_packed_lengths_file_is_not_a_rollout_dump(tmp_path):
    path = tmp_path / "packed_lengths_step_0.jsonl"
    path.write_text('{"step": 0, "input": 10, "output": [3, 4]}\n')
    assert registry.detect(path).name == "polytrace-packed"


# --- schema version 3: runs.length_unit -----------------------------------------------------

def test_a_version_2_database_gets_length_unit_on_open(tmp_path):
    db = tmp_path / "v2.duckdb"
    con = store.open(db)
    con.execute("INSERT INTO runs (run_id, name) VALUES ('old', 'before length_unit')")
    con.execute("ALTER TABLE runs DROP COLUMN length_unit")  # as schema 2 left it
    con.execute("UPDATE store_meta SET value = '2' WHERE key = 'schema_version'")
    con.close()
    with pytest.raises(store.StoreError, match=rf"older PolyTrace \(schema 2, this one reads {migrate.SCHEMA_VERSION}\)"):
        store.open(db, "r")
    con = store.open(db)
    try:
        assert con.execute("SELECT run_id, length_unit FROM runs").fetchall() == [("old", None)]
        assert dict(con.execute("SELECT * FROM store_meta").fetchall())["schema_version"] == str(migrate.SCHEMA_VERSION)
    finally:
        con.close()


# --- Ray timelines --------------------------------------------------------------------------

def gcs_span(worker: str, method: str, ts: float, dur: float, node: str = "10.0.0.1") -> list[dict]:
    """A call as ray.timeline() (ray/_private/state.py chrome_tracing_dump) lays it out, with an
    execution phase inside it."""
    name = f"actor_rollout_{method}"
    return [{"cat": f"task::WorkerDict.{name}", "name": name, "pid": node, "tid": worker, "ts": ts,
             "dur": dur, "ph": "X", "cname": "generic_work", "args": {"name": name, "task_id": "t"}},
            {"cat": "task:execute", "name": "task:execute", "pid": node, "tid": worker, "ts": ts + 1,
             "dur": max(dur - 2, 0), "ph": "X", "cname": "rail_animation", "args": {}}]


def test_steps_are_the_rollout_before_each_update_and_validation_stays_in_its_step(con, tmp_path):
    # per worker: setup, a validation rollout before training, then two steps whose first ends
    # with a validation rollout and a checkpoint save after its update
    calls = [("init_model", 0, 10), ("generate_sequences", 100, 50),            # setup, validation
             ("generate_sequences", 200, 80), ("compute_log_prob", 300, 20),    # step 1
             ("update_actor", 400, 30), ("generate_sequences", 500, 40),        # ... its validation
             ("save_checkpoint", 600, 10),
             ("generate_sequences", 700, 60), ("update_actor", 800, 30)]       # step 2
    trace = [e for w, skew in (("worker:a", 0), ("worker:b", 3)) for m, ts, dur in calls
             for e in gcs_span(w, m, ts + skew, dur)]
    path = tmp_path / "timeline.json"
    path.write_text(json.dumps(trace))
    run_id = ingest_paths(con, [path]).run_id
    got = rows(con, "SELECT ts_us, name, stage, step FROM ray_spans WHERE run_id = ? AND worker = 'worker:b' "
                    "ORDER BY ts_us", run_id)
    assert [(ts, stage, step) for ts, _, stage, step in got] == [
        (3, None, None), (103, "gen", None), (203, "gen", 1), (303, "old_log_prob", 1),
        (403, "update_actor", 1), (503, "gen", 1), (603, "save_checkpoint", 1), (703, "gen", 2),
        (803, "update_actor", 2)]
    assert rows(con, "SELECT count(*), count(DISTINCT node), min(actor) FROM ray_spans WHERE run_id = ?",
                run_id) == [(18, 1, "WorkerDict")]


def test_the_dashboard_layout_names_nodes_and_workers_in_metadata(con, tmp_path):
    # ray/_private/profiling.py chrome_tracing_dump: numbered pid/tid, names in "M" events
    trace = [{"cat": "task::WorkerDict.actor_rollout_generate_sequences", "name": "actor_rollout_generate_sequences",
              "pid": 0, "tid": 1, "ts": 10.0, "dur": 5.0, "cname": "generic_work", "args": {}, "ph": "X"},
             {"name": "process_name", "args": {"name": "Node 10.0.0.7"}, "pid": 0, "tid": None, "ph": "M"},
             {"name": "thread_name", "ph": "M", "tid": 1, "pid": 0, "args": {"name": "worker:00ff"}}]
    path = tmp_path / "timeline.json"
    path.write_text(json.dumps(trace))
    assert registry.detect(path).name == "ray-timeline"
    result = ingest_paths(con, [path])
    assert rows(con, "SELECT node, worker, name, stage, step FROM ray_spans WHERE run_id = ?", result.run_id) == [
        ("10.0.0.7", "worker:00ff", "actor_rollout_generate_sequences", "gen", None)]
    assert result.warnings == [("no training step inferred (no rollout round followed by an update round): "
                                "calls have no step")]
    # no step: ray_stage_time is per call over the whole trace
    assert [(r["step"], r["calls"], r["total_s"]) for r in answer(con, "ray_stage_time", run_id=result.run_id)] == [
        (None, 1, 5e-6)]


def test_ray_timeline_defects_and_neighbours(con, tmp_path):
    path = tmp_path / "timeline.json"
    path.write_text(json.dumps([{"cat": "submit_task", "name": "submit_task", "pid": "n", "tid": "driver:01",
                                 "ts": 1, "dur": 2, "ph": "X"}]))
    with pytest.raises(IngestError, match=r"timeline.json: no task span \(cat task::...\) in the Ray timeline"):
        ingest_paths(con, [path])
    path.write_text(json.dumps(gcs_span("worker:a", "update_actor", 1, -5)))
    with pytest.raises(IngestError, match=r"event 1 \(task::WorkerDict.actor_rollout_update_actor\): ts and dur"):
        ingest_paths(con, [path])
    kineto = tmp_path / "rank0.json"
    kineto.write_bytes(registry.get("kineto").sample().files["rank0.json"])
    assert registry.detect(kineto).name == "kineto"


def test_ray_timeline_chart_of_one_step(con, tmp_path):
    (name, data), = registry.get("ray-timeline").sample().files.items()
    (tmp_path / name).write_bytes(data)
    run_id = ingest_paths(con, [tmp_path / name]).run_id
    # the sample's step 2 starts at 10,000 us; worker 1's rollout takes 2,000 us, worker 2's 4,000
    lanes = sorted({r["lane"] for r in answer(con, "ray_timeline", run_id=run_id)})
    assert len(lanes) == 2 and all(lane.startswith("10.0.0.1 worker:") for lane in lanes)
    got = answer(con, "ray_timeline", run_id=run_id, step=2)
    by_worker = {}
    for r in got:
        by_worker.setdefault(r["lane"], []).append((r["name"].removeprefix("actor_rollout_"), r["start_s"], r["dur_s"]))
    assert sorted(by_worker.values()) == [
        [("generate_sequences", 0.0, 0.002), ("compute_log_prob", 0.005, 0.0007), ("update_actor", 0.006, 0.0015)],
        [("generate_sequences", 0.0, 0.004), ("compute_log_prob", 0.005, 0.0007), ("update_actor", 0.006, 0.0015)]]
    stage_time = answer(con, "ray_stage_time", run_id=run_id)
    assert {(r["step"], r["stage"]) for r in stage_time} == {
        (None, None), (1, "gen"), (1, "old_log_prob"), (1, "update_actor"),
        (2, "gen"), (2, "old_log_prob"), (2, "update_actor")}
    gen2 = [r for r in stage_time if (r["step"], r["stage"]) == (2, "gen")]
    assert sorted((r["total_s"], r["idle_s"]) for r in gen2) == [(0.002, 0.002), (0.004, 0.0)]


RAY_JOB = """
import json, sys, time
import ray

ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)


@ray.remote(num_cpus=0)
class WorkerDict:  # verl's colocated worker class: methods named <role>_<method>
    def actor_rollout_init_model(self):
        return 0

    def actor_rollout_generate_sequences(self, step):
        time.sleep(0.3)
        return step

    def actor_rollout_compute_log_prob(self, step):
        time.sleep(0.1)
        return step

    def actor_rollout_update_actor(self, step):
        time.sleep(0.2)
        return step


workers = [WorkerDict.remote() for _ in range(2)]
ray.get([w.actor_rollout_init_model.remote() for w in workers])
for step in (1, 2):
    for method in ("generate_sequences", "compute_log_prob", "update_actor"):
        ray.get([getattr(w, "actor_rollout_" + method).remote(step) for w in workers])
# profile events reach the GCS in batches: dump until all 14 calls are in, a bounded number of times
for _ in range(30):
    ray.timeline(filename=sys.argv[1])  # as verl's main_ppo does with ray_init.timeline_json_file
    with open(sys.argv[1]) as f:
        calls = [e for e in json.load(f) if e["cat"].startswith("task::WorkerDict.")]
    if len(calls) >= 16:  # 2 workers x (__init__, init_model and 2 steps x 3 methods)
        break
    time.sleep(1)
ray.shutdown()
"""


def test_a_local_ray_jobs_timeline(con, tmp_path):
    pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'polytrace[ray]')")
    job, timeline = tmp_path / "job.py", tmp_path / "timeline.json"
    job.write_text(textwrap.dedent(RAY_JOB))
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_DEDUP_LOGS": "0"}
    proc = subprocess.run([sys.executable, str(job), str(timeline)], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert registry.detect(timeline).name == "ray-timeline"
    run_id = ingest_paths(con, [timeline]).run_id
    got = rows(con, "SELECT step, name, stage, count(*), count(DISTINCT worker) FROM ray_spans "
                    "WHERE run_id = ? AND actor = 'WorkerDict' GROUP BY ALL ORDER BY step NULLS FIRST, name", run_id)
    assert got == [
        (None, "__init__", None, 2, 2), (None, "actor_rollout_init_model", None, 2, 2),
        (1, "actor_rollout_compute_log_prob", "old_log_prob", 2, 2),
        (1, "actor_rollout_generate_sequences", "gen", 2, 2),
        (1, "actor_rollout_update_actor", "update_actor", 2, 2),
        (2, "actor_rollout_compute_log_prob", "old_log_prob", 2, 2),
        (2, "actor_rollout_generate_sequences", "gen", 2, 2),
        (2, "actor_rollout_update_actor", "update_actor", 2, 2)]
    stage_time = answer(con, "ray_stage_time", run_id=run_id)
    assert {(r["step"], r["name"], r["calls"]) for r in stage_time if r["step"]} == {
        (s, f"actor_rollout_{m}", 1) for s in (1, 2) for m in ("generate_sequences", "compute_log_prob",
                                                                 "update_actor")}
    assert all(r["idle_s"] >= 0 and r["total_s"] > 0 for r in stage_time)
    assert len(answer(con, "ray_timeline", run_id=run_id)) == con.execute(
        "SELECT count(*) FROM ray_spans WHERE run_id = ?", [run_id]).fetchone()[0]


# --- offline W&B runs -----------------------------------------------------------------------

WANDB_RUN = """
import wandb

config = {"actor_rollout_ref": {"model": {"path": "/models/Qwen2.5-7B-Instruct/"}},
          "data": {"max_response_length": 2048},
          "trainer": {"n_gpus_per_node": 4, "nnodes": 2, "project_name": "polytrace-test"}}
run = wandb.init(project="polytrace-test", mode="offline", config=config)
run.config.update({"algorithm": {"adv_estimator": "grpo"}})
for step in range(1, 31):
    row = {"timing_s/gen": float(step), "timing/update_actor": 0.5 * step,
           "response_length/mean": 100 + step, "note": "text is no metric", "flag": True}
    row.update({f"pad/metric_{i:03d}": i / 8 for i in range(150)})  # ~6 KB rows cross 32 KiB blocks
    wandb.log(row, step=step)
run.finish()
"""


@pytest.fixture(scope="module")
def wandb_run(tmp_path_factory) -> Path:
    """The run-*.wandb file of an offline run written by the wandb package."""
    pytest.importorskip("wandb", reason="the wandb extra is not installed (pip install 'polytrace[wandb]')")
    root = tmp_path_factory.mktemp("wandb")
    (root / "run.py").write_text(textwrap.dedent(WANDB_RUN))
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(root),
           "WANDB_DISABLE_CODE": "true", "WANDB_DISABLE_GIT": "true"}
    proc = subprocess.run([sys.executable, "run.py"], capture_output=True, text=True, env=env, cwd=root,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (path,) = root.glob("wandb/offline-run-*/run-*.wandb")
    return path


def test_an_offline_wandb_run(con, wandb_run):
    assert registry.detect(wandb_run).name == "wandb-offline"
    result = ingest_paths(con, [wandb_run])
    got = {(s, k): v for s, k, v in rows(con, "SELECT step, key, value FROM step_metrics WHERE run_id = ?",
                                         result.run_id)}
    assert sorted({s for s, _ in got}) == list(range(1, 31))
    assert got[(7, "timing_s/gen")] == 7.0 and got[(7, "timing_s/update_actor")] == 3.5  # timing/ renamed
    assert got[(30, "response_length/mean")] == 130.0 and got[(30, "pad/metric_149")] == 149 / 8
    keys = {k for _, k in got}
    assert not {"note", "flag", "_step", "timing/update_actor"} & keys
    assert len(keys - {"_runtime", "_timestamp"}) == 3 + 150
    assert "30 old-style timing/<stage> value(s) stored as timing_s/<stage>" in result.warnings
    (run,) = con.execute("SELECT framework, model, max_response_len, n_gpus, config FROM runs WHERE run_id = ?",
                         [result.run_id]).fetchall()
    assert run[:4] == ("verl", "Qwen2.5-7B-Instruct", 2048, 8)
    assert json.loads(run[4])["algorithm"] == {"adv_estimator": "grpo"}  # a config update after init


def test_wandb_log_decoding_agrees_with_the_wandb_protobuf_classes(wandb_run):
    from wandb.proto import wandb_internal_pb2 as pb

    warnings: list[str] = []
    with open(wandb_run, "rb") as stream:
        payloads = list(wandb_offline.records(stream, wandb_run, warnings))
    assert warnings == [] and piece_kinds(wandb_run.read_bytes()) >= {wandb_offline.FIRST, wandb_offline.LAST}
    theirs, ours = [], []
    for payload in payloads:
        record = pb.Record()
        record.ParseFromString(payload)
        if record.WhichOneof("record_type") != "history":
            continue
        values = {".".join(i.nested_key) or i.key: json.loads(i.value_json) for i in record.history.item}
        theirs.append((record.history.step.num, {k: float(v) for k, v in values.items() if k != "_step"
                                                 and isinstance(v, (int, float)) and not isinstance(v, bool)}))
        ours.append(wandb_offline.history(dict(wandb_offline.fields(payload))[wandb_offline.RECORD_HISTORY]))
    assert len(ours) == 30 and ours == theirs


def piece_kinds(data: bytes) -> set[int]:
    """The piece types of a record log: FIRST and LAST show records split over blocks."""
    kinds, pos = set(), wandb_offline.HEADER.size
    while pos + wandb_offline.PIECE.size <= len(data):
        if wandb_offline.BLOCK - pos % wandb_offline.BLOCK < wandb_offline.PIECE.size:
            pos += wandb_offline.BLOCK - pos % wandb_offline.BLOCK
            continue
        _, length, kind = wandb_offline.PIECE.unpack_from(data, pos)
        kinds.add(kind)
        pos += wandb_offline.PIECE.size + length
    return kinds


def test_a_cut_or_corrupt_wandb_log(con, tmp_path):
    data = registry.get("wandb-offline").sample().files["run-abc123.wandb"]
    cut = tmp_path / "run-cut.wandb"
    cut.write_bytes(data[:-5])  # the last history row is cut off
    result = ingest_paths(con, [cut])
    assert rows(con, "SELECT DISTINCT step FROM step_metrics WHERE run_id = ?", result.run_id) == [(1,)]
    assert any(w.startswith("the log ends inside a record at byte") for w in result.warnings)
    bad = tmp_path / "run-bad.wandb"
    bad.write_bytes(data[:60] + bytes([data[60] ^ 0xFF]) + data[61:])
    with pytest.raises(IngestError, match=r"run-bad.wandb: corrupt record at byte 7 \(checksum mismatch\)"):
        ingest_paths(con, [bad])
    other = tmp_path / "run-other.wandb"
    other.write_bytes(b":W&B\xe1\xbe\x01" + data[7:])  # a log version this reader does not know
    assert registry.detect(other) is None


# --- uploads and findings -------------------------------------------------------------------

def test_uploads_of_each_new_format_and_their_findings(make_server, tmp_path):
    srv = make_server()
    dump = write_dump(tmp_path / "d")
    uploads = {"verl-rollout-dump": ("5.jsonl", dump.read_bytes())}
    for name in ("ray-timeline", "wandb-offline"):
        uploads[name], = registry.get(name).sample().files.items()
    run_ids = {}
    for name, (file_name, data) in uploads.items():
        r = httpx.post(f"{srv.url}/api/runs", files=[("file", (file_name, data))], timeout=60)
        assert r.status_code == 201, r.text
        assert r.json()["format"] == name
        run_ids[name] = r.json()["run_id"]
    found = httpx.get(f"{srv.url}/api/runs/{run_ids['verl-rollout-dump']}/findings").json()["findings"]
    assert [f["kind"] for f in found if f["kind"] == "group_waste"] == ["group_waste"]
    stage_time = httpx.get(f"{srv.url}/api/queries/ray_stage_time",
                           params={"run_id": run_ids["ray-timeline"]}).json()
    assert stage_time["ok"] and len(stage_time["rows"]) == 2 * (1 + 2 * 3)  # workers x (setup + steps x methods)
    timings = httpx.get(f"{srv.url}/api/queries/stage_breakdown",
                        params={"run_id": run_ids["wandb-offline"]}).json()
    assert [row[:3] for row in timings["rows"]] == [[1, 10.0, 6.0], [2, 8.0, 4.5]]


def test_the_edge_rows_for_the_new_tables_give_every_new_query_rows():
    """The edge runs of tests/edge_lake.py walk these queries too."""
    from tests.edge_lake import build_database, params_for

    con = build_database()
    for name in ("group_waste", "finding_group_waste", "ray_stage_time", "ray_timeline"):
        query = load_catalog()[name]
        assert any(run_bound(con, query, p).rows for p in params_for(query)), name
    assert isinstance(con, duckdb.DuckDBPyConnection)

