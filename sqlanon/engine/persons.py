"""A job's persons, where a `unit` column names each row's person: the table every criterion counts instead of rows.

A run counts a session's scratch table of one row per person (the unit, the QIs, the sensitive columns the criteria
read): a class's size is its persons, suppression removes persons and its limit counts them, each person's sensitive
value counts once. The publication writes every row of each published person (`Persons.rows`).

A person whose rows disagree on a quasi-identifier (an age recorded at each visit, a zip code that changed) is
generalized consistently: their value is the lowest common ancestor of their values in the QI's hierarchy (its
level and node, as the key `~lca~LEVEL.CODE`), which the run adds to the hierarchy as a value of its own whose
label is the ancestor's at every level below the ancestor's and the ancestor's path above (`with_common_ancestors`).
The search then treats it as any value: at a node whose level for the QI is at or above the ancestor's, the person
is published as everyone else is; below it, at the ancestor's label, in a class of their own with the persons who
share it. Every row of the person is published with the person's value, so the person is in one class whatever the
node. Mondrian cuts it as any leaf of the extended hierarchy: a partition that holds it and persons of other values
is at or above the ancestor's level (their node is the ancestor or above it), one that holds such persons only
publishes the ancestor's label.

A person whose rows hold several values of a sensitive attribute (a diagnosis per visit) holds each of them once
(1:M data, after Gong et al.'s (k, l)-diversity for 1:M data): the persons' table holds the number of the person's
set of values (`Database.value_set` orders the sets), which frequency sets group as any value, and the run keeps,
per such attribute (`HeldValues`), each person's distinct values and each set's members. A criterion then reads,
per class, how many of its persons hold each value (criteria.view.FrequencySetView.held), and a class's size stays
its persons (see docs/job-file.md for what each criterion requires of such classes). The lattice search, its
publication, `apply` and the audit count so; Mondrian, Anatomy, the analyses and the release ledger refuse such
persons.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..backends import Database
from ..backends.base import value_set_item
from ..errors import DataError, HierarchyError
from ..model.hierarchies import Hierarchy
from ..model.job import Job, QuasiIdentifier

#: the unit column as it is, beside its pseudonym, in rows with persons' pseudonyms (Persons.pseudonymized_rows)
PERSON_KEY = "sqlanon_person__"
#: how a person's lowest common ancestor is written as a value of its QI (then its level, a dot, and the ancestor's
#: code among its level's labels); a hierarchy holding a value that starts so is refused where persons disagree
LCA_PREFIX = "~lca~"
#: the persons' table's columns of the largest values of numbers whose persons' rows disagree (`high_column`)
HIGH_PREFIX = "sqlanon_high__"


@dataclass(frozen=True)
class HeldValues:
    """A sensitive attribute whose values differ within persons: `holdings`, a scratch table of each person's
    distinct values (the unit, the attribute's column), and `members`, of each set of values the persons' table
    holds and its values (`held`, the set's number in the persons' table; `value`)."""

    holdings: str
    members: str


@dataclass(kw_only=True)
class Persons:
    """A run's persons' table (`table`, a session's scratch table), the FROM item whose rows a publication writes
    (`rows`: the source, until `pseudonymized_rows` gives the rows with each person's pseudonym and, for each QI
    that varies within a person (`varying`), the person's value), per such QI its hierarchy with the persons'
    common ancestors added (`hierarchies`), or for a number without one the column of the persons' largest
    values (`highs`)."""

    table: str
    rows: str
    source: str  # the source's table, whose rows are published
    unit: str
    varying: list[str] = field(default_factory=list)
    hierarchies: dict[str, Hierarchy] = field(default_factory=dict)
    highs: dict[str, str] = field(default_factory=dict)  # QI -> the column of its persons' largest values
    #: sensitive columns whose values differ within persons: their column holds the number of each person's set
    held: dict[str, HeldValues] = field(default_factory=dict)

    def drop(self, db: Database, conn: Connection) -> None:
        """Drop the persons' table and the tables of their held values."""
        for tables in self.held.values():
            db.drop_table(conn, tables.members)
            db.drop_table(conn, tables.holdings)
        db.drop_table(conn, self.table)

    @contextmanager
    def pseudonymized_rows(
        self,
        db: Database,
        conn: Connection,
        columns: list[str],
        pseudonym: Callable[[str], str],
        name: str,
        keyed: bool = False,
    ) -> Iterator[str]:
        """Within: the FROM item of the rows a publication writes (`rows`) with the unit column already published,
        as its pseudonym (`pseudonym`: the SQL of it over a value's SQL), computed once per person in a scratch table
        `name` of the persons' pseudonyms (and their varying QIs' values), which the source's rows join; with
        `keyed`, the unit as it is too, as PERSON_KEY (to join other tables of the persons). At 2.5M visits of 1M
        patients, the HMAC of each row cost most of the publication."""
        if keyed and any(db.same_name(c, PERSON_KEY) for c in columns):
            raise DataError(f"a source column named {PERSON_KEY!r} collides with sqlanon's own; rename it")
        persons = db.ref_table(self.table, [self.unit, *self.varying]).alias("p")
        person = sa.select(
            persons.c[self.unit].label("u"),
            sa.literal_column(pseudonym("p." + db.q(self.unit))).label("pseudonym"),
            *(persons.c[c].label(f"v{i}") for i, c in enumerate(self.varying)),
        )
        mapping = db.create_scratch(conn, name, db.as_text(conn, person))
        try:
            m = db.ref_table(mapping, ["u", "pseudonym", *(f"v{i}" for i in range(len(self.varying)))]).alias("m")
            rows = db.ref_table(self.source, columns).alias("r")
            varying = {db.name_key(c): f"v{i}" for i, c in enumerate(self.varying)}
            selected = [
                m.c.pseudonym.label(c)
                if db.same_name(c, self.unit)
                else m.c[varying[db.name_key(c)]].label(c)
                if db.name_key(c) in varying
                else rows.c[c]
                for c in columns
            ]
            if keyed:
                selected.append(rows.c[self.unit].label(PERSON_KEY))
            query = sa.select(*selected).select_from(rows.join(m, rows.c[self.unit] == m.c.u))
            yield "(" + db.as_text(conn, query) + ")"
        finally:
            db.drop_table(conn, mapping)


def persons_holding_several(db: Database, conn: Connection, table: str, unit: str, column: str) -> int:
    """How many persons of `table` (a reference) hold several values of `column` (NULL among them): one grouping
    by person."""
    rows = db.ref_table(table, [unit, column])
    value = value_set_item(rows.c[column])  # NULL as a value of its own
    several = sa.select(rows.c[unit]).group_by(rows.c[unit]).having(sa.func.count(value.distinct()) > 1).subquery("p")
    return int(db.execute(conn, db.as_text(conn, sa.select(sa.func.count()).select_from(several))).scalar_one())


def hierarchy_key(text: str, maps_null: bool) -> str:
    """A column's value as text (`text`) as a key into the hierarchy's leaves: a NULL is its empty line, where the
    hierarchy has one (`maps_null`)."""
    return f"COALESCE({text}, '')" if maps_null else text


def person_columns(job: Job, sensitive: Sequence[str] = (), qis: bool = True) -> list[str]:
    """The columns of a job's persons' table (`person_table`): the unit, the QIs (unless not `qis`), the job's
    sensitive columns and `sensitive` (those of criteria evaluated beside the job's)."""
    assert job.unit_column is not None
    return [job.unit_column, *(job.qi_names if qis else []), *dict.fromkeys([*job.sensitive, *sensitive])]


def person_table_name(run_id: int) -> str:
    """The name of a run's persons' table (`person_table`), a scratch table of its session."""
    return f"persons_{run_id}"


def person_table(db: Database, conn: Connection, job: Job, source: str, run_id: int) -> str:
    """The persons of a job with a `unit` column, one row each (the unit and the sensitive columns), for Anatomy,
    which draws them by their sensitive value alone and publishes each row's QIs as they are (a person's rows may
    disagree on those). Refused (DataError, nothing left behind) where a person is NULL, or a person's rows disagree
    on a sensitive column (`_distinct_persons` says which)."""
    persons, varying, _ = _distinct_persons(db, conn, job, source, run_id, (), qis=False)
    if varying:
        db.drop_table(conn, persons)
        raise _disagreement(job, varying)
    return persons


def counted_persons(
    db: Database,
    conn: Connection,
    job: Job,
    source: str,
    run_id: int,
    sensitive: Sequence[str],
    hierarchy_of: Callable[[QuasiIdentifier], Hierarchy | None],
    several_values: bool = False,
) -> Persons:
    """The persons a lattice search or Mondrian counts, one row each (the `person_columns`): where a person's rows
    disagree on a QI, the person's value is the lowest common ancestor of their values in its hierarchy
    (`hierarchy_of`, the QI's hierarchy as the job gives it; see the module's docstring), or for a number Mondrian
    cuts without one (None), the smallest of their values, the largest beside it (`Persons.highs`); where they
    disagree on a sensitive column and the caller counts `several_values`, the set of their values (`Persons.held`).
    Refused, nothing left behind: such a number NULL in some of a person's rows, NULL persons, and persons whose rows
    disagree on a sensitive value where the caller does not count several."""
    assert job.unit_column is not None
    distinct, varying, mixed = _distinct_persons(db, conn, job, source, run_id, sensitive)
    if not varying:
        return Persons(table=distinct, rows=source, source=source, unit=job.unit_column)
    try:
        held = [column for column in varying if column not in job.qi_names]
        if held and not several_values:
            raise _disagreement(job, varying)
        hierarchies, ranged = {}, []
        for qi in job.quasi_identifiers:
            if qi.column in varying and (hierarchy := hierarchy_of(qi)) is None:
                ranged.append(qi.column)
            elif qi.column in varying and hierarchy is not None:
                hierarchies[qi.column] = hierarchy
        _refuse_numbers_with_nulls(job, mixed, ranged)
        highs = {c: high_column(i) for i, c in enumerate(ranged)}
        columns = person_columns(job, sensitive)[1:]
        clash = next((c for c in columns if any(db.same_name(c, high) for high in highs.values())), None)
        if clash is not None:
            raise DataError(f"a source column named {clash!r} collides with sqlanon's own; rename it")
        persons = Persons(
            table=_common_ancestors(db, conn, job, distinct, run_id, columns, hierarchies, ranged, held),
            rows=source,
            source=source,
            unit=job.unit_column,
            varying=[c for c in varying if c not in held],
            highs=highs,
        )
        try:
            persons.held = {
                c: _held_values(db, conn, job, distinct, persons.table, c, f"{run_id}_{i}") for i, c in enumerate(held)
            }
        except Exception:
            persons.drop(db, conn)
            raise
    finally:
        db.drop_table(conn, distinct)
    try:
        found = _ancestors_found(db, conn, persons.table, list(hierarchies))
        persons.hierarchies = {c: with_common_ancestors(hierarchies[c], found[c]) for c in hierarchies}
    except Exception:
        persons.drop(db, conn)
        raise
    for column, count in varying.items():
        warnings.warn(_varying_warning(job, column, count, ranged, held), UserWarning, stacklevel=2)
    return persons


def _varying_warning(job: Job, column: str, persons: int, ranged: Sequence[str], held: Sequence[str]) -> str:
    """What the run does with the persons whose rows disagree on `column`."""
    if column in held:
        return (
            f"{persons} person(s) of unit column {job.unit_column!r} have rows with different values of the "
            f"sensitive column {column!r}: each of their values counts once for them (a group's count of a value is "
            "the number of its persons who hold it)"
        )
    how = (
        "each is cut by the smallest of their values and published with a range that holds all of them"
        if column in ranged
        else "each is published at or above the lowest level of its hierarchy where their values meet"
    )
    return (
        f"{persons} person(s) of unit column {job.unit_column!r} have rows with different values of the "
        f"quasi-identifier {column!r}: {how}, in all of their rows"
    )


def _held_values(
    db: Database, conn: Connection, job: Job, distinct: str, persons: str, column: str, suffix: str
) -> HeldValues:
    """The tables of a sensitive `column` whose values differ within persons (`HeldValues`): each person's distinct
    values, from the `distinct` rows of the source, and each set of values of the `persons`' table with its
    members."""
    assert job.unit_column is not None
    unit = job.unit_column
    rows = db.ref_table(distinct, [unit, column])
    holdings = db.create_scratch(
        conn, f"holdings_{suffix}", db.as_text(conn, sa.select(rows.c[unit], rows.c[column]).distinct())
    )
    try:
        held = db.ref_table(holdings, [unit, column]).alias("h")
        person = db.ref_table(persons, [unit, column]).alias("p")
        members = sa.select(person.c[column].label("held"), held.c[column].label("value")).distinct()
        members = members.select_from(held.join(person, held.c[unit] == person.c[unit]))
        tables = HeldValues(
            holdings=holdings, members=db.create_scratch(conn, f"members_{suffix}", db.as_text(conn, members))
        )
    except Exception:
        db.drop_table(conn, holdings)
        raise
    db.analyze(conn, tables.holdings)
    db.analyze(conn, tables.members)
    return tables


def high_column(i: int) -> str:
    """The persons' table's column of the largest value of the i-th QI whose persons' rows disagree, where the
    person's own column holds the smallest (a number Mondrian cuts without a hierarchy)."""
    return f"{HIGH_PREFIX}{i}"


def _refuse_numbers_with_nulls(job: Job, mixed: dict[str, int], ranged: list[str]) -> None:
    """A person whose rows hold a number of a `ranged` QI and NULL has no range: refused (`mixed`: per column, the
    persons whose rows hold a value and NULL, which `_varying_columns` counted)."""
    column = next((c for c in ranged if mixed.get(c)), None)
    if column is not None:
        raise DataError(
            f"{mixed[column]} person(s) of unit column {job.unit_column!r} have a NULL in some rows of the "
            f"quasi-identifier {column!r} and a number in others, which Mondrian cuts as a number (no hierarchy): a "
            "range of theirs cannot hold a NULL; fill the NULLs, give the column a hierarchy that maps NULL, or use "
            "the lattice search"
        )


def _distinct_persons(
    db: Database, conn: Connection, job: Job, source: str, run_id: int, sensitive: Sequence[str], qis: bool = True
) -> tuple[str, dict[str, int], dict[str, int]]:
    """The distinct rows of the source's `person_columns` (one DISTINCT), the columns whose values differ within
    a person, each with how many persons (none: the table is the persons', one row each), and of those the persons
    whose rows hold a value and NULL (`_varying_columns`). A NULL person is refused (nothing left behind)."""
    assert job.unit_column is not None
    columns = person_columns(job, sensitive, qis)[1:]
    persons = db.create_scratch(conn, person_table_name(run_id), persons_select(db, source, job.unit_column, columns))
    try:
        counted = db.ref_table(persons, [job.unit_column]).c[job.unit_column]
        rows, named = db.execute(
            conn, db.as_text(conn, sa.select(sa.func.count(), sa.func.count(counted.distinct())))
        ).one()
        if rows == named:
            # every method joins it: Mondrian's check of 1M persons' values against a hierarchy took 654 s on
            # PostgreSQL without its statistics
            db.analyze(conn, persons)
            return persons, {}, {}
        varying, mixed = _varying_columns(db, conn, job, source, persons, columns)
        assert varying, "a person with two distinct rows has two values of some column"
        return persons, varying, mixed
    except Exception:
        db.drop_table(conn, persons)
        raise


def _varying_columns(
    db: Database, conn: Connection, job: Job, source: str, distinct: str, columns: list[str]
) -> tuple[dict[str, int], dict[str, int]]:
    """The `columns` whose values differ within a person, each with how many persons, and the persons whose rows
    hold a value and NULL (Mondrian cannot range them): one grouping by person of the `source`'s `distinct` rows
    (where a person has one row, nothing differs); a NULL person is refused here."""
    assert job.unit_column is not None
    table = db.ref_table(distinct, [job.unit_column, *columns])
    unit = table.c[job.unit_column]
    rows = sa.func.count()

    def with_null(column: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:  # a value, and NULL
        return sa.and_(sa.func.count(column) > 0, sa.func.count(column) < rows)

    def differs(column: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:  # two values, or NULL and not
        text = sa.cast(column, sa.String)  # text: PostgreSQL has no MIN(boolean)
        return sa.or_(sa.func.min(text) != sa.func.max(text), with_null(column))

    per_person = (
        sa.select(
            sa.case((unit.is_(None), rows), else_=0).label("unnamed"),
            *(sa.case((differs(table.c[c]), 1), else_=0).label(f"v{i}") for i, c in enumerate(columns)),
            *(sa.case((with_null(table.c[c]), 1), else_=0).label(f"n{i}") for i, c in enumerate(columns)),
        )
        .group_by(unit)
        .having(sa.or_(rows > 1, unit.is_(None)))
        .subquery("p")
    )
    found = db.execute(conn, db.as_text(conn, sa.select(*(sa.func.sum(c) for c in per_person.c)))).one()
    if found[0]:
        named = db.ref_table(source, [job.unit_column]).c[job.unit_column]
        unnamed = db.execute(conn, db.as_text(conn, sa.select(sa.func.count()).where(named.is_(None)))).scalar_one()
        raise DataError(
            f"unit column {job.unit_column!r} is NULL in {unnamed} row(s): every row must name its person; fill "
            "them in or leave those rows out of the table"
        )
    varying, mixed = found[1 : 1 + len(columns)], found[1 + len(columns) :]
    return {c: int(n) for c, n in zip(columns, varying) if n}, {c: int(n) for c, n in zip(columns, mixed) if n}


def _disagreement(job: Job, varying: dict[str, int]) -> DataError:
    """The error for persons whose rows disagree on sensitive columns (`varying`: column -> persons)."""
    (column, persons), *others = [(c, n) for c, n in varying.items() if c not in job.qi_names]
    also = f" (and of {', '.join(c for c, _ in others)})" if others else ""
    return DataError(
        f"{persons} person(s) of unit column {job.unit_column!r} have rows with different values of the sensitive "
        f"column {column!r}{also}; this method counts one sensitive value per person, so it must be the same in "
        "all of their rows: keep one value per person (e.g. the first visit's), list a column that may differ as "
        "insensitive, or publish by generalization (output.method: generalize), whose search counts each value a "
        "person holds"
    )


def _common_ancestors(
    db: Database,
    conn: Connection,
    job: Job,
    source: str,
    run_id: int,
    columns: list[str],
    hierarchies: dict[str, Hierarchy],
    ranged: Sequence[str] = (),
    held: Sequence[str] = (),
) -> str:
    """The persons' table, one row per person, where each QI of `hierarchies` holds the person's value as text, or,
    where their rows disagree, the key of their values' lowest common ancestor, each number of `ranged` the
    person's smallest value, their largest beside it (`high_column`), and each sensitive column of `held` the
    number of the person's set of values (`Database.value_set`) among the persons' sets. One grouping by person
    of the source's distinct rows (`source`), joined with each such QI's codes by level (a scratch table of the
    hierarchy's values). A person with a value missing from the hierarchy (or an unmapped NULL) keeps that value,
    which the star schema's checks then name."""
    assert job.unit_column is not None
    table = db.ref_table(source, [job.unit_column, *columns]).alias("r")
    joined: Any = table
    keys: dict[str, sa.ColumnElement[Any]] = {}
    codes_tables = []
    try:
        for k, (column, hierarchy) in enumerate(hierarchies.items()):
            codes = _codes_table(db, conn, hierarchy, f"lca_{run_id}_{k}")
            codes_tables.append(codes)
            levels = db.ref_table(codes, ["v", *(f"c{i}" for i in range(hierarchy.height + 1))]).alias(f"d{k}")
            value = sa.cast(table.c[column], sa.String)
            looked_up = sa.func.coalesce(value, "") if hierarchy.maps_null else value
            joined = joined.outerjoin(levels, looked_up == levels.c.v)
            keys[column] = _ancestor_key(value, levels, hierarchy.height)
        for column in ranged:
            keys[column] = sa.func.min(table.c[column])
        for column in held:  # the set's number among the sets (its rank): integers group and join faster than text
            keys[column] = sa.func.dense_rank().over(order_by=db.value_set(table.c[column]))
        selected = [keys[c].label(c) if c in keys else table.c[c] for c in [job.unit_column, *columns]]
        selected += [sa.func.max(table.c[c]).label(high_column(i)) for i, c in enumerate(ranged)]
        grouped = [table.c[c] for c in [job.unit_column, *columns] if c not in keys]
        query = sa.select(*selected).select_from(joined).group_by(*grouped)
        persons = db.create_scratch(conn, f"ancestors_{run_id}", db.as_text(conn, query))
        db.analyze(conn, persons)
        return persons
    finally:
        for codes in codes_tables:
            db.drop_table(conn, codes)


def _codes_table(db: Database, conn: Connection, hierarchy: Hierarchy, name: str) -> str:
    """A scratch table (v, c0..ch) of the hierarchy's values and their codes by level (a code per distinct label of
    the level, so two values share their node at level L exactly when their cL agree)."""
    levels = range(hierarchy.height + 1)
    columns = [("v", "VARCHAR")] + [(f"c{i}", "INTEGER") for i in levels]
    rows = [row[: hierarchy.height + 2] for row in hierarchy.dimension_rows()]
    return db.create_scratch_from_rows(conn, name, columns, rows)


def _ancestor_key(value: sa.ColumnElement[Any], levels: Any, height: int) -> sa.ColumnElement[Any]:
    """A person's value (aggregated over their rows): the value itself where their rows agree, else the key of the
    lowest level where their codes agree (LCA_PREFIX, level, code); a value without a code (missing from the
    hierarchy) is the person's value, for the checks to name; values with no common ancestor, level height + 1."""
    unmatched = sa.func.count(sa.case((levels.c.v.is_(None), 1)))
    whens: list[tuple[Any, Any]] = [
        (unmatched > 0, sa.func.min(sa.case((levels.c.v.is_(None), value)))),
        (sa.func.min(levels.c.c0) == sa.func.max(levels.c.c0), sa.func.min(value)),
    ]
    for level in range(1, height + 1):
        code = levels.c[f"c{level}"]
        key = sa.literal(f"{LCA_PREFIX}{level}.") + sa.cast(sa.func.min(code), sa.String)
        whens.append((sa.func.min(code) == sa.func.max(code), key))
    return sa.case(*whens, else_=sa.literal(f"{LCA_PREFIX}{height + 1}.0"))


def _ancestors_found(db: Database, conn: Connection, persons: str, columns: list[str]) -> dict[str, list[str]]:
    """Per column, the distinct ancestor keys the persons' table holds (at most the hierarchy's nodes), in one
    statement."""
    table = db.ref_table(persons, columns)
    branches = [
        sa.select(sa.literal(k).label("k"), table.c[c].label("key")).where(table.c[c].like(f"{LCA_PREFIX}%")).distinct()
        for k, c in enumerate(columns)
    ]
    found: dict[str, list[str]] = {c: [] for c in columns}
    if not branches:  # persons disagree on numbers only (Mondrian's, without a hierarchy)
        return found
    for k, key in db.execute(conn, db.as_text(conn, sa.union_all(*branches))).all():
        found[columns[k]].append(key)
    return found


def with_common_ancestors(hierarchy: Hierarchy, keys: list[str]) -> Hierarchy:
    """The hierarchy with a value for each ancestor key (`LCA_PREFIX` LEVEL.CODE, `_ancestor_key`): labelled as the
    ancestor at every level up to its own, then the ancestor's path. Refused: persons whose values share no
    ancestor (a hierarchy with several top labels), and a hierarchy whose own values look like keys."""
    clash = next((v for v in hierarchy.values if v.startswith(LCA_PREFIX)), None)
    if clash is not None:
        raise HierarchyError(
            f"hierarchy for {hierarchy.column!r} ({hierarchy.origin}) holds the value {clash!r}, which sqlanon "
            f"writes for persons whose rows disagree on it ({LCA_PREFIX}...): rename it"
        )
    labels = [sorted(set(column)) for column in hierarchy.columns]
    above = {(level, path[level]): path[level:] for path in hierarchy.paths for level in range(1, hierarchy.height + 1)}
    paths = []
    for key in sorted(keys):
        level, code = map(int, key[len(LCA_PREFIX) :].split("."))
        if level > hierarchy.height:
            raise DataError(
                f"persons' rows hold values of {hierarchy.column!r} with no common ancestor in its hierarchy "
                f"({hierarchy.origin}, top labels {', '.join(hierarchy.top_labels)}): give it one top label"
            )
        ancestor = above[(level, labels[level][code])]
        paths.append((key, *[ancestor[0]] * (level - 1), *ancestor))
    return Hierarchy(column=hierarchy.column, paths=hierarchy.paths + tuple(paths), origin=hierarchy.origin)


def published_leaves(hierarchy: Hierarchy) -> dict[str, str]:
    """What level 0 publishes for each of a hierarchy's values `with_common_ancestors` that is an ancestor's key:
    the ancestor's label (the key's label at level 1, the ancestor's or, above it, the ancestor's own)."""
    return {path[0]: path[1] for path in hierarchy.paths if path[0].startswith(LCA_PREFIX)}


def ancestor_areas(hierarchy: Hierarchy) -> Callable[[str], tuple[int, int]]:
    """For each value of a hierarchy `with_common_ancestors`, what it stands for in a node's area (the hierarchy's
    values under its label): (1, 0) for the hierarchy's own values, (0, the own values under the ancestor) for an
    ancestor's key. A node's area is then the sum of the first, or where it holds only an ancestor's key (at a level
    below the ancestor's), the second: the ancestor's area, as the person is published at the ancestor's label."""
    own = [path for path in hierarchy.paths if not path[0].startswith(LCA_PREFIX)]
    counts = Counter((level, path[level]) for path in own for level in range(hierarchy.height + 1))
    paths = {path[0]: path for path in hierarchy.paths}

    def area(value: str) -> tuple[int, int]:
        if not value.startswith(LCA_PREFIX):
            return 1, 0
        level = int(value[len(LCA_PREFIX) :].split(".")[0])
        return 0, counts[(level, paths[value][level])]

    return area


def persons_select(db: Database, table: str, unit: str, columns: list[str], where: str = "") -> str:
    """SELECT one row per person of `table` (a reference, or a FROM item; `where`: a condition on its rows): the
    `unit` column that names them and `columns`, which are the same in all of a person's rows (one row for each
    combination where they are not, so that a person in two classes is seen in both)."""
    selected = ", ".join(db.q(c) for c in [unit, *columns])
    return f"SELECT DISTINCT {selected} FROM {table}" + (" WHERE " + where if where else "")


def persons_from(db: Database, table: str, unit: str, columns: list[str]) -> str:
    """`persons_select` as a FROM item (`persons`)."""
    return f"({persons_select(db, table, unit, columns)}) AS persons"
