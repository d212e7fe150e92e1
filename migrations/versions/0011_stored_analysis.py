"""`SELECT sqlanon.analyze_job(name [, node])`: a registered job's attacks, risk and utility from SQL.

Since revision 0013 the routine is installed by `sqlanon migrate` after the revisions (sqlanon.store.postgres).

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-23
"""

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade(schema: str, quoted_schema: str) -> None:
    pass


def downgrade(schema: str, quoted_schema: str) -> None:
    pass
