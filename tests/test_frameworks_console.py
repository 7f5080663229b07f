"""Golden tests of the OpenRLHF and ROLL console formats: hand-made logs in, step_metrics rows out,
and those rows read through store/vocabulary/<framework>.toml give the canonical values derived by hand."""
from __future__ import annotations

import math
import tomllib
from pathlib import Path

import pytest

from polytrace.ingest import registry
from polytrace.ingest.contract import IngestError
from polytrace.ingest.formats import openrlhf_console, roll_console
from polytrace.ingest.load import ingest_paths
from tests.conftest import FIXTURES

LOGS = FIXTURES / "frameworks"
VOCABULARY = Path(__file__).resolve().parents[1] / "store" / "vocabulary"


def step_rows(parsed) -> list[tuple]:
    return [(r["step"], r["key"], r["value"]) for r in parsed.tables["step_metrics"].to_pylist()]


def canonical(rows: list[tuple], framework: str) -> dict[int, dict[str, float]]:
    """The mapping file applied as its README says: first present key (or the sum with combine),
    times scale; timing keys under [stages] that no metric names pass as timing_s/<rest>."""
    m = tomllib.loads((VOCABULARY / f"{framework}.toml").read_text())
    steps: dict[int, dict[str, float]] = {}
    for step, key, value in rows:
        steps.setdefault(step, {})[key] = value
    named = {k for entry in m["metric"].values() for k in entry["keys"]}
    out = {}
    for step, raw in steps.items():
        values = {}
        for name, entry in m["metric"].items():
            present = [raw[k] for k in entry["keys"] if k in raw]
            if present:
                values[name] = (sum(present) if entry.get("combine") == "sum" else present[0]) * entry["scale"]
        prefix = m.get("stages", {}).get("prefix")
        if prefix:
            values |= {"timing_s/" + k[len(prefix):]: v * m["stages"]["scale"]
                       for k, v in raw.items() if k.startswith(prefix) and k not in named}
        out[step] = values
    return out


def test_openrlhf_console_golden():
    log = LOGS / "openrlhf_console.log"
    assert registry.detect(log).name == "openrlhf-console"
    parsed = openrlhf_console.parse(log)
    assert parsed.run == {"framework": "openrlhf"}
    assert parsed.warnings == []
    # keys as WandbLogger.log_train writes them ("train/" + key); the tqdm redraw and the ANSI-coloured
    # Ray prefix before step 2 are dropped; the evaluation goes under "eval/" at its global_step;
    # step 3's line is cut before its closing brace, so step 3 has no row at all
    stages = ["make_experience", "ppo_train", "broadcast"]
    assert step_rows(parsed) == [
        (1, "train/policy_loss", 0.5), (1, "train/actor_lr", 1e-06), (1, "train/actor_grad_norm", 0.75),
        (1, "train/ppo_clip_ratio", 0.0125), (1, "train/ppo_kl", 0.001), (1, "train/kl", 0.0),
        (1, "train/response_length", 500.0),
        *[(1, f"train/timing/{s}", v) for s, v in zip(stages, [20.0, 40.0, 5.0])],
        (1, "train/rollout/reward_mean", 0.25), (1, "train/rollout/response_length_mean", 500.0),
        (1, "train/rollout/truncated_rate", 0.0), (1, "train/timing/generation", 35.0),
        (1, "train/timing/step_total", 100.0),
        (2, "train/policy_loss", -0.25), (2, "train/actor_lr", 1e-06), (2, "train/actor_grad_norm", 1.5),
        (2, "train/ppo_clip_ratio", 0.025), (2, "train/ppo_kl", 0.002), (2, "train/kl", 0.0005),
        (2, "train/response_length", 620.5),
        *[(2, f"train/timing/{s}", v) for s, v in zip(stages, [20.0, 40.0, 5.0])],
        (2, "train/rollout/reward_mean", 0.5), (2, "train/rollout/response_length_mean", 620.5),
        (2, "train/rollout/truncated_rate", 0.125), (2, "train/timing/generation", 45.0),
        (2, "train/timing/step_total", 110.0),
        (2, "eval/eval_math_pass1", 0.375),
    ]


