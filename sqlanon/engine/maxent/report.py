"""Every release solved together (and each pair), the probability table and the report's figures."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Connection

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


def release_pairs(count: int) -> list[list[int]]:
    """Every pair of releases (1-based), to tell which two together cause a disclosure."""
    return [list(pair) for pair in itertools.combinations(range(1, count + 1), 2)]


def analyze_releases(
    tables: ReleaseTables,
    *,
    settings: InferenceSettings,
    output: str | None = None,
    progress: Progress = silent,
) -> InferenceReport:
    """Solve every release of `tables` together (and, with more than two, each pair, to name the pair behind each
    disclosure), write P(s | person) to `output` (a table reference) when given, and report; drops `tables`.
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
            f"CREATE TABLE {output} AS SELECT pseudonym AS {db.q(tables.series.pseudonym)}, label AS "
            f"{db.q(tables.sensitive)}, probability, alone, positive, negative, cause FROM {result}",
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
