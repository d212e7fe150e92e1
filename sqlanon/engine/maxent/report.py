"""Every release solved together (and each pair), the probability table and the report's figures."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy import and_, case, func, or_, select
from sqlalchemy.engine import Connection
from sqlalchemy.sql.ddl import CreateTableAs

from ...backends import Database
from ...model.job import InferenceSettings
from ...model.progress import Progress, silent
from .releases import ReleaseTables
from .solve import solve

if TYPE_CHECKING:  # imported where a DataFrame is asked for (see api.py)
    import pandas as pd

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
    #: the disclosures no one release gives alone: a value above max_probability where no release alone puts it
    #: there, or below min_probability where every release of the person allows it at least that often
    combined: list[dict[str, Any]] = field(default_factory=list)  # the first LISTED, most certain first
    combined_count: int = 0

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

    def frame(self) -> pd.DataFrame:
        """The entropies per release (as `entropy_frame`); the disclosures are in `positive` and `negative`."""
        return self.entropy_frame()

    def entropy_frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(
            [
                {"release": e.name, "persons": e.persons, "alone": e.alone, "together": e.together, "drop": e.drop}
                for e in self.entropy
            ]
        )


def release_pairs(count: int) -> list[list[int]]:
    """Every pair of releases (1-based), to tell which two together cause a disclosure."""
    return [list(pair) for pair in itertools.combinations(range(1, count + 1), 2)]


def analyze_releases(
    tables: ReleaseTables,
    *,
    settings: InferenceSettings,
    output: tuple[str | None, str] | None = None,
    progress: Progress = silent,
    name_pairs: bool = True,
    at_stake: str | None = None,
) -> InferenceReport:
    """Solve every release of `tables` together (and, with more than two and `name_pairs`, each pair, to name the
    pair behind each disclosure), write P(s | person) to the table `output` (schema, name) when given, and report;
    drops `tables`. With `at_stake`, a scratch table of that name holds the pseudonyms of every person a combined
    disclosure is about (the caller drops it).
    Runs in the caller's transaction: on an error its rollback takes the scratch tables with it."""
    started = time.perf_counter()
    db, conn = tables.db, tables.conn
    # every join here is on integer keys of tables as large as the releases, and the propagation chains common
    # table expressions whose sizes PostgreSQL can only guess: on two anatomy releases of Adult (30k and 20k
    # persons) it nested loops over them (a components statement: 75 s) where hash joins take 2 s; with the
    # scratch tables analyzed too (engine.scratch), the inference took 22 s instead of 545
    with db.hash_joins(conn):
        x, figures = solve(db, conn, tables, settings, progress=progress)
        count = len(tables.releases)
        pairs = release_pairs(count) if count > 2 and name_pairs else []
        pair_tables = [solve(db, conn, tables, settings, pair, f"pair{j}", progress)[0] for j, pair in enumerate(pairs)]
        result = tables.make("result", _result(tables, x, settings, pair_tables, _causes(tables, pairs)))
    report = _report(db, conn, tables, result, x, figures, settings)
    report.seconds = time.perf_counter() - started
    report.statements += tables.statements
    if output is not None:
        schema, name = output
        probabilities = select(
            result.c.pseudonym.label(tables.series.pseudonym),
            result.c.label.label(tables.sensitive),
            *(result.c[c] for c in ("probability", "alone", "positive", "negative", "cause")),
        )
        db.execute(conn, CreateTableAs(probabilities, name, schema=schema))
        report.table = name
    if at_stake is not None:
        stake = select(result.c.pseudonym).where(_combined(result, settings)).distinct()
        db.create_scratch(conn, at_stake, stake)
    tables.drop_all()
    return report


#: the codes of the releases behind a disclosure: one release alone, every release together, or pair j (j + 1 for
#: j = 0, 1, ...); their names are in a small table of causes, joined when the result is made
ALONE, TOGETHER = -1, 0


