"""Per-step aggregates materialized at ingest, so dashboard queries never scan every sample."""
from __future__ import annotations

import re
from importlib import resources

import duckdb

# Each aggregate table is exactly the result of its SELECT for one run ($run_id); the
# catalog queries read the tables, and on_the_fly() swaps the SELECTs back in to check
# or time them against the raw tables.
FILLS: dict[str, str] = {
    "step_lengths": """
        -- the three quantiles come out of one sort, as a list
        SELECT * EXCLUDE (q), q[1] AS response_p50, q[2] AS response_p90, q[3] AS response_p99
        FROM (
        SELECT
            s.run_id,
            s.step,
            count(*) AS n,
            count(DISTINCT s.prompt_id) AS prompts,
            sum(s.prompt_len)::BIGINT AS prompt_tokens,
            sum(s.response_len)::BIGINT AS response_tokens,
            avg(s.prompt_len) AS prompt_mean,
            avg(s.response_len) AS response_mean,
            stddev_pop(s.response_len) AS response_std,
            quantile_cont(s.response_len, [0.5, 0.9, 0.99]) AS q,
            max(s.response_len) AS response_max,
            count(*) FILTER (WHERE s.truncated OR s.response_len >= r.max_response_len) AS capped,
            count(*) FILTER (WHERE s.truncated IS NOT NULL OR r.max_response_len IS NOT NULL)
                AS cap_known,
            bool_or(s.kept IS NOT NULL OR s.used IS NOT NULL) AS filtered,
            count(DISTINCT s.prompt_id) FILTER (WHERE s.kept) AS kept_prompts,
            count(DISTINCT s.prompt_id) FILTER (WHERE s.used) AS used_prompts,
            coalesce(sum(s.response_len) FILTER (WHERE s.used)::BIGINT, 0) AS used_tokens
        FROM samples s
        JOIN runs r ON r.run_id = s.run_id
        WHERE s.run_id = $run_id
        GROUP BY s.run_id, s.step)""",
    "step_rank_lengths": """
        WITH ranks AS (
            SELECT
                run_id,
                step,
                dp_rank,
                count(*) AS n,
                sum(prompt_len)::BIGINT AS prompt_tokens,
                sum(response_len)::BIGINT AS response_tokens,
                max(response_len) AS max_len
            FROM samples
            WHERE run_id = $run_id
            GROUP BY run_id, step, dp_rank),
        gen AS (
            -- tensor-parallel peers of one engine finish together; the slowest one counts
            SELECT step, dp_rank, max(seconds) AS gen_s
            FROM rank_stage
            WHERE run_id = $run_id AND stage = 'gen'
            GROUP BY step, dp_rank)
        SELECT ranks.*, gen.gen_s
        FROM ranks
        LEFT JOIN gen ON gen.step = ranks.step AND gen.dp_rank IS NOT DISTINCT FROM ranks.dp_rank""",
    "step_length_bins": """
        SELECT
            run_id,
            step,
            CASE WHEN response_len < 1 THEN 0 ELSE floor(log2(response_len))::INTEGER + 1 END AS bin,
            count(*) AS responses
        FROM samples
        WHERE run_id = $run_id AND response_len IS NOT NULL
        GROUP BY ALL""",
    "step_turns": """
        WITH per_turn AS (
            SELECT
                step,
                count(*) AS turns,
                quantile_cont(engine_latency_s, [0.5, 0.99]) AS engine,
                sum(prompt_tokens) FILTER (WHERE cached_tokens IS NOT NULL)::BIGINT
                    AS cache_prompt_tokens,
                sum(cached_tokens)::BIGINT AS cached_tokens
            FROM turns
            WHERE run_id = $run_id
            GROUP BY step),
        per_rollout AS (
            SELECT step, count(*) AS rollouts, max(turns) AS turns_max
            FROM (SELECT step, prompt_id, sample_id, count(*) AS turns
                  FROM turns WHERE run_id = $run_id GROUP BY ALL)
            GROUP BY step),
        tools AS (
            SELECT step, count(*) AS tool_calls, quantile_cont(latency_s, [0.5, 0.99]) AS latency
            FROM tool_calls
            WHERE run_id = $run_id
            GROUP BY step)
        SELECT
            $run_id::VARCHAR AS run_id,
            per_turn.step,
            per_rollout.rollouts,
            per_turn.turns,
            per_rollout.turns_max,
            coalesce(tools.tool_calls, 0) AS tool_calls,
            tools.latency[1] AS tool_latency_p50,
            tools.latency[2] AS tool_latency_p99,
            per_turn.engine[1] AS engine_latency_p50,
            per_turn.engine[2] AS engine_latency_p99,
            per_turn.cache_prompt_tokens,
            per_turn.cached_tokens
        FROM per_turn
        JOIN per_rollout USING (step)
        LEFT JOIN tools USING (step)""",
    "run_ranks": """
        SELECT
            run_id,
            count(DISTINCT rank) AS ranks,
            min(rank) AS min_rank,
            max(rank) AS max_rank,
            -- packed logs name ranks dp_rank * tp with tp_rank 0: the stride between ranks is tp
            max(rank) + (max(rank) - min(rank)) // NULLIF(count(DISTINCT rank) - 1, 0)
                AS gpus_from_ranks
        FROM samples
        WHERE run_id = $run_id AND rank IS NOT NULL
        GROUP BY run_id""",
}


def aggregates_sql() -> str:
    return resources.files("polytrace.ingest").joinpath("aggregates.sql").read_text()


def materialize(con: duckdb.DuckDBPyConnection, run_id: str) -> None:
    """(Re)compute every aggregate table for one run, inside the caller's transaction."""
    for table in FILLS:
        con.execute(f"DELETE FROM {table} WHERE run_id = $run_id", {"run_id": run_id})
        con.execute(f"INSERT INTO {table} BY NAME {FILLS[table]}", {"run_id": run_id})


def backfill(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Materialize the runs that have samples or turns but no aggregates (ingested before
    the aggregate tables existed); returns their ids."""
    missing = [r[0] for r in con.execute("""
        SELECT run_id FROM runs r
        WHERE (EXISTS (SELECT 1 FROM samples s WHERE s.run_id = r.run_id)
               AND NOT EXISTS (SELECT 1 FROM step_lengths l WHERE l.run_id = r.run_id))
           OR (EXISTS (SELECT 1 FROM samples s WHERE s.run_id = r.run_id AND s.rank IS NOT NULL)
               AND NOT EXISTS (SELECT 1 FROM run_ranks k WHERE k.run_id = r.run_id))
           OR (EXISTS (SELECT 1 FROM turns t WHERE t.run_id = r.run_id)
               AND NOT EXISTS (SELECT 1 FROM step_turns a WHERE a.run_id = r.run_id))
        ORDER BY run_id""").fetchall()]
    for run_id in missing:
        con.execute("BEGIN TRANSACTION")
        try:
            materialize(con, run_id)
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    return missing


def on_the_fly(sql: str) -> str:
    """The same catalog SQL with every aggregate table computed from the raw tables.

    Only for queries bound to one `$run_id`: the fills read that parameter.
    """
    ctes = ",\n".join(f"{table} AS ({select})" for table, select in FILLS.items())
    own = re.match(r"\s*WITH\s", sql, re.IGNORECASE)
    if own:
        return f"WITH {ctes},\n{sql[own.end():]}"
    return f"WITH {ctes}\n{sql}"
