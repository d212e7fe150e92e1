"""sqlanon metadata schema: runs, attributes, lattice nodes and edges, frequency-set registry.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# Plain SQL that DuckDB and PostgreSQL both accept. No foreign keys or indexes on
# the lattice tables: they are bulk-written per iteration, and DuckDB's index
# maintenance would cost more than the lookups save at lattice sizes.
TABLES = """
CREATE SEQUENCE {s}.run_ids START 1;
CREATE TABLE {s}.runs (
    run_id BIGINT PRIMARY KEY,
    job_name TEXT NOT NULL,
    command TEXT NOT NULL,
    strategy TEXT NOT NULL,
    config TEXT NOT NULL,
    status TEXT NOT NULL,
    started_at TIMESTAMP NOT NULL,
    finished_at TIMESTAMP,
    iteration INTEGER NOT NULL DEFAULT 0,
    nodes_checked INTEGER NOT NULL DEFAULT 0,
    result TEXT,
    error TEXT
);
CREATE TABLE {s}.run_attributes (
    run_id BIGINT NOT NULL,
    attr INTEGER NOT NULL,
    column_name TEXT NOT NULL,
    height INTEGER NOT NULL,
    hierarchy TEXT NOT NULL,
    dimension_table TEXT NOT NULL
);
CREATE TABLE {s}.lattice_nodes (
    run_id BIGINT NOT NULL,
    node_id BIGINT NOT NULL,
    iteration INTEGER NOT NULL,
    node_key TEXT NOT NULL,
    prefix_key TEXT NOT NULL,
    last_attr INTEGER NOT NULL,
    last_level INTEGER NOT NULL,
    parent1 BIGINT,
    parent2 BIGINT,
    height INTEGER NOT NULL,
    status TEXT NOT NULL
);
CREATE TABLE {s}.lattice_node_levels (
    run_id BIGINT NOT NULL,
    node_id BIGINT NOT NULL,
    attr INTEGER NOT NULL,
    level INTEGER NOT NULL
);
CREATE TABLE {s}.lattice_edges (
    run_id BIGINT NOT NULL,
    iteration INTEGER NOT NULL,
    start_id BIGINT NOT NULL,
    end_id BIGINT NOT NULL
);
CREATE TABLE {s}.frequency_sets (
    run_id BIGINT NOT NULL,
    node_id BIGINT,
    label TEXT NOT NULL,
    table_name TEXT NOT NULL,
    origin TEXT NOT NULL,
    derived_from TEXT,
    row_count BIGINT NOT NULL,
    dropped BOOLEAN NOT NULL DEFAULT FALSE
)
"""

DROP = ["frequency_sets", "lattice_edges", "lattice_node_levels", "lattice_nodes", "run_attributes", "runs"]


def upgrade(schema: str, quoted_schema: str) -> None:
    for statement in TABLES.split(";"):
        op.execute(statement.format(s=quoted_schema))


def downgrade(schema: str, quoted_schema: str) -> None:
    for table in DROP:
        op.execute(f"DROP TABLE {quoted_schema}.{table}")
    op.execute(f"DROP SEQUENCE {quoted_schema}.run_ids")
