"""AReaL and NeMo-RL: their vocabulary files cover every canonical name, and their console
output (AReaL's stats tables, NeMo-RL's per-step blocks) lands in step_metrics under the keys
their trackers log to W&B and TensorBoard."""
from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VOCABULARY = ROOT / "store" / "vocabulary"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "frameworks"
FRAMEWORKS = ["areal", "nemo-rl"]


def load(name: str) -> dict:
    with open(VOCABULARY / f"{name}.toml", "rb") as f:
        return tomllib.load(f)


def covered(name: str, not_logged: dict) -> bool:
    return name in not_logged or any(
        k.endswith("*") and name.startswith(k[:-1]) for k in not_logged)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_every_canonical_name_is_mapped_or_said_not_logged(framework):
    canonical = load("canonical")
    mapping = load(framework)
    assert mapping["framework"] == framework
    metric, not_logged = mapping.get("metric", {}), mapping.get("not_logged", {})
    missing = [n for n in canonical if n not in metric and not covered(n, not_logged)]
    assert missing == []
    assert set(metric) <= set(canonical)
    assert not set(metric) & set(not_logged)
    for name, entry in metric.items():
        assert entry["keys"] and entry["source"] and entry["aggregation"], name
        assert isinstance(entry["scale"], float), name
        assert entry.get("combine", "first") in ("first", "sum", "difference"), name
    for field in ("display", "repo", "commit", "license", "signature"):
        assert mapping[field], field
    assert len(mapping["commit"]) == 40


# --- console formats ------------------------------------------------------------------------

import math  # noqa: E402

from polytrace.ingest import registry  # noqa: E402
from polytrace.ingest.contract import IngestError  # noqa: E402
from polytrace.ingest.formats import areal_console, nemo_rl_console  # noqa: E402
from polytrace.ingest.load import ingest_paths  # noqa: E402

NAN = math.nan


def rows_of(parsed) -> list[tuple]:
    t = parsed.tables["step_metrics"]
    return list(zip(*(t.column(c).to_pylist() for c in ("step", "key", "value"))))


def assert_rows(got: list[tuple], want: list[tuple]) -> None:
    def same(a, b):
        if isinstance(a, float) and isinstance(b, float):
            return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-12)
        return a == b
    assert len(got) == len(want), (got, want)
    for g, w in zip(sorted(got, key=str), sorted(want, key=str)):
        assert all(same(x, y) for x, y in zip(g, w)), (g, w)


def test_nemo_rl_console_golden():
    parsed = nemo_rl_console.parse(FIXTURES / "nemo_rl_console.log")
    # Labels become the logged keys; percentages of logged ratios are /100; the second epoch's
    # 'Step 1/1' is logged step 2 (total_steps + 1), as its 'validation at step 2' says; the
    # Ray worker's '• Loss: 99.0' outside a section, the per-worker bars and 'Samples processed'
    # (not logged by NeMo-RL) are not stored; the initial validation is step 0.
    assert_rows(rows_of(parsed), [
        (0, "validation/accuracy", 0.1), (0, "validation/avg_length", 250.0),
        (0, "timing/validation/total_validation_time", 4.0),
        (1, "train/loss", 0.0125), (1, "train/gen_kl_error", 0.001), (1, "train/reward", 0.25),
        (1, "train/mean_gen_tokens_per_sample", 300.5),
        (1, "timing/train/total_step_time", 20.0), (1, "timing/train/generation", 12.0),
        (1, "timing/train/policy_training", 4.0), (1, "timing/train/policy_and_reference_logprobs", 2.0),
        (1, "timing/train/prepare_for_generation/total", 1.5),
        (1, "timing/train/advantage_calculation", 0.25), (1, "timing/train/reward_calculation", 0.25),
        (1, "performance/average_token_imbalance", 0.1), (1, "performance/samples_per_sec_per_gpu", 0.4),
        (1, "performance/tokens_per_sec_per_gpu", 250.0), (1, "performance/tokens_per_sec", 2000.0),
        (1, "performance/train_flops_per_gpu", 10.0), (1, "performance/train_fp_utilization", 0.25),
        (2, "validation/accuracy", 0.3), (2, "validation/avg_length", 280.0),
        (2, "timing/validation/total_validation_time", 5.0),
        (2, "train/loss", NAN), (2, "train/gen_kl_error", 0.002), (2, "train/reward", 0.5),
        (2, "train/mean_gen_tokens_per_sample", 400.0),
        (2, "timing/train/total_step_time", 30.0), (2, "timing/train/generation", 15.0),
        (2, "timing/train/policy_training", 5.0),
    ])
    assert parsed.run == {"framework": "nemo-rl", "model": "Qwen2.5-1.5B"}
    assert parsed.warnings == []


