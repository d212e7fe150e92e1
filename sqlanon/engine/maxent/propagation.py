"""Propagation: the (person, value) pairs no assignment of values to persons allows, removed round by round."""

from __future__ import annotations

import itertools
from functools import partial
from typing import Any

import sqlalchemy as sa
from sqlalchemy import and_, case, func, or_, select
from sqlalchemy.engine import Connection
from sqlalchemy.sql import FromClause

from ...backends import Database
from ...errors import DataError
from ...model.progress import Progress, silent
from ..scratch import MATERIALIZED
from .parts import connected_parts
from .releases import ReleaseTables, progress_label

MAX_PROPAGATION_ROUNDS = 100_000
MATCHED_GROUP = 12  # groups of at most this many persons get the exact (matching) propagation
MATCHED_STATES = 100_000  # ... when their value counts allow at most this many partial assignments
# ... but not groups of at most this many persons with distinct values (Anatomy's buckets for l <= 3): there the
# counting rules alone leave only pairs some assignment uses. Once they remove nothing more, a value has either
# one fixed holder and no other, or at least two open ones, and an open person at least two values not held by a
# fixed one; on m <= 3 open persons and their m values, every such pair lies on a perfect matching (m = 2: the
# complete 2 x 2 graph; m = 3: the other two persons each keep one of the other two values, and both values are
# kept by one of them, so they match). Matching them cost 7 s of two million-record releases' inference, for
# no pair.
COUNTED_GROUP = 3


def propagate(
    db: Database,
    conn: Connection,
    tables: ReleaseTables,
    possible: sa.TableClause,
    members: sa.Subquery,
    rs: list[int],
    name: str,
    progress: Progress = silent,
) -> tuple[sa.TableClause, int, int]:
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
    m = members.alias("m")
    every_group = select(m.c.r, m.c.grp).distinct()
    dirty = tables.make(f"{name}_dirty", every_group)  # groups that may lose pairs by the counting rules
    unmatched = tables.make(f"{name}_unmatched", every_group)  # groups changed since their last matching pass
    removed, rounds, level = 0, 0, 0  # level: 0 counting rules, 1 matching, 2 components
    while rounds < MAX_PROPAGATION_ROUNDS:
        rounds += 1
        # matching and components cost more: each only once the rules before it remove nothing more (and
        # then only it runs: the cheaper rules, over the same pairs, would find nothing again)
        query, text = tables.once(
            (name, "round", level),
            partial(_propagation_round, tables, possible, members, dirty, groups, unmatched, level),
        )
        gone = tables.make(f"{name}_gone", query, text)
        if level == 2:
            _Components(tables=tables, possible=possible, members=members, rs=rs, name=name).add_removals(gone)
        count = tables.scalar(select(func.count()).select_from(select(gone).distinct().subquery("g")))
        tables.statements += 2
        if count:
            db.execute(
                conn, sa.delete(possible).where(possible.c.person == gone.c.person, possible.c.value == gone.c.value)
            )
            if level:
                db.execute(conn, sa.delete(unmatched))
            db.execute(conn, sa.delete(dirty))
            db.execute(conn, sa.insert(dirty).from_select(["r", "grp"], _groups_of(members, select(gone.c.person))))
            db.execute(
                conn,
                sa.insert(unmatched).from_select(
                    ["r", "grp"], sa.except_(select(dirty.c.r, dirty.c.grp), select(unmatched.c.r, unmatched.c.grp))
                ),
            )
            tables.statements += 5
        tables.drop(gone)
        removed += count
        progress(f"propagation, {progress_label(name)}: rounds", rounds, None)
        level = 0 if count else level + 1
        if level > (2 if len(rs) > 1 else 1):
            break
    for table in (dirty, unmatched):
        tables.drop(table)
    groups.drop()
    _check_counts(tables, possible, members, rs)
    return possible, removed, rounds


