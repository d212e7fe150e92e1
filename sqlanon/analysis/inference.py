"""Inference across releases by maximum entropy (Wang, Zhu, Du, Teng), solved in the database.

Every published release splits the persons it holds into groups (buckets of
a bucketized pair, or classes of equal generalized QIs) and says how often each
sensitive value occurs in each group. With P(s | i) a variable for every
person i and value s, the releases give:
- zero constraints: P(s | i) = 0 unless s occurs in i's group of every release
  that holds i (s outside the intersection, the "maximum common subset");
- one constraints: sum over s of P(s | i) = 1;
- relation constraints: for each group b of each release and value s,
  sum over i in b of P(s | i) = count of s in b.
The least biased solution is the one of maximum entropy. It is found in
two steps, both in the database:
1. Propagation removes the pairs no solution allows: the counting rules
   (a value already held by `count` persons fixed to it is no one else's in
   that group; a value just `count` persons may hold is theirs) and, for
   groups of up to MATCHED_GROUP persons, the pairs no complete assignment of
   the group's values uses (each group is a global cardinality constraint;
   a forward and a backward pass over its partial assignments, in one
   recursive statement for all groups), repeated until nothing changes,
   since what one release rules out can rule out more in another.
2. Iterative proportional fitting on the pairs left: start uniform over each
   person's possible values, then repeatedly scale every (group, value) of
   each release to its count and every person to one, several passes per
   statement as nested window functions.
Propagation matters: IPF approaches a probability the releases force to 0
only like 1 / passes (chains of them slower still), and two independently
bucketized releases force most of them; on Adult (7,200 records, l = 5) plain
IPF was still far off after 131,072 passes, while after propagation the pairs
left are exactly the support a linear program finds (checked once with
HiGHS) and IPF converges in one statement. Where propagation is incomplete
(groups above MATCHED_GROUP persons, or forcing only a linear combination of
groups reveals), the iteration removes probabilities that keep halving while
the passes double (SNAP_BELOW, SNAP_RATIO), and the report gives the passes
and the largest constraint violation left.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Connection

from ..backends import Database
from ..engine.scratch import Scratch
from ..errors import ConfigError, DataError
from ..model.hierarchies import Hierarchy
from ..model.job import InferenceSettings, Job, Release, ReleaseSeries
from ..model.progress import Progress, silent
from ..publish.ownership import Ownership, TableName

if TYPE_CHECKING:  # imported where a DataFrame is asked for (see api.py)
    import pandas as pd

PASSES_PER_STATEMENT = 16  # IPF passes in one statement (the violation is checked after each statement)


def _label(name: str) -> str:
    """How progress names a solve: every release, or one pair of them."""
    return "all releases" if name == "p" else name.replace("pair", "pair ")


LISTED = 50  # disclosures listed in a report (all of them are flagged in the probability table)


@dataclass(kw_only=True)
class ReleaseEntropy:
    name: str
    persons: int
    alone: float  # H(S | I) over the release's persons, from the release alone (nats)
    together: float  # the same persons' H(S | I) from every release together

    @property
    def drop(self) -> float:
        """How much of the release's uncertainty the other releases remove (0.2 = 20 % lower)."""
        return 0.0 if self.alone == 0 else 1 - self.together / self.alone


@dataclass(kw_only=True)
class InferenceReport:
    persons: int
    values: int
    variables: int  # P(s | i) that may be positive (after the zero constraints)
    zero_constraints: int
    one_constraints: int
    relation_constraints: int
    iterations: int
    max_violation: float
    converged: bool
    seconds: float
    statements: int
    entropy: list[ReleaseEntropy]
    total_together: float  # H(S | I) over every person, every release together
    positive: list[dict[str, Any]] = field(default_factory=list)  # the first LISTED
    negative: list[dict[str, Any]] = field(default_factory=list)
    positive_count: int = 0
    negative_count: int = 0
    table: str | None = None  # where P(s | person) was written
    forced_zero: int = 0  # possible pairs the releases together force to 0 (found while iterating)

    @property
    def disclosed(self) -> bool:
        return bool(self.positive_count or self.negative_count)

    def to_dict(self) -> dict[str, Any]:
        return {
            "persons": self.persons,
            "values": self.values,
            "variables": self.variables,
            "constraints": {
                "zero": self.zero_constraints,
                "one": self.one_constraints,
                "relation": self.relation_constraints,
            },
            "forced_zero": self.forced_zero,
            "iterations": self.iterations,
            "max_violation": self.max_violation,
            "converged": self.converged,
            "seconds": round(self.seconds, 3),
            "statements": self.statements,
            "entropy": [
                {"release": e.name, "persons": e.persons, "alone": e.alone, "together": e.together, "drop": e.drop}
                for e in self.entropy
            ],
            "total_together": self.total_together,
            "positive_disclosures": self.positive_count,
            "negative_disclosures": self.negative_count,
            "positive": self.positive,
            "negative": self.negative,
            "table": self.table,
        }

    def entropy_frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(
            [
                {"release": e.name, "persons": e.persons, "alone": e.alone, "together": e.together, "drop": e.drop}
                for e in self.entropy
            ]
        )


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


