"""Smaller statistics samples for the lattice tables on PostgreSQL.

Incognito analyzes the lattice tables after each bulk write: without fresh statistics the planner misjudges a
new run's rows (Adult's search took 470 s instead of 6). The tables keep every run's lattice, so with the
default sample (30,000 rows) each ANALYZE grew with the history: at 889,000 rows in lattice_nodes, the 48
ANALYZEs took 2.9 s of a 6.0 s search. A statistics target of 10 samples 3,000 rows, enough for the run and
iteration columns the statements filter on: the same search 3.1 s (its ANALYZEs 0.45 s).

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25
"""

from alembic import op
from sqlalchemy import text

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

TABLES = ("lattice_nodes", "lattice_node_levels", "lattice_edges")
TARGET = 10


def _set_target(schema: str, quoted_schema: str, target: int) -> None:
    conn = op.get_bind()
    if conn.dialect.name != "postgresql":
        return  # DuckDB keeps its own statistics
    for table in TABLES:
        columns = (
            conn.execute(
                text(
                    "SELECT a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON "
                    "n.oid = c.relnamespace WHERE n.nspname = :s AND c.relname = :t AND a.attnum > 0 "
                    "AND NOT a.attisdropped ORDER BY a.attnum"
                ),
                {"s": schema, "t": table},
            )
            .scalars()
            .all()
        )
        quoted = conn.dialect.identifier_preparer.quote
        changes = ", ".join(f"ALTER COLUMN {quoted(c)} SET STATISTICS {target}" for c in columns)
        conn.exec_driver_sql(f"ALTER TABLE {quoted_schema}.{quoted(table)} {changes}")


def upgrade(schema: str, quoted_schema: str) -> None:
    _set_target(schema, quoted_schema, TARGET)


def downgrade(schema: str, quoted_schema: str) -> None:
    _set_target(schema, quoted_schema, -1)  # the server's default_statistics_target again
