"""The stored audit function, sqlanon.audit(table, quasi-identifiers, sensitive) (PostgreSQL only).

Its body is sql/audit_function.sql, so psql users get the same figures as `sqlanon audit`.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22
"""
from importlib import resources

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def _postgres() -> bool:
    return op.get_context().dialect.name == "postgresql"


def upgrade(schema: str, quoted_schema: str) -> None:
    if _postgres():
        body = resources.files("sqlanon.sql").joinpath("audit_function.sql").read_text()
        op.execute(body.replace("{s}", quoted_schema))


def downgrade(schema: str, quoted_schema: str) -> None:
    if _postgres():
        op.execute(f"DROP FUNCTION {quoted_schema}.audit(regclass, text[], text[])")
