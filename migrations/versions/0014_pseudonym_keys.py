"""Pseudonym keys the database holds: a registered job pseudonymizes from SQL without a key in anyone's hands.

`pseudonym_keys` keeps each key as HMAC's two padded keys (never the key itself, which one XOR gives back, so
they are as secret). On PostgreSQL no role but the store's owner reads the table (the installation revokes every
privilege on the store's tables); a run computes its pseudonyms through the routine `pseudonym(key, value)`, as
the definer, for the roles the key was created for (`users`, a JSON list). `sqlanon key create` writes a key.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-29
"""

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade(schema: str, quoted_schema: str) -> None:
    s = quoted_schema
    binary = "BYTEA" if op.get_bind().dialect.name == "postgresql" else "BLOB"
    op.execute(
        f"CREATE TABLE {s}.pseudonym_keys (name TEXT PRIMARY KEY, inner_pad {binary} NOT NULL, "
        f"outer_pad {binary} NOT NULL, users TEXT NOT NULL, owner_role TEXT, created_at TIMESTAMP NOT NULL)"
    )


def downgrade(schema: str, quoted_schema: str) -> None:
    op.execute(f"DROP TABLE {quoted_schema}.pseudonym_keys")
