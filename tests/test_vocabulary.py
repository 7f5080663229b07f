"""The metric vocabulary: every framework's mapping covers every canonical name, the catalog reads
canonical names only, and one hand-made run written with each framework's own keys gives the
answers of its verl twin."""
from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from polytrace.ingest.load import ingest_paths
from polytrace.queries.catalog import get_query
from polytrace.queries.runner import Limits, run
from polytrace.store import vocabulary
from tests.conftest import ROOT

FRAMEWORKS = sorted(vocabulary.frameworks())
# The queries the issue names, whose answers must not depend on which framework logged a run.
SAME_ANSWERS = ("step_budget", "stage_breakdown", "health_lengths", "health_score", "throughput",
                "finding_step_time_spike", "finding_length_drift", "finding_cap_hits",
                "finding_collapse", "finding_throughput_drop")


def test_the_six_frameworks_are_mapped():
    assert {"verl", "openrlhf", "slime", "areal", "roll", "nemo-rl"} <= set(FRAMEWORKS)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_every_canonical_name_is_mapped_or_said_not_logged(framework):
    fw = vocabulary.frameworks()[framework]
    assert [n for n in vocabulary.names() if fw.covers(n) is None] == []
    assert fw.signature, "a framework is recognised by its signature keys"
    assert fw.repo and fw.commit, "each mapping says where its key names were read"


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_every_mapping_says_its_source_and_aggregation(framework):
    fw = vocabulary.frameworks()[framework]
    assert [m.name for m in fw.metrics.values() if not (m.source and m.aggregation)] == []


def _literals(sql: str) -> set[str]:
    code = "\n".join(line.split("--", 1)[0] for line in sql.splitlines())
    return set(re.findall(r"'([a-z_]+(?:/[A-Za-z0-9_]+)+)'", code))


def test_the_catalog_reads_canonical_names_only():
    """Every metric name a query, view or aggregate compares a key with is in canonical.toml."""
    files = [*ROOT.glob("queries/*.sql"), *ROOT.glob("queries/views/*.sql"), ROOT / "store" / "views.sql"]
    read = {name: f.name for f in files for name in _literals(f.read_text())
            if not name.startswith(("api/", "queries/"))}
    assert {n: f for n, f in read.items() if n not in vocabulary.names()} == {}
    assert len(read) >= 40


def test_canonical_metrics_of_a_verl_log_are_its_own_keys(con, tmp_path):
    """verl maps each canonical name to itself; a timer no name lists keeps its stage name; a
    key outside the vocabulary stays in step_metrics only."""
    path = tmp_path / "history.csv"
    path.write_text("_step,timing_s/gen,timing_s/my_stage,response_length/mean,custom/thing\n"
                    "1,6.5,0.25,1000,7\n2,4.0,0.5,1200,8\n")
    run_id = ingest_paths(con, [path]).run_id
    assert con.execute("SELECT framework FROM runs WHERE run_id = ?", [run_id]).fetchall() == [("verl",)]
    assert con.execute("SELECT step, key, value, raw_key FROM canonical_metrics WHERE run_id = ? "
                       "ORDER BY step, key", [run_id]).fetchall() == [
        (1, "response_length/mean", 1000.0, "response_length/mean"),
        (1, "timing_s/gen", 6.5, "timing_s/gen"),
        (1, "timing_s/my_stage", 0.25, "timing_s/my_stage"),
        (2, "response_length/mean", 1200.0, "response_length/mean"),
        (2, "timing_s/gen", 4.0, "timing_s/gen"),
        (2, "timing_s/my_stage", 0.5, "timing_s/my_stage"),
    ]
    assert con.execute("SELECT count(*) FROM step_metrics WHERE run_id = ? AND key = 'custom/thing'",
                       [run_id]).fetchall() == [(2,)]


def test_a_difference_needs_every_key_of_the_step(con, tmp_path):
    """AReaL's response length is its sequence length minus its prompt length (both means over the
    step's sequences): a step that logs only one of them has no response length, not a wrong one."""
    path = tmp_path / "history.csv"
    path.write_text("_step,ppo_actor/seq_len/avg,ppo_actor/prompt_len/avg\n1,612.5,100\n2,900,\n")
    run_id = ingest_paths(con, [path], run_overrides={"framework": "areal"}).run_id
    assert con.execute("SELECT step, key, value, raw_key FROM canonical_metrics WHERE run_id = ? "
                       "ORDER BY step, key", [run_id]).fetchall() == [
        (1, "prompt_length/mean", 100.0, "ppo_actor/prompt_len/avg"),
        (1, "response_length/mean", 512.5, "ppo_actor/seq_len/avg"),
    ]


# ---- one run, six vocabularies ------------------------------------------------------------------

