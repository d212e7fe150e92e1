"""Pseudonym keys the database holds (`pseudonym_keys`): written by the store's owner, used by the roles named.

A key is stored as HMAC's two padded keys, read into the table from a session-scoped table the writer loaded
through the driver's bulk path (`Database.secret_table`): no statement carries them. Runs never read them: on
PostgreSQL the routine `pseudonym(key, value)` (sql/pseudonym_keys.sql) computes each pseudonym as the definer.
"""

from __future__ import annotations

from .ops import Op

#: the session-scoped table a key's pads are loaded into before STORE reads them (see Database.secret_table)
IMPORT_TABLE = "sqlanon_key_import"

STORE = Op(
    name="pseudonym_key_store",
    params=(("name", "text"), ("users", "text"), ("created_at", "timestamp")),
    sql=(
        "INSERT INTO {s}.pseudonym_keys (name, inner_pad, outer_pad, users, owner_role, created_at) SELECT :name, "
        "inner_pad, outer_pad, :users, {caller}, :created_at FROM {temp}." + IMPORT_TABLE,
    ),
    owner_only=True,
)

#: the keys by name, with the roles that may use each (never their pads)
LIST = Op(
    name="pseudonym_keys_list",
    params=(),
    sql=("SELECT name, users, owner_role, created_at FROM {s}.pseudonym_keys ORDER BY name",),
    returns=(("name", "text"), ("users", "text"), ("owner_role", "text"), ("created_at", "timestamp")),
    owner_only=True,
)

#: whether the key exists, and whether the caller is one of the roles it was created for (or has their rights)
USABLE = Op(
    name="pseudonym_key_usable",
    params=(("name", "text"),),
    sql=(
        "SELECT users, EXISTS (SELECT 1 FROM unnest(string_to_array(users, ',')) AS u(role) WHERE {mine:u.role}) "
        "FROM {s}.pseudonym_keys WHERE name = :name",
    ),
    returns=(("users", "text"), ("usable", "boolean")),
)

OPS = (STORE, LIST, USABLE)