class _Components:
    """For each pair of releases and each value, the connected parts of its groups: two groups (one per
    release) are linked by a person in both who may hold the value. Within a part, the counts of the first
    release's groups minus the second's equal what the persons in the first release only hold of the value
    minus what the persons in the second only hold; when that difference is as large (or as small) as it
    can be, those persons hold the value, or do not (the paper's argument that Patient 14 cannot have Flu)."""

    def __init__(
        self, *, tables: ReleaseTables, possible: sa.TableClause, members: sa.Subquery, rs: list[int], name: str
    ):
        self.tables, self.possible, self.members, self.rs, self.name = tables, possible, members, rs, name

    def add_removals(self, gone: sa.TableClause) -> None:
        for a, b in itertools.combinations(self.rs, 2):
            self._pair(a, b, gone)

    def _pair(self, a: int, b: int, gone: sa.TableClause) -> None:
        tables, counts = self.tables, self.tables.counts
        node_order = [counts.c.r, counts.c.grp, counts.c.value]
        nodes = tables.make(
            f"{self.name}_nodes",
            select(counts, func.row_number().over(order_by=node_order).label("node")).where(counts.c.r.in_([a, b])),
        )
        placed = self._placed(nodes, a, b)
        p = placed.alias("p")
        edges = tables.make(
            f"{self.name}_edges",
            select(p.c.na.label("u"), p.c.nb.label("v")).distinct().where(p.c.na.is_not(None), p.c.nb.is_not(None)),
        )
        every_node = sa.union_all(
            select(edges.c.u, edges.c.v), select(nodes.c.node.label("u"), nodes.c.node.label("v"))
        )
        parts = connected_parts(tables, every_node, self.name)
        p = placed.alias("p_alone")
        alone = select(
            p.c.person, p.c.value, func.coalesce(p.c.na, p.c.nb).label("node"), p.c.nb.is_(None).label("first")
        ).where(or_(p.c.na.is_(None), p.c.nb.is_(None)))
        n, ln = nodes.alias("n"), parts.alias("ln")
        balance = (
            select(ln.c.part, func.sum(case((n.c.r == a, n.c.cnt), else_=-n.c.cnt)).label("d"))
            .join_from(n, ln, ln.c.node == n.c.node)
            .group_by(ln.c.part)
            .subquery("pt")
        )
        o, lo = alone.subquery("o_sides"), parts.alias("lo")
        sides = (
            select(
                lo.c.part,
                func.sum(case((o.c.first, 1), else_=0)).label("n1"),
                func.sum(case((o.c.first, 0), else_=1)).label("n2"),
            )
            .join_from(o, lo, lo.c.node == o.c.node)
            .group_by(lo.c.part)
            .subquery("s")
        )
        # d = n1: the lone persons of release a all hold the value, those of release b none; d = -n2: the mirror
        o, lv = alone.subquery("o"), parts.alias("l")
        verdict = (
            select(o.c.person, o.c.value, (o.c.first == (balance.c.d == sides.c.n1)).label("holds"))
            .select_from(
                o.join(lv, lv.c.node == o.c.node)
                .join(balance, balance.c.part == lv.c.part)
                .join(sides, sides.c.part == lv.c.part)
            )
            .where(or_(balance.c.d == sides.c.n1, balance.c.d == -sides.c.n2))
            .subquery("v")
        )
        q = self.possible.alias("q")
        held = select(verdict.c.person, q.c.value).join_from(
            verdict, q, and_(q.c.person == verdict.c.person, (q.c.value != verdict.c.value) == verdict.c.holds)
        )
        tables.db.execute(tables.conn, sa.insert(gone).from_select(["person", "value"], held))
        for table in (nodes, edges, parts):
            tables.drop(table)
        tables.statements += 3

    def _placed(self, nodes: sa.TableClause, a: int, b: int) -> sa.Subquery:
        """Each possible pair with its group (graph node) in release a and in release b, when it is in them."""
        q, ma, mb = self.possible.alias("q"), self.members.alias("ma"), self.members.alias("mb")
        na, nb = nodes.alias("na"), nodes.alias("nb")
        return (
            select(q.c.person, q.c.value, na.c.node.label("na"), nb.c.node.label("nb"))
            .select_from(
                q.outerjoin(ma, and_(ma.c.person == q.c.person, ma.c.r == a))
                .outerjoin(mb, and_(mb.c.person == q.c.person, mb.c.r == b))
                .outerjoin(na, and_(na.c.r == a, na.c.grp == ma.c.grp, na.c.value == q.c.value))
                .outerjoin(nb, and_(nb.c.r == b, nb.c.grp == mb.c.grp, nb.c.value == q.c.value))
            )
            .where(or_(ma.c.grp.is_not(None), mb.c.grp.is_not(None)))
            .subquery("placed")
        )