def solve(
    db: Database,
    conn: Connection,
    tables: ReleaseTables,
    settings: InferenceSettings,
    subset: list[int] | None = None,
    name: str = "p",
    progress: Progress = silent,
) -> tuple[str, dict[str, Any]]:
    """The maximum-entropy P(s | i) from the releases numbered in `subset` (default: all), as a scratch table
    `(person, value, p)`; returns its name and the solve's figures. Raises DataError when the releases admit
    no solution, naming the constraint."""
    rs = subset or list(range(1, len(tables.releases) + 1))
    members, counts = tables.members, tables.counts
    in_subset = f"r IN ({', '.join(map(str, rs))})"
    possible, x = tables.ref(f"{name}_possible"), tables.ref(f"{name}_x")
    # (person, value) kept when the value is in the person's group of every release of the subset holding them
    sub_members = f"(SELECT * FROM {members} WHERE {in_subset})"
    tables.create(
        possible,
        (
            f"SELECT m.person, c.value FROM {sub_members} m JOIN {counts} c ON c.r = m.r AND c.grp = m.grp "
            f"JOIN (SELECT person, COUNT(*) AS held FROM {sub_members} h0 GROUP BY person) h ON h.person = m.person "
            "GROUP BY m.person, c.value, h.held HAVING COUNT(*) = h.held"
        ),
    )
    possible, propagated, rounds = _propagate(db, conn, tables, possible, sub_members, rs, name, progress)
    _check_solvable(db, conn, tables, possible, rs)
    # persons left with one value hold it: they leave the iteration, and their groups' counts shrink by them
    undecided = f"(SELECT person FROM {possible} GROUP BY person HAVING COUNT(*) > 1)"
    held = tables.ref(f"{name}_held")
    tables.create(
        held,
        f"SELECT m.r, m.grp, p.value, COUNT(*) AS n FROM {sub_members} m JOIN {possible} p "
        f"ON p.person = m.person WHERE m.person NOT IN {undecided} GROUP BY m.r, m.grp, p.value",
    )
    pivot = ", ".join(f"MAX(CASE WHEN r = {r} THEN grp END) AS b{r}" for r in rs)
    joins = " ".join(
        f"LEFT JOIN {counts} c{r} ON c{r}.r = {r} AND c{r}.grp = g.b{r} AND c{r}.value = v.value "
        f"LEFT JOIN {held} h{r} ON h{r}.r = {r} AND h{r}.grp = g.b{r} AND h{r}.value = v.value"
        for r in rs
    )
    tables.create(
        x,
        (
            f"SELECT v.person, v.value, {', '.join(f'g.b{r}' for r in rs)}, "
            f"{', '.join(f'CAST(c{r}.cnt - COALESCE(h{r}.n, 0) AS DOUBLE PRECISION) AS c{r}' for r in rs)}, "
            "CAST(1 AS DOUBLE PRECISION) / COUNT(*) OVER (PARTITION BY v.person) AS x "
            f"FROM {possible} v JOIN (SELECT person, {pivot} FROM {members} WHERE {in_subset} GROUP BY person) g "
            f"ON g.person = v.person {joins} WHERE v.person IN {undecided}"
        ),
    )
    figures = _iterate(db, conn, tables, x, rs, settings, name, progress)
    db.execute(
        conn,
        f"INSERT INTO {x} (person, value, p) SELECT person, value, 1 FROM {possible} WHERE person NOT IN {undecided}",
    )
    tables.drop(held)
    figures["snapped"] += propagated
    figures["propagation_rounds"] = rounds
    return x, figures


MAX_PROPAGATION_ROUNDS = 100_000
MATCHED_GROUP = 12  # groups of at most this many persons get the exact (matching) propagation
MATCHED_STATES = 100_000  # ... when their value counts allow at most this many partial assignments


def _propagate(
    db: Database,
    conn: Connection,
    tables: ReleaseTables,
    possible: str,
    members: str,
    rs: list[int],
    name: str,
    progress: Progress = silent,
) -> tuple[str, int, int]:
    """Remove the (person, value) pairs that no assignment of values to persons allows, until none is left.

    Each group of a release is a global cardinality constraint: its persons
    take its values, each value exactly `count` times. A pair is kept only if
    some complete assignment of the group uses it (for groups of at most
    MATCHED_GROUP persons: a forward and a backward pass over the group's
    partial assignments, as states counting the values used, in one
    recursive statement for every group); larger groups get the counting
    rules (a value already held by `count` fixed persons is no one else's; a
    value that just `count` persons may hold is theirs). Removing a pair in
    one release's group can remove more in another release, so rounds repeat
    until nothing changes. IPF then iterates over what is left: it would
    approach these zeros only like 1 / passes (and chains of them slower
    still), while on the pairs left it converges in a few passes. One
    statement per round; returns the table left, the pairs removed and the
    rounds."""
    groups = _MatchedGroups(tables, members, name)
    every_group = f"SELECT DISTINCT r, grp FROM {members} m"
    dirty, unmatched = tables.ref(f"{name}_dirty"), tables.ref(f"{name}_unmatched")
    tables.create(dirty, every_group)  # groups that may lose pairs by the counting rules
    tables.create(unmatched, every_group)  # groups changed since their last matching pass
    removed, rounds, level = 0, 0, 0  # level: 0 counting rules, 1 and matching, 2 and components
    while rounds < MAX_PROPAGATION_ROUNDS:
        rounds += 1
        gone = tables.ref(f"{name}_gone")
        # matching and components cost more: each only once the cheaper rules alone remove nothing more
        tables.create(gone, _propagation_round(tables, possible, members, dirty, groups if level else None, unmatched))
        if level == 2:
            _Components(tables=tables, possible=possible, members=members, rs=rs, name=name).add_removals(gone)
        count = db.execute(conn, f"SELECT COUNT(*) FROM (SELECT DISTINCT person, value FROM {gone}) g").scalar_one()
        tables.statements += 2
        if count:
            db.execute(
                conn,
                f"DELETE FROM {possible} USING {gone} g WHERE {possible}.person = g.person "
                f"AND {possible}.value = g.value",
            )
            changed = f"SELECT DISTINCT m.r, m.grp FROM {members} m WHERE m.person IN (SELECT person FROM {gone})"
            if level:
                db.execute(conn, f"DELETE FROM {unmatched}")
            db.execute(conn, f"DELETE FROM {dirty}")
            db.execute(conn, f"INSERT INTO {dirty} {changed}")
            db.execute(
                conn, f"INSERT INTO {unmatched} SELECT r, grp FROM {dirty} EXCEPT SELECT r, grp FROM {unmatched}"
            )
            tables.statements += 5
        tables.drop(gone)
        removed += count
        progress(f"propagation, {_label(name)}: rounds", rounds, None)
        level = 0 if count else level + 1
        if level > (2 if len(rs) > 1 else 1):
            break
    for ref in (dirty, unmatched):
        tables.drop(ref)
    groups.drop()
    _check_counts(db, conn, tables, possible, members, rs)
    return possible, removed, rounds


