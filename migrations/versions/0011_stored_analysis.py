"""`SELECT sqlanon.analyze_job(name [, node])`: a registered job's attacks, risk and utility from SQL.

Installed where PL/Python routines are (migration 0008: a superuser, PL/Python available), from
sql/plpython_analysis.sql, with EXECUTE for the role sqlanon_runner only, like the other PL/Python routines.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-23
"""
from alembic import op
from sqlalchemy import text

from sqlanon.metadata import RUNNER_ROLE, stored_sql

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

SIGNATURE = "{s}.analyze_job(text, text)"


def upgrade(schema: str, quoted_schema: str) -> None:
    conn = op.get_bind()
    if conn.dialect.name != "postgresql":
        return
    installed = conn.execute(text(
        "SELECT to_regprocedure(:f) IS NOT NULL AND (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)"),
        {"f": f'"{schema}".run_job(text, boolean, json)'}).scalar()
    if not installed:  # no PL/Python here (or not a superuser): `sqlanon analyze` from the CLI still works
        return
    conn.exec_driver_sql(stored_sql("plpython_analysis.sql", schema, quoted_schema))
    signature = SIGNATURE.format(s=quoted_schema)
    conn.exec_driver_sql(f"REVOKE EXECUTE ON FUNCTION {signature} FROM PUBLIC")
    conn.exec_driver_sql(f'GRANT EXECUTE ON FUNCTION {signature} TO "{RUNNER_ROLE}"')


def downgrade(schema: str, quoted_schema: str) -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION IF EXISTS {SIGNATURE.format(s=quoted_schema)}")
