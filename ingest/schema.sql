-- The canonical PolyTrace tables. Every format parses into these; every query reads them.
-- Keys are run_id (VARCHAR) and step (INTEGER). Statements are idempotent so that
-- opening an existing database re-applies them safely.

-- One row per ingested run.
CREATE TABLE IF NOT EXISTS runs (
    run_id           VARCHAR PRIMARY KEY, -- short stable id derived from the content hash
    name             VARCHAR,             -- user-facing name (--name, or the input's file/dir name)
    format           VARCHAR,             -- format of the input; 'mixed' when a directory held several
    framework        VARCHAR,             -- verl, OpenRLHF, AReaL, slime, rllm ... when known
    model            VARCHAR,             -- model name when the input or a config names it
    task             VARCHAR,             -- workload type: math, code, search, video ... when known
    max_response_len INTEGER,             -- response-length cap in tokens, when known
    n_gpus           INTEGER,             -- GPUs in the job, when known
    config           JSON,                -- any run-level configuration the input carried
    sha256           VARCHAR,             -- hash over all input files' bytes; dedup key
    created_at       TIMESTAMP            -- when the run was ingested (UTC)
);

-- One row per file in each ingest attempt, successful or not.
CREATE SEQUENCE IF NOT EXISTS ingest_seq;
CREATE TABLE IF NOT EXISTS ingests (
    ingest_id   BIGINT DEFAULT nextval('ingest_seq'), -- monotonically increasing attempt id
    run_id      VARCHAR,   -- run the file landed in; NULL when the attempt failed
    file_name   VARCHAR,   -- path of the file as given (inside an archive: archive!member)
    sha256      VARCHAR,   -- hash of the file's raw bytes
    format      VARCHAR,   -- detected or forced format; NULL if none matched
    bytes       BIGINT,    -- raw size on disk
    rows        BIGINT,    -- canonical rows produced from this file
    status      VARCHAR,   -- 'ok' or 'failed'
    error       VARCHAR,   -- one-line reason when failed; warnings when ok
    started_at  TIMESTAMP, -- attempt start (UTC)
    finished_at TIMESTAMP  -- attempt end (UTC)
);

-- One row per response: a packed output[j], or one multi-turn rollout.
CREATE TABLE IF NOT EXISTS samples (
    run_id          VARCHAR,  -- owning run
    step            INTEGER,  -- training (workload) step
    prompt_id       INTEGER,  -- packed: prompt's position in the step's file; multi-turn: prompt_group_id
    sample_id       INTEGER,  -- packed: j in output[j]; multi-turn: sample_id
    rank            INTEGER,  -- global rank that logged the sample
    dp_rank         INTEGER,  -- data-parallel rank (= rollout engine)
    tp_rank         INTEGER,  -- tensor-parallel rank
    prompt_len      INTEGER,  -- prompt tokens
    response_len    INTEGER,  -- response tokens
    truncated       BOOLEAN,  -- hit the response cap (finish_reason 'length', or len >= cap); NULL if unknown
    validate        BOOLEAN,  -- sample came from a validation pass
    kept            BOOLEAN,  -- prompt passed DAPO's dynamic-sampling filter; NULL without a filter file
    used            BOOLEAN,  -- prompt went into the training batch; NULL without a filter file
    turn_count      INTEGER,  -- multi-turn: number of assistant turns
    tool_call_count INTEGER,  -- multi-turn: number of tool calls
    finish_reason   VARCHAR,  -- engine finish reason of the final turn
    reward          DOUBLE    -- verifiable reward, when logged
);

-- One row per assistant turn of a multi-turn rollout.
CREATE TABLE IF NOT EXISTS turns (
    run_id            VARCHAR, -- owning run
    step              INTEGER, -- training step
    prompt_id         INTEGER, -- prompt_group_id
    sample_id         INTEGER, -- rollout within the group
    turn              INTEGER, -- 0-based turn index
    prompt_tokens     INTEGER, -- tokens sent to the engine for this turn
    cached_tokens     INTEGER, -- of those, served from the prefix cache
    completion_tokens INTEGER, -- tokens generated in this turn
    engine_latency_s  DOUBLE,  -- engine wall time for this turn (s)
    finish_reason     VARCHAR, -- stop, length, tool_calls ...
    tool_call_count   INTEGER  -- tool calls emitted by this turn
);

-- One row per tool call made during a multi-turn rollout.
CREATE TABLE IF NOT EXISTS tool_calls (
    run_id          VARCHAR, -- owning run
    step            INTEGER, -- training step
    prompt_id       INTEGER, -- prompt_group_id
    sample_id       INTEGER, -- rollout within the group
    turn            INTEGER, -- turn that emitted the call
    tool_name       VARCHAR, -- e.g. search, python
    latency_s       DOUBLE,  -- tool wall time (s)
    status          VARCHAR, -- success, error, timeout ...
    response_tokens INTEGER, -- tokens the tool's answer added to the context
    query_count     INTEGER  -- queries batched into the call (search tools)
);

-- Per-rank time spent in one stage of one step (e.g. PolyTrace reward_timings).
CREATE TABLE IF NOT EXISTS rank_stage (
    run_id     VARCHAR, -- owning run
    step       INTEGER, -- training step
    rank       INTEGER, -- global rank
    dp_rank    INTEGER, -- data-parallel rank
    tp_rank    INTEGER, -- tensor-parallel rank
    stage      VARCHAR, -- reward, gen, update_actor ...
    seconds    DOUBLE,  -- wall time of the stage on this rank (s)
    batch_size INTEGER, -- samples the rank handled in the stage
    tokens     BIGINT   -- response tokens the rank handled in the stage
);

-- Every numeric metric of a step, in long form (verl console/JSONL logs, W&B exports).
CREATE TABLE IF NOT EXISTS step_metrics (
    run_id VARCHAR, -- owning run
    step   INTEGER, -- training step
    key    VARCHAR, -- metric name as logged, e.g. timing_s/gen
    value  DOUBLE   -- metric value; NaN and +-inf are kept
);