def test_openrlhf_rows_through_the_mapping():
    values = canonical(step_rows(openrlhf_console.parse(LOGS / "openrlhf_console.log")), "openrlhf")
    # step 1: generation 35 + make_experience 20 + ppo_train 40 + broadcast 5 = step_total 100
    assert values[1] == {
        "timing_s/step": 100.0, "timing_s/gen": 35.0, "timing_s/update_actor": 40.0,
        "timing_s/update_weights": 5.0, "timing_s/make_experience": 20.0,
        "response_length/mean": 500.0, "response_length/clip_ratio": 0.0, "critic/rewards/mean": 0.25,
        "actor/ppo_kl": 0.001, "actor/kl_loss": 0.0, "actor/grad_norm": 0.75, "actor/pg_clipfrac": 0.0125,
    }
    assert values[2]["timing_s/step"] == 45.0 + 20.0 + 40.0 + 5.0
    assert values[2]["response_length/clip_ratio"] == 0.125


def test_roll_console_golden():
    log = LOGS / "roll_console.log"
    assert registry.detect(log).name == "roll-console"
    parsed = roll_console.parse(log)
    assert parsed.run == {"framework": "roll"}
    assert parsed.warnings == []
    rows = step_rows(parsed)
    # each step is printed twice (the stdout tracker's line, then the pipeline's dict with @tags):
    # one row per key, tags stripped as the trackers strip them, the string-free numbers only
    assert [r for r in rows if r[0] == 0] == [
        (0, "time/step_total", 0.0), (0, "time/step_stop_server", 0.5), (0, "time/step_model_update", 4.0),
        (0, "time/val_step", 20.0), (0, "val_correct/all/mean", 0.25), (0, "time/step_generate", 60.0),
        (0, "time/ref_log_probs_values", 6.0), (0, "time/old_log_probs", 8.0),
        (0, "math/time/compute_advantage", 0.5), (0, "system/global_step", 0.0),
        (0, "system/batch_size", 128.0), (0, "system/tps_gpu", 1500.0),
        (0, "token/prompt_length/mean", 100.0), (0, "token/response_length/mean", 900.0),
        (0, "token/response_length/max", 4096.0), (0, "token/response_length/min", 12.0),
        (0, "token/total_response_length/clip", 4.0), (0, "critic/entropy/mean", 0.75),
        (0, "critic/score/mean", 0.5), (0, "critic/rewards/mean", 0.5),
        (0, "global_seqlen/actor_train/min", 30000.0), (0, "global_seqlen/actor_train/max", 34000.0),
        (0, "global_seqlen/actor_train/mean", 32000.0), (0, "global_seqlen/actor_train/balanced_max", 32100.0),
        (0, "actor/pg_loss", 0.125), (0, "actor/kl_loss", 0.001), (0, "actor/policykl", 0.002),
        (0, "actor/clipfrac", 0.01), (0, "actor_train/grad_norm", 0.5), (0, "time/step_train", 30.0),
        (0, "mask/final_mask_sum_eq_0", 0.0), (0, "system/step", 0.0),
    ]
    # step 1 has no validation and no global_seqlen keys, and a checkpoint save
    assert len([r for r in rows if r[0] == 1]) == 26
    assert (1, "time/actor_train/do_checkpoint/total", 12.0) in rows


def test_roll_rows_through_the_mapping():
    values = canonical(step_rows(roll_console.parse(LOGS / "roll_console.log")), "roll")
    # the step is the sum of its stage timers, not time/step_total (step 0's reads 0: the step before)
    assert values[0]["timing_s/step"] == 0.5 + 4.0 + 20.0 + 60.0 + 6.0 + 8.0 + 30.0 == 128.5
    assert values[1]["timing_s/step"] == 0.5 + 4.5 + 70.0 + 6.0 + 8.0 + 31.0 + 12.0 == 132.0
    assert values[1]["timing_s/save_checkpoint"] == 12.0 and "timing_s/save_checkpoint" not in values[0]
    assert values[0]["timing_s/testing"] == 20.0 and "timing_s/testing" not in values[1]
    # policykl is new minus old log-prob: negated to verl's sign
    assert (values[0]["actor/ppo_kl"], values[1]["actor/ppo_kl"]) == (-0.002, 0.004)
    assert {k: values[1][k] for k in ("timing_s/gen", "timing_s/ref", "timing_s/old_log_prob",
                                      "timing_s/update_actor", "timing_s/update_weights",
                                      "perf/throughput", "response_length/mean", "prompt_length/mean",
                                      "critic/score/mean", "actor/pg_clipfrac", "actor/grad_norm")} == {
        "timing_s/gen": 70.0, "timing_s/ref": 6.0, "timing_s/old_log_prob": 8.0,
        "timing_s/update_actor": 31.0, "timing_s/update_weights": 4.5, "perf/throughput": 1400.0,
        "response_length/mean": 1000.0, "prompt_length/mean": 100.0, "critic/score/mean": 0.625,
        "actor/pg_clipfrac": 0.02, "actor/grad_norm": 0.625,
    }
    assert "response_length/clip_ratio" not in values[0]  # ROLL logs a count, said not_logged


