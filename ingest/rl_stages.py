"""verl's stages (its timing_s/<stage> names) and the worker methods and timers that serve them,
for formats that name work by the method or timer that ran it (Ray timelines, NVTX ranges).

verl's workers' methods (verl/workers/fsdp_workers.py: generate_sequences, compute_log_prob, ...)
are called through a colocated WorkerDict as `<role>_<method>`; verl's NsightSystemsProfiler
names an NVTX range after the method (verl/utils/profiler/nvtx_profile.py annotate), and
marked_timer names one after the trainer's timer, which is the stage's own name.
"""
from __future__ import annotations

# verl worker method (after its role prefix) -> the verl stage (timing_s/<stage>) it serves
METHODS = {
    "generate_sequences": "gen",
    "compute_rm_score": "reward",
    "compute_reward_async": "reward",
    "compute_log_prob": "old_log_prob",
    "compute_ref_log_prob": "ref",
    "compute_values": "values",
    "update_critic": "update_critic",
    "update_actor": "update_actor",
    "save_checkpoint": "save_checkpoint",
    "update_weights": "update_weights",
}
# the trainer's marked_timer names (verl/trainer/ppo/ray_trainer.py) that are stages themselves
TIMERS = {"gen", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor",
          "save_checkpoint", "testing", "update_weights"}
_BY_LENGTH = sorted(METHODS, key=len, reverse=True)


def stage_of(name: str) -> str | None:
    """The verl stage of a method (with or without its role prefix) or of a timer; None otherwise."""
    if name in TIMERS:
        return name
    for method in _BY_LENGTH:
        if name == method or name.endswith("_" + method):
            return METHODS[method]
    return None
