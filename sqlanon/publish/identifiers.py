"""Keyed pseudonyms of direct identifiers, computed in SQL from keys that no statement carries.

A pseudonym is HMAC-SHA256 (RFC 2104) of the value's text, H(K ^ opad || H(K ^ ipad || text)), as 64 hex digits;
NULL stays NULL. The two padded keys are computed here and loaded into a session-scoped table of the publishing
connection through the driver's bulk path, never as a statement's text or parameter (`Database.secret_table`), and
the publishing statement reads them from there. So a server that logs every statement with its parameters
(log_statement, log_min_duration_statement, auto_explain), DuckDB's query log and Spark's plans and UI hold no key
material: neither the key nor its pads, either of which gives the key back by one XOR.

A key the database holds (`key_name`, see store.keys) is never read at all: the statement names it, and the
database computes the pseudonym (`Database.held_hmac`; on PostgreSQL a routine running as the store's owner, for
the roles the key was created for). Whether the run's role may use it is checked before any search.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from sqlalchemy.engine import Connection

from ..backends import Database
from ..errors import ConfigError
from ..model.job import Identifier, Job
from ..store import Store, keys

BLOCK = 64  # SHA-256's block size: longer keys are hashed first, shorter ones padded with zero bytes


def hmac_pads(key: bytes) -> tuple[bytes, bytes]:
    """The key XORed with HMAC's inner and outer pads (RFC 2104)."""
    if len(key) > BLOCK:
        key = hashlib.sha256(key).digest()
    padded = key.ljust(BLOCK, b"\0")
    return bytes(b ^ 0x36 for b in padded), bytes(b ^ 0x5C for b in padded)


@dataclass
class Pseudonyms:
    """The job's pseudonym keys by column (read when the job starts, never stored), and once `loaded` into a
    connection, the table its publishing statements read their pads from."""

    keys: dict[str, bytes] = field(default_factory=dict, repr=False)
    table: str | None = None
    held: dict[str, str] = field(default_factory=dict)  # column -> the name of a key the database holds
    store: str | None = None  # the metadata schema holding those keys, once checked (see check_held)

    @classmethod
    def of(cls, job: Job) -> Pseudonyms:
        """Every pseudonym key of the job, read now (before any search), so a missing key fails early."""
        pseudonymized = [i for i in job.identifying if i.action == "pseudonym"]
        return cls(
            {i.column: i.key() for i in pseudonymized if i.key_name is None},
            held={i.column: i.key_name for i in pseudonymized if i.key_name is not None},
        )

    def check_held(self, db: Database, conn: Connection, store: str) -> None:
        """Refuse, before any search, a held key that does not exist or was not created for the caller's roles."""
        for column, name in self.held.items():
            found = Store(db, store).call(db.metadata_connection(conn), keys.USABLE, name=name).first()
            fix = f"the database's owner creates it with: sqlanon key create {name} --for ROLE"
            if found is None:
                raise ConfigError(f"identifying.{column}: the database holds no pseudonym key {name!r}; {fix}")
            if not found[1]:
                raise ConfigError(
                    f"identifying.{column}: pseudonym key {name!r} is for role(s) {found[0]}, not this one; {fix}"
                )
        self.store = store

    @contextmanager
    def loaded(self, db: Database, conn: Connection) -> Iterator[Pseudonyms]:
        """Within: the pads are in a session-scoped table of `conn` (see the module docstring)."""
        if not self.keys:
            yield self
            return
        rows = [(k, *hmac_pads(key)) for k, key in enumerate(self.keys.values())]
        columns = [("k", "INTEGER"), ("inner_pad", db.bytes_type), ("outer_pad", db.bytes_type)]
        with db.secret_table(conn, f"sqlanon_keys_{uuid.uuid4().hex[:12]}", columns, rows) as table:
            self.table = table
            try:
                yield self
            finally:
                self.table = None

    def select(
        self, db: Database, identifying: list[Identifier] | tuple[Identifier, ...], column: str, value: str
    ) -> str | None:
        """How source column `column` (its value in SQL: `value`) is published: None for a dropped identifier, the
        keyed pseudonym for a pseudonymized one, else the value itself."""
        for identifier in identifying:
            if db.same_name(identifier.column, column):
                return None if identifier.action == "drop" else self._hmac(db, identifier.column, value)
        return value

    def sql_of(
        self, db: Database, identifying: list[Identifier] | tuple[Identifier, ...], column: str
    ) -> Callable[[str], str]:
        """The SQL of pseudonymized `column`'s pseudonym over a value's SQL (a unit's, computed once per person)."""

        def pseudonym(value: str) -> str:
            found = self.select(db, identifying, column, value)
            assert found is not None, "a unit is published as a pseudonym (the job's checks)"
            return found

        return pseudonym

    def _hmac(self, db: Database, column: str, value: str) -> str:
        if column in self.held:
            assert self.store is not None, "held keys are checked before the run (check_held)"
            return db.held_hmac(value, self.store, self.held[column])
        assert self.table is not None, "pseudonyms are computed by a connection they were loaded into"
        k = list(self.keys).index(column)
        return db.keyed_hmac(value, self.table, k)
