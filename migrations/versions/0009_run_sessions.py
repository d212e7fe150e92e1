"""The session each run works in, so that the tables of a run whose session died can be found and dropped.

On PostgreSQL a run is live while a backend with its process id and start time
is in pg_stat_activity; on DuckDB, where one process at a time writes the
file, a run still marked running when another process opens it is dead.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-22
"""

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade(schema: str, quoted_schema: str) -> None:
    op.execute(f"ALTER TABLE {quoted_schema}.runs ADD COLUMN backend_pid INTEGER")
    op.execute(f"ALTER TABLE {quoted_schema}.runs ADD COLUMN backend_start TEXT")


def downgrade(schema: str, quoted_schema: str) -> None:
    op.execute(f"ALTER TABLE {quoted_schema}.runs DROP COLUMN backend_start")
    op.execute(f"ALTER TABLE {quoted_schema}.runs DROP COLUMN backend_pid")
