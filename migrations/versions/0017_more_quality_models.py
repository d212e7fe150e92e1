"""ARX's normalized entropy, precision (monotonic and not), classification, entropy-based information loss and
publisher payout among the stored utility metrics of a run's nodes (node_metrics; sqlanon.model.quality). Rows
stored before have none (NULL).

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-30
"""

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

COLUMNS = (
    "normalized_entropy",
    "precision_loss",
    "precision_loss_nm",
    "classification",
    "entropy_loss",
    "publisher_payout",
)


def upgrade(schema: str, quoted_schema: str) -> None:
    for column in COLUMNS:
        op.execute(f"ALTER TABLE {quoted_schema}.node_metrics ADD COLUMN {column} DOUBLE PRECISION")


def downgrade(schema: str, quoted_schema: str) -> None:
    for column in COLUMNS:
        op.execute(f"ALTER TABLE {quoted_schema}.node_metrics DROP COLUMN {column}")
