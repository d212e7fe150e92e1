"""Scratch tables of one session: made from a SELECT, replaced in place, all dropped at the end."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy.engine import Connection

from ..backends import Database


class Scratch:
    """The temporary tables a computation makes (named `<prefix>_<name>`), and how many statements it ran."""

    def __init__(self, db: Database, conn: Connection, prefix: str):
        self.db, self.conn, self.prefix = db, conn, prefix
        self.created: list[str] = []
        self.names: dict[str, str] = {}  # table name of each ref handed out
        self.statements = 0

    def ref(self, name: str) -> str:
        table = f"{self.prefix}_{name}"
        ref = self.db.scratch_ref(table)
        self.names[ref] = table
        return ref

    def create(self, ref: str, select: str, params: dict[str, Any] | None = None) -> None:
        """`ref` (one of this scratch's refs) made from `select`, and analyzed: the statements that join it are
        planned on its real size (PostgreSQL took a fresh 50k-row table of release members for 546 rows and
        joined the wrong way round)."""
        self.register(self.db.create_scratch(self.conn, self.names[ref], select, params))
        self.db.analyze(self.conn, ref)
        self.statements += 1

    def create_from_rows(self, ref: str, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[Any]]) -> None:
        """`ref` of (name, type) `columns` holding `rows` (computed in Python), analyzed once they are in."""
        self.register(self.db.create_scratch_from_rows(self.conn, self.names[ref], columns, rows))
        self.db.analyze(self.conn, ref)
        self.statements += 2

    def replace(self, ref: str, select: str, params: dict[str, Any] | None = None) -> None:
        """`ref` made anew from `select`, which may read `ref` itself."""
        following = self.ref("next")
        self.create(following, select, params)
        self.swap(following, ref)

    def swap(self, following: str, ref: str) -> None:
        """`following` takes the place (and name) of `ref`."""
        self.drop(ref)
        self.db.execute(self.conn, f"ALTER TABLE {following} RENAME TO {self.db.q(self.names[ref])}")
        self.created[self.created.index(following)] = ref

    def register(self, ref: str) -> None:
        if ref not in self.created:
            self.created.append(ref)

    def drop(self, ref: str) -> None:
        self.db.drop_table(self.conn, ref)
        if ref in self.created:
            self.created.remove(ref)

    def drop_all(self) -> None:
        for ref in reversed(self.created):
            self.db.drop_table(self.conn, ref)
        self.created.clear()


@contextmanager
def stored_select(
    db: Database, conn: Connection, name: str, select: str, params: dict[str, Any] | None = None
) -> Iterator[str]:
    """`select` stored once as the scratch table `name`; yields a SELECT of it for the statements that read it
    (instead of each computing it again), then drops it."""
    ref = db.create_scratch(conn, name, select, params)
    yield f"SELECT * FROM {ref}"
    # dropped when the statements succeeded; after an error the caller's rollback takes the table (a DROP
    # there would fail in PostgreSQL's aborted transaction and hide the error that stopped them)
    db.drop_table(conn, ref)
