"""Scratch tables of one session: made from a SELECT, replaced in place, all dropped at the end.

A table is named by its reference (text, for statements composed as text) or, made from a SQLAlchemy Core query
with `make`, is that query's result as a Core table, its columns the query's.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.sql.selectable import SelectBase

from ..backends import Database

#: the prefix of a common table expression computed once, however often its statement reads it
MATERIALIZED = "MATERIALIZED"


class Scratch:
    """The temporary tables a computation makes (named `<prefix>_<name>`), and how many statements it ran."""

    def __init__(self, db: Database, conn: Connection, prefix: str):
        self.db, self.conn, self.prefix = db, conn, prefix
        self.created: list[str] = []
        self.names: dict[str, str] = {}  # table name of each ref handed out
        self.statements = 0
        self._compiled: dict[Hashable, tuple[Any, str]] = {}  # statements run again and again, and their text

    def ref(self, name: str) -> str:
        table = f"{self.prefix}_{name}"
        ref = self.db.scratch_ref(table)
        self.names[ref] = table
        return ref

    def make(self, name: str, select: SelectBase, text: str | None = None) -> sa.TableClause:
        """A new scratch table made from the Core query `select` (or from its `text`, as `once` returns it), as
        a Core table of the query's columns."""
        ref = self.ref(name)
        self.create(ref, select if text is None else text)
        return self.table(ref, select)

    def remake(self, table: sa.TableClause, select: SelectBase, text: str | None = None) -> sa.TableClause:
        """`table` made anew from `select` (or its `text`), which may read `table` itself."""
        ref = self.ref_of(table)
        self.replace(ref, select if text is None else text)
        return self.table(ref, select)

    def once(self, key: Hashable, build: Callable[[], Any]) -> tuple[Any, str]:
        """The statement `build` makes, and its text, built and compiled once per `key`: for the statements run
        again and again over tables of the same names. SQLAlchemy compiles a CREATE TABLE AS anew each time and
        DuckDB's dialect caches no statement: 16 IPF passes (about 100 common table expressions) took 13 ms to
        build and 20 ms to compile, half of a 10k-record inference's time; Mondrian's rounds 0.8 s of 4.2 at
        1M rows."""
        if key not in self._compiled:
            statement = build()
            self._compiled[key] = (statement, self.db.as_text(self.conn, statement))
        return self._compiled[key]

    def table(self, ref: str, select: SelectBase) -> sa.TableClause:
        """Scratch table `ref` as a Core table with the columns of `select` (each one named or labeled)."""
        columns = [c.key for c in select.selected_columns]
        unnamed = [str(c) for c, key in zip(select.selected_columns, columns, strict=True) if key is None]
        assert not unnamed, f"label the scratch table's columns {unnamed}"
        return self.db.scratch_table(self.names[ref], [str(key) for key in columns])

    def scalar(self, query: sa.Select[Any]) -> Any:
        """The one value of `query`."""
        return self.db.execute(self.conn, query).scalar_one()

    def count(self, table: sa.TableClause) -> int:
        """The rows of `table`."""
        return int(self.scalar(sa.select(sa.func.count()).select_from(table)))

    def make_from_rows(
        self, name: str, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[Any]]
    ) -> sa.TableClause:
        """A new scratch table of (name, type) `columns` holding `rows`, as a Core table."""
        ref = self.ref(name)
        self.create_from_rows(ref, columns, rows)
        return self.db.scratch_table(self.names[ref], [c for c, _ in columns])

    def ref_of(self, table: sa.TableClause) -> str:
        return self.db.scratch_ref(table.name)

    def create(self, ref: str, select: str | SelectBase, params: dict[str, Any] | None = None) -> None:
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

    def replace(self, ref: str, select: str | SelectBase, params: dict[str, Any] | None = None) -> None:
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

    def drop(self, table: str | sa.TableClause) -> None:
        ref = table if isinstance(table, str) else self.ref_of(table)
        self.db.drop_table(self.conn, ref)
        if ref in self.created:
            self.created.remove(ref)

    def drop_all(self) -> None:
        for ref in reversed(self.created):
            self.db.drop_table(self.conn, ref)
        self.created.clear()