class _MatchedGroups:
    """The small groups, their persons in order (`steps`) and their values as digits of a mixed-radix state
    (`slots`: a value with count c takes a digit 0..c), so a partial assignment is one integer."""

    def __init__(self, tables: ReleaseTables, members: sa.Subquery, name: str):
        self.tables = tables
        counts = tables.counts
        c = select(counts.c.r, counts.c.grp, counts.c.cnt, _radix(counts).label("radix")).subquery("c")
        g = (
            select(
                c.c.r,
                c.c.grp,
                func.sum(c.c.cnt).label("persons"),
                func.exp(func.sum(func.ln(c.c.cnt + 1))).label("states"),
                func.max(c.c.cnt).label("largest"),
                sa.cast(func.round(func.sum(c.c.cnt * c.c.radix)), sa.BigInteger).label("full_state"),
            )
            .group_by(c.c.r, c.c.grp)
            .subquery("g")
        )
        ms = members.alias("ms")
        m = select(ms.c.r, ms.c.grp).distinct().subquery("m")
        self.sizes = tables.make(
            f"{name}_groups",
            select(g.c.r, g.c.grp, g.c.persons, g.c.full_state)
            .join_from(g, m, and_(m.c.r == g.c.r, m.c.grp == g.c.grp))
            .where(
                g.c.persons <= MATCHED_GROUP,
                g.c.states <= MATCHED_STATES,
                sa.not_(and_(g.c.persons <= COUNTED_GROUP, g.c.largest == 1)),
            ),
        )
        sizes, cs = self.sizes, counts.alias("c")
        self.slots = tables.make(
            f"{name}_slots",
            select(
                cs.c.r, cs.c.grp, cs.c.value, cs.c.cnt, sa.cast(func.round(_radix(cs)), sa.BigInteger).label("radix")
            ).join_from(cs, sizes, and_(sizes.c.r == cs.c.r, sizes.c.grp == cs.c.grp)),
        )
        mp = members.alias("m")
        in_order = func.row_number().over(partition_by=[mp.c.r, mp.c.grp], order_by=mp.c.person)
        self.steps = tables.make(
            f"{name}_steps",
            select(mp.c.r, mp.c.grp, mp.c.person, in_order.label("t")).join_from(
                mp, sizes, and_(sizes.c.r == mp.c.r, sizes.c.grp == mp.c.grp)
            ),
        )

    def feasible(self, possible: sa.TableClause, dirty: sa.TableClause) -> sa.Select[Any]:
        """SELECT r, grp, person, value: the pairs some complete assignment of their (small, dirty) group uses."""
        sizes = self.sizes
        dirty_sizes = select(sizes).join_from(sizes, dirty, and_(dirty.c.r == sizes.c.r, dirty.c.grp == sizes.c.grp))
        g0, g1 = dirty_sizes.subquery("g0"), dirty_sizes.subquery("g1")
        start = sa.cast(sa.literal(0), sa.BigInteger)
        fwd = select(g0.c.r, g0.c.grp, sa.literal(0).label("t"), start.label("st")).cte(
            "fwd", recursive=True, nesting=True
        )
        f = fwd.alias("f")
        moved, p, q, s = self._moves(possible, f, f.c.t + 1)
        fwd = fwd.union(
            select(f.c.r, f.c.grp, f.c.t + 1, f.c.st + s.c.radix).select_from(moved).where(_free(f.c.st, s) < s.c.cnt)
        )
        bwd = select(g1.c.r, g1.c.grp, g1.c.persons.label("t"), g1.c.full_state.label("st")).cte(
            "bwd", recursive=True, nesting=True
        )
        b = bwd.alias("b")
        moved, p, q, s = self._moves(possible, b, b.c.t)
        bwd = bwd.union(
            select(b.c.r, b.c.grp, b.c.t - 1, b.c.st - s.c.radix)
            .select_from(moved)
            .where(b.c.t > 0, _free(b.c.st, s) > 0)
        )
        f, b = fwd.alias("f"), bwd.alias("b")
        moved, p, q, s = self._moves(possible, f, f.c.t + 1)
        met = and_(b.c.r == f.c.r, b.c.grp == f.c.grp, b.c.t == f.c.t + 1, b.c.st == f.c.st + s.c.radix)
        return (
            select(f.c.r, f.c.grp, p.c.person, q.c.value)
            .distinct()
            .select_from(moved.join(b, met))
            .where(_free(f.c.st, s) < s.c.cnt)
        )

    def _moves(self, possible: sa.TableClause, at: FromClause, step: Any) -> tuple[sa.Join, Any, Any, Any]:
        """The moves from partial assignment `at`: the group's person number `step` (p) takes one of their
        possible values (q), a digit of the state (s)."""
        p, q, s = self.steps.alias("p"), possible.alias("q"), self.slots.alias("s")
        moved = (
            at.join(p, and_(p.c.r == at.c.r, p.c.grp == at.c.grp, p.c.t == step))
            .join(q, q.c.person == p.c.person)
            .join(s, and_(s.c.r == at.c.r, s.c.grp == at.c.grp, s.c.value == q.c.value))
        )
        return moved, p, q, s

    def drop(self) -> None:
        for table in (self.steps, self.slots, self.sizes):
            self.tables.drop(table)