def test_ingest_keeps_the_framework(con):
    result = ingest_paths(con, [LOGS / "roll_console.log"])
    assert result.format == "roll-console"
    assert con.execute("SELECT framework FROM runs WHERE run_id = ?", [result.run_id]).fetchone() == ("roll",)
    result = ingest_paths(con, [LOGS / "openrlhf_console.log"])
    assert con.execute("SELECT framework FROM runs WHERE run_id = ?", [result.run_id]).fetchone() == ("openrlhf",)


@pytest.mark.parametrize("fmt, reason", [
    (openrlhf_console, "no OpenRLHF step line ('Global step N: {...}') found"),
    (roll_console, "no ROLL metrics line ('metrics_tag: {...}' or the pipeline's JSON dict with "
                   "system/global_step) found"),
])
def test_a_log_without_metric_lines_is_one_line_error(tmp_path, fmt, reason):
    log = tmp_path / "train.log"
    # noise of both frameworks, and a metric line of each cut before its end
    log.write_text("INFO 08-13 12:00:00 ppo_trainer.py:547] \u2728 Global step 1: {'policy_loss': 0.5\n"
                   '[2025-06-01 10:00:00] [tracking.py (161)] [INFO] [DRIVER 0 / 1][PID 1] metrics_tag: {"step": 0\n')
    with pytest.raises(IngestError) as e:
        fmt.parse(log)
    assert str(e.value) == f"train.log: {reason}"
    binary = tmp_path / "run.log"
    binary.write_bytes(b"\x00\x01 Global step 1: {'a': 1}\n")
    with pytest.raises(IngestError, match="binary data"):
        fmt.parse(binary)


def test_python_dict_values():
    """What a repr dict can hold: numpy and torch scalars, nan and inf count; strings, bools,
    None, lists and nested dicts do not; quotes and brackets inside strings do not end an item."""
    from polytrace.ingest.logged_dicts import repr_pairs
    text = ("x {'a': np.float64(0.5), 'b': tensor(2., device='cuda:0'), 'c': nan, 'd': -inf, "
            "'e': 'x, y}', 'f': True, 'g': None, 'h': [1, 2], 'i': {'j': 1}, \"k'\": 3}")
    values = repr_pairs(text, text.index("{"))
    assert math.isnan(values.pop("c"))
    assert values == {"a": 0.5, "b": 2.0, "d": -math.inf, "k'": 3.0}
    assert repr_pairs("{'a': 1, 'b': 2", 0) is None


REAL = LOGS / "real"


def test_real_openrlhf_files_agree_with_the_mapping():
    """Files written by OpenRLHF's own WandbLogger and logger (real/make_real.py): the console
    format stores the keys the W&B run holds, with the same values, and they map alike."""
    from polytrace.ingest.formats import wandb_offline
    console = step_rows(openrlhf_console.parse(REAL / "openrlhf" / "console.log"))
    logged = step_rows(wandb_offline.parse(REAL / "openrlhf" / "run-openrlhf.wandb"))
    # W&B's own step counts log calls from 0; OpenRLHF's step is train/global_step (1, 2)
    global_step = {s: v for s, k, v in logged if k == "train/global_step"}
    assert global_step == {0: 1.0, 1: 2.0}
    from_wandb = sorted((int(global_step[s]), k, v) for s, k, v in logged
                        if k.startswith("train/") and k != "train/global_step")
    assert from_wandb == sorted(console)
    values = canonical(console, "openrlhf")
    assert values[2]["timing_s/step"] == 110.0 and values[2]["timing_s/gen"] == 45.0