def twin_steps() -> dict[int, dict[str, float]]:
    """A 30-step GRPO run with verl's names: a checkpoint every 10 steps (3.4x a normal step),
    responses growing from 1,000 to 1,740 tokens with the cap share rising, a throughput that
    sags in the last steps, and a score that climbs."""
    steps = {}
    for s in range(1, 31):
        ckpt = 60.0 if s % 10 == 0 else 0.0
        gen, old, ref, upd = 20.0 + s * 0.5, 3.0, 2.5, 12.0
        m = {
            "timing_s/gen": gen, "timing_s/old_log_prob": old, "timing_s/ref": ref,
            "timing_s/update_actor": upd, "timing_s/adv": 0.5, "timing_s/reward": 1.5,
            "timing_s/update_weights": 1.0, "timing_s/save_checkpoint": ckpt,
            "timing_s/step": gen + old + ref + upd + 0.5 + 1.5 + 1.0 + ckpt + 0.75,
            "response_length/mean": 1000.0 + 25.0 * (s - 1), "response_length/max": 8192.0,
            "response_length/min": 12.0, "response_length/clip_ratio": 0.01 + 0.004 * s,
            "prompt_length/mean": 310.0, "critic/score/mean": 0.2 + 0.01 * s,
            "critic/rewards/mean": 0.15 + 0.01 * s, "actor/entropy": 0.9 - 0.01 * s,
            "actor/ppo_kl": 0.001 * s, "actor/kl_loss": 0.002, "actor/grad_norm": 0.4,
            "actor/pg_clipfrac": 0.02, "perf/throughput": 1500.0 if s < 28 else 800.0,
            "perf/total_num_tokens": 2.0e6, "perf/mfu/actor": 0.31,
        }
        if not ckpt:
            del m["timing_s/save_checkpoint"]
        steps[s] = m
    return steps


def write_csv(path: Path, rows: dict[int, dict[str, float]]) -> Path:
    keys = sorted({k for r in rows.values() for k in r})
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["_step", *keys])
        for step, r in sorted(rows.items()):
            w.writerow([step, *(repr(r[k]) if k in r else "" for k in keys)])
    return path


def in_framework(framework: str, steps: dict[int, dict[str, float]]) -> tuple[dict, dict]:
    """The run as `framework` logs it (its first key for each name, in its unit) and its verl
    twin with only the names that framework logs, as its mapping reads them back: a key two
    names share holds one value, a name the mapping sums (a step time as the sum of the
    framework's stage timers) is the sum of those timers the run logs, and a name it takes as a
    difference (AReaL's response length: sequence minus prompt) is logged as that sum."""
    fw = vocabulary.frameworks()[framework]
    own = {}
    for s, m in steps.items():
        own[s] = {}
        for n, v in m.items():
            if n in fw.metrics and fw.metrics[n].combine != "sum":
                own[s][fw.metrics[n].keys[0]] = v / fw.metrics[n].scale
        for n, v in m.items():
            spec = fw.metrics.get(n)
            if spec and spec.combine == "sum" and not any(k in own[s] for k in spec.keys):
                own[s][spec.keys[0]] = v / spec.scale
            if spec and spec.combine == "difference" and all(k in own[s] for k in spec.keys[1:]):
                own[s][spec.keys[0]] = v / spec.scale + sum(own[s][k] for k in spec.keys[1:])
    twin = {s: {n: read_back(fw.metrics[n], own[s]) for n in m if n in fw.metrics} for s, m in steps.items()}
    return own, twin


def read_back(spec, logged: dict[str, float]) -> float | None:
    values = [logged[k] * spec.scale for k in spec.keys if k in logged]
    if spec.combine == "difference":
        return values[0] - sum(values[1:]) if len(values) == len(spec.keys) else None
    return sum(values) if spec.combine == "sum" else values[0]


def answers(con, run_id: str, framework: str = "verl") -> dict[str, list]:
    """The answers, the run id masked and a finding's framework words (cap_hits names whose
    clip ratio it read) said as for verl."""
    out = {}
    for name in SAME_ANSWERS:
        answer = run(con, get_query(name), {"run_id": run_id}, Limits(timeout_ms=20_000, row_cap=10_000))
        out[name] = [[round(v, 6) if isinstance(v, float) else
                      v.replace(run_id, "<run>").replace(f"({framework}'s logged clip ratio)", "(verl clip_ratio)")
                      if isinstance(v, str) else v for v in row.values()]
                     for row in answer.table.to_pylist()]
    return out


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_run_in_each_framework_answers_as_its_verl_twin(con, tmp_path, framework):
    own, twin = in_framework(framework, twin_steps())
    facts = {"n_gpus": 8}
    mine = ingest_paths(con, [write_csv(tmp_path / "own.csv", own)],
                        run_overrides={**facts, "framework": framework}).run_id
    verl = ingest_paths(con, [write_csv(tmp_path / "twin.csv", twin)],
                        run_overrides={**facts, "framework": "verl"}).run_id
    got, want = answers(con, mine, framework), answers(con, verl)
    assert got == want
    # the checkpoint spikes are seen through every framework that times its checkpoints
    if "timing_s/save_checkpoint" in vocabulary.frameworks()[framework].metrics:
        assert got["finding_step_time_spike"], "the twin has a checkpoint every 10 steps"


@pytest.mark.parametrize("framework", [f for f in FRAMEWORKS if f != "verl"])
def test_a_framework_is_recognised_by_its_keys(con, tmp_path, framework):
    own, _ = in_framework(framework, twin_steps())
    fw = vocabulary.frameworks()[framework]
    keys = {k for r in own.values() for k in r}
    if not any(k == s or (s.endswith("/") and k.startswith(s)) for s in fw.signature for k in keys):
        pytest.skip(f"{framework}'s signature keys are none of its mapped keys")
    run_id = ingest_paths(con, [write_csv(tmp_path / "own.csv", own)]).run_id
    assert con.execute("SELECT framework FROM runs WHERE run_id = ?", [run_id]).fetchall() == [(framework,)]


def test_the_documented_table_is_the_vocabulary():
    readme = (Path(__file__).resolve().parent.parent / "docs" / "frameworks.md").read_text()
    table = readme.split("<!-- vocabulary:begin -->\n", 1)[1].split("\n<!-- vocabulary:end -->", 1)[0]
    assert table == vocabulary.markdown()
