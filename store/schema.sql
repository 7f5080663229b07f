-- The canonical PolyTrace tables. Every format parses into these; every query reads them.
-- Keys are run_id (VARCHAR) and step (INTEGER). Statements are idempotent so that
-- opening an existing database re-applies them safely.

-- The schema's recorded version and the aggregate definitions' digest (store/migrate.py).
CREATE TABLE IF NOT EXISTS store_meta (
    key   VARCHAR PRIMARY KEY, -- schema_version, schema or aggregates
    value VARCHAR              -- the version number, or the digest of schema.sql or of store/aggregates/*.sql
);

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
    created_at       TIMESTAMP,           -- when the run was ingested (UTC)
    length_unit      VARCHAR,             -- unit of samples.prompt_len/response_len: 'tokens', or 'chars' (a verl rollout dump ingested without a tokenizer); NULL means tokens
    trainer_gpus     INTEGER,             -- async runs: GPUs of the trainer pool (training, log-probs, weight sync), when known
    rollout_gpus     INTEGER,             -- async runs: GPUs of the rollout pool (inference engines), when known
    max_staleness    INTEGER              -- the configured staleness bound in policy versions (AReaL max_head_offpolicyness, NeMo-RL max_trajectory_age_steps), when given; config keys are read too
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
    error       VARCHAR,   -- one-line reason when failed
    started_at  TIMESTAMP, -- attempt start (UTC)
    finished_at TIMESTAMP, -- attempt end (UTC)
    warnings    VARCHAR    -- what a loaded file had to say ('; '-joined): lines cut short, steps logged twice
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
    key    VARCHAR, -- metric name as logged, e.g. timing_s/gen (old verl's timing/gen is stored as timing_s/gen)
    value  DOUBLE   -- metric value; NaN and +-inf are kept
);

-- Each RL framework's logged metric keys mapped to the canonical names the catalog reads, filled
-- from store/vocabulary/*.toml by every writer whose files differ (store/vocabulary.py); the
-- canonical_metrics aggregate translates a run's step_metrics through its framework's rows.
CREATE TABLE IF NOT EXISTS metric_vocabulary (
    framework VARCHAR, -- runs.framework value the row serves (verl, openrlhf, slime, areal, roll, nemo-rl)
    kind      VARCHAR, -- 'metric' (a logged key for a canonical name), 'stage' (a timing prefix kept as timing_s/<stage>), 'signature' (a key, or a prefix ending in '/', only this framework logs)
    key       VARCHAR, -- the logged key, or the prefix
    name      VARCHAR, -- the canonical name ('timing_s/' for a stage prefix); NULL for a signature
    scale     DOUBLE,  -- canonical value = logged value x scale (ms -> s: 0.001)
    combine   VARCHAR, -- 'first': the name's first key the step logged wins; 'sum': its keys add up
    position  INTEGER  -- the key's place in its name's list of keys
);

-- One row per trajectory of an asynchronous (or off-policy) run: the policy versions it was
-- generated under and consumed by, when it moved, and what became of it. A version counts the
-- weight updates the rollout engines had received (verl's global_steps - 1, AReaL's and NeMo-RL's
-- weight version); the consume version is the version of the weights the trainer updated with it,
-- so a trajectory generated and trained by the same weights has staleness 0 (on-policy).
-- Staleness = consume_version - start_version, split into in-flight (end_version - start_version:
-- a partial rollout resumed across weight updates) and in-queue (consume_version - end_version:
-- finished, waiting for the trainer). Timestamps are seconds on the source's own clock.
CREATE TABLE IF NOT EXISTS trajectories (
    run_id          VARCHAR, -- owning run
    step            INTEGER, -- training step whose batch consumed it (dropped or filtered: the step it was dropped at); NULL when the source does not say
    trajectory_id   VARCHAR, -- the source's id: verl's dump line (step:line), AReaL task_id:session_id
    prompt_id       INTEGER, -- prompt group, as samples.prompt_id, when the source has one
    sample_id       INTEGER, -- sample within its group, as samples.sample_id
    start_version   INTEGER, -- policy version that generated its first token (verl min_global_steps, AReaL head_version)
    end_version     INTEGER, -- policy version that generated its last token (verl max_global_steps, AReaL tail_version); above start_version when generation spanned a weight update
    consume_version INTEGER, -- version of the weights the trainer updated with it (verl global_steps - 1); NULL when never consumed or not logged
    enqueue_ts      DOUBLE,  -- submitted to the rollout engines (AReaL submit_ts) (s)
    gen_start_ts    DOUBLE,  -- generation of its first token started (AReaL: first generate phase start) (s)
    gen_end_ts      DOUBLE,  -- its last token generated (AReaL: last generate phase end) (s)
    ready_ts        DOUBLE,  -- finished, reward included, and handed to the trainer's queue (AReaL finalized_ts) (s)
    consume_ts      DOUBLE,  -- taken by the trainer into a batch (s)
    status          VARCHAR, -- accepted (trained on), dropped_stale (discarded as too old), filtered (rejected by a filter: DAPO, AReaL should_accept), failed (workflow error, aborted)
    reason          VARCHAR, -- the source's reason for any status but accepted, as it wrote it
    resume_count    INTEGER, -- times its generation was interrupted (a weight update) and resumed; NULL when not logged
    tokens          BIGINT   -- response tokens generated for it (in runs.length_unit: characters when a dump was read without a tokenizer)
);

-- What-if rollout simulation results (polytrace simulate ... --store): predicted rollout
-- time per step, policy and engine, plus one row per step and policy with engine NULL.
CREATE TABLE IF NOT EXISTS whatif (
    run_id      VARCHAR, -- simulated run
    step        INTEGER, -- training step
    policy      VARCHAR, -- dispatch: as-recorded, round-robin, predicted-balanced, length-balanced (knows every length); algorithm: partial-rollout:q; config: cap:C
    engine      INTEGER, -- rollout engine index; NULL on the step's summary row
    n           INTEGER, -- samples the engine generated (summary row: all engines)
    tokens      BIGINT,  -- response tokens generated in the step (partial rollout: this step's share)
    max_len     INTEGER, -- longest generation on the engine in the step (tokens)
    predicted_s DOUBLE,  -- predicted rollout time (s); summary row: the slowest engine, the step's rollout time
    idle_frac   DOUBLE,  -- engine: 1 - its time / slowest engine's; summary row: 1 - sum(times) / (engines * slowest)
    speedup     DOUBLE,  -- summary row: as-recorded rollout time / this policy's; NULL on engine rows
    calibration VARCHAR  -- the cost model's calibration: a calib.json or iters file, the built-in H200 grid, or 'log' (fitted to the run's own steps)
);

-- GPU-side events: one row per kernel, memcpy or memset (formats kineto and nsys).
CREATE TABLE IF NOT EXISTS gpu_events (
    run_id       VARCHAR, -- owning run
    rank         INTEGER, -- global rank of the trace (distributedInfo.rank, else the file name, else 0)
    step         INTEGER, -- ProfilerStep#N whose window holds the event's CPU launch (as HTA); NULL outside every window
    stream       INTEGER, -- CUDA/HIP stream the event ran on
    category     VARCHAR, -- compute (kernels, MTIA ops), communication (NCCL/RCCL kernels) or memory (memcpy/memset, MTIA dma)
    name_id      BIGINT,  -- kernel name, via kernel_names (stable hash of the name)
    ts_us        DOUBLE,  -- start on the trace's clock (us)
    dur_us       DOUBLE,  -- duration (us)
    hta_excluded BOOLEAN, -- HTA's default drops it: the rank has >= 2 ProfilerStep windows and the event was launched at or after the last one's start, or its launch is not in the trace
    trace_start_us DOUBLE -- start of the first GPU event of the event's trace file: tells apart the files of a rank profiled in several (NULL in runs loaded before it was kept)
);

-- Kernel names of gpu_events; identical rows may repeat when several files share a name.
CREATE TABLE IF NOT EXISTS kernel_names (
    run_id  VARCHAR, -- owning run
    name_id BIGINT,  -- id used by gpu_events.name_id
    name    VARCHAR  -- full kernel, memcpy or memset name as the profiler wrote it
);

-- ProfilerStep#N windows: CPU-side annotations of one profiler step on one rank.
CREATE TABLE IF NOT EXISTS profiler_steps (
    run_id VARCHAR, -- owning run
    rank   INTEGER, -- global rank
    step   INTEGER, -- N of ProfilerStep#N
    ts_us  DOUBLE,  -- window start on the trace's clock (us)
    dur_us DOUBLE   -- window length (us)
);

-- One row per rank trace file (or archive member) of a kineto ingest, per GPU of an nsys export.
CREATE TABLE IF NOT EXISTS gpu_ranks (
    run_id         VARCHAR, -- owning run
    rank           INTEGER, -- global rank given to the file's events
    source         VARCHAR, -- file name, or archive!member
    rank_from      VARCHAR, -- where the rank came from: distributedInfo, file name, environment (nsys: the captured RANK), device id (nsys: one export of several GPUs), or default (0)
    world_size     INTEGER, -- distributedInfo.world_size, when present
    device         VARCHAR, -- first deviceProperties name, e.g. NVIDIA H200
    trace_events   BIGINT,  -- events in the file's traceEvents, of every kind (nsys: its GPU's kernels, memcpys, memsets and syncs)
    gpu_events     BIGINT,  -- of those, rows stored in gpu_events
    profiler_steps INTEGER, -- ProfilerStep windows in the file
    clock          VARCHAR, -- what the file's times are after: baseTimeNanoseconds (Kineto since PyTorch 2.1), Unix epoch (older Kineto), nsys session start (an nsys export put on the epoch by TARGET_INFO_SESSION_START_TIME), or own (origin unknown)
    clock_origin_ns BIGINT  -- Unix time (ns) of the file's ts_us = 0; NULL for a clock of its own
);

-- Annotated CPU ranges: NVTX ranges of an Nsight Systems export (format nsys) and record_function
-- ranges of a Kineto trace (cat user_annotation), each with the GPU work its process launched
-- inside it (CUDA runtime calls between its start and end, matched to their kernels, memcpys and
-- memsets by correlation id), as nsys projects a range onto the GPU. A nested range's work
-- counts in its parent's too. ProfilerStep#N ranges are profiler_steps instead.
CREATE TABLE IF NOT EXISTS gpu_ranges (
    run_id           VARCHAR, -- owning run
    rank             INTEGER, -- global rank of the GPU the range's process ran work on
    name             VARCHAR, -- the range's text, e.g. update_actor, nccl:all_reduce
    stage            VARCHAR, -- verl stage it serves (timing_s/<stage>: gen, old_log_prob, ref, update_actor, ...), from a worker method or trainer timer name; NULL otherwise
    ts_us            DOUBLE,  -- start on the trace's clock: the UTC clock, us since the epoch (an nsys capture without a session start: its own clock)
    dur_us           DOUBLE,  -- duration on the CPU (us)
    gpu_events       BIGINT,  -- kernels, memcpys and memsets launched inside it
    gpu_us           DOUBLE,  -- their summed durations (us; overlapping streams count twice)
    communication_us DOUBLE,  -- of which NCCL/RCCL kernels (us)
    memory_us        DOUBLE,  -- of which memcpys and memsets (us)
    gpu_start_us     DOUBLE,  -- first start of those events (us); NULL when it launched none
    gpu_end_us       DOUBLE   -- last end of those events (us): the range's span on the GPU ends here
);

-- The critical path of each profiled window of a rank's Kineto trace, as HTA 0.5 defines it
-- (critical_path_analysis): the chain of CPU operators, launches, GPU kernels and syncs whose
-- weights add up to the most time. Windows are the ProfilerSteps; a trace without them has one
-- for the whole trace and one per record_function range (the first 64 by start).
CREATE TABLE IF NOT EXISTS critical_paths (
    run_id                    VARCHAR, -- owning run
    rank                      INTEGER, -- global rank
    annotation                VARCHAR, -- the window: ProfilerStep, (whole trace), or a record_function range's name (HTA's annotation)
    instance                  INTEGER, -- which range of that name, from 0 in the trace's order
    step                      INTEGER, -- profiler step number of a ProfilerStep window, else NULL
    ts_us                     DOUBLE,  -- window start on the trace's clock (us)
    dur_us                    DOUBLE,  -- window length (us)
    length_us                 DOUBLE,  -- the path's length: the sum of its edges' weights (us)
    span_us                   DOUBLE,  -- from the path's first node to its last (us): length plus the time it spent waiting (blocking calls, gaps between top-level operators)
    cpu_us                    DOUBLE,  -- of the length, CPU operators and runtime calls (us)
    gpu_compute_us            DOUBLE,  -- of the length, GPU kernels, memcpys and memsets other than NCCL's (us)
    gpu_communication_us      DOUBLE,  -- of the length, NCCL kernels (us)
    launch_overhead_us        DOUBLE,  -- of the length, launch to kernel start where the stream was empty (us)
    kernel_kernel_overhead_us DOUBLE,  -- of the length, gaps between consecutive kernels on a stream (us)
    events                    BIGINT,  -- events on the path
    edges                     BIGINT   -- edges on the path
);

-- The edges of each critical path, in order.
CREATE TABLE IF NOT EXISTS critical_path_edges (
    run_id     VARCHAR, -- owning run
    rank       INTEGER, -- global rank
    annotation VARCHAR, -- as critical_paths
    instance   INTEGER, -- as critical_paths
    seq        INTEGER, -- position on the path, from 0
    type       VARCHAR, -- operator, launch_delay, kernel_kernel_delay, dependency or sync_dependency (HTA's edge types)
    bound      VARCHAR, -- what its time is: cpu, gpu_compute, gpu_communication, launch_overhead, kernel_kernel_overhead; NULL for a weightless dependency or sync
    name       VARCHAR, -- the event its time is charged to (a launch delay: the kernel launched); NULL for a dependency or sync
    track      VARCHAR, -- where that event ran: "thread <tid>" or "stream <n>"
    ts_us      DOUBLE,  -- the edge's start on the trace's clock (us)
    dur_us     DOUBLE   -- its weight (us): 0 for a dependency, a sync, or a blocking call's wait
);

-- Memory a rank's device held after each time an allocation changed: from a PyTorch profiler
-- memory timeline (format memory-timeline) per category, as HTA's memory analysis sums them; from
-- a Kineto trace's [memory] events (profile_memory=True) the allocator's running totals per
-- device, which name no category (all in unknown_bytes) but say what was reserved.
CREATE TABLE IF NOT EXISTS gpu_memory (
    run_id                VARCHAR, -- owning run
    rank                  INTEGER, -- global rank (from the file name, else 0)
    ts_us                 DOUBLE,  -- time on the file's clock (us; a memory timeline's is the epoch); memory that existed before profiling is at the first time
    device                VARCHAR, -- cuda:0, cpu, ... from a Kineto trace's [memory] events; NULL from a memory timeline export, which names none
    parameter_bytes       BIGINT,  -- model parameters (bytes)
    optimizer_state_bytes BIGINT,  -- optimizer state (bytes)
    input_bytes           BIGINT,  -- inputs (bytes)
    temporary_bytes       BIGINT,  -- temporaries freed within the op that made them (bytes)
    activation_bytes      BIGINT,  -- activations kept for the backward pass (bytes)
    gradient_bytes        BIGINT,  -- gradients (bytes)
    autograd_detail_bytes BIGINT,  -- autograd's own buffers (bytes)
    unknown_bytes         BIGINT,  -- memory PyTorch could not categorise (bytes)
    total_bytes           BIGINT,  -- their sum (bytes)
    reserved_bytes        BIGINT   -- reserved by the caching allocator, allocated or not (Kineto's Total Reserved; bytes); NULL from a memory timeline export
);

-- gpu_events with their kernel names joined in.
CREATE OR REPLACE VIEW gpu_events_named AS
SELECT e.*, k.name
FROM gpu_events e
JOIN (SELECT DISTINCT run_id, name_id, name FROM kernel_names) k USING (run_id, name_id);

-- HTA's temporal breakdown of each rank, per profiler step and over the whole trace, with
-- and without the events HTA drops by default; computed at ingest (ingest/gpu_time.py).
CREATE TABLE IF NOT EXISTS gpu_step_time (
    run_id            VARCHAR, -- owning run
    rank              INTEGER, -- global rank
    step              INTEGER, -- profiler step; NULL on the rank's whole-trace row
    include_last_step BOOLEAN, -- false: without hta_excluded events (HTA's default); true: every event
    kernel_time_us    DOUBLE,  -- last GPU event end minus first GPU event start (us)
    busy_us           DOUBLE,  -- union of GPU events over all streams (us)
    compute_us        DOUBLE   -- union of compute kernels (us)
);

-- Forward validation of the generation-time model fitted to the run's own log
-- (polytrace simulate RUN --calibration log --store, workload/genfit.py): each step of the
-- second half of those with a gen time and lengths, predicted by a model fitted only on
-- the steps before it (an expanding window).
CREATE TABLE IF NOT EXISTS gen_forecast (
    run_id      VARCHAR, -- run whose steps were predicted
    step        INTEGER, -- training step predicted
    stage       VARCHAR, -- stage predicted: gen (the rollout)
    measured_s  DOUBLE,  -- measured time: timing_s/gen, or the slowest engine's rank_stage gen seconds (s)
    predicted_s DOUBLE,  -- the model's prediction from the earlier steps only (s)
    fit_steps   INTEGER, -- how many earlier steps that model was fitted on
    model       VARCHAR  -- log:step (per-step model on verl step metrics) or log:engine (per-engine cost model on samples)
);

-- What if a synchronous run trained asynchronously (workload/overlap.py): each step's time with
-- generation overlapping training on two GPU pools, from the run's own per-step gen model
-- (simulate --calibration log --store). One split of the GPUs per mode, the one that minimizes the
-- run's predicted time. An estimate under linear scaling of each pool's work, never a bound.
CREATE TABLE IF NOT EXISTS whatif_async (
    run_id           VARCHAR, -- simulated run (a synchronous one)
    step             INTEGER, -- training step
    mode             VARCHAR, -- one-step-off (staleness 1) or fully-async:k (a staleness bound of k versions)
    staleness        INTEGER, -- the staleness bound the mode allows (policy versions)
    rollout_share    DOUBLE,  -- share of the job's GPUs in the rollout pool (the trainer has the rest)
    rollout_gpus     INTEGER, -- rollout_share x gpus; NULL when the job's GPU count is unknown
    gpus             INTEGER, -- the job's GPUs (runs.n_gpus); NULL when unknown
    measured_s       DOUBLE,  -- the synchronous step's measured time, timing_s/step (s)
    gen_s            DOUBLE,  -- the model's prediction of the step's gen stage (s)
    train_s          DOUBLE,  -- the step's training stages as measured: step - gen - weight sync - checkpoint - validation (s)
    predicted_sync_s DOUBLE,  -- the model's synchronous step: its gen prediction plus the measured rest (s)
    predicted_s      DOUBLE,  -- the predicted async step (s)
    speedup          DOUBLE,  -- predicted_sync_s / predicted_s (> 1: the async step is shorter)
    limited_by       VARCHAR  -- the term that sets the async step: rollout throughput, training, or slowest sample (the bounding sample must finish within the staleness bound)
);

-- What a partial-rollout simulation (whatif policy partial-rollout:q) carries from each step to
-- the next: the samples cut at the step's cap, which finish in a later step, partly generated
-- by an older policy.
CREATE TABLE IF NOT EXISTS whatif_carry (
    run_id         VARCHAR, -- simulated run
    step           INTEGER, -- step whose rollout stopped at the cap
    policy         VARCHAR, -- partial-rollout:q
    carried        INTEGER, -- samples left unfinished, to continue in the next step
    carried_tokens BIGINT   -- tokens those samples still had to generate (tokens)
);

-- Each run's line in the runs overview: run_summary's figures and the count of its findings by
-- severity, as the catalog computed them when the run last changed (queries/overview.py). A
-- row whose catalog digest is not the current catalog's is recomputed by the next writer.
CREATE TABLE IF NOT EXISTS run_overview (
    run_id                 VARCHAR, -- the run
    steps                  BIGINT,  -- run_summary.steps
    samples                BIGINT,  -- run_summary.samples
    gpus                   BIGINT,  -- run_summary.gpus: n_gpus, else inferred from the logged ranks
    step_s_mean            DOUBLE,  -- run_summary.mean_step_s (s)
    rollout_idle_frac_mean DOUBLE,  -- run_summary.rollout_idle_frac_mean
    tail_ratio_max         DOUBLE,  -- run_summary.tail_ratio_worst
    dp_imbalance_mean      DOUBLE,  -- run_summary.dp_imbalance_mean
    filter_waste_share     DOUBLE,  -- run_summary.wasted_token_frac
    gpu_idle_pct           DOUBLE,  -- 100 * run_summary.gpu_idle_frac_mean (%)
    findings_critical      INTEGER, -- findings of severity critical
    findings_warn          INTEGER, -- findings of severity warn
    findings_info          INTEGER, -- findings of severity info
    findings               VARCHAR, -- the findings list, most severe first, as JSON: what `polytrace findings` prints
    catalog                VARCHAR, -- digest of the catalog that computed the row
    refreshed_at           TIMESTAMP -- when (UTC)
);

-- The whole answer of each stored catalog query (`-- stored: yes`) for the run and the defaults
-- of its other parameters, as the catalog computed it when the run last changed
-- (queries/answers.py); a write that changes the run's rows deletes its answers in the same
-- transaction, so a kept answer is always the run's. The answers are stored uncompressed: reading
-- one from a compressed (ZSTD) column decompressed every answer stored beside it, which made each
-- lookup cost more the more runs the database holds.
CREATE TABLE IF NOT EXISTS run_answers (
    run_id  VARCHAR, -- the run
    query   VARCHAR, -- the catalog query, e.g. run_summary
    catalog VARCHAR, -- digest of the catalog that computed it
    answer  BLOB USING COMPRESSION uncompressed, -- its rows and their types: one Arrow IPC stream
    rows_json VARCHAR USING COMPRESSION uncompressed -- {"columns", "rows"}; NULL unless JSON keeps each value
);

-- Numeric fields of a sample beyond the canonical samples columns, in long form: the reward
-- function's extra outputs in a verl rollout dump (acc, format_score ...).
CREATE TABLE IF NOT EXISTS sample_metrics (
    run_id    VARCHAR, -- owning run
    step      INTEGER, -- training step
    prompt_id INTEGER, -- the sample's prompt group in the step, as samples.prompt_id
    sample_id INTEGER, -- the sample in its group, as samples.sample_id
    key       VARCHAR, -- field name as the dump wrote it, e.g. acc
    value     DOUBLE   -- its value; true and false are 1 and 0; NaN and +-inf are kept
);

-- One row per Ray task or actor-method call of a Ray timeline (format ray-timeline).
CREATE TABLE IF NOT EXISTS ray_spans (
    run_id VARCHAR, -- owning run
    step   INTEGER, -- training step inferred from the trainer's rollout and update rounds, from 1 in trace order; NULL outside every step (setup, a validation before the first step)
    node   VARCHAR, -- the node the worker ran on (its IP address, as Ray names it)
    worker VARCHAR, -- the Ray worker process, e.g. worker:50fab4e8... (the trace's tid)
    actor  VARCHAR, -- actor class of a method call, e.g. WorkerDict; NULL for a plain task
    name   VARCHAR, -- method or task name, e.g. actor_rollout_generate_sequences
    stage  VARCHAR, -- verl stage the call serves, named as timing_s/<stage>: gen, reward, old_log_prob, ref, values, update_critic, update_actor, save_checkpoint, update_weights; NULL for any other call
    ts_us  DOUBLE,  -- start on the trace's clock (us)
    dur_us DOUBLE   -- duration (us)
);

-- A run that follows a directory or a pusher as a training job writes it (ingest/live.py): where it
-- comes from, the facts its files gave, and when its last step landed.
CREATE TABLE IF NOT EXISTS live_runs (
    live_run       VARCHAR PRIMARY KEY, -- the run's run_id, derived from the followed directory (not named run_id: follower state is not run data, so row counts, exports and deletes leave it out)
    source         VARCHAR,   -- the followed directory, as the follower names it
    facts          JSON,      -- run facts its files gave, first mention wins (runs columns are these, then what after_load hooks derive)
    last_step      INTEGER,   -- the highest step committed so far
    last_step_at   TIMESTAMP, -- when an append last brought a step (UTC)
    last_append_at TIMESTAMP  -- when the last append committed anything (UTC)
);

-- How far each followed file of a live run is in the run: its committed byte offset, written in the
-- same transaction as the rows those bytes gave, so a restarted follower resumes with no duplicate
-- and no missing step.
CREATE TABLE IF NOT EXISTS live_files (
    live_run   VARCHAR,   -- the live run's run_id
    file_name  VARCHAR,   -- path of the file below the followed directory
    format     VARCHAR,   -- its format, detected from its first bytes
    committed  BIGINT,    -- bytes of the file the run holds: whole lines of a log, or the whole file of a step file
    identity   VARCHAR,   -- the file as the follower saw it (device:inode), to tell a rotated file from a grown one
    mtime      DOUBLE,    -- modification time of a whole step file when it was committed (s since the epoch)
    steps      INTEGER[], -- the steps a whole step file held (reloaded together if the file changes)
    note       VARCHAR,   -- the last warning said about the file (truncated, rotated, stopped parsing), said once
    updated_at TIMESTAMP, -- when its last bytes were committed (UTC)
    tail       BLOB,      -- a log's last committed bytes (up to 64): bytes resent over them must be the same
    PRIMARY KEY (live_run, file_name)
);
