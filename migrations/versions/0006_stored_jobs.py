"""Jobs from SQL (PostgreSQL): job_runs(), run_nodes(), passing_nodes(); with PL/Python, run_job,
register_job, publish.

Bodies: sql/job_functions.sql and sql/plpython.sql. PL/Python (package
postgresql-plpython3-NN) is an untrusted language that only a superuser can
create: without it, or without the right to create it, the PL/Python part is
skipped and everything else works as before (`sqlanon migrate` says which).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22
"""
from alembic import op
from sqlalchemy import text

from sqlanon.metadata import stored_sql

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def plpython_usable() -> bool:
    installed, available, superuser = op.get_bind().execute(text(
        "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'plpython3u'), "
        "EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'plpython3u'), "
        "(SELECT rolsuper FROM pg_roles WHERE rolname = current_user)")).one()
    return bool(superuser and (installed or available))  # functions in an untrusted language need a superuser


def _install(name: str, schema: str, quoted_schema: str) -> None:
    # exec_driver_sql: colons in the Python bodies must not be read as bind parameters
    op.get_bind().exec_driver_sql(stored_sql(name, schema, quoted_schema))


def upgrade(schema: str, quoted_schema: str) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    _install("job_functions.sql", schema, quoted_schema)
    if plpython_usable():
        op.execute("CREATE EXTENSION IF NOT EXISTS plpython3u")
        _install("plpython.sql", schema, quoted_schema)


def downgrade(schema: str, quoted_schema: str) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for routine in ("PROCEDURE {s}.publish(bigint, text, text, text, json)", "FUNCTION {s}.register_job(text, json, json)",
                    "PROCEDURE {s}.run_job(text, boolean, json)", "FUNCTION {s}.load_sqlanon()",
                    "FUNCTION {s}.run_nodes(bigint)", "FUNCTION {s}.job_runs(text)",
                    "FUNCTION {s}.passing_nodes(bigint)"):
        kind, signature = routine.split(" ", 1)
        op.execute(f"DROP {kind} IF EXISTS {signature.format(s=quoted_schema)}")