def test_real_roll_console_file():
    """Lines written by ROLL's own get_logger with the RLVR pipeline's message (real/make_real.py)."""
    assert registry.detect(REAL / "roll" / "console.log").name == "roll-console"
    values = canonical(step_rows(roll_console.parse(REAL / "roll" / "console.log")), "roll")
    assert values[1]["timing_s/step"] == 0.5 + 4.5 + 70.0 + 6.0 + 8.0 + 31.0
    assert (values[0]["actor/ppo_kl"], values[1]["perf/throughput"]) == (-0.002, 1400.0)


def test_slime_real_excerpt_reads_through_to_its_findings(con):
    """A real run's line (THUDM/slime issue 1837): the rollout's numbers land under their keys and
    canonical names, and its 46% truncated share is the cap finding, in slime's words."""
    from polytrace.queries.catalog import bind, load_catalog
    from polytrace.queries.runner import run_bound

    log = LOGS / "slime_issue_1837_excerpt.log"
    assert registry.detect(log).name == "slime-console"
    run_id = ingest_paths(con, [log]).run_id
    got = dict(con.execute("SELECT key, value FROM canonical_metrics WHERE run_id = ? AND step = 0",
                           [run_id]).fetchall())
    assert got["timing_s/gen"] == 371.1796889305115  # perf/rollout_time
    assert (got["response_length/mean"], got["response_length/max"], got["response_length/min"]) == (
        2773.71484375, 4096.0, 593.0)
    assert got["response_length/clip_ratio"] == 0.46484375  # rollout/truncated_ratio
    q = load_catalog()["finding_cap_hits"]
    answer = run_bound(con, q, bind(q, {"run_id": run_id}))
    (finding,) = [dict(zip(answer.columns, row)) for row in answer.rows]
    assert (finding["severity"], finding["value"], finding["steps"]) == ("critical", 0.46484375, [0])
    assert finding["text"].startswith("46.5% of responses in the last step stopped at the response-length "
                                      "cap (slime's logged clip ratio)")


def test_slime_console_golden():
    from polytrace.ingest.formats import slime_console
    log = LOGS / "slime_console.log"
    assert registry.detect(log).name == "slime-console"
    parsed = slime_console.parse(log)
    assert parsed.run == {"framework": "slime"} and parsed.warnings == []
    rows = step_rows(parsed)
    # the four dicts of rollout 0 (rollout manager, trainer rollout data, optimizer step, timers)
    # merge into step 0: 6 + 4 + 9 + 8 keys, no key in two of them; the Timer line is no dict
    assert len([r for r in rows if r[0] == 0]) == 27
    assert [r for r in rows if r[0] == 1] == [
        (1, "rollout/response_len/mean", 1100.0), (1, "rollout/response_len/max", 4096.0),
        (1, "rollout/response_len/min", 80.0), (1, "rollout/truncated_ratio", 0.25),
        (1, "perf/rollout_time", 220.0), (1, "rollout/raw_reward", 0.375),
        (1, "train/entropy_loss", 0.45), (1, "train/pg_clipfrac", 0.02), (1, "train/ppo_kl", 0.001),
        (1, "train/grad_norm", 0.75), (1, "train/step", 1.0),
        (1, "perf/update_weights_time", 3.0), (1, "perf/save_model_time", 12.0),
        (1, "perf/train_wait_time", 240.0), (1, "perf/ref_log_probs_time", 5.0), (1, "perf/train_time", 31.0),
        (1, "perf/actor_train_time", 26.0), (1, "perf/step_time", 271.0),
    ]
    values = canonical(rows, "slime")
    assert values[0] == {
        "timing_s/step": 240.0, "timing_s/gen": 200.0, "timing_s/ref": 5.0, "timing_s/update_actor": 25.0,
        "timing_s/update_weights": 3.0, "response_length/mean": 1000.0, "response_length/max": 4096.0,
        "response_length/min": 100.0, "response_length/clip_ratio": 0.125, "critic/score/mean": 0.25,
        "actor/entropy": 0.5, "actor/ppo_kl": 0.0, "actor/grad_norm": 1.0, "actor/pg_clipfrac": 0.01,
    }
    assert values[1]["timing_s/save_checkpoint"] == 12.0
    empty = LOGS / "openrlhf_console.log"
    with pytest.raises(IngestError) as e:
        slime_console.parse(empty)
    assert str(e.value) == ("openrlhf_console.log: no slime metrics line ('perf N: {...}', "
                            "'rollout N: {...}' or 'step N: {...}') found")