def _radix(counts: FromClause) -> Any:
    """Each value's place in its group's mixed-radix state: the product of (count + 1) over the values before it."""
    before = func.sum(func.ln(counts.c.cnt + 1)).over(
        partition_by=[counts.c.r, counts.c.grp], order_by=counts.c.value, rows=(None, -1)
    )
    return func.coalesce(func.exp(before), 1)


def _free(state: Any, s: FromClause) -> Any:
    """How many of the slot's value `state` has used: its digit."""
    return func.mod(sa.cast(func.floor(state / sa.cast(s.c.radix, sa.Double)), sa.BigInteger), s.c.cnt + 1)


COUNTING_ROUNDS = 4  # rounds of the counting rules chained in one statement


def _propagation_round(
    tables: ReleaseTables,
    possible: sa.TableClause,
    members: sa.Subquery,
    dirty: sa.TableClause,
    groups: _MatchedGroups,
    unmatched: sa.TableClause,
    level: int,
) -> sa.SelectBase:
    """SELECT person, value: the pairs to remove this statement. At level 0, COUNTING_ROUNDS rounds of the
    counting rules, the first over the `dirty` groups and each next one over the groups of the persons the
    previous round removed pairs of (no other group's rules can remove more); at level 1, matching over the
    small groups in `unmatched`; at level 2, none (the components add theirs). A round reads only its groups'
    persons and what the statement removed so far, not the whole table of pairs: on two million-record
    releases, most rounds touch a few thousand of 2.8 million pairs."""
    if level == 1:
        return _unmatched_pairs(possible, groups, unmatched)
    if level == 2:
        return select(possible.c.person, possible.c.value).where(sa.false())
    touched_groups: FromClause = dirty
    removed: list[Any] = []  # gone1, gone2, ...: the rounds' removals
    for k in range(1, COUNTING_ROUNDS + 1):
        if k > 1:
            touched_groups = _groups_of(members, select(removed[-1].c.person)).subquery(f"d{k}")
        m, d = members.alias("m"), touched_groups
        touched = (
            select(m).join_from(m, d, and_(d.c.r == m.c.r, d.c.grp == m.c.grp)).cte(f"t{k}").prefix_with(MATERIALIZED)
        )
        # the pairs of the round's persons still possible: every earlier round's removals taken out
        q = possible.alias("q")
        pairs: sa.SelectBase = select(q.c.person, q.c.value).where(q.c.person.in_(select(touched.c.person)))
        if removed:
            earlier = sa.union_all(*(select(g.c.person, g.c.value) for g in removed)).subquery(f"e{k}")
            pairs = sa.except_(pairs, select(earlier.c.person, earlier.c.value))
        removed.append(_counting_rules(tables, k, touched, pairs.cte(f"p{k}").prefix_with(MATERIALIZED)))
    return sa.union(*(select(g.c.person, g.c.value) for g in removed))


def _unmatched_pairs(possible: sa.TableClause, groups: _MatchedGroups, unmatched: sa.TableClause) -> sa.Select[Any]:
    """SELECT person, value: in the small groups of `unmatched`, the pairs no complete assignment of the group
    uses."""
    q, p, d = possible.alias("q"), groups.steps.alias("p"), unmatched.alias("d")
    ok = groups.feasible(possible, unmatched).subquery("ok")
    return (
        select(q.c.person, q.c.value)
        .select_from(
            q.join(p, p.c.person == q.c.person)
            .join(d, and_(d.c.r == p.c.r, d.c.grp == p.c.grp))
            .outerjoin(
                ok, and_(ok.c.r == p.c.r, ok.c.grp == p.c.grp, ok.c.person == q.c.person, ok.c.value == q.c.value)
            )
        )
        .where(ok.c.person.is_(None))
        .distinct()
    )


def _groups_of(members: sa.Subquery, persons: sa.Select[Any]) -> sa.Select[Any]:
    """SELECT r, grp: the groups, in every release, of the persons `persons` selects."""
    m = members.alias("m")
    return select(m.c.r, m.c.grp).distinct().where(m.c.person.in_(persons))


