"""Propagation: the (person, value) pairs no assignment of values to persons allows, removed round by round."""

from __future__ import annotations

import itertools

from sqlalchemy.engine import Connection

from ...backends import Database
from ...errors import DataError
from ...model.progress import Progress, silent
from .parts import connected_parts
from .releases import ReleaseTables, progress_label

MAX_PROPAGATION_ROUNDS = 100_000
MATCHED_GROUP = 12  # groups of at most this many persons get the exact (matching) propagation
MATCHED_STATES = 100_000  # ... when their value counts allow at most this many partial assignments


def propagate(
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
            changed = _groups_of(members, f"SELECT person FROM {gone}")
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
        progress(f"propagation, {progress_label(name)}: rounds", rounds, None)
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
        nodes, edges = tables.ref(f"{self.name}_nodes"), tables.ref(f"{self.name}_edges")
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
        every_node = f"SELECT u, v FROM {edges} e UNION ALL SELECT node, node FROM {nodes} n"
        parts = connected_parts(tables, every_node, self.name)
        alone = (
            f"(SELECT p.person, p.value, COALESCE(p.na, p.nb) AS node, p.nb IS NULL AS first FROM {placed} p "
            "WHERE p.na IS NULL OR p.nb IS NULL)"
        )
        balance = (
            f"(SELECT l.part, SUM(CASE WHEN n.r = {a} THEN n.cnt ELSE -n.cnt END) AS d FROM {nodes} n "
            f"JOIN {parts} l ON l.node = n.node GROUP BY l.part)"
        )
        sides = (
            f"(SELECT l.part, SUM(CASE WHEN o.first THEN 1 ELSE 0 END) AS n1, SUM(CASE WHEN o.first THEN 0 "
            f"ELSE 1 END) AS n2 FROM {alone} o JOIN {parts} l ON l.node = o.node GROUP BY l.part)"
        )
        # d = n1: the lone persons of release a all hold the value, those of release b none; d = -n2: the mirror
        verdict = (
            f"(SELECT o.person, o.value, o.first = (pt.d = s.n1) AS holds FROM {alone} o JOIN {parts} l "
            f"ON l.node = o.node JOIN {balance} pt ON pt.part = l.part JOIN {sides} s ON s.part = l.part "
            "WHERE pt.d = s.n1 OR pt.d = -s.n2)"
        )
        db.execute(
            conn,
            f"INSERT INTO {gone} SELECT v.person, q.value FROM {verdict} v JOIN {possible} q "
            "ON q.person = v.person AND (q.value <> v.value) = v.holds",
        )
        for ref in (nodes, edges, parts):
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
    the counting rules, the first over the `dirty` groups and each next one over the groups of the persons the
    previous round removed pairs of (no other group's rules can remove more); with `groups`, one round of the
    counting rules and of matching over the small groups in `unmatched`. A round reads only its groups' persons
    and what the statement removed so far, not the whole table of pairs: on two million-record releases,
    most rounds touch a few thousand of 2.8 million pairs."""
    steps = [f"t1 AS MATERIALIZED (SELECT m.* FROM {members} m JOIN {dirty} d ON d.r = m.r AND d.grp = m.grp)"]
    rounds = 1 if groups is not None else COUNTING_ROUNDS
    for k in range(1, rounds + 1):
        if k > 1:
            steps.append(
                f"t{k} AS MATERIALIZED (SELECT m.* FROM {members} m JOIN "
                f"({_groups_of(members, f'SELECT person FROM gone{k - 1}')}) d ON d.r = m.r AND d.grp = m.grp)"
            )
        # the pairs of the round's persons still possible: every earlier round's removals taken out
        earlier = " UNION ALL ".join(f"SELECT person, value FROM gone{j}" for j in range(1, k))
        steps.append(
            f"p{k} AS MATERIALIZED (SELECT q.person, q.value FROM {possible} q "
            f"WHERE q.person IN (SELECT person FROM t{k})"
            + (f" EXCEPT SELECT person, value FROM ({earlier}) e{k})" if earlier else ")")
        )
        steps += _counting_rules(tables, k, f"t{k}")
    removed = " UNION ".join(f"SELECT person, value FROM gone{k}" for k in range(1, rounds + 1))
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


def _groups_of(members: str, persons: str) -> str:
    """SELECT r, grp: the groups, in every release, of the persons `persons` SELECTs."""
    return f"SELECT DISTINCT m.r, m.grp FROM {members} m WHERE m.person IN ({persons})"


def _counting_rules(tables: ReleaseTables, k: int, touched: str) -> list[str]:
    """CTEs of round `k`, ending with gone{k}: the pairs the counting rules remove, looking at the members of
    the groups in `touched`, whose persons' possible pairs are p{k}."""
    p = f"p{k}"
    return [
        f"n{k} AS MATERIALIZED (SELECT person, COUNT(*) AS n FROM {p} GROUP BY person)",
        f"u{k} AS MATERIALIZED (SELECT t.r, t.grp, t.value, t.fixed, t.open, c.cnt FROM (SELECT m.r, m.grp, "
        "q.value, SUM(CASE WHEN s.n = 1 THEN 1 ELSE 0 END) AS fixed, SUM(CASE WHEN s.n > 1 THEN 1 ELSE 0 END) "
        f"AS open FROM {touched} m JOIN {p} q ON q.person = m.person JOIN n{k} s ON s.person = m.person "
        f"GROUP BY m.r, m.grp, q.value) t JOIN {tables.counts} c ON c.r = t.r AND c.grp = t.grp "
        "AND c.value = t.value WHERE t.fixed = c.cnt OR (t.open > 0 AND t.fixed + t.open = c.cnt))",
        # the group's open persons who may hold the value: (a) it is taken by persons fixed to it, so they
        # cannot; (b) they number just what is left of its count, so they must, and their other values go
        f"gone{k} AS MATERIALIZED (SELECT m.person, ru.value FROM u{k} ru JOIN {touched} m ON m.r = ru.r "
        f"AND m.grp = ru.grp JOIN n{k} s ON s.person = m.person JOIN {p} q ON q.person = m.person "
        "AND q.value = ru.value WHERE ru.fixed = ru.cnt AND s.n > 1 "
        f"UNION SELECT m.person, o.value FROM u{k} ru JOIN {touched} m ON m.r = ru.r AND m.grp = ru.grp "
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
