"""The one way an output table appears: staged, audited, owned and granted, or not at all.

Every publication method writes each of its tables through `staged_table`, inside the caller's transaction:
the target is checked first (only sqlanon's own earlier output is ever replaced), the rows are written where the
database stages them (the table itself where DDL is transactional, a cached view on Spark), the caller audits
what it was given and says so with `Staged.audited`, and only then is the table made final, recorded as
sqlanon's and granted to the job's readers. An exception anywhere, or a table nobody audited, leaves nothing.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Connection

from ..backends import Database, open_database
from .ownership import Ownership, TableName

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from .ledger import LedgerCheck

PREVIEW_ROWS = 5  # rows of a published table a publication's result shows
FRAME_ROWS = 100_000  # rows of each DataFrame `PublishedTable.frames` gives, by default


@dataclass(kw_only=True)
class Staged:
    """An output being written: `ref` is what its audit reads; `audited(rows)` once the audit has passed."""

    ref: str
    rows: int | None = None

    def audited(self, rows: int) -> None:
        self.rows = rows


@dataclass(frozen=True, kw_only=True)
class Destination:
    """Where one table of a publication goes, and who may read it."""

    name: TableName
    source: TableName  # the table published from, which is never replaced
    replace: bool
    grant_to: tuple[str, ...] | list[str] = ()


@contextmanager
def staged_table(
    db: Database,
    conn: Connection,
    *,
    destination: Destination,
    select: str,
    params: dict[str, object] | None = None,
    ownership: Ownership,
    run_id: int,
) -> Iterator[Staged]:
    """Write `select` as `destination`, all or nothing, in the caller's transaction (see the module)."""
    replacing = ownership.check_target(conn, destination.name, destination.replace, "output table", destination.source)
    final = db.q(destination.name.schema, destination.name.table)
    with db.staged_output(conn, final, select, dict(params or {}), replacing) as written:
        staged = Staged(ref=written)
        yield staged
        if staged.rows is None:
            raise AssertionError(f"{destination.name} was staged but not audited; nothing is published unaudited")
    ownership.record(conn, destination.name, "output", staged.rows, run_id)
    for role in destination.grant_to:  # in the same transaction: readers see the table once it exists
        db.grant_select(conn, final, role)


def preview(db: Database, conn: Connection, name: TableName, order: str | None = None) -> list[dict[str, Any]]:
    """The first PREVIEW_ROWS rows of a published table (by `order`, a column list, where given)."""
    return db.first_rows(conn, db.q(name.schema, name.table), PREVIEW_ROWS, order)


def plain_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows (a preview's) with values JSON can carry: numbers and text as they are, anything else as text."""
    return [{k: plain(v) for k, v in row.items()} for row in rows]


def plain(value: Any) -> Any:
    """A value JSON can carry (numbers, text and NULL as they are, anything else as text)."""
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


@dataclass(frozen=True, eq=False)
class PublishedTable:
    """A published table, read back as pandas DataFrames or an Arrow stream: from its database, opened again for
    each read, or through the run's own database when that lives in this process' memory (a DataFrame source),
    which lives as long as this object does."""

    name: TableName
    url: str = field(repr=False)  # it may hold a password: never shown
    held: Database | None = field(default=None, repr=False)

    @classmethod
    def of(cls, db: Database, name: TableName) -> PublishedTable:
        return cls(name=name, url=db.url, held=db if db.in_memory else None)

    def frame(self) -> pd.DataFrame:
        """Every row of the table, as one DataFrame."""
        return next(self._frames(None))

    def frames(self, rows: int = FRAME_ROWS) -> Iterator[pd.DataFrame]:
        """The table as DataFrames of about `rows` rows each (DuckDB hands rows over 2,048 at a time), for a
        release larger than memory."""
        if rows < 1:
            raise ValueError(f"rows must be at least 1, got {rows}")
        return self._frames(rows)

    def arrow(self, rows: int = FRAME_ROWS) -> pa.RecordBatchReader:
        """The table as an Arrow stream of record batches of about `rows` rows each (needs pyarrow)."""
        try:
            import pyarrow as pa
        except ImportError:
            raise ImportError("an Arrow stream needs pyarrow: pip install pyarrow") from None
        batches = (pa.RecordBatch.from_pandas(frame, preserve_index=False) for frame in self.frames(rows))
        first = next(batches)
        return pa.RecordBatchReader.from_batches(first.schema, itertools.chain([first], batches))

    def _frames(self, rows: int | None) -> Iterator[pd.DataFrame]:
        db = self.held or open_database(self.url)
        try:
            with db.connect() as conn:
                yield from db.read_frames(conn, db.q(self.name.schema, self.name.table), rows)
        finally:
            if self.held is None:
                db.dispose()


@dataclass(kw_only=True)
class Released:
    """What a publication's result shares: the table it published, read back by `frame()` (every method's result
    derives from it)."""

    release: PublishedTable | None = field(default=None, repr=False)  # the published table, to read back
    ledger: LedgerCheck | None = None  # the job's earlier releases this one was checked against (`ledger:`)

    def frame(self) -> pd.DataFrame:
        """The whole published table (`release.frames()` and `release.arrow()` stream a large one)."""
        assert self.release is not None, "a publication's result knows its table"
        return self.release.frame()
