"""Operations on `release_ledger`: the releases of a job that keeps a ledger, one per publishing run.

An entry is the publishing role's: other roles neither list nor forget it. It is written in the publication's
own transaction, so a release is in the ledger exactly when its tables were committed.
"""

from __future__ import annotations

from .ops import Op

ENTRY = (
    ("method", "text"),
    ("schema_name", "text"),
    ("table_name", "text"),
    ("sensitive_table", "text"),
    ("person_column", "text"),
    ("details", "text"),
    ("persons", "bigint"),
    ("row_count", "bigint"),
    ("key_probe", "text"),
    ("created_at", "timestamp"),
)

RECORD = Op(
    name="ledger_record",
    params=(("run", "bigint"), ("job_name", "text")) + ENTRY,
    sql=(
        "INSERT INTO {s}.release_ledger (run_id, job_name, "
        + ", ".join(name for name, _ in ENTRY)
        + ", owner_role) VALUES (:run, :job_name, "
        + ", ".join(f":{name}" for name, _ in ENTRY)
        + ", {caller})",
    ),
    guard="run",
)

#: the caller's releases of a job, oldest first
ENTRIES = Op(
    name="ledger_entries",
    params=(("job_name", "text"),),
    sql=(
        "SELECT run_id, " + ", ".join(name for name, _ in ENTRY) + " FROM {s}.release_ledger "
        "WHERE job_name = :job_name AND {mine:owner_role} ORDER BY run_id",
    ),
    returns=(("run_id", "bigint"),) + ENTRY,
)

#: remove one of the caller's entries (a release that was withdrawn before anyone read it); returns its run
FORGET = Op(
    name="ledger_forget",
    params=(("job_name", "text"), ("run", "bigint")),
    sql=(
        "DELETE FROM {s}.release_ledger WHERE job_name = :job_name AND run_id = :run AND {mine:owner_role} "
        "RETURNING run_id",
    ),
    returns=(("run_id", "bigint"),),
)

OPS = (RECORD, ENTRIES, FORGET)
