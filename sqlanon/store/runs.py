"""Operations on run records: `runs`, and the attributes, frequency sets and metrics each run records.

A run belongs to the role that starts it (`owner_role`): on PostgreSQL its session, recorded with it, tells a live
run from one whose session died.
"""

from __future__ import annotations

from .ops import Insert, Op

RUN = (("run", "bigint"),)
IDS = (("ids", "bigint[]"),)

START = Op(
    name="run_start",
    params=(
        ("job_name", "text"),
        ("command", "text"),
        ("strategy", "text"),
        ("config", "text"),
        ("started_at", "timestamp"),
    ),
    sql=(
        "INSERT INTO {s}.runs (run_id, job_name, command, strategy, config, status, started_at, owner_role, "
        "backend_pid, backend_start) VALUES (nextval({run_ids}), :job_name, :command, :strategy, :config, "
        "'running', :started_at, {caller}, {session_pid}, {session_start}) RETURNING run_id",
    ),
    returns=(("run_id", "bigint"),),
)

REOPEN = Op(
    name="run_reopen",
    params=RUN,
    sql=(
        "UPDATE {s}.runs SET status = 'running', finished_at = NULL, error = NULL, backend_pid = {session_pid}, "
        "backend_start = {session_start} WHERE run_id = :run",
        "DELETE FROM {s}.run_attributes WHERE run_id = :run",
    ),
    guard="run",
)

PROGRESS = Op(
    name="run_progress",
    params=RUN + (("iteration", "integer"), ("nodes_checked", "integer")),
    sql=("UPDATE {s}.runs SET iteration = :iteration, nodes_checked = :nodes_checked WHERE run_id = :run",),
    guard="run",
)

CLOSE = Op(
    name="run_close",
    params=RUN + (("status", "text"), ("finished_at", "timestamp"), ("result", "text"), ("error", "text")),
    sql=(
        "UPDATE {s}.runs SET status = :status, finished_at = :finished_at, result = :result, error = :error "
        "WHERE run_id = :run",
    ),
    guard="run",
)

#: runs still marked running whose session is gone (where one process owns the database: every one of them; the
#: caller keeps those its own process runs)
DEAD = Op(
    name="runs_dead",
    params=(),
    sql=("SELECT r.run_id FROM {s}.runs r WHERE r.status = 'running' AND {session_gone:r} ORDER BY r.run_id",),
    returns=(("run_id", "bigint"),),
)

#: closes runs found dead, whoever started them (only those still without a live session)
INTERRUPT = Op(
    name="runs_interrupt",
    params=IDS + (("finished_at", "timestamp"), ("error", "text")),
    sql=(
        "UPDATE {s}.runs r SET status = 'interrupted', finished_at = :finished_at, error = :error "
        "WHERE r.status = 'running' AND r.run_id IN (SELECT unnest(:ids)) AND {session_gone:r}",
    ),
)

UNFINISHED = Op(
    name="runs_unfinished",
    params=IDS,
    sql=(
        "SELECT run_id FROM {s}.runs WHERE status IN ('failed', 'interrupted', 'cancelled') "
        "AND run_id IN (SELECT unnest(:ids)) AND {mine:owner_role}",
    ),
    returns=(("run_id", "bigint"),),
)

#: the caller's latest run of a job by one command, for a resume (the job need not be registered: a file's job)
LAST_OF_JOB = Op(
    name="run_last_of_job",
    params=(("job", "text"), ("command", "text")),
    sql=(
        "SELECT run_id, status, config FROM {s}.runs WHERE job_name = :job AND command = :command AND "
        "{mine:owner_role} ORDER BY run_id DESC LIMIT 1",
    ),
    returns=(("run_id", "bigint"), ("status", "text"), ("config", "text")),
)

OUTCOME = Op(
    name="run_outcome",
    params=RUN,
    sql=("SELECT job_name, command, status, result FROM {s}.runs WHERE run_id = :run",),
    returns=(("job_name", "text"), ("command", "text"), ("status", "text"), ("result", "text")),
    guard="run",
)

ATTRIBUTES = Insert(
    name="run_attributes_add",
    table="run_attributes",
    columns=(
        ("attr", "integer"),
        ("column_name", "text"),
        ("height", "integer"),
        ("hierarchy", "text"),
        ("dimension_table", "text"),
    ),
)

FREQUENCY_SETS = Insert(
    name="frequency_sets_add",
    table="frequency_sets",
    columns=(
        ("node_id", "bigint"),
        ("label", "text"),
        ("table_name", "text"),
        ("origin", "text"),
        ("derived_from", "text"),
        ("row_count", "bigint"),
        ("dropped", "boolean"),
    ),
)

NODE_METRICS = Insert(
    name="node_metrics_set",
    table="node_metrics",
    columns=(
        ("node", "text"),
        ("minimal", "boolean"),
        ("selected", "boolean"),
        ("height", "integer"),
        ("relative_distance", "double precision"),
        ("precision", "double precision"),
        ("suppressed", "bigint"),
        ("completeness", "double precision"),
        ("classes", "bigint"),
        ("avg_class_size", "double precision"),
        ("c_avg", "double precision"),
        ("discernibility", "bigint"),
        ("kl_divergence", "double precision"),
        ("loss", "double precision"),
        ("aecs", "double precision"),
        ("dm_star", "double precision"),
        ("non_uniform_entropy", "double precision"),
        ("non_uniform_entropy_nm", "double precision"),
        ("normalized_entropy", "double precision"),
        ("precision_loss", "double precision"),
        ("precision_loss_nm", "double precision"),
        ("classification", "double precision"),
        ("entropy_loss", "double precision"),
        ("publisher_payout", "double precision"),
    ),
    replace=True,
)

OPS = (
    START,
    REOPEN,
    PROGRESS,
    CLOSE,
    DEAD,
    INTERRUPT,
    UNFINISHED,
    LAST_OF_JOB,
    OUTCOME,
    ATTRIBUTES,
    FREQUENCY_SETS,
    NODE_METRICS,
)
