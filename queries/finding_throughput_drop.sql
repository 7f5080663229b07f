-- name: finding_throughput_drop
-- title: Finding: training throughput fell
-- section: Findings
-- stored: yes
-- verl's perf/throughput (tokens per second per GPU) over the last 10% of steps against the
-- first 10% (at least one step each). Emitted at 0.67 or less.
-- @param run_id VARCHAR  Run to examine.
-- @column kind VARCHAR  throughput_drop.
-- @column severity VARCHAR  warn.
-- @column value DOUBLE fmt=x  Last-10% mean throughput over first-10% mean throughput.
-- @column unit VARCHAR  ratio.
-- @column steps INTEGER[]  The first and last steps compared.
-- @column stage VARCHAR  NULL.
-- @column text VARCHAR  The finding in one sentence.
-- @column evidence VARCHAR  The catalog URL of throughput.
-- @chart table
WITH ranked AS (
    SELECT step, throughput AS value, row_number() OVER (ORDER BY step) AS i, count(*) OVER () AS n
    FROM verl_steps
    WHERE throughput IS NOT NULL AND NOT isnan(throughput)),
cmp AS (
    SELECT
        max(n) AS n,
        greatest(1, floor(max(n) * 0.1))::INTEGER AS k,
        avg(value) FILTER (WHERE i <= greatest(1, floor(n * 0.1))) AS first_tp,
        avg(value) FILTER (WHERE i > n - greatest(1, floor(n * 0.1))) AS last_tp,
        list(step ORDER BY step) FILTER (WHERE i <= greatest(1, floor(n * 0.1))
                                          OR i > n - greatest(1, floor(n * 0.1))) AS steps
    FROM ranked)
SELECT
    'throughput_drop' AS kind,
    'warn' AS severity,
    last_tp / NULLIF(first_tp, 0) AS value,
    'ratio' AS unit,
    steps,
    NULL::VARCHAR AS stage,
    printf('Training throughput fell to %.2f× of its start, from %,d to %,d tokens/s per GPU (%s): '
           'the same GPUs now process fewer tokens each second; compare the step-time breakdown of '
           'the first and last steps to see which stage slowed.',
           last_tp / NULLIF(first_tp, 0), round(first_tp)::BIGINT, round(last_tp)::BIGINT,
           CASE WHEN k = 1 THEN 'first and last step' ELSE printf('first and last %d steps', k) END) AS text,
    '/api/queries/throughput?run_id=' || $run_id AS evidence
FROM cmp
WHERE n >= 2 AND last_tp / NULLIF(first_tp, 0) <= 0.67
