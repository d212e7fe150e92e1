"""The stored audit function, sqlanon.audit(table, quasi-identifiers, sensitive) (PostgreSQL only).

Since revision 0013 every routine of the store, this one included (sql/audit_function.sql), is installed by
`sqlanon migrate` after the revisions, from the definitions of the installed sqlanon (sqlanon.store.postgres):
a revision no longer installs routines, so upgrading from any revision gives the same routines.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22
"""

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade(schema: str, quoted_schema: str) -> None:
    pass


def downgrade(schema: str, quoted_schema: str) -> None:
    pass