def test_nemo_rl_real_excerpt():
    """A real run's block (pmotgi/nemo-rl-on-gke): every printed number lands under its key."""
    path = FIXTURES / "nemo_rl_gke_excerpt.log"
    assert registry.detect(path).name == "nemo-rl-console"
    got = dict(((k, v) for _, k, v in rows_of(nemo_rl_console.parse(path))))
    assert len(got) == 26
    assert got["timing/train/total_step_time"] == 35.70
    assert got["timing/train/prepare_for_generation/transfer_and_update_weights"] == 0.60
    assert got["performance/tokens_per_sec_per_gpu"] == 1073.59
    assert got["train/mean_gen_tokens_per_sample"] == 201.2197
    # NeMo-RL's own arithmetic holds on the printed numbers: 16 prompts x 64 generations over
    # 35.70 s on 8 GPUs is 3.59 samples/s/GPU, and the group figure is 8 times the per-GPU one.
    assert round(16 * 64 / 35.70 / 8, 2) == got["performance/samples_per_sec_per_gpu"]
    assert abs(got["performance/tokens_per_sec"] - 8 * got["performance/tokens_per_sec_per_gpu"]) < 0.05


def test_areal_console_golden():
    """The table written by AReaL's own tabulate_stats and logger (make_areal_console.py)."""
    path = FIXTURES / "areal_console.log"
    assert registry.detect(path).name == "areal-console"
    parsed = areal_console.parse(path)
    # 'Train step N/2' is global_step N-1, the step W&B and TensorBoard get; .4e keeps these exact
    want = []
    for step, values in enumerate([
        {"timeperf/rollout": 6.0, "timeperf/recompute_logp": 1.0, "timeperf/ref_logp": 0.5,
         "timeperf/compute_advantage": 0.25, "timeperf/train_step": 2.0, "timeperf/update_weights": 0.5,
         "timeperf/save": 0.0, "timeperf/checkpoint_for_recover": 0.0, "timeperf/eval": 0.0,
         "timeperf/clear_batches": 0.125, "ppo_actor/prompt_len/avg": 100.0,
         "ppo_actor/seq_len/avg": 612.5, "ppo_actor/task_reward/avg": 0.5,
         "ppo_actor/update/entropy/avg": 0.75, "ppo_actor/update/approx_kl/avg": -0.001,
         "ppo_actor/update/clip_ratio/avg": 0.02, "ppo_actor/update/grad_norm": 0.25,
         "ppo_actor/update/lr": 1e-06, "rollout/reward": 0.5},
        {"timeperf/rollout": 9.0, "timeperf/recompute_logp": 1.0, "timeperf/ref_logp": 0.5,
         "timeperf/compute_advantage": 0.25, "timeperf/train_step": 2.5, "timeperf/update_weights": 0.5,
         "timeperf/save": 3.0, "timeperf/checkpoint_for_recover": 1.0, "timeperf/eval": 0.0,
         "timeperf/clear_batches": 0.125, "ppo_actor/prompt_len/avg": 100.0,
         "ppo_actor/seq_len/avg": 900.0, "ppo_actor/task_reward/avg": 0.625,
         "ppo_actor/update/entropy/avg": NAN, "ppo_actor/update/approx_kl/avg": -0.002,
         "ppo_actor/update/clip_ratio/avg": 0.04, "ppo_actor/update/grad_norm": 0.5,
         "ppo_actor/update/lr": 1e-06, "rollout/reward": 0.625},
    ]):
        want += [(step, k, v) for k, v in values.items()]
    assert_rows(rows_of(parsed), want)
    assert parsed.run == {"framework": "areal"} and parsed.warnings == []