class _Components:
    """For each pair of releases and each value, the connected parts of its groups: two groups (one per
    release) are linked by a person in both who may hold the value. Within a part, the counts of the first
    release's groups minus the second's equal what the persons in the first release only hold of the value
    minus what the persons in the second only hold; when that difference is as large (or as small) as it
    can be, those persons hold the value, or do not (the paper's argument that Patient 14 cannot have Flu)."""

    def __init__(self, *, tables: ReleaseTables, possible: str, members: str, rs: list[int], name: str):
        self.tables, self.possible, self.members, self.rs, self.name = tables, possible, members, rs, name

    def add_removals(self, gone: str) -> None:
        for a, b in itertools.combinations(self.rs, 2):
            self._pair(a, b, gone)

    def _pair(self, a: int, b: int, gone: str) -> None:
        tables, db, conn = self.tables, self.tables.db, self.tables.conn
        possible, members = self.possible, self.members
        nodes, edges, labels = (tables.ref(f"{self.name}_{t}") for t in ("nodes", "edges", "labels"))
        tables.create(
            nodes,
            f"SELECT r, grp, value, cnt, ROW_NUMBER() OVER (ORDER BY r, grp, value) AS node "
            f"FROM {tables.counts} WHERE r IN ({a}, {b})",
        )
        # each possible pair with its group (graph node) in release a and in release b, when it is in them
        placed = (
            f"(SELECT q.person, q.value, na.node AS na, nb.node AS nb FROM {possible} q "
            f"LEFT JOIN {members} ma ON ma.person = q.person AND ma.r = {a} "
            f"LEFT JOIN {members} mb ON mb.person = q.person AND mb.r = {b} "
            f"LEFT JOIN {nodes} na ON na.r = {a} AND na.grp = ma.grp AND na.value = q.value "
            f"LEFT JOIN {nodes} nb ON nb.r = {b} AND nb.grp = mb.grp AND nb.value = q.value "
            "WHERE ma.grp IS NOT NULL OR mb.grp IS NOT NULL)"
        )
        tables.create(
            edges, f"SELECT DISTINCT na AS u, nb AS v FROM {placed} p WHERE na IS NOT NULL AND nb IS NOT NULL"
        )
        tables.create(labels, f"SELECT node, node AS label FROM {nodes} n0")
        while True:  # smallest label over each part: neighbours' labels, then the label's own label (a jump)
            following = tables.ref(f"{self.name}_labels_next")
            tables.create(
                following,
                (
                    "SELECT n.node, LEAST(MIN(n.label), MIN(COALESCE(j.label, n.label))) AS label FROM (SELECT l.node, "
                    f"LEAST(l.label, COALESCE(MIN(o.label), l.label)) AS label FROM {labels} l LEFT JOIN "
                    "(SELECT u AS x, "
                    f"v AS y FROM {edges} e1 UNION ALL SELECT v, u FROM {edges} e2) e ON e.x = l.node LEFT JOIN "
                    f"{labels} o ON o.node = e.y GROUP BY l.node, l.label) n LEFT JOIN {labels} j ON j.node = n.label "
                    "GROUP BY n.node"
                ),
            )
            moved = db.execute(
                conn, f"SELECT COUNT(*) FROM {labels} l JOIN {following} f ON f.node = l.node WHERE f.label <> l.label"
            ).scalar_one()
            tables.swap(following, labels)
            tables.statements += 1
            if not moved:
                break
        alone = (
            f"(SELECT p.person, p.value, COALESCE(p.na, p.nb) AS node, p.nb IS NULL AS first FROM {placed} p "
            "WHERE p.na IS NULL OR p.nb IS NULL)"
        )
        parts = (
            f"(SELECT l.label, SUM(CASE WHEN n.r = {a} THEN n.cnt ELSE -n.cnt END) AS d FROM {nodes} n "
            f"JOIN {labels} l ON l.node = n.node GROUP BY l.label)"
        )
        sides = (
            f"(SELECT l.label, SUM(CASE WHEN o.first THEN 1 ELSE 0 END) AS n1, SUM(CASE WHEN o.first THEN 0 "
            f"ELSE 1 END) AS n2 FROM {alone} o JOIN {labels} l ON l.node = o.node GROUP BY l.label)"
        )
        # d = n1: the lone persons of release a all hold the value, those of release b none; d = -n2: the mirror
        verdict = (
            f"(SELECT o.person, o.value, o.first = (pt.d = s.n1) AS holds FROM {alone} o JOIN {labels} l "
            f"ON l.node = o.node JOIN {parts} pt ON pt.label = l.label JOIN {sides} s ON s.label = l.label "
            "WHERE pt.d = s.n1 OR pt.d = -s.n2)"
        )
        db.execute(
            conn,
            f"INSERT INTO {gone} SELECT v.person, q.value FROM {verdict} v JOIN {possible} q "
            "ON q.person = v.person AND (q.value <> v.value) = v.holds",
        )
        for ref in (nodes, edges, labels):
            tables.drop(ref)
        tables.statements += 3


