"""Operations on registered jobs (`jobs`, `job_files`) and the runs listed under a job's name.

A job belongs to the role that registered it (`registered_by`: the caller as the store records it, never a value
the caller passes): only that role and its members (a DBA who was granted it, a superuser) see it, replace it or
run it.
"""

from __future__ import annotations

from .ops import Op

JOB = (("job", "text"),)
RUN_COLUMNS = (
    ("run_id", "bigint"),
    ("command", "text"),
    ("status", "text"),
    ("iteration", "integer"),
    ("nodes_checked", "integer"),
    ("started_at", "timestamp"),
    ("finished_at", "timestamp"),
    ("error", "text"),
)

REGISTER = Op(
    name="job_register",
    params=JOB + (("config", "text"), ("registered_at", "timestamp"), ("paths", "text[]"), ("contents", "text[]")),
    sql=(
        "DELETE FROM {s}.job_files WHERE job_name = :job",
        "DELETE FROM {s}.jobs WHERE name = :job",
        "INSERT INTO {s}.jobs (name, config, registered_at, registered_by) VALUES (:job, :config, :registered_at, "
        "{caller})",
        "INSERT INTO {s}.job_files (job_name, path, content) SELECT :job, unnest(:paths), unnest(:contents)",
    ),
    guard="job_free",
)

DEFINITION = Op(
    name="job_definition",
    params=JOB,
    sql=("SELECT config, registered_by FROM {s}.jobs WHERE name = :job",),
    returns=(("config", "text"), ("registered_by", "text")),
    guard="job",
)

FILES = Op(
    name="job_files_of",
    params=JOB,
    sql=("SELECT path, content FROM {s}.job_files WHERE job_name = :job",),
    returns=(("path", "text"), ("content", "text")),
    guard="job",
)

LIST = Op(
    name="jobs_list",
    params=(),
    sql=(
        "SELECT j.name, j.registered_at, r.run_id, r.status, r.started_at FROM {s}.jobs j "
        "LEFT JOIN (SELECT job_name, MAX(run_id) AS run_id FROM {s}.runs WHERE {mine:owner_role} GROUP BY job_name) l "
        "ON l.job_name = j.name LEFT JOIN {s}.runs r ON r.run_id = l.run_id WHERE {mine:j.registered_by} "
        "ORDER BY j.name",
    ),
    returns=(
        ("name", "text"),
        ("registered_at", "timestamp"),
        ("run_id", "bigint"),
        ("status", "text"),
        ("started_at", "timestamp"),
    ),
)

RUNS = Op(
    name="job_runs_list",
    params=JOB + (("most", "integer"),),
    sql=(
        "SELECT run_id, command, status, iteration, nodes_checked, started_at, finished_at, error FROM {s}.runs "
        "WHERE job_name = :job AND {mine:owner_role} ORDER BY run_id DESC LIMIT :most",
    ),
    returns=RUN_COLUMNS,
)

LAST_RUN = Op(
    name="job_last_run",
    params=JOB,
    sql=(
        "SELECT run_id, status FROM {s}.runs WHERE job_name = :job AND {mine:owner_role} ORDER BY run_id DESC LIMIT 1",
    ),
    returns=(("run_id", "bigint"), ("status", "text")),
    guard="job",
)

#: a new run of the job closes the job's runs still marked running: it holds the job's lock, so they are dead
FAIL_RUNNING = Op(
    name="job_fail_running",
    params=JOB + (("finished_at", "timestamp"), ("error", "text")),
    sql=(
        "UPDATE {s}.runs SET status = 'failed', finished_at = :finished_at, error = :error WHERE job_name = :job AND "
        "status = 'running' AND {mine:owner_role}",
    ),
    guard="job",
)

OPS = (REGISTER, DEFINITION, FILES, LIST, RUNS, LAST_RUN, FAIL_RUNNING)