def test_areal_tables_split_by_ray_and_a_list_commit(tmp_path):
    """A commit of two dicts logs steps N-1 and N; a Ray prefix and an unannounced table are noise."""
    log = tmp_path / "train.log"
    log.write_text(
        "(RLTrainer pid=9) (AReaL) 20261205-09:00:00.000 StatsLogger INFO: "
        "Epoch 1/1 Step 5/9 Train step 5/9 done.\n"
        "╒═══╤═══╕\n│ not_stats │ 1.0 │\n╘═══╧═══╛\n"
        "(RLTrainer pid=9) (AReaL) 20261205-09:00:00.001 StatsLogger INFO: Stats (1/2):\n"
        "(RLTrainer pid=9) (AReaL) 20261205-09:00:00.001 StatsLogger INFO: \n"
        "(RLTrainer pid=9) ╒═══╤═══╕\n(RLTrainer pid=9) │ a │ 1.0000e+00 │ b │ 2.0000e+00 │\n"
        "(RLTrainer pid=9) ╘═══╧═══╛\n"
        "(AReaL) 20261205-09:00:00.002 StatsLogger INFO: Stats (2/2):\n"
        "(AReaL) 20261205-09:00:00.002 StatsLogger INFO: \n"
        "╒═══╤═══╕\n│ a │ 3.0000e+00 │   │   │\n╘═══╧═══╛\n")
    assert rows_of(areal_console.parse(log)) == [(4, "a", 1.0), (4, "b", 2.0), (5, "a", 3.0)]


@pytest.mark.parametrize("fmt, text, reason", [
    ("nemo-rl-console", "▶ Setting up compute cluster...\nSETUP COMPLETE\n",
     r"^empty\.log: no NeMo-RL step block \('===== Step N/M =====' with Training Results or Timing\) found$"),
    ("areal-console", "(AReaL) 20261205-09:00:00.000 Launcher INFO: starting\n",
     r"^empty\.log: no AReaL stats table \('Stats \(i/n\):' then '│ key │ value │' rows\) found$"),
])
def test_a_log_without_steps_is_one_line_and_stores_nothing(con, tmp_path, fmt, text, reason):
    path = tmp_path / "empty.log"
    path.write_text(text)
    assert registry.detect(path).name == fmt
    with pytest.raises(IngestError, match=reason):
        ingest_paths(con, [path])
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
    assert con.execute("SELECT status FROM ingests").fetchall() == [("failed",)]


@pytest.mark.parametrize("fmt", ["nemo-rl-console", "areal-console"])
def test_binary_data_is_refused(con, tmp_path, fmt):
    blob = tmp_path / "run.log"
    blob.write_bytes(b"(AReaL) ===== Step 1/2 =====\x00\x01" * 50)
    with pytest.raises(IngestError, match=r"^run\.log: binary data, not an? (NeMo-RL|AReaL) console log$"):
        ingest_paths(con, [blob], format=fmt)


def test_the_console_formats_claim_only_their_own(tmp_path):
    mine = (nemo_rl_console.FORMAT, areal_console.FORMAT)
    verl = Path(__file__).resolve().parent / "fixtures" / "verl"
    for path in sorted(verl.glob("*.log")):
        head = path.read_bytes()[:65536]
        assert not any(f.sniff(head, path.name) for f in mine), path.name
    nemo = (FIXTURES / "nemo_rl_console.log").read_bytes()
    areal = (FIXTURES / "areal_console.log").read_bytes()
    assert not areal_console.sniff(nemo, "x.log") and not nemo_rl_console.sniff(areal, "x.log")


@pytest.mark.parametrize("file, framework, steps", [
    ("nemo_rl_console.log", "nemo-rl", 3), ("areal_console.log", "areal", 2)])
def test_ingest_keeps_the_framework_as_a_run_fact(con, file, framework, steps):
    result = ingest_paths(con, [FIXTURES / file])
    assert con.execute("SELECT framework FROM runs WHERE run_id = ?", [result.run_id]).fetchone() == (framework,)
    assert con.execute("SELECT count(DISTINCT step) FROM step_metrics WHERE run_id = ?",
                       [result.run_id]).fetchone() == (steps,)
