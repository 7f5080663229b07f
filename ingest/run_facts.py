"""Run-level facts: the `runs` columns an ingest fills, and those a user may give."""

RUN_COLUMNS = ("framework", "model", "task", "max_response_len", "n_gpus", "config", "trainer_gpus",
               "rollout_gpus", "max_staleness")
# Given on the command line or as upload fields when the input does not carry them.
GIVEN_RUN_FACTS = {
    "max_response_len": "Response-length cap in tokens, when the files do not say (enables the cap findings).",
    "n_gpus": "GPUs in the job, when the files do not say.",
    "trainer_gpus": "Async runs: GPUs of the trainer pool, when the files do not say (splits async_budget).",
    "rollout_gpus": "Async runs: GPUs of the rollout pool, when the files do not say (splits async_budget).",
    "max_staleness": "Async runs: the staleness bound in policy versions (AReaL max_head_offpolicyness), "
                     "when the files do not say (enables the staleness_bound finding).",
}
# Given as text, checked against store/vocabulary; a given framework beats detection from the keys.
GIVEN_FRAMEWORK = ("The framework that wrote the files (verl, openrlhf, slime, areal, roll, nemo-rl): "
                   "whose metric names they hold, when the files do not say (it is otherwise detected from the keys).")
