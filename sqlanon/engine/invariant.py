"""m-invariant bucketization (Xiao and Tao, SIGMOD 2007): the buckets of a new release of a changing table that keep
the signature (the set of sensitive values of their bucket) of every person still there from the previous release,
with counterfeits where a value has no one left to hold it. The statements are SQLAlchemy Core over scratch tables.

The records (one per person, their published columns u<k>, sensitive VALUE and pseudonym) fall in three kinds:
- continuing: in the previous release; each stays with the others of their previous group, in a bucket of its own;
- filling: new persons who take the place of one who left (or of a value no one holds now) in such a bucket, one
  per missing (group, value), drawn in a keyed pseudo-random order (md5 of the seed and the pseudonym);
- left: the other new persons, bucketized as Anatomy does (value order, then the keyed order; record p of them to
  bucket p mod G + 1 after the continuing ones, G = their number // m), which needs each value held by at most G.
A missing (group, value) that no new person fills is a counterfeit: the value is published in the bucket, and the
counterfeits table says how many of each bucket's values no published person holds (as the paper's auxiliary
table does). Every bucket then holds its previous group's values, each once: m-unique if that group was.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from ..backends import Database
from ..errors import DataError
from .anatomy import BUCKET, COUNTERFEIT, VALUE
from .scratch import Scratch


@dataclass(frozen=True, kw_only=True)
class PreviousGroups:
    """The previous release as integer-keyed tables (engine.maxent.ReleaseTables, release 1): members(r, person,
    grp), counts(r, grp, value, cnt), persons(person, pseudonym), vals(value, label); and `typed`: the sensitive
    values as the previous release published them, (value, label)."""

    members: sa.TableClause
    counts: sa.TableClause
    persons: sa.TableClause
    vals: sa.TableClause
    typed: sa.Subquery


@dataclass(frozen=True, kw_only=True)
class InvariantBuckets:
    """The scratch tables of an m-invariant bucketization: `assigned` (u<k>, VALUE, BUCKET, as anatomy's
    assignment) and `counterfeits` (BUCKET, VALUE, COUNTERFEIT); and how many of each kind."""

    assigned: str
    counterfeits: str
    continuing: int
    filling: int
    left: int
    counterfeit_count: int

    def figures(self) -> dict[str, int]:
        """Who went where: the persons who stayed in their group's bucket, the new ones who took the place of one
        who left, the new ones bucketized afresh, and the counterfeits."""
        return {
            "stayed": self.continuing,
            "took_a_place": self.filling,
            "bucketized_afresh": self.left,
            "counterfeits": self.counterfeit_count,
        }


def invariant_buckets(
    db: Database,
    conn: Connection,
    *,
    records: str,
    columns: list[str],
    person: str,
    previous: PreviousGroups,
    m: int,
    seed: str,
    prefix: str,
) -> InvariantBuckets:
    """Bucketize the scratch table `records` (its `columns` u<k>, VALUE; `person` the column holding each record's
    pseudonym) m-invariantly after `previous` (see the module)."""
    r = db.ref_table(records, [*columns, VALUE])
    shuffle = func.md5(func.concat(sa.literal(seed), sa.literal("|"), sa.cast(r.c[person], sa.String)))
    pm, pp = previous.members.alias("pm"), previous.persons.alias("pp")
    known = select(r, sa.cast(r.c[VALUE], sa.String).label("label"), shuffle.label("shuffle"), pm.c.grp).select_from(
        r.outerjoin(pp, pp.c.pseudonym == sa.cast(r.c[person], sa.String)).outerjoin(
            pm, sa.and_(pm.c.person == pp.c.person, pm.c.r == 1)
        )
    )
    scratch = Scratch(db, conn, prefix)  # its tables analyzed as they are made: PostgreSQL plans the joins on them
    people = scratch.make("people", known)
    slots = scratch.make("slots", _slots(people, previous))
    _refuse_changed_values(db, conn, people, slots)
    missing = scratch.make("missing", _missing(people, slots))
    numbered = func.row_number().over(partition_by=people.c.label, order_by=people.c.shuffle).label("n")
    fresh = scratch.make("fresh", select(people, numbered).where(people.c.grp.is_(None)))
    buckets = int(db.execute(conn, select(func.coalesce(func.max(slots.c.bucket), 0))).scalar_one())
    left, left_count = _left(db, conn, fresh, missing, columns, m, buckets)
    assigned = db.create_scratch(
        conn, f"{prefix}_assigned", sa.union_all(*_placed(people, fresh, missing, slots, columns), left)
    )
    counterfeits = db.create_scratch(conn, f"{prefix}_counterfeits", _counterfeits(missing, fresh, previous.typed))
    continuing, fresh_count, counterfeit_count = db.execute(
        conn,
        select(
            select(func.count()).where(people.c.grp.is_not(None)).scalar_subquery(),
            select(func.count()).select_from(fresh).scalar_subquery(),
            select(func.count()).select_from(db.ref_table(counterfeits, [BUCKET])).scalar_subquery(),
        ),
    ).one()
    scratch.drop_all()
    return InvariantBuckets(
        assigned=assigned,
        counterfeits=counterfeits,
        continuing=int(continuing),
        filling=int(fresh_count) - left_count,
        left=left_count,
        counterfeit_count=int(counterfeit_count),
    )


def _slots(people: sa.TableClause, previous: PreviousGroups) -> sa.Select[Any]:
    """Every (previous group that someone continues in, value of it), with the group's new bucket (1, 2, ...)."""
    c, v = previous.counts.alias("c"), previous.vals.alias("v")
    continued = select(people.c.grp).where(people.c.grp.is_not(None)).distinct().subquery("g")
    bucket = func.dense_rank().over(order_by=c.c.grp).label("bucket")
    joined = c.join(v, v.c.value == c.c.value).join(continued, continued.c.grp == c.c.grp)
    return select(c.c.grp, v.c.label, bucket).select_from(joined).where(c.c.r == 1).distinct()