def _causes(tables: ReleaseTables, pairs: list[list[int]]) -> sa.TableClause:
    """The causes' codes and names (the releases' names are data: bound, never formatted into a statement)."""
    names = [r.name for r in tables.releases]
    rows = [(ALONE, "one release alone"), (TOGETHER, f"{names[0]} + {names[1]}" if len(names) == 2 else "all releases")]
    rows += [(j + 1, f"{names[a - 1]} + {names[b - 1]}") for j, (a, b) in enumerate(pairs)]
    return tables.make_from_rows("causes", [("code", "INTEGER"), ("cause", "VARCHAR")], rows)


def _result(
    tables: ReleaseTables,
    x: sa.TableClause,
    settings: InferenceSettings,
    pair_tables: list[sa.TableClause],
    causes: sa.TableClause,
) -> sa.Select[Any]:
    """Every (person, value) some release allows: the probability from all releases, the highest from any one
    release alone (count / group size), the disclosure flags and the releases that cause them (`causes`)."""
    # flags need the threshold passed by more than the tolerance the probabilities are solved to
    high = settings.max_probability + settings.tolerance
    low = settings.min_probability - settings.tolerance
    counts, members = tables.counts, tables.members
    sizes = select(counts.c.r, counts.c.grp, func.sum(counts.c.cnt).label("size")).group_by(counts.c.r, counts.c.grp)
    m, c, s = members.alias("m"), counts.alias("c"), sizes.subquery("s")
    share = sa.cast(c.c.cnt, sa.Double) / s.c.size
    alone = (
        select(
            m.c.person,
            c.c.value,
            func.max(share).label("alone"),
            func.min(share).label("least"),
            func.count().label("holding"),
        )
        .select_from(
            m.join(c, and_(c.c.r == m.c.r, c.c.grp == m.c.grp)).join(s, and_(s.c.r == m.c.r, s.c.grp == m.c.grp))
        )
        .group_by(m.c.person, c.c.value)
        .subquery("a")
    )

    def flagged(p: Any) -> Any:
        return or_(func.coalesce(p, 0) > high, and_(func.coalesce(p, 0) < low, alone.c.alone >= low))

    # the releases each person is in: a value that one of them leaves out of the person's group is ruled out by
    # that release alone (its `lowest` is 0), so no combination discloses it
    held = select(members.c.person, func.count().label("releases")).group_by(members.c.person).subquery("h")
    lowest = case((alone.c.holding == held.c.releases, alone.c.least), else_=0.0)
    persons, vals, xa = tables.persons.alias("pe"), tables.vals.alias("v"), x.alias("x")
    joined = (
        alone.join(held, held.c.person == alone.c.person)
        .join(persons, persons.c.person == alone.c.person)
        .join(vals, vals.c.value == alone.c.value)
        .outerjoin(xa, and_(xa.c.person == alone.c.person, xa.c.value == alone.c.value))
    )
    whens = [(alone.c.alone > high, ALONE)]
    for j, table in enumerate(pair_tables):
        y = table.alias(f"y{j}")
        joined = joined.outerjoin(y, and_(y.c.person == alone.c.person, y.c.value == alone.c.value))
        whens.append((flagged(y.c.p), j + 1))
    p = func.coalesce(xa.c.p, 0)
    cause = case((sa.not_(flagged(xa.c.p)), sa.null()), *whens, else_=TOGETHER)
    coded = (
        select(
            persons.c.pseudonym,
            vals.c.label,
            p.label("probability"),
            alone.c.alone,
            (p > high).label("positive"),
            and_(p < low, alone.c.alone >= low).label("negative"),
            cause.label("cause_code"),
            lowest.label("lowest"),
        )
        .select_from(joined)
        .subquery("coded")
    )
    every = [
        coded.c[c]
        for c in ("pseudonym", "label", "probability", "alone", "positive", "negative", "cause_code", "lowest")
    ]
    return select(*every, causes.c.cause).join_from(coded, causes, causes.c.code == coded.c.cause_code, isouter=True)