class _MatchedGroups:
    """The small groups, their persons in order (`steps`) and their values as digits of a mixed-radix state
    (`slots`: a value with count c takes a digit 0..c), so a partial assignment is one integer."""

    def __init__(self, tables: ReleaseTables, members: str, name: str):
        self.tables = tables
        self.sizes, self.steps, self.slots = (tables.ref(f"{name}_{t}") for t in ("groups", "steps", "slots"))
        counts = tables.counts
        tables.create(
            self.sizes,
            (
                f"SELECT g.r, g.grp, g.persons, g.full_state FROM (SELECT c.r, c.grp, SUM(c.cnt) AS persons, "
                "EXP(SUM(LN(c.cnt + 1))) AS states, CAST(ROUND(SUM(c.cnt * c.radix)) AS BIGINT) AS full_state FROM "
                f"(SELECT r, grp, cnt, COALESCE(EXP(SUM(LN(cnt + 1)) OVER (PARTITION BY r, grp ORDER BY value ROWS "
                f"BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)), 1) AS radix FROM {counts}) c GROUP BY c.r, c.grp) g "
                f"JOIN (SELECT DISTINCT r, grp FROM {members} ms) m ON m.r = g.r AND m.grp = g.grp "
                f"WHERE g.persons <= {MATCHED_GROUP} AND g.states <= {MATCHED_STATES}"
            ),
        )
        tables.create(
            self.slots,
            (
                "SELECT c.r, c.grp, c.value, c.cnt, CAST(ROUND(COALESCE(EXP(SUM(LN(c.cnt + 1)) OVER (PARTITION BY "
                "c.r, c.grp ORDER BY c.value ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)), 1)) AS BIGINT) "
                "AS radix "
                f"FROM {counts} c JOIN {self.sizes} g ON g.r = c.r AND g.grp = c.grp"
            ),
        )
        tables.create(
            self.steps,
            (
                "SELECT m.r, m.grp, m.person, ROW_NUMBER() OVER (PARTITION BY m.r, m.grp ORDER BY m.person) AS t "
                f"FROM {members} m JOIN {self.sizes} g ON g.r = m.r AND g.grp = m.grp"
            ),
        )

    def feasible(self, possible: str, dirty: str) -> str:
        """SELECT r, grp, person, value: the pairs some complete assignment of their (small, dirty) group uses."""
        steps, slots = self.steps, self.slots
        sizes = f"(SELECT g.* FROM {self.sizes} g JOIN {dirty} d ON d.r = g.r AND d.grp = g.grp)"
        free = "MOD(CAST(FLOOR({st} / CAST(s.radix AS DOUBLE PRECISION)) AS BIGINT), s.cnt + 1)"
        moves = (
            f"JOIN {steps} p ON p.r = {{a}}.r AND p.grp = {{a}}.grp AND p.t = {{t}} JOIN {possible} q "
            f"ON q.person = p.person JOIN {slots} s ON s.r = {{a}}.r AND s.grp = {{a}}.grp AND s.value = q.value"
        )
        return (
            "WITH RECURSIVE fwd(r, grp, t, st) AS ("
            f"SELECT r, grp, 0, CAST(0 AS BIGINT) FROM {sizes} g0 UNION SELECT f.r, f.grp, f.t + 1, f.st + s.radix "
            f"FROM fwd f {moves.format(a='f', t='f.t + 1')} WHERE {free.format(st='f.st')} < s.cnt), "
            "bwd(r, grp, t, st) AS ("
            f"SELECT r, grp, persons, full_state FROM {sizes} g1 UNION SELECT b.r, b.grp, b.t - 1, b.st - s.radix "
            f"FROM bwd b {moves.format(a='b', t='b.t')} WHERE b.t > 0 AND {free.format(st='b.st')} > 0) "
            f"SELECT DISTINCT f.r, f.grp, p.person, q.value FROM fwd f {moves.format(a='f', t='f.t + 1')} "
            f"JOIN bwd b ON b.r = f.r AND b.grp = f.grp AND b.t = f.t + 1 AND b.st = f.st + s.radix "
            f"WHERE {free.format(st='f.st')} < s.cnt"
        )

    def drop(self) -> None:
        for ref in (self.steps, self.slots, self.sizes):
            self.tables.drop(ref)


COUNTING_ROUNDS = 4  # rounds of the counting rules chained in one statement


def _propagation_round(
    tables: ReleaseTables, possible: str, members: str, dirty: str, groups: _MatchedGroups | None, unmatched: str
) -> str:
    """SELECT person, value: the pairs to remove this statement. Without `groups`, COUNTING_ROUNDS rounds of
    the counting rules, the first over the `dirty` groups and the next over every group (each round sees
    what the previous removed); with `groups`, one round of the counting rules and of matching over the
    small groups in `unmatched`."""
    touched = f"(SELECT m.* FROM {members} m JOIN {dirty} d ON d.r = m.r AND d.grp = m.grp)"
    steps = [f"p0 AS MATERIALIZED (SELECT person, value FROM {possible})"]
    rounds = 1 if groups is not None else COUNTING_ROUNDS
    for k in range(1, rounds + 1):
        steps += _counting_rules(tables, k, members, touched if k == 1 else members)
        steps.append(
            f"p{k} AS MATERIALIZED (SELECT person, value FROM p{k - 1} EXCEPT SELECT person, value FROM gone{k})"
        )
    removed = f"SELECT person, value FROM p0 EXCEPT SELECT person, value FROM p{rounds}"
    if groups is None:
        return f"WITH {', '.join(steps)} {removed}"
    # (c) in a small group, the pairs no complete assignment of the group uses
    lost = (
        f"SELECT q.person, q.value FROM {possible} q JOIN {groups.steps} p ON p.person = q.person "
        f"JOIN {unmatched} d ON d.r = p.r AND d.grp = p.grp "
        f"LEFT JOIN ({groups.feasible(possible, unmatched)}) ok ON ok.r = p.r AND ok.grp = p.grp "
        "AND ok.person = q.person AND ok.value = q.value WHERE ok.person IS NULL"
    )
    return f"WITH {', '.join(steps)} {removed} UNION {lost}"


