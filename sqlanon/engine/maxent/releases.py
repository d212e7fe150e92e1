"""The releases as integer-keyed scratch tables: who is in which group, how often each value is in each group."""

from __future__ import annotations

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
            member, count = self._release_sql(r, release, hierarchies, qi_columns)
            raw_members.append(member)
            raw_counts.append(count)
        self.members, self.counts = self.ref("members"), self.ref("counts")
        self.persons, self.vals = self.ref("persons"), self.ref("vals")
        raw_m, raw_c = self.ref("raw_members"), self.ref("raw_counts")
        self.create(raw_m, " UNION ALL ".join(raw_members))
        self.create(raw_c, " UNION ALL ".join(raw_counts))
        self._check_raw(raw_m, raw_c)
        self.create(
            self.persons,
            f"SELECT ROW_NUMBER() OVER (ORDER BY pseudonym) AS person, pseudonym FROM "
            f"(SELECT DISTINCT pseudonym FROM {raw_m}) AS p",
        )
        self.create(
            self.vals,
            f"SELECT ROW_NUMBER() OVER (ORDER BY label) AS value, label FROM (SELECT DISTINCT label FROM {raw_c}) AS v",
        )
        self.create(
            self.members,
            f"SELECT m.r, p.person, m.grp FROM {raw_m} m JOIN {self.persons} p ON p.pseudonym = m.pseudonym",
        )
        self.create(
            self.counts,
            f"SELECT c.r, c.grp, v.value, c.cnt FROM {raw_c} c JOIN {self.vals} v ON v.label = c.label WHERE c.cnt > 0",
        )

    def _release_sql(
        self, r: int, release: Release, hierarchies: dict[str, Hierarchy], qi_columns: list[str]
    ) -> tuple[str, str]:
        """SELECT r, pseudonym, grp and SELECT r, grp, label, cnt for one release, after checking its columns."""
        q = self.db.q
        pseudonym, sensitive = self.series.pseudonym, self.sensitive
        table = q(release.schema, release.table)
        self._require(
            release,
            release.table,
            [pseudonym] + ([self.series.bucket] if release.bucketized else qi_columns + [sensitive]),
        )
        person = f"CAST({q(pseudonym)} AS VARCHAR)"
        if release.bucketized:
            assert release.sensitive_table is not None
            self._require(release, release.sensitive_table, [self.series.bucket, sensitive, "count"])
            bucket = q(self.series.bucket)
            return (
                f"SELECT {r} AS r, {person} AS pseudonym, CAST({bucket} AS BIGINT) AS grp FROM {table}",
                f"SELECT {r} AS r, CAST({bucket} AS BIGINT) AS grp, CAST({q(sensitive)} AS VARCHAR) AS label, "
                f"SUM({q('count')}) AS cnt FROM {q(release.schema, release.sensitive_table)} "
                f"GROUP BY {bucket}, {q(sensitive)}",
            )
        self._check_labels(release, table, hierarchies, qi_columns)
        classes = ", ".join(q(c) for c in qi_columns)
        grouped = f"(SELECT *, DENSE_RANK() OVER (ORDER BY {classes}) AS sqlanon_grp__ FROM {table}) AS g"
        return (
            f"SELECT {r} AS r, {person} AS pseudonym, CAST(sqlanon_grp__ AS BIGINT) AS grp FROM {grouped}",
            f"SELECT {r} AS r, CAST(sqlanon_grp__ AS BIGINT) AS grp, CAST({q(sensitive)} AS VARCHAR) AS label, "
            f"COUNT(*) AS cnt FROM {grouped} GROUP BY sqlanon_grp__, {q(sensitive)}",
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
        self, release: Release, table: str, hierarchies: dict[str, Hierarchy], qi_columns: list[str]
    ) -> None:
        """Every generalized QI value of the release is a label of its hierarchy (at some level)."""
        for column in qi_columns:
            labels = sorted({label for path in hierarchies[column].paths for label in path})
            self.statements += 1
            names = {f"lab{j}": label for j, label in enumerate(labels)}
            stray = self.db.execute(
                self.conn,
                (
                    f"SELECT CAST({self.db.q(column)} AS VARCHAR) FROM {table} WHERE {self.db.q(column)} IS NOT NULL "
                    f"AND CAST({self.db.q(column)} AS VARCHAR) NOT IN ({', '.join(':' + n for n in names)}) LIMIT 1"
                ),
                names,
            ).first()
            if stray is not None:
                raise DataError(
                    f"release {release.name!r}: value {stray[0]!r} of {column!r} is not a label of its "
                    "hierarchy; a generalized release must use the job's hierarchies (or list the "
                    "release as bucketized, with its sensitive_table)"
                )

    def _check_raw(self, raw_m: str, raw_c: str) -> None:
        """Pseudonyms present and unique per release; each group lists one value per person."""
        name = {r: rel.name for r, rel in enumerate(self.releases, start=1)}
        row = self.db.execute(self.conn, f"SELECT r FROM {raw_m} WHERE pseudonym IS NULL LIMIT 1").first()
        if row:
            raise DataError(
                f"release {name[row[0]]!r}: the pseudonym column {self.series.pseudonym!r} is NULL in "
                "some rows; every published record needs its pseudonym"
            )
        row = self.db.execute(
            self.conn, f"SELECT r, pseudonym FROM {raw_m} GROUP BY r, pseudonym HAVING COUNT(*) > 1 LIMIT 1"
        ).first()
        if row:
            raise DataError(
                f"release {name[row[0]]!r}: pseudonym {row[1]!r} appears more than once; a person is "
                "published once per release"
            )
        row = self.db.execute(
            self.conn,
            (
                f"SELECT COALESCE(m.r, c.r), COALESCE(m.grp, c.grp), m.n, c.n FROM (SELECT r, grp, COUNT(*) AS n FROM "
                f"{raw_m} GROUP BY r, grp) m FULL JOIN (SELECT r, grp, SUM(cnt) AS n FROM {raw_c} GROUP BY r, grp) c "
                "ON c.r = m.r AND c.grp = m.grp WHERE m.n IS NULL OR c.n IS NULL OR m.n <> c.n LIMIT 1"
            ),
        ).first()
        if row:
            raise DataError(
                f"release {name[row[0]]!r}: bucket {row[1]} has {row[2] or 0} person(s) but lists "
                f"{row[3] or 0} sensitive value(s); the release is inconsistent"
            )
        self.statements += 3
