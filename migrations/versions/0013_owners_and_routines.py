"""Every record belongs to a role, and roles reach the store only through its routines.

Runs and owned tables get an `owner_role` (the role that logged in to start or write them; jobs already have
`registered_by`), filled in for earlier rows with the job's registrant, else the schema's owner. On PostgreSQL,
roles that run sqlanon no longer write the store's tables: every operation is a routine (sqlanon.store.postgres),
installed by `sqlanon migrate` after the revisions and checking that a run or job it touches is the caller's.
So this revision drops what the routines replace: the routines earlier revisions installed, the triggers that
stamped `registered_by` (a routine records the caller itself), and the server_settings table (the settings live in
the body of the routine installation(), which only its owner can replace); every privilege on the store's tables
is revoked (by the installation, each time it runs).

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26
"""

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

#: routines of revisions 0005-0011 (0010's trigger functions included)
OLD_ROUTINES = (
    "PROCEDURE {s}.publish(bigint, text, text, text, json)",
    "FUNCTION {s}.register_job(text, json, json)",
    "PROCEDURE {s}.run_job(text, boolean, json)",
    "FUNCTION {s}.load_sqlanon()",
    "FUNCTION {s}.analyze_job(text, text)",
    "FUNCTION {s}.run_nodes(bigint)",
    "FUNCTION {s}.job_runs(text)",
    "FUNCTION {s}.passing_nodes(bigint)",
    "FUNCTION {s}.audit(regclass, text[], text[])",
)


def upgrade(schema: str, quoted_schema: str) -> None:
    s = quoted_schema
    op.execute(f"ALTER TABLE {s}.runs ADD COLUMN owner_role TEXT")
    op.execute(f"ALTER TABLE {s}.owned_tables ADD COLUMN owner_role TEXT")
    if op.get_bind().dialect.name != "postgresql":
        return  # DuckDB has no roles: whoever opens the file has all of it
    owner = f"(SELECT CAST(pg_get_userbyid(nspowner) AS TEXT) FROM pg_namespace WHERE nspname = '{_literal(schema)}')"
    op.execute(f"UPDATE {s}.jobs SET registered_by = {owner} WHERE registered_by IS NULL")
    op.execute(
        f"UPDATE {s}.runs r SET owner_role = COALESCE((SELECT j.registered_by FROM {s}.jobs j WHERE j.name = "
        f"r.job_name), {owner})"
    )
    op.execute(
        f"UPDATE {s}.owned_tables o SET owner_role = COALESCE((SELECT r.owner_role FROM {s}.runs r WHERE "
        f"r.run_id = o.run_id), {owner})"
    )
    op.execute(f"DROP TRIGGER IF EXISTS stamp_writer ON {s}.job_files")
    op.execute(f"DROP TRIGGER IF EXISTS stamp_registrant ON {s}.jobs")
    op.execute(f"DROP FUNCTION IF EXISTS {s}.stamp_job_files_writer()")
    op.execute(f"DROP FUNCTION IF EXISTS {s}.stamp_job_registrant()")
    for routine in OLD_ROUTINES:
        kind, signature = routine.split(" ", 1)
        op.execute(f"DROP {kind} IF EXISTS {signature.format(s=s)}")
    op.execute(f"DROP TABLE IF EXISTS {s}.server_settings")


def downgrade(schema: str, quoted_schema: str) -> None:
    s = quoted_schema  # sqlanon.metadata.downgrade drops the store's routines first
    op.execute(f"ALTER TABLE {s}.owned_tables DROP COLUMN owner_role")
    op.execute(f"ALTER TABLE {s}.runs DROP COLUMN owner_role")


def _literal(text: str) -> str:
    return text.replace("'", "''")