def _counting_rules(tables: ReleaseTables, k: int, members: str, touched: str) -> list[str]:
    """CTEs of round `k` over p{k-1}, ending with gone{k}: the pairs the counting rules remove, looking at the
    groups in `touched`."""
    p = f"p{k - 1}"
    return [
        f"n{k} AS MATERIALIZED (SELECT person, COUNT(*) AS n FROM {p} GROUP BY person)",
        f"u{k} AS MATERIALIZED (SELECT t.r, t.grp, t.value, t.fixed, t.open, c.cnt FROM (SELECT m.r, m.grp, "
        "q.value, SUM(CASE WHEN s.n = 1 THEN 1 ELSE 0 END) AS fixed, SUM(CASE WHEN s.n > 1 THEN 1 ELSE 0 END) "
        f"AS open FROM {touched} m JOIN {p} q ON q.person = m.person JOIN n{k} s ON s.person = m.person "
        f"GROUP BY m.r, m.grp, q.value) t JOIN {tables.counts} c ON c.r = t.r AND c.grp = t.grp "
        "AND c.value = t.value WHERE t.fixed = c.cnt OR (t.open > 0 AND t.fixed + t.open = c.cnt))",
        # the group's open persons who may hold the value: (a) it is taken by persons fixed to it, so they
        # cannot; (b) they number just what is left of its count, so they must, and their other values go
        f"gone{k} AS MATERIALIZED (SELECT m.person, ru.value FROM u{k} ru JOIN {members} m ON m.r = ru.r "
        f"AND m.grp = ru.grp JOIN n{k} s ON s.person = m.person JOIN {p} q ON q.person = m.person "
        "AND q.value = ru.value WHERE ru.fixed = ru.cnt AND s.n > 1 "
        f"UNION SELECT m.person, o.value FROM u{k} ru JOIN {members} m ON m.r = ru.r AND m.grp = ru.grp "
        f"JOIN n{k} s ON s.person = m.person JOIN {p} q ON q.person = m.person AND q.value = ru.value "
        f"JOIN {p} o ON o.person = m.person AND o.value <> ru.value "
        "WHERE ru.fixed < ru.cnt AND ru.open > 0 AND ru.fixed + ru.open = ru.cnt AND s.n > 1)",
    ]


def _check_counts(
    db: Database, conn: Connection, tables: ReleaseTables, possible: str, members: str, rs: list[int]
) -> None:
    """A group value held by more fixed persons than its count, or possible for fewer persons than its count,
    has no solution: name it."""
    row = db.execute(
        conn,
        (
            f"SELECT c.r, c.grp, v.label, c.cnt, COUNT(p.person) AS could, SUM(CASE WHEN s.n = 1 THEN 1 ELSE 0 END) "
            f"FROM {tables.counts} c JOIN {tables.vals} v ON v.value = c.value JOIN {members} m ON m.r = c.r "
            f"AND m.grp = c.grp LEFT JOIN {possible} p ON p.person = m.person AND p.value = c.value LEFT JOIN "
            f"(SELECT person, COUNT(*) AS n FROM {possible} GROUP BY person) s ON s.person = p.person "
            f"WHERE c.r IN ({', '.join(map(str, rs))}) GROUP BY c.r, c.grp, v.label, c.cnt "
            "HAVING COUNT(p.person) < c.cnt OR SUM(CASE WHEN s.n = 1 THEN 1 ELSE 0 END) > c.cnt "
            "ORDER BY c.r, c.grp LIMIT 1"
        ),
    ).first()
    if row:
        release = tables.releases[row[0] - 1].name
        raise DataError(
            f"the releases are inconsistent: release {release!r}, bucket {row[1]} lists {row[3]} x "
            f"{row[2]!r}, but given the other releases {row[4]} of its persons may hold it and "
            f"{row[5] or 0} "
            "must; no solution exists"
        )


def _check_solvable(db: Database, conn: Connection, tables: ReleaseTables, possible: str, rs: list[int]) -> None:
    """Name the first person left without a possible value (a group value no person may hold is named by
    `_check_counts`, which propagation runs first)."""
    release = {r: tables.releases[r - 1].name for r in rs}
    in_subset = f"r IN ({', '.join(map(str, rs))})"
    row = db.execute(
        conn,
        (
            f"SELECT p.pseudonym FROM (SELECT DISTINCT person FROM {tables.members} WHERE {in_subset}) m "
            f"JOIN {tables.persons} p ON p.person = m.person WHERE m.person NOT IN (SELECT person FROM {possible}) "
            "ORDER BY p.pseudonym LIMIT 1"
        ),
    ).first()
    if row:
        raise DataError(
            f"the releases are inconsistent: person {row[0]!r} has no sensitive value that every "
            f"release holding them allows ({', '.join(release.values())}); no solution exists"
        )
    tables.statements += 1


class _Solver:
    """IPF passes over a variables table, replaced by a new table after each statement of passes."""

    def __init__(self, *, db: Database, conn: Connection, tables: ReleaseTables, x: str, rs: list[int], name: str):
        self.db, self.conn, self.tables, self.rs = db, conn, tables, rs
        self.columns = ["person", "value"] + [f"b{r}" for r in rs] + [f"c{r}" for r in rs]
        self.name, self.current, self.passes, self.statements = name, x, 0, 0
        self.snapped = self.tables_made = 0

    def run(self, passes: int) -> float:
        """Run `passes` passes in one statement; returns the largest constraint violation after them."""
        query = _passes(self.current, passes, self.columns, self.rs)
        self.passes += passes
        self._replace(query)
        self.statements += 1  # the violation query (the tables count what they create)
        return _violation(self.db, self.conn, self.current, self.rs)

    def _replace(self, query: str) -> None:
        following = self._new_name()
        self.tables.create(following, query)
        self.drop(self.current)
        self.current = following

    def copy(self) -> str:
        saved = self._new_name()
        self.tables.create(saved, f"SELECT * FROM {self.current}")
        return saved

    def _new_name(self) -> str:
        self.tables_made += 1
        return self.tables.ref(f"{self.name}_x{self.tables_made}")

    def drop(self, ref: str) -> None:
        self.tables.drop(ref)

    def restore(self, saved: str) -> None:
        self._replace(f"SELECT * FROM {saved}")

    def snap(self, earlier: str) -> int:
        """Remove the variables that halved since `earlier` (twice fewer passes ago) and are small: the way a
        probability the constraints force to 0 approaches it (like 1 / passes), while the others settle."""
        columns = ", ".join(f"x.{c}" for c in self.columns)
        before = self.db.count_rows(self.conn, self.current)
        self._replace(
            f"SELECT {columns}, x.x FROM {self.current} x JOIN {earlier} e ON e.person = x.person AND "
            f"e.value = x.value WHERE NOT (x.x < {SNAP_BELOW} AND x.x < {SNAP_RATIO} * e.x)"
        )
        after = self.db.count_rows(self.conn, self.current)
        self.statements += 2
        return int(before - after)


