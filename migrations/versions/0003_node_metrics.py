"""Utility metrics of a run's reported nodes (minimal ones, candidates of a selection, the chosen one).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

# node: the levels in QI order joined by commas (as in the JSON output)
TABLE = """
CREATE TABLE {s}.node_metrics (
    run_id BIGINT NOT NULL,
    node TEXT NOT NULL,
    minimal BOOLEAN NOT NULL,
    selected BOOLEAN NOT NULL,
    height INTEGER NOT NULL,
    relative_distance DOUBLE PRECISION NOT NULL,
    "precision" DOUBLE PRECISION NOT NULL,
    suppressed BIGINT NOT NULL,
    completeness DOUBLE PRECISION NOT NULL,
    classes BIGINT NOT NULL,
    avg_class_size DOUBLE PRECISION,
    c_avg DOUBLE PRECISION,
    discernibility BIGINT NOT NULL,
    kl_divergence DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (run_id, node)
)
"""


def upgrade(schema: str, quoted_schema: str) -> None:
    op.execute(TABLE.format(s=quoted_schema))


def downgrade(schema: str, quoted_schema: str) -> None:
    op.execute(f"DROP TABLE {quoted_schema}.node_metrics")
