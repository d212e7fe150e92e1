"""Which tables sqlanon may write: it creates new tables, and replaces only its own.

sqlanon writes two kinds of table outside its metadata schema: published
outputs, and sources loaded from CSV files or DataFrames. Each one is recorded in
`owned_tables` with a random token that is also written into the table's
comment. A table counts as sqlanon's only while both agree, so a table that
someone dropped and re-created under the same name is not sqlanon's any more.

Every write goes through `check_target` first (before any search) and again
in the writing transaction:
- never the source table, however its name is spelled (DuckDB ignores case;
  PostgreSQL names longer than 63 bytes are refused, as it would cut them);
- never inside sqlanon's metadata schema;
- a schema that exists and where the role may create tables;
- an existing table only when asked to replace it, and only when it is sqlanon's.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Connection

from ..backends import Database, qualified_name
from ..errors import ConfigError, DataError
from ..store import Store, tables
from ..store.records import now


@dataclass(frozen=True)
class TableName:
    """A table as the database resolves it: its schema filled in."""

    schema: str
    table: str

    def __str__(self) -> str:
        return qualified_name(self.schema, self.table)

    def same_as(self, other: TableName, db: Database) -> bool:
        """Whether both name one table, names compared as the database resolves them."""
        return db.same_name(self.schema, other.schema) and db.same_name(self.table, other.table)


@dataclass(kw_only=True, frozen=True)
class OwnedTable:
    kind: str  # output | source
    file_path: str | None
    file_sha256: str | None
    row_count: int


class Ownership:
    """The `owned_tables` record of one metadata schema (the store's, through its operations: each role sees and
    replaces only its own records)."""

    def __init__(self, db: Database, metadata_schema: str):
        self.db, self.metadata_schema, self.store = db, metadata_schema, Store(db, metadata_schema)

    def resolve(self, conn: Connection, schema: str | None, table: str, where: str) -> TableName:
        """The table's name with its schema, after refusing names the database would change."""
        resolved = self.db.resolved_schema(conn, schema)
        self.db.check_name(resolved, f"{where} schema", table=True)
        self.db.check_name(table, where, table=True)
        return TableName(resolved, table)

    def _key(self, name: TableName) -> dict[str, str]:
        return {"schema_name": self.db.name_key(name.schema), "table_name": self.db.name_key(name.table)}

    def owned(self, conn: Connection, name: TableName) -> OwnedTable | None:
        """The record of a table sqlanon created, when the table is still that one."""
        row = self.store.call(self.db.metadata_connection(conn), tables.OWNED, **self._key(name)).first()
        if row is None:
            return None
        comment = self.db.table_comment(conn, name.schema, name.table) or ""
        if row[1] not in comment:
            return None
        return OwnedTable(kind=row[0], file_path=row[2], file_sha256=row[3], row_count=int(row[4]))

    def record(
        self,
        conn: Connection,
        name: TableName,
        kind: str,
        rows: int,
        run_id: int | None = None,
        file_path: str | None = None,
        file_sha256: str | None = None,
    ) -> None:
        """Mark a table sqlanon just created (in the creating transaction)."""
        token = uuid.uuid4().hex
        what = f"run {run_id}" if run_id is not None else f"loaded from {Path(file_path or '').name}"
        self.db.set_table_comment(conn, self.db.q(name.schema, name.table), f"written by sqlanon ({what}; {token})")
        self.store.call(
            self.db.metadata_connection(conn),
            tables.RECORD,
            **self._key(name),
            kind=kind,
            token=token,
            run=run_id,
            file_path=file_path,
            file_sha256=file_sha256,
            row_count=rows,
            created_at=now(),
        )

    def check_target(
        self,
        conn: Connection,
        target: TableName,
        replace: bool,
        what: str,
        source: TableName | None = None,
        replace_any: bool = False,
    ) -> bool:
        """Refuse a table sqlanon may not write (see the module docstring); returns whether it exists.

        `replace_any` lets `sqlanon load --replace` overwrite a table sqlanon did
        not create: the one command where the user names the table to overwrite.
        """
        db = self.db
        if db.same_name(target.schema, self.metadata_schema):
            raise ConfigError(
                f"{what} {str(target)!r} would be inside sqlanon's metadata schema "
                f"{self.metadata_schema!r}; choose another schema"
            )
        if source is not None and target.same_as(source, db):
            raise ConfigError(
                f"{what} {str(target)!r} is the source table {str(source)!r} (names are compared as "
                f"{db.name_rule}"
                "); sqlanon never writes over its source: choose another output.table"
            )
        if not db.schema_exists(conn, target.schema):
            raise DataError(
                f"schema {target.schema!r} of {what} {target.table!r} does not exist; create it "
                f"(CREATE SCHEMA {db.q(target.schema)}) or choose another schema"
            )
        if not db.may_create_in(conn, target.schema):
            user = db.current_role(conn)
            raise DataError(
                f"role {user!r} may not create tables in schema {target.schema!r}; ask its owner for: "
                f"GRANT CREATE ON SCHEMA {db.q(target.schema)} TO {db.q(user)}"
            )
        if not db.table_exists(conn, target.schema, target.table):
            return False
        if not replace:
            raise DataError(
                f"{what} {str(target)!r} already exists; choose another name, or pass --replace to "
                "overwrite a table sqlanon wrote"
            )
        if not replace_any and self.owned(conn, target) is None:
            raise DataError(
                f"{what} {str(target)!r} exists and was not written by sqlanon; sqlanon replaces only "
                "tables it created: drop or rename it yourself, or choose another name"
            )
        return True


#: what the record of a source loaded from a DataFrame holds in place of a file's path (its digest: SourceFrame)
FRAME_PATH = "(a pandas DataFrame)"


def file_digest(path: Path, options: dict[str, Any]) -> str:
    """SHA-256 of a CSV file and the options it is read with: the same digest means the same table."""
    digest = hashlib.sha256(json.dumps(options, sort_keys=True, default=str).encode())
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
