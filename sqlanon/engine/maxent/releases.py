"""The releases as integer-keyed scratch tables: who is in which group, how often each value is in each group."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from ...backends import Database
from ...errors import DataError
from ...model.hierarchies import Hierarchy
from ...model.job import Release, ReleaseSeries
from ..scratch import Scratch


def progress_label(name: str) -> str:
    """How progress names a solve: every release, or one pair of them."""
    return "all releases" if name == "p" else name.replace("pair", "pair ")


class ReleaseTables(Scratch):
    """The releases as two scratch tables: who is in which group, and how often each value is in each group.

    `members(r, person, grp)` and `counts(r, grp, value, cnt)`, persons and
    values as integer ids (`persons(person, pseudonym)`, `vals(value, label)`),
    r the release's position in the series (1-based).
    """

    def __init__(
        self,
        *,
        db: Database,
        conn: Connection,
        series: ReleaseSeries,
        sensitive: str,
        hierarchies: dict[str, Hierarchy],
        qi_columns: list[str],
        prefix: str,
    ):
        super().__init__(db, conn, prefix)
        self.series, self.sensitive = series, sensitive
        self.releases = list(series.releases)
        raw_members, raw_counts = [], []
        for r, release in enumerate(self.releases, start=1):
            members, count = self._release_sql(r, release, hierarchies, qi_columns)
            raw_members += members
            raw_counts.append(count)
        raw_m = self.make("raw_members", sa.union_all(*raw_members))
        raw_c = self.make("raw_counts", sa.union_all(*raw_counts))
        self._check_raw(raw_m, raw_c)
        p = select(raw_m.c.pseudonym).distinct().subquery("p")
        self.persons = self.make(
            "persons", select(func.row_number().over(order_by=p.c.pseudonym).label("person"), p.c.pseudonym)
        )
        v = select(raw_c.c.label).distinct().subquery("v")
        self.vals = self.make("vals", select(func.row_number().over(order_by=v.c.label).label("value"), v.c.label))
        m, pe = raw_m.alias("m"), self.persons.alias("p")
        self.members = self.make(
            "members", select(m.c.r, pe.c.person, m.c.grp).join_from(m, pe, pe.c.pseudonym == m.c.pseudonym)
        )
        c, va = raw_c.alias("c"), self.vals.alias("v")
        self.counts = self.make(
            "counts",
            select(c.c.r, c.c.grp, va.c.value, c.c.cnt).join_from(c, va, va.c.label == c.c.label).where(c.c.cnt > 0),
        )

    def _release_sql(
        self, r: int, release: Release, hierarchies: dict[str, Hierarchy], qi_columns: list[str]
    ) -> tuple[list[sa.Select[Any]], sa.Select[Any]]:
        """SELECTs of r, pseudonym, grp and SELECT r, grp, label, cnt for one release, after checking its columns.
        A counterfeit is a member of its bucket of its own (a pseudonym no person has: `counterfeit r.bucket.k`)."""
        pseudonym, sensitive, bucket = self.series.pseudonym, self.sensitive, self.series.bucket
        qi_columns = list(release.qi_columns or qi_columns)
        columns = [pseudonym] + ([bucket] if release.bucketized else qi_columns + [sensitive])
        self._require(release, release.table, columns)
        table: sa.TableClause | sa.Subquery = sa.table(
            release.table, *map(sa.column, dict.fromkeys(columns)), schema=release.schema
        )
        if release.distinct:  # a person's rows agree on every column read (the publication checked it)
            table = select(*table.c).distinct().subquery("d")
        if release.bucketized:
            assert release.sensitive_table is not None
            held = [bucket, sensitive, "count"]
            self._require(release, release.sensitive_table, held)
            values = sa.table(release.sensitive_table, *map(sa.column, held), schema=release.schema)
            members = [select(_release(r), _pseudonym(table.c[pseudonym]), _group(table.c[bucket]))]
            if release.counterfeit_table is not None:
                fake = [bucket, "counterfeit"]
                self._require(release, release.counterfeit_table, fake)
                c = sa.table(release.counterfeit_table, *map(sa.column, fake), schema=release.schema)
                named = func.concat(sa.literal(f"counterfeit {r}."), c.c[bucket], sa.literal("."), c.c.counterfeit)
                members.append(select(_release(r), _pseudonym(named), _group(c.c[bucket])))
            return (
                members,
                select(
                    _release(r),
                    _group(values.c[bucket]),
                    _label(values.c[sensitive]),
                    func.sum(values.c["count"]).label("cnt"),
                ).group_by(values.c[bucket], values.c[sensitive]),
            )
        if release.hierarchy_labels:
            self._check_labels(release, table, hierarchies, qi_columns)
        g = select(
            table, func.dense_rank().over(order_by=[table.c[c] for c in qi_columns]).label("sqlanon_grp__")
        ).subquery("g")
        return (
            [select(_release(r), _pseudonym(g.c[pseudonym]), _group(g.c.sqlanon_grp__))],
            select(_release(r), _group(g.c.sqlanon_grp__), _label(g.c[sensitive]), func.count().label("cnt")).group_by(
                g.c.sqlanon_grp__, g.c[sensitive]
            ),
        )

    def _require(self, release: Release, table: str, columns: list[str]) -> None:
        db = self.db
        if not db.table_exists(self.conn, release.schema, table):
            raise DataError(f"release {release.name!r}: table {table!r} does not exist; fix releases.series")
        present = {db.name_key(c) for c in db.columns(self.conn, release.schema, table)}
        missing = [c for c in columns if db.name_key(c) not in present]
        if missing:
            what = "pseudonym column" if missing[0] == self.series.pseudonym else "column"
            raise DataError(
                f"release {release.name!r}: table {table!r} has no {what} {missing[0]!r}; every release "
                f"needs {', '.join(columns)} (set releases.pseudonym or the release's table)"
            )

    def _check_labels(
        self,
        release: Release,
        table: sa.TableClause | sa.Subquery,
        hierarchies: dict[str, Hierarchy],
        qi_columns: list[str],
    ) -> None:
        """Every generalized QI value of the release is a label of its hierarchy (at some level)."""
        for column in qi_columns:
            labels = sorted({label for path in hierarchies[column].paths for label in path})
            self.statements += 1
            value = sa.cast(table.c[column], sa.String)
            stray = self.db.execute(
                self.conn, select(value).where(table.c[column].is_not(None), value.not_in(labels)).limit(1)
            ).first()
            if stray is not None:
                raise DataError(
                    f"release {release.name!r}: value {stray[0]!r} of {column!r} is not a label of its "
                    "hierarchy; a generalized release must use the job's hierarchies (or list the "
                    "release as bucketized, with its sensitive_table)"
                )

    def _check_raw(self, raw_m: sa.TableClause, raw_c: sa.TableClause) -> None:
        """Pseudonyms present and unique per release; each group lists one value per person."""
        name = {r: rel.name for r, rel in enumerate(self.releases, start=1)}
        db, conn = self.db, self.conn
        row = db.execute(conn, select(raw_m.c.r).where(raw_m.c.pseudonym.is_(None)).limit(1)).first()
        if row:
            raise DataError(
                f"release {name[row[0]]!r}: the pseudonym column {self.series.pseudonym!r} is NULL in "
                "some rows; every published record needs its pseudonym"
            )
        row = db.execute(
            conn,
            select(raw_m.c.r, raw_m.c.pseudonym)
            .group_by(raw_m.c.r, raw_m.c.pseudonym)
            .having(func.count() > 1)
            .limit(1),
        ).first()
        if row:
            raise DataError(
                f"release {name[row[0]]!r}: pseudonym {row[1]!r} appears more than once; a person is "
                "published once per release"
            )
        m = select(raw_m.c.r, raw_m.c.grp, func.count().label("n")).group_by(raw_m.c.r, raw_m.c.grp).subquery("m")
        listed = select(raw_c.c.r, raw_c.c.grp, func.sum(raw_c.c.cnt).label("n")).group_by(raw_c.c.r, raw_c.c.grp)
        c = listed.subquery("c")
        row = db.execute(
            conn,
            select(func.coalesce(m.c.r, c.c.r), func.coalesce(m.c.grp, c.c.grp), m.c.n, c.c.n)
            .select_from(m.join(c, sa.and_(c.c.r == m.c.r, c.c.grp == m.c.grp), full=True))
            .where(sa.or_(m.c.n.is_(None), c.c.n.is_(None), m.c.n != c.c.n))
            .limit(1),
        ).first()
        if row:
            raise DataError(
                f"release {name[row[0]]!r}: bucket {row[1]} has {row[2] or 0} person(s) but lists "
                f"{row[3] or 0} sensitive value(s); the release is inconsistent"
            )
        self.statements += 3


def _release(r: int) -> sa.Label[Any]:
    return sa.literal(r).label("r")


def _pseudonym(column: sa.ColumnElement[Any]) -> sa.Label[Any]:
    return sa.cast(column, sa.String).label("pseudonym")


def _group(column: sa.ColumnElement[Any]) -> sa.Label[Any]:
    return sa.cast(column, sa.BigInteger).label("grp")


def _label(column: sa.ColumnElement[Any]) -> sa.Label[Any]:
    return sa.cast(column, sa.String).label("label")
