"""ARX's quality models among the stored utility metrics of a run's nodes (node_metrics): loss, AECS, DM* and
non-uniform entropy, monotonic and not (sqlanon.model.quality). Rows stored before have none (NULL).

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-30
"""

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

COLUMNS = ("loss", "aecs", "dm_star", "non_uniform_entropy", "non_uniform_entropy_nm")


def upgrade(schema: str, quoted_schema: str) -> None:
    for column in COLUMNS:
        op.execute(f"ALTER TABLE {quoted_schema}.node_metrics ADD COLUMN {column} DOUBLE PRECISION")


def downgrade(schema: str, quoted_schema: str) -> None:
    for column in COLUMNS:
        op.execute(f"ALTER TABLE {quoted_schema}.node_metrics DROP COLUMN {column}")
