"""Tables sqlanon created outside its own schema: published outputs and sources loaded from CSV files.

sqlanon replaces only a table listed here whose comment still carries the
token recorded with it (a table dropped and re-created by someone else under
the same name has no such comment). Loaded sources keep the file's checksum,
so a job that names the same file again reuses the table instead of reloading it.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-22
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade(schema: str, quoted_schema: str) -> None:
    op.execute(f"""
CREATE TABLE {quoted_schema}.owned_tables (
    schema_name TEXT NOT NULL,
    table_name TEXT NOT NULL,
    kind TEXT NOT NULL,
    token TEXT NOT NULL,
    run_id BIGINT,
    file_path TEXT,
    file_sha256 TEXT,
    row_count BIGINT NOT NULL,
    created_at TIMESTAMP NOT NULL,
    PRIMARY KEY (schema_name, table_name)
)""")


def downgrade(schema: str, quoted_schema: str) -> None:
    op.execute(f"DROP TABLE {quoted_schema}.owned_tables")
