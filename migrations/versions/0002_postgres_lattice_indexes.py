"""Indexes on the lattice tables (PostgreSQL only).

Without them PostgreSQL plans the candidate, pruning and edge queries as
nested loops over whole tables; DuckDB's hash joins need none, and its index
maintenance would slow the bulk writes.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

INDEXES = {
    "lattice_nodes_by_key": "lattice_nodes (run_id, iteration, node_key)",
    "lattice_nodes_by_prefix": "lattice_nodes (run_id, iteration, prefix_key)",
    "lattice_nodes_by_id": "lattice_nodes (run_id, node_id)",
    "lattice_node_levels_by_node": "lattice_node_levels (run_id, node_id)",
    "lattice_edges_by_iteration": "lattice_edges (run_id, iteration)",
    "frequency_sets_by_run": "frequency_sets (run_id, label)",
}


def _postgres() -> bool:
    return op.get_context().dialect.name == "postgresql"


def upgrade(schema: str, quoted_schema: str) -> None:
    if _postgres():
        for name, target in INDEXES.items():
            op.execute(f"CREATE INDEX {name} ON {quoted_schema}.{target}")


def downgrade(schema: str, quoted_schema: str) -> None:
    if _postgres():
        for name in INDEXES:
            op.execute(f"DROP INDEX {quoted_schema}.{name}")