def _counting_rules(tables: ReleaseTables, k: int, touched: sa.CTE, pairs: sa.CTE) -> sa.CTE:
    """Round `k`'s removals (gone{k}): the pairs the counting rules remove, looking at the members of the groups
    in `touched`, whose persons' possible pairs are `pairs`."""
    per_person = select(pairs.c.person, func.count().label("n")).group_by(pairs.c.person)
    held = per_person.cte(f"n{k}").prefix_with(MATERIALIZED)
    m, q, s = touched.alias(f"m{k}"), pairs.alias(f"q{k}"), held.alias(f"s{k}")
    # each member's possible values with the group and the member's count of them, stored once: every join below
    # is then on a whole key (a join of the pairs with the decided values on the value alone, which PostgreSQL
    # chose where it saw one-row estimates, made 8.9 million rows of 17,000 pairs: 7 of its 11 s on two
    # 10,000-record releases)
    holders = (
        select(m.c.r, m.c.grp, m.c.person, q.c.value, s.c.n)
        .select_from(m.join(q, q.c.person == m.c.person).join(s, s.c.person == m.c.person))
        .cte(f"h{k}")
        .prefix_with(MATERIALIZED)
    )
    h = holders.alias(f"hs{k}")
    t = (
        select(
            h.c.r,
            h.c.grp,
            h.c.value,
            func.sum(case((h.c.n == 1, 1), else_=0)).label("fixed"),
            func.sum(case((h.c.n > 1, 1), else_=0)).label("open"),
        )
        .group_by(h.c.r, h.c.grp, h.c.value)
        .subquery("t")
    )
    c = tables.counts.alias("c")
    decided = (
        select(t.c.r, t.c.grp, t.c.value, t.c.fixed, t.c.open, c.c.cnt)
        .join_from(t, c, and_(c.c.r == t.c.r, c.c.grp == t.c.grp, c.c.value == t.c.value))
        .where(or_(t.c.fixed == c.c.cnt, and_(t.c.open > 0, t.c.fixed + t.c.open == c.c.cnt)))
        .cte(f"u{k}")
        .prefix_with(MATERIALIZED)
    )
    # the group's open persons who may hold the value: (a) it is taken by persons fixed to it, so they
    # cannot; (b) they number just what is left of its count, so they must, and their other values go
    ru, o, oh = decided.alias(f"ru{k}"), pairs.alias(f"o{k}"), holders.alias(f"oh{k}")
    open_holders = ru.join(oh, and_(oh.c.r == ru.c.r, oh.c.grp == ru.c.grp, oh.c.value == ru.c.value))
    taken = select(oh.c.person, ru.c.value).select_from(open_holders).where(ru.c.fixed == ru.c.cnt, oh.c.n > 1)
    theirs = (
        select(oh.c.person, o.c.value)
        .select_from(open_holders.join(o, and_(o.c.person == oh.c.person, o.c.value != ru.c.value)))
        .where(ru.c.fixed < ru.c.cnt, ru.c.open > 0, ru.c.fixed + ru.c.open == ru.c.cnt, oh.c.n > 1)
    )
    return sa.union(taken, theirs).cte(f"gone{k}").prefix_with(MATERIALIZED)


def _check_counts(tables: ReleaseTables, possible: sa.TableClause, members: sa.Subquery, rs: list[int]) -> None:
    """A group value held by more fixed persons than its count, or possible for fewer persons than its count,
    has no solution: name it."""
    c, v, m, p = tables.counts.alias("c"), tables.vals.alias("v"), members.alias("m"), possible.alias("p")
    held = select(possible.c.person, func.count().label("n")).group_by(possible.c.person).subquery("s")
    could, must = func.count(p.c.person), func.sum(case((held.c.n == 1, 1), else_=0))
    row = tables.db.execute(
        tables.conn,
        select(c.c.r, c.c.grp, v.c.label, c.c.cnt, could, must)
        .select_from(
            c.join(v, v.c.value == c.c.value)
            .join(m, and_(m.c.r == c.c.r, m.c.grp == c.c.grp))
            .outerjoin(p, and_(p.c.person == m.c.person, p.c.value == c.c.value))
            .outerjoin(held, held.c.person == p.c.person)
        )
        .where(c.c.r.in_(rs))
        .group_by(c.c.r, c.c.grp, v.c.label, c.c.cnt)
        .having(or_(could < c.c.cnt, must > c.c.cnt))
        .order_by(c.c.r, c.c.grp)
        .limit(1),
    ).first()
    if row:
        release = tables.releases[row[0] - 1].name
        raise DataError(
            f"the releases are inconsistent: release {release!r}, bucket {row[1]} lists {row[3]} x "
            f"{row[2]!r}, but given the other releases {row[4]} of its persons may hold it and "
            f"{row[5] or 0} "
            "must; no solution exists"
        )
