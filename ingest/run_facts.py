"""Run-level facts: the `runs` columns an ingest fills, and those a user may give."""

RUN_COLUMNS = ("framework", "model", "task", "max_response_len", "n_gpus", "config")
# Given on the command line or as upload fields when the input does not carry them.
GIVEN_RUN_FACTS = {
    "max_response_len": "Response-length cap in tokens, when the files do not say (enables the cap findings).",
    "n_gpus": "GPUs in the job, when the files do not say.",
}
