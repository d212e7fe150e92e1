"""Least privilege for the PL/Python routines (PostgreSQL).

This revision once created a server_settings table and a cluster-wide role sqlanon_runner; revision 0013
replaced both (settings in the body of the routine installation(), a runner role per database, see
sqlanon.store.postgres) and the routines are installed by `sqlanon migrate` after the revisions.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-22
"""

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade(schema: str, quoted_schema: str) -> None:
    pass


def downgrade(schema: str, quoted_schema: str) -> None:
    pass