def _report(
    db: Database,
    conn: Connection,
    tables: ReleaseTables,
    result: sa.TableClause,
    x: sa.TableClause,
    figures: dict[str, Any],
    settings: InferenceSettings,
) -> InferenceReport:
    """The figures of a solve: sizes, constraints, entropies per release, the first disclosures of each kind."""
    persons, values, unions = db.execute(
        conn,
        select(func.count(result.c.pseudonym.distinct()), func.count(result.c.label.distinct()), func.count()),
    ).one()
    variables = tables.count(x) + figures["snapped"]
    relations = tables.count(tables.counts)
    entropy = []
    for r, release in enumerate(tables.releases, start=1):
        held, alone = db.execute(conn, _entropy_alone(tables.counts, r)).one()
        in_release = select(tables.members.c.person).where(tables.members.c.r == r)
        together = db.execute(conn, _entropy(x, x.c.person.in_(in_release))).scalar_one()
        entropy.append(
            ReleaseEntropy(name=release.name, persons=int(held or 0), alone=float(alone or 0), together=float(together))
        )
    total = db.execute(conn, _entropy(x, sa.true())).scalar_one()
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
        statements=figures["statements"] + 6 + 2 * len(tables.releases),
        entropy=entropy,
        total_together=float(total),
        forced_zero=figures["snapped"],
    )
    listed_columns = [result.c[c] for c in ("pseudonym", "label", "probability", "alone", "cause")]
    certainty = func.greatest(result.c.probability, 1 - result.c.probability)
    kinds: dict[str, tuple[Any, list[Any]]] = {
        "positive": (result.c.positive.is_(True), [result.c.probability.desc()]),
        "negative": (result.c.negative.is_(True), [result.c.alone.desc(), result.c.probability]),
        "combined": (_combined(result, settings), [certainty.desc()]),
    }
    for kind, (flagged, order) in kinds.items():
        rows = db.execute(
            conn,
            select(*listed_columns).where(flagged).order_by(*order, result.c.pseudonym, result.c.label).limit(LISTED),
        ).all()
        listed = [
            {"pseudonym": p, "value": v, "probability": float(pr), "alone": float(a), "releases": c}
            for p, v, pr, a, c in rows
        ]
        count = db.execute(conn, select(func.count()).select_from(result).where(flagged)).scalar_one()
        setattr(report, kind, listed)
        setattr(report, f"{kind}_count", int(count))
    return report


def _combined(result: sa.TableClause, settings: InferenceSettings) -> sa.ColumnElement[bool]:
    """The disclosures no one release gives alone (InferenceReport.combined), over the result table."""
    return or_(
        and_(result.c.positive.is_(True), result.c.cause_code != ALONE),
        and_(result.c.negative.is_(True), result.c.lowest >= settings.min_probability - settings.tolerance),
    )


def _entropy_alone(counts: sa.TableClause, r: int) -> sa.Select[Any]:
    """The persons of release r and their H(S | I) from release r alone: each group's value distribution."""
    c = (
        select(counts.c.grp, counts.c.cnt, func.sum(counts.c.cnt).over(partition_by=counts.c.grp).label("total"))
        .where(counts.c.r == r)
        .subquery("c")
    )
    h = -c.c.cnt * func.ln(sa.cast(c.c.cnt, sa.Double) / c.c.total)
    g = select(func.sum(c.c.cnt).label("size"), func.sum(h).label("h")).group_by(c.c.grp).subquery("g")
    return select(func.sum(g.c.size), func.sum(g.c.h))


def _entropy(x: sa.TableClause, persons: Any) -> sa.Select[Any]:
    """H(S | I) of the solution `x` over the persons `persons` admits."""
    return select(func.coalesce(func.sum(-x.c.p * func.ln(x.c.p)), 0)).where(x.c.p > 0, persons)
