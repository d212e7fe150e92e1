"""The release ledger: every publication of a job that keeps one (`ledger:` in the job), with the persons it holds.

One row per publishing run: the tables it wrote, the column whose pseudonym names each person in them, the
columns a later release is compared on (QIs, sensitive columns, as JSON), the node and criteria, how many persons
and rows it held when it committed, and the pseudonym of a fixed probe value (`key_probe`), which tells whether a
later release pseudonymizes persons with the same key. The publication's own table is the persons' record: a
later publication of the job reads it there, and refuses to go on if it was dropped or changed.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-29
"""

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade(schema: str, quoted_schema: str) -> None:
    op.execute(f"""
CREATE TABLE {quoted_schema}.release_ledger (
    run_id BIGINT PRIMARY KEY,
    job_name TEXT NOT NULL,
    method TEXT NOT NULL,
    schema_name TEXT,
    table_name TEXT NOT NULL,
    sensitive_table TEXT,
    person_column TEXT NOT NULL,
    details TEXT NOT NULL,
    persons BIGINT NOT NULL,
    row_count BIGINT NOT NULL,
    key_probe TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL,
    owner_role TEXT
)""")


def downgrade(schema: str, quoted_schema: str) -> None:
    op.execute(f"DROP TABLE {quoted_schema}.release_ledger")
