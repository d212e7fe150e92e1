"""The stored audit function, sqlanon.audit(table, quasi-identifiers, sensitive) (PostgreSQL only).

Its body is sql/audit_function.sql, so psql users get the same figures as `sqlanon audit`.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22
"""
from alembic import op

from sqlanon.metadata import stored_sql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade(schema: str, quoted_schema: str) -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(stored_sql("audit_function.sql", schema, quoted_schema))


def downgrade(schema: str, quoted_schema: str) -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION {quoted_schema}.audit(regclass, text[], text[])")
