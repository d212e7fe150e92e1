"""Registered jobs: a job's configuration and the files it names (hierarchies), stored in the database.

A registered job runs from this state alone (`sqlanon job run NAME`), on the
database that holds it: nothing is read from the client's disk.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

TABLES = """
CREATE TABLE {s}.jobs (
    name TEXT PRIMARY KEY,
    config TEXT NOT NULL,
    registered_at TIMESTAMP NOT NULL
);
CREATE TABLE {s}.job_files (
    job_name TEXT NOT NULL,
    path TEXT NOT NULL,
    content TEXT NOT NULL,
    PRIMARY KEY (job_name, path)
)
"""


def upgrade(schema: str, quoted_schema: str) -> None:
    for statement in TABLES.format(s=quoted_schema).split(";"):
        op.execute(statement)


def downgrade(schema: str, quoted_schema: str) -> None:
    op.execute(f"DROP TABLE {quoted_schema}.job_files")
    op.execute(f"DROP TABLE {quoted_schema}.jobs")
