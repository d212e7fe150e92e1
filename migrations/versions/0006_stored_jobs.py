"""Jobs from SQL (PostgreSQL): job_runs(), run_nodes(), passing_nodes(); with PL/Python, run_job,
register_job, publish.

Since revision 0013 these routines are installed by `sqlanon migrate` after the revisions, from the definitions
of the installed sqlanon (sqlanon.store.postgres), not by a revision.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22
"""

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade(schema: str, quoted_schema: str) -> None:
    pass


def downgrade(schema: str, quoted_schema: str) -> None:
    pass