SNAP_FROM = 32  # passes before the first look for probabilities forced to 0
SNAP_BELOW, SNAP_RATIO = 0.05, 0.6  # removed when below this and below this share of its value at half the passes


def _iterate(
    db: Database,
    conn: Connection,
    tables: ReleaseTables,
    x: str,
    rs: list[int],
    settings: InferenceSettings,
    name: str,
    progress: Progress = silent,
) -> dict[str, Any]:
    """IPF passes until the largest relation-constraint violation is within the tolerance.

    Plain IPF approaches a probability forced to 0 (or 1) only like
    1 / passes. At every doubling of the passes, the variables that halved
    meanwhile and are small are taken as forced to 0 and removed, after which
    convergence is faster again; if the violation at twice the passes is
    worse than before the removal, it is undone and no more removals are
    tried. A violation that no longer falls between two doublings means the
    constraints have no solution; one still falling when max_iterations is
    reached is reported as not converged.
    """
    started = time.perf_counter()
    solver = _Solver(db=db, conn=conn, tables=tables, x=x, rs=rs, name=name)
    violation, checkpoint, trial, snapping, stalled = float("inf"), None, None, True, False
    at_doubling: dict[int, float] = {}
    while solver.passes < settings.max_iterations and violation > settings.tolerance:
        violation = solver.run(min(PASSES_PER_STATEMENT, settings.max_iterations - solver.passes))
        progress(f"iterating, {_label(name)}: passes", solver.passes, settings.max_iterations)
        if trial is not None and solver.passes >= trial[1]:  # judge the last removal
            saved, _, before = trial
            if violation > before:
                solver.restore(saved)
                violation, snapping = before, False
            solver.drop(saved)
            trial = None
        if solver.passes < SNAP_FROM or solver.passes & (solver.passes - 1) or violation <= settings.tolerance:
            continue  # look again at the next power of two
        at_doubling[solver.passes] = violation
        earlier = at_doubling.get(solver.passes // 2)
        if trial is None and earlier is not None and violation >= STALLED * earlier and violation > 0.01:
            stalled = True
            break
        if checkpoint is not None and snapping and trial is None:
            saved = solver.copy()
            removed = solver.snap(checkpoint)
            if removed:
                solver.snapped += removed
                trial = (saved, solver.passes * 2, violation)
            else:
                solver.drop(saved)
        if checkpoint is not None:
            solver.drop(checkpoint)
        checkpoint = solver.copy()
    for leftover in [checkpoint] + ([trial[0]] if trial else []):
        if leftover:
            solver.drop(leftover)
    tables.create(x, f"SELECT person, value, x AS p FROM {solver.current}")
    solver.drop(solver.current)
    if stalled:
        worst = _worst_constraint(db, conn, tables, x, rs)
        raise DataError(
            f"the releases admit no solution: after {solver.passes} passes {worst} is still off by "
            f"{violation:.3g} and no longer improves; check that the releases describe the same persons "
            "and values"
        )
    return {
        "iterations": solver.passes,
        "max_violation": violation,
        "converged": violation <= settings.tolerance,
        "seconds": time.perf_counter() - started,
        "statements": solver.statements,
        "snapped": solver.snapped,
    }


STALLED = 0.95  # a violation at least this share of the one at half the passes has stopped falling


def _passes(table: str, passes: int, columns: list[str], rs: list[int]) -> str:
    """`passes` IPF passes over `table`, as one statement: in each, every release's (group, value) sums are
    scaled to their counts, then every person's probabilities to one. Each step is a GROUP BY joined back
    (materialized common table expressions: on DuckDB about twice as fast as window functions); a person
    outside a release (b NULL) is left alone by its scaling."""
    keep = ", ".join(f"t.{c}" for c in columns)
    steps, k = [f"s0 AS MATERIALIZED (SELECT {', '.join(columns)}, x FROM {table})"], 0
    for _ in range(passes):
        for r in rs:
            k += 1
            steps += [
                f"g{k} AS MATERIALIZED (SELECT b{r} AS b, value, SUM(x) AS total FROM s{k - 1} "
                f"WHERE b{r} IS NOT NULL GROUP BY b{r}, value)",
                f"s{k} AS MATERIALIZED (SELECT {keep}, CASE WHEN t.b{r} IS NULL THEN t.x ELSE t.x * t.c{r} / "
                f"g.total END AS x FROM s{k - 1} t LEFT JOIN g{k} g ON g.b = t.b{r} AND g.value = t.value)",
            ]
        k += 1
        steps += [
            f"g{k} AS MATERIALIZED (SELECT person, SUM(x) AS total FROM s{k - 1} GROUP BY person)",
            f"s{k} AS MATERIALIZED (SELECT {keep}, t.x / g.total AS x FROM s{k - 1} t JOIN g{k} g "
            "ON g.person = t.person)",
        ]
    return f"WITH {', '.join(steps)} SELECT * FROM s{k}"


def _violation(db: Database, conn: Connection, x: str, rs: list[int]) -> float:
    """The largest |sum over a group's persons of P(s | i) - count of s in the group| (persons sum to one)."""
    parts = [f"SELECT ABS(SUM(x) - MAX(c{r})) AS off FROM {x} WHERE b{r} IS NOT NULL GROUP BY b{r}, value" for r in rs]
    return float(db.execute(conn, f"SELECT COALESCE(MAX(off), 0) FROM ({' UNION ALL '.join(parts)}) AS v").scalar_one())


def _worst_constraint(db: Database, conn: Connection, tables: ReleaseTables, p: str, rs: list[int]) -> str:
    parts = [
        f"SELECT {r} AS r, m.grp, p.value, ABS(SUM(p.p) - MAX(c.cnt)) AS off FROM {p} p JOIN {tables.members} m "
        f"ON m.person = p.person AND m.r = {r} JOIN {tables.counts} c ON c.r = {r} AND c.grp = m.grp "
        "AND c.value = p.value GROUP BY m.grp, p.value"
        for r in rs
    ]
    row = db.execute(
        conn,
        f"SELECT w.r, w.grp, v.label FROM ({' UNION ALL '.join(parts)}) w JOIN {tables.vals} v "
        "ON v.value = w.value ORDER BY w.off DESC LIMIT 1",
    ).first()
    return f"release {tables.releases[row[0] - 1].name!r}, bucket {row[1]}, value {row[2]!r}"


def release_pairs(count: int) -> list[list[int]]:
    """Every pair of releases (1-based), to tell which two together cause a disclosure."""
    return [list(pair) for pair in itertools.combinations(range(1, count + 1), 2)]


def analyze_releases(
    db: Database,
    conn: Connection,
    series: ReleaseSeries,
    sensitive: str,
    hierarchies: dict[str, Hierarchy],
    qi_columns: list[str],
    settings: InferenceSettings,
    prefix: str,
    output: str | None = None,
    progress: Progress = silent,
) -> InferenceReport:
    """Solve every release together (and, with more than two, each pair, to name the pair behind each
    disclosure), write P(s | person) to `output` (a table reference) when given, and report."""
    started = time.perf_counter()
    # in the caller's transaction: on an error its rollback takes the scratch tables with it
    tables = ReleaseTables(
        db=db,
        conn=conn,
        series=series,
        sensitive=sensitive,
        hierarchies=hierarchies,
        qi_columns=qi_columns,
        prefix=prefix,
    )
    x, figures = solve(db, conn, tables, settings, progress=progress)
    count = len(tables.releases)
    pairs = release_pairs(count) if count > 2 else []
    pair_tables = [solve(db, conn, tables, settings, pair, f"pair{j}", progress)[0] for j, pair in enumerate(pairs)]
    result = tables.ref("result")
    tables.create(result, *_result_sql(tables, x, settings, pairs, pair_tables))
    report = _report(db, conn, tables, result, x, figures, settings)
    report.seconds = time.perf_counter() - started
    report.statements += tables.statements
    if output is not None:
        db.execute(
            conn,
            f"CREATE TABLE {output} AS SELECT pseudonym AS {db.q(series.pseudonym)}, label AS "
            f"{db.q(sensitive)}, probability, alone, positive, negative, cause FROM {result}",
        )
        report.table = output
    tables.drop_all()
    return report


def _result_sql(
    tables: ReleaseTables, x: str, settings: InferenceSettings, pairs: list[list[int]], pair_tables: list[str]
) -> tuple[str, dict[str, Any]]:
    """Every (person, value) some release allows: the probability from all releases, the highest from any one
    release alone (count / group size), the disclosure flags and the releases that cause them."""
    names = [r.name for r in tables.releases]
    # flags need the threshold passed by more than the tolerance the probabilities are solved to
    params: dict[str, Any] = {
        "high": settings.max_probability + settings.tolerance,
        "low": settings.min_probability - settings.tolerance,
        "alone_cause": "one release alone",
        "together": f"{names[0]} + {names[1]}" if len(names) == 2 else "all releases",
    }
    flagged = "(COALESCE({p}, 0) > :high OR (COALESCE({p}, 0) < :low AND a.alone >= :low))"
    causes = ["WHEN a.alone > :high THEN :alone_cause"]
    for j, (a, b) in enumerate(pairs):
        params[f"pair{j}"] = f"{names[a - 1]} + {names[b - 1]}"
        causes.append(f"WHEN {flagged.format(p=f'y{j}.p')} THEN :pair{j}")
    pair_joins = " ".join(
        f"LEFT JOIN {t} y{j} ON y{j}.person = a.person AND y{j}.value = a.value" for j, t in enumerate(pair_tables)
    )
    sizes = f"(SELECT r, grp, SUM(cnt) AS size FROM {tables.counts} GROUP BY r, grp)"
    alone = (
        f"(SELECT m.person, c.value, MAX(CAST(c.cnt AS DOUBLE PRECISION) / s.size) AS alone "
        f"FROM {tables.members} m JOIN {tables.counts} c ON c.r = m.r AND c.grp = m.grp "
        f"JOIN {sizes} s ON s.r = m.r AND s.grp = m.grp GROUP BY m.person, c.value)"
    )
    p = "COALESCE(x.p, 0)"
    return (
        f"SELECT pe.pseudonym, v.label, {p} AS probability, a.alone, {p} > :high AS positive, "
        f"({p} < :low AND a.alone >= :low) AS negative, "
        f"CASE WHEN NOT {flagged.format(p='x.p')} THEN NULL {' '.join(causes)} ELSE :together END AS cause "
        f"FROM {alone} a JOIN {tables.persons} pe ON pe.person = a.person JOIN {tables.vals} v "
        f"ON v.value = a.value LEFT JOIN {x} x ON x.person = a.person AND x.value = a.value {pair_joins}"
    ), params


def _report(
    db: Database,
    conn: Connection,
    tables: ReleaseTables,
    result: str,
    x: str,
    figures: dict[str, Any],
    settings: InferenceSettings,
) -> InferenceReport:
    """The figures of a solve: sizes, constraints, entropies per release, the first disclosures of each kind."""
    persons, values, unions = db.execute(
        conn, f"SELECT COUNT(DISTINCT pseudonym), COUNT(DISTINCT label), COUNT(*) FROM {result}"
    ).one()
    variables = db.count_rows(conn, x) + figures["snapped"]
    relations = db.count_rows(conn, tables.counts)
    entropy = []
    for r, release in enumerate(tables.releases, start=1):
        held, alone = db.execute(
            conn,
            (
                "SELECT SUM(size), SUM(h) FROM (SELECT SUM(cnt) AS size, "
                "SUM(-cnt * LN(CAST(cnt AS DOUBLE PRECISION) / total)) AS h FROM (SELECT grp, cnt, "
                f"SUM(cnt) OVER (PARTITION BY grp) AS total FROM {tables.counts} WHERE r = {r}) c GROUP BY grp) g"
            ),
        ).one()
        together = db.execute(
            conn,
            (
                f"SELECT COALESCE(SUM(-p * LN(p)), 0) FROM {x} WHERE p > 0 AND person IN "
                f"(SELECT person FROM {tables.members} WHERE r = {r})"
            ),
        ).scalar_one()
        entropy.append(
            ReleaseEntropy(name=release.name, persons=int(held or 0), alone=float(alone or 0), together=float(together))
        )
    total = db.execute(conn, f"SELECT COALESCE(SUM(-p * LN(p)), 0) FROM {x} WHERE p > 0").scalar_one()
    report = InferenceReport(
        persons=int(persons),
        values=int(values),
        variables=int(variables),
        zero_constraints=int(unions) - int(variables),
        one_constraints=int(persons),
        relation_constraints=int(relations),
        iterations=figures["iterations"],
        max_violation=figures["max_violation"],
        converged=figures["converged"],
        seconds=0.0,
        statements=figures["statements"] + 4 + 2 * len(tables.releases),
        entropy=entropy,
        total_together=float(total),
        forced_zero=figures["snapped"],
    )
    for kind in ("positive", "negative"):
        order = "probability DESC" if kind == "positive" else "alone DESC, probability"
        rows = db.execute(
            conn,
            f"SELECT pseudonym, label, probability, alone, cause FROM {result} WHERE {kind} "
            f"ORDER BY {order}, pseudonym, label LIMIT {LISTED}",
        ).all()
        listed = [
            {"pseudonym": p, "value": v, "probability": float(pr), "alone": float(a), "releases": c}
            for p, v, pr, a, c in rows
        ]
        count = db.execute(conn, f"SELECT COUNT(*) FROM {result} WHERE {kind}").scalar_one()
        setattr(report, kind, listed)
        setattr(report, f"{kind}_count", int(count))
    return report


def check_release_tables(db: Database, conn: Connection, job: Job, target: TableName | None) -> None:
    """A release is a table sqlanon published: not the job's source; and inference.table is a table of its own,
    none of the releases' (names compared as the database resolves them)."""
    assert job.releases is not None
    source = TableName(db.resolved_schema(conn, job.source.schema), job.source.table)
    for release in job.releases.releases:
        for table in filter(None, (release.table, release.sensitive_table)):
            name = TableName(db.resolved_schema(conn, release.schema), table)
            if name.same_as(source, db):
                raise ConfigError(
                    f"release {release.name!r}: table {str(name)!r} is the job's source table; a "
                    "release is a table sqlanon published (generalized, or a bucketized pair): name the "
                    "published tables under releases.series"
                )
            if target is not None and name.same_as(target, db):
                raise ConfigError(
                    f"inference.table {str(target)!r} is a table of release {release.name!r}; write "
                    "the probabilities to a table of their own"
                )


def check_inference_job(job: Job) -> None:
    """What inference needs of a job, before any database is opened: releases, and one sensitive column."""
    if job.releases is None:
        raise ConfigError(
            "the config has no releases; add releases: {pseudonym: COLUMN, series: [{name: N, table: "
            "T, sensitive_table: S}, ...]}"
        )
    if len(job.sensitive) != 1:
        raise ConfigError(
            f"inference follows one sensitive column; the job lists {len(job.sensitive)} "
            f"({', '.join(job.sensitive) or 'none'}): list exactly one under sensitive"
        )


@dataclass(kw_only=True)
class InferenceTarget:
    """Where P(s | person) goes (`inference.table`), checked with the releases' tables before any work (a run's
    target, see sqlanon.session.Checked); its name stays None when the job names no table."""

    job: Job
    replace: bool
    setting: str = "inference.table"
    name: TableName | None = None

    def check(self, db: Database, conn: Connection, ownership: Ownership, source: TableName | None) -> TableName | None:
        settings = self.job.inference
        if settings.table is not None:
            self.name = ownership.resolve(conn, settings.schema or self.job.source.schema, settings.table, self.setting)
        check_release_tables(db, conn, self.job, self.name)
        if self.name is not None:
            ownership.check_target(conn, self.name, self.replace, self.setting)
        return self.name


def infer(
    db: Database,
    conn: Connection,
    *,
    job: Job,
    hierarchies: dict[str, Hierarchy],
    target: TableName | None,
    ownership: Ownership,
    replace: bool,
    run_id: int,
    progress: Progress = silent,
) -> InferenceReport:
    """Solve the job's inference in the caller's transaction; with a `target`, write P(s | person) there (replacing
    only sqlanon's own earlier table) and record it as sqlanon's."""
    assert job.releases is not None
    output = None
    if target is not None:
        if ownership.check_target(conn, target, replace, "inference.table"):
            db.drop_table(conn, db.q(target.schema, target.table))
        output = db.q(target.schema, target.table)
    report = analyze_releases(
        db,
        conn,
        job.releases,
        job.sensitive[0],
        hierarchies,
        list(hierarchies),
        job.inference,
        f"inference_{run_id}",
        output,
        progress,
    )
    if target is not None:
        report.table = str(target)
        ownership.record(conn, target, "output", report.persons, run_id)
    return report