def _refuse_changed_values(db: Database, conn: Connection, people: sa.TableClause, slots: sa.TableClause) -> None:
    """A continuing person whose value is not one of their previous group's cannot keep their signature."""
    changed = db.execute(
        conn,
        select(func.count())
        .select_from(people.outerjoin(slots, sa.and_(slots.c.grp == people.c.grp, slots.c.label == people.c.label)))
        .where(people.c.grp.is_not(None), slots.c.grp.is_(None)),
    ).scalar_one()
    if changed:
        raise DataError(
            f"{changed} person(s) of the previous release hold a sensitive value now that their group there did "
            "not: m-invariance keeps a person's values while they stay; publish a release without them first (their "
            "lifespan ends), or bucketize without output.invariant"
        )


def _missing(people: sa.TableClause, slots: sa.TableClause) -> sa.Select[Any]:
    """The (group, value) slots no continuing person holds, numbered per value (n)."""
    held = select(people.c.grp, people.c.label).where(people.c.grp.is_not(None)).subquery("h")
    open_slots = (
        select(slots)
        .select_from(slots.outerjoin(held, sa.and_(held.c.grp == slots.c.grp, held.c.label == slots.c.label)))
        .where(held.c.grp.is_(None))
        .subquery("o")
    )
    n = func.row_number().over(partition_by=open_slots.c.label, order_by=open_slots.c.grp).label("n")
    return select(open_slots.c.grp, open_slots.c.label, n, open_slots.c.bucket)


def _placed(
    people: sa.TableClause, fresh: sa.TableClause, missing: sa.TableClause, slots: sa.TableClause, columns: list[str]
) -> list[sa.Select[Any]]:
    """The continuing records in their group's bucket, and the new ones that fill a missing slot."""
    in_group = slots.alias("s")
    continuing = select(*(people.c[c] for c in columns), people.c[VALUE], in_group.c.bucket.label(BUCKET)).select_from(
        people.join(in_group, sa.and_(in_group.c.grp == people.c.grp, in_group.c.label == people.c.label))
    )
    filling = select(*(fresh.c[c] for c in columns), fresh.c[VALUE], missing.c.bucket.label(BUCKET)).select_from(
        fresh.join(missing, sa.and_(missing.c.label == fresh.c.label, missing.c.n == fresh.c.n))
    )
    return [continuing, filling]


def _left(
    db: Database,
    conn: Connection,
    fresh: sa.TableClause,
    missing: sa.TableClause,
    columns: list[str],
    m: int,
    after: int,
) -> tuple[sa.Select[Any], int]:
    """The new records no slot took, bucketized as Anatomy does after bucket `after`; and how many they are.
    Refused when they cannot be (fewer than m, or some value held by more of them than there are buckets)."""
    # anti-joins on the value and its number (PostgreSQL plans NOT IN over a large subquery as a loop)
    slot = missing.alias("slot")
    unmatched = fresh.outerjoin(slot, sa.and_(slot.c.label == fresh.c.label, slot.c.n == fresh.c.n))
    unplaced = slot.c.label.is_(None)
    per_value = (
        select(fresh.c.label, func.count().label("held"))
        .select_from(unmatched)
        .where(unplaced)
        .group_by(fresh.c.label)
        .subquery()
    )
    total, most = db.execute(
        conn, select(func.coalesce(func.sum(per_value.c.held), 0), func.max(per_value.c.held))
    ).one()
    total, groups = int(total), int(total) // m
    if total and (groups == 0 or int(most) > groups):
        why = f"fewer than {m}" if groups == 0 else f"one value holds {most} of them, more than {groups} buckets"
        raise DataError(
            f"the {total} new person(s) that take no place of one who left cannot be bucketized {m}-unique ({why}); "
            "nothing was written: publish when more have joined, or bucketize without output.invariant"
        )
    number = func.row_number().over(order_by=[fresh.c[VALUE], fresh.c.shuffle])
    bucket = (sa.literal(after) + func.mod(number - 1, max(groups, 1)) + 1).label(BUCKET)
    left = select(*(fresh.c[c] for c in columns), fresh.c[VALUE], bucket).select_from(unmatched).where(unplaced)
    return left, total


def _counterfeits(missing: sa.TableClause, fresh: sa.TableClause, typed: sa.Subquery) -> sa.Select[Any]:
    """The missing slots no new record fills: their bucket, the value as published, and a number per bucket."""
    taken = fresh.alias("taken")
    number = func.row_number().over(partition_by=missing.c.bucket, order_by=missing.c.label).label(COUNTERFEIT)
    return (
        select(missing.c.bucket.label(BUCKET), typed.c.value.label(VALUE), number)
        .select_from(
            missing.join(typed, typed.c.label == missing.c.label).outerjoin(
                taken, sa.and_(taken.c.label == missing.c.label, taken.c.n == missing.c.n)
            )
        )
        .where(taken.c.label.is_(None))
    )
