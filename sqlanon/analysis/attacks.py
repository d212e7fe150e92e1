"""Attacks and risk of a release, as SQL over its classes (never its rows in Python).

Every analysis reads one frequency set: per class (the QI values as
published) and value of one sensitive attribute, the tuples with that value.
From it, one statement per table computes:

- homogeneity (l-diversity paper, section 3): classes whose tuples all share
  one sensitive value reveal it; nearly homogeneous ones (the most frequent
  value holds at least `near` of the class) nearly do;
- background knowledge: an adversary who can rule out b values for a person
  learns the true one when the person's class holds at most b + 1 distinct
  values (b = 0 is homogeneity; l-diversity with l = b + 2 stops it);
- re-identification risk for the prosecutor model, as ARX reports it: a
  record's risk is 1 / its class size; the highest and average risk, the
  records whose risk is above a threshold, the share of unique records; with a
  population table the release was drawn from, the journalist model (1 / the
  class's size in the population) and the marketer risk (the expected share
  of records re-identified: the sum over classes of n / N, over the rows).

Classes that the criteria make us suppress (with a suppression limit) are
not released, so they are left out; their tuples are counted as suppressed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import text
from sqlalchemy.engine import Connection

from ..errors import ConfigError, DataError

if TYPE_CHECKING:
    import pandas as pd

REVEALED_SHOWN = 10  # revealed sensitive values listed per table


@dataclass(frozen=True)
class AnalysisSettings:
    near: float = 0.95  # a class is nearly homogeneous when its most frequent value holds this share
    risk_threshold: float = 0.2  # records whose prosecutor risk (1 / class size) is above this are at risk
    background: int = 2  # values an adversary can rule out: b = 0..background

    def __post_init__(self) -> None:
        if not 0.5 < self.near <= 1:
            raise ConfigError(f"near-homogeneity share {self.near} must be above 0.5 and at most 1 (default 0.95)")
        if not 0 < self.risk_threshold <= 1:
            raise ConfigError(
                f"risk threshold {self.risk_threshold} must be above 0 and at most 1 (e.g. 0.2: "
                "classes of fewer than 5)"
            )
        if not 0 <= self.background <= 20:
            raise ConfigError(f"background knowledge {self.background} must be a whole number from 0 to 20")


def default_background(job: Any, sensitive: str | None = None) -> int:
    """How many values the background-knowledge analysis lets an adversary rule out: l - 2 for the job's
    l-diversity on the attribute (what it is meant to withstand, the paper's argument), else 2."""
    attribute = sensitive or (job.sensitive[0] if job.sensitive else None)
    ls = [int(c.l) for c in job.criteria if getattr(c, "l", None) is not None and attribute in c.sensitive_attributes()]
    return max(max(ls) - 2, 0) if ls else 2


@dataclass(kw_only=True)
class TableAnalysis:
    """The attack and risk figures of one release (a node of the lattice, or a published table)."""

    label: str  # the node's levels joined by commas, or the table's name
    sensitive: str
    rows: int  # released tuples
    classes: int
    suppressed: int
    homogeneous_classes: int
    homogeneous_tuples: int
    nearly_homogeneous_classes: int
    nearly_homogeneous_tuples: int
    revealed_values: list[str]
    disclosed_by_background: dict[int, int]  # b -> tuples whose value b ruled-out values disclose
    highest_risk: float
    average_risk: float
    records_at_risk: int
    unique_share: float
    utility: dict[str, Any] = field(default_factory=dict)
    # with a population table (the journalist and marketer models): risk 1 / the class's size in the population
    journalist_highest_risk: float | None = None
    journalist_records_at_risk: int | None = None
    marketer_risk: float | None = None  # the expected share of records re-identified: sum of n / N, over rows
    bayes: dict[str, int] = field(default_factory=dict)  # the Bayes-optimal audit (nodes only; see bayes_audit)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["disclosed_by_background"] = {str(b): n for b, n in self.disclosed_by_background.items()}
        return data


def analyze_frequency_set(
    conn: Connection,
    label: str,
    sensitive: str,
    definition: str,
    class_columns: list[str],
    value_column: str,
    settings: AnalysisSettings,
    suppressed_classes: str | None = None,
    population: str | None = None,
) -> TableAnalysis:
    """The figures of one release from `definition`: a SELECT of `class_columns`, `value_column` and cnt.

    `suppressed_classes`, when given, is a SELECT of the class columns of the classes left out of the release;
    `population`, a SELECT of the same class columns and cnt over the population the release was drawn from.
    """
    classes = ", ".join(class_columns)
    left_out = ""
    if suppressed_classes:
        on = " AND ".join(f"c.{col} = x.{col}" for col in class_columns)
        left_out = f"WHERE NOT EXISTS (SELECT 1 FROM ({suppressed_classes}) x WHERE {on})"
    background = ", ".join(
        f"COALESCE(SUM(CASE WHEN distinct_values <= {b + 1} THEN n END), 0) AS b{b}"
        for b in range(settings.background + 1)
    )
    sql = (
        f"WITH fs AS MATERIALIZED ({definition}), "
        f"all_classes AS (SELECT {classes}, SUM(cnt) AS n, COUNT(*) AS distinct_values, MAX(cnt) AS top "
        f"FROM fs GROUP BY {classes}), "
        f"released AS (SELECT * FROM all_classes c {left_out}) "
        f"SELECT COALESCE(SUM(n), 0), COUNT(*), (SELECT COALESCE(SUM(n), 0) FROM all_classes), "
        f"COALESCE(SUM(CASE WHEN distinct_values = 1 THEN 1 END), 0), "
        f"COALESCE(SUM(CASE WHEN distinct_values = 1 THEN n END), 0), "
        f"COALESCE(SUM(CASE WHEN top >= :near * n THEN 1 END), 0), "
        f"COALESCE(SUM(CASE WHEN top >= :near * n THEN n END), 0), "
        f"COALESCE(MAX(1.0 / n), 0), COALESCE(SUM(CASE WHEN 1.0 / n > :risk THEN n END), 0), "
        f"COALESCE(SUM(CASE WHEN n = 1 THEN 1 END), 0), {background} FROM released"
    )
    values = {"near": settings.near, "risk": settings.risk_threshold}
    row = conn.execute(text(sql), values).one()
    rows, n_classes, everything = int(row[0]), int(row[1]), int(row[2])
    on = " AND ".join(f"fs.{col} = r.{col}" for col in class_columns)
    revealed = (
        conn.execute(
            text(
                f"WITH fs AS MATERIALIZED ({definition}), all_classes AS (SELECT {classes}, COUNT(*) AS "
                "distinct_values "
                f"FROM fs GROUP BY {classes}), released AS (SELECT * FROM all_classes c {left_out}) "
                f"SELECT DISTINCT CAST(fs.{value_column} AS VARCHAR) AS v FROM fs JOIN released r ON {on} "
                f"WHERE r.distinct_values = 1 ORDER BY v LIMIT {REVEALED_SHOWN}"
            )
        )
        .scalars()
        .all()
    )
    analysis = TableAnalysis(
        label=label,
        sensitive=sensitive,
        rows=rows,
        classes=n_classes,
        suppressed=everything - rows,
        homogeneous_classes=int(row[3]),
        homogeneous_tuples=int(row[4]),
        nearly_homogeneous_classes=int(row[5]),
        nearly_homogeneous_tuples=int(row[6]),
        revealed_values=["NULL" if v is None else v for v in revealed],
        disclosed_by_background={b: int(row[10 + b]) for b in range(settings.background + 1)},
        highest_risk=float(row[7]),
        average_risk=n_classes / rows if rows else 0.0,
        records_at_risk=int(row[8]),
        unique_share=int(row[9]) / rows if rows else 0.0,
    )
    if population is not None:
        _population_risk(conn, analysis, definition, classes, left_out, population, values)
    return analysis


def _population_risk(
    conn: Connection,
    analysis: TableAnalysis,
    definition: str,
    classes: str,
    left_out: str,
    population: str,
    values: Mapping[str, object],
) -> None:
    """Journalist and marketer risk: each released class matched with its size in the population."""
    on = " AND ".join(f"r.{c} = p.{c}" for c in classes.split(", "))
    row = conn.execute(
        text(
            f"WITH fs AS ({definition}), all_classes AS (SELECT {classes}, SUM(cnt) AS n FROM fs GROUP BY {classes}), "
            f"released AS (SELECT * FROM all_classes c {left_out}), "
            f"pop AS (SELECT {classes}, SUM(cnt) AS f FROM ({population}) q GROUP BY {classes}) "
            f"SELECT COALESCE(MAX(1.0 / p.f), 0), COALESCE(SUM(CASE WHEN 1.0 / p.f > :risk THEN r.n END), 0), "
            f"COALESCE(SUM(r.n / CAST(p.f AS DOUBLE PRECISION)), 0), "
            f"COALESCE(SUM(CASE WHEN p.f IS NULL OR p.f < r.n THEN 1 END), 0) FROM released r LEFT JOIN pop p ON {on}"
        ),
        values,
    ).one()
    if int(row[3]):
        raise DataError(
            f"the population table holds fewer tuples than the release in {int(row[3])} class(es) of "
            f"{analysis.label}: a population must contain the table it is compared with"
        )
    analysis.journalist_highest_risk = float(row[0])
    analysis.journalist_records_at_risk = int(row[1])
    analysis.marketer_risk = float(row[2]) / analysis.rows if analysis.rows else 0.0


@dataclass(kw_only=True, frozen=True)
class BayesSettings:
    """Thresholds of the Bayes-optimal audit (l-diversity paper, section 3; ../docs in the README)."""

    delta: float = 0.05  # positive disclosure: a person's true value has posterior > 1 - delta
    epsilon: float = 0.05  # negative disclosure: some value of the person's class has posterior < epsilon
    rho1: float = 0.2  # (rho1, rho2) breach: prior < rho1 and posterior > rho2, or prior > 1 - rho1 and
    rho2: float = 0.8  # posterior < 1 - rho2

    def __post_init__(self) -> None:
        for name in ("delta", "epsilon", "rho1", "rho2"):
            if not 0 < getattr(self, name) < 1:
                raise ConfigError(f"Bayes audit {name} {getattr(self, name)} must be between 0 and 1 (exclusive)")
        if self.rho1 >= self.rho2:
            raise ConfigError(f"Bayes audit rho1 ({self.rho1}) must be below rho2 ({self.rho2})")


def bayes_audit(
    conn: Connection,
    cells: str,
    exact: list[str],
    classes: list[str],
    settings: BayesSettings,
    suppressed_classes: str | None = None,
) -> dict[str, int]:
    """Tuples with positive disclosure, negative disclosure and (rho1, rho2) breaches, for an adversary whose
    prior is the table itself: f(s | q) from the original QI values q.

    `cells` SELECTs, per original QI values (`exact` columns), published class (`classes`, a function of them)
    and sensitive value s: cnt. The posterior of value s for a person with QI q published in class q* is
    beta(q, s) = n(q*, s) f(s|q) / f(s|q*), normalized over the values s of q* (the paper's Theorem 3.1), with
    n(q*, s) counted in the release (suppressed classes left out) and f from the whole table. Without
    suppression beta(q, s) = f(s|q): the audit then shows what an adversary who knows the table learns from any
    release, the paper's argument that Bayes-optimal privacy cannot be achieved by generalization alone.
    """
    q, g = ", ".join(exact), ", ".join(classes)
    left_out = ""
    if suppressed_classes:
        on = " AND ".join(f"x.{c} = c.{c}" for c in classes)
        left_out = f"WHERE NOT EXISTS (SELECT 1 FROM ({suppressed_classes}) x WHERE {on})"
    by_q = " AND ".join(f"r.{c} = nq.{c}" for c in exact)
    by_g = " AND ".join(f"r.{c} = {{t}}.{c}" for c in classes)
    own = " AND ".join(f"o.{c} = r.{c}" for c in exact)
    sql = (
        f"WITH cells AS MATERIALIZED ({cells}), released AS (SELECT * FROM cells c {left_out}), "
        f"nq AS (SELECT {q}, SUM(cnt) AS n FROM cells GROUP BY {q}), "
        f"prior_gs AS (SELECT {g}, s, SUM(cnt) AS n FROM cells GROUP BY {g}, s), "
        f"prior_g AS (SELECT {g}, SUM(cnt) AS n FROM cells GROUP BY {g}), "
        f"pub AS (SELECT {g}, s, SUM(cnt) AS n FROM released GROUP BY {g}, s), "
        f"persons AS (SELECT {q}, {g}, SUM(cnt) AS n FROM released GROUP BY {q}, {g}), "
        f"terms AS (SELECT r.*, p.s, COALESCE(o.cnt, 0) AS own, CAST(COALESCE(o.cnt, 0) AS DOUBLE PRECISION) / nq.n "
        f"AS alpha, p.n * (CAST(COALESCE(o.cnt, 0) AS DOUBLE PRECISION) / nq.n) / "
        f"(CAST(pgs.n AS DOUBLE PRECISION) / pg.n) AS term "
        f"FROM persons r JOIN nq ON {by_q} JOIN pub p ON {by_g.format(t='p')} "
        f"JOIN prior_gs pgs ON {by_g.format(t='pgs')} AND pgs.s = p.s JOIN prior_g pg ON {by_g.format(t='pg')} "
        f"LEFT JOIN cells o ON {own} AND o.s = p.s), "
        f"beta AS (SELECT t.*, term / SUM(term) OVER (PARTITION BY {q}) AS beta FROM terms t), "
        f"per_q AS (SELECT {q}, MAX(n) AS n, "
        f"SUM(CASE WHEN own > 0 AND beta > 1 - :delta THEN own ELSE 0 END) AS positive, "
        f"MAX(CASE WHEN beta < :epsilon AND own < n THEN 1 ELSE 0 END) AS negative, "
        f"MAX(CASE WHEN (alpha < :rho1 AND beta > :rho2) OR (alpha > 1 - :rho1 AND beta < 1 - :rho2) THEN 1 "
        f"ELSE 0 END) AS breach FROM beta GROUP BY {q}) "
        f"SELECT COALESCE(SUM(positive), 0), COALESCE(SUM(negative * n), 0), COALESCE(SUM(breach * n), 0) "
        f"FROM per_q"
    )
    values = {"delta": settings.delta, "epsilon": settings.epsilon, "rho1": settings.rho1, "rho2": settings.rho2}
    positive, negative, breach = conn.execute(text(sql), values).one()
    return {
        "positive_disclosure_tuples": int(positive),
        "negative_disclosure_tuples": int(negative),
        "rho_breach_tuples": int(breach),
    }


@dataclass
class AnalysisReport:
    """Every analyzed release, and the homogeneity attack over all of them (the paper's per-table averages)."""

    sensitive: str
    settings: AnalysisSettings
    tables: list[TableAnalysis]

    @property
    def affected_tables(self) -> int:
        """Releases with at least one homogeneous class."""
        return sum(1 for t in self.tables if t.homogeneous_classes)

    def summary(self) -> dict[str, Any]:
        count = len(self.tables) or 1
        return {
            "tables": len(self.tables),
            "affected_tables": self.affected_tables,
            "average_homogeneous_classes": sum(t.homogeneous_classes for t in self.tables) / count,
            "average_homogeneous_tuples": sum(t.homogeneous_tuples for t in self.tables) / count,
            "average_nearly_homogeneous_classes": sum(t.nearly_homogeneous_classes for t in self.tables) / count,
            "average_nearly_homogeneous_tuples": sum(t.nearly_homogeneous_tuples for t in self.tables) / count,
        }

    def exceeds(self, max_risk: float | None, max_homogeneous: int | None) -> list[str]:
        """What goes over the given limits (for exit code 1), one sentence each."""
        found = []
        for t in self.tables:
            if max_risk is not None and t.highest_risk > max_risk:
                found.append(f"{t.label}: highest risk {t.highest_risk:.3g} above {max_risk}")
            if max_homogeneous is not None and t.homogeneous_tuples > max_homogeneous:
                found.append(
                    f"{t.label}: {t.homogeneous_tuples} tuples in homogeneous classes, above {max_homogeneous}"
                )
        return found

    def to_dict(self) -> dict[str, Any]:
        return {
            "sensitive": self.sensitive,
            "settings": asdict(self.settings),
            "summary": self.summary(),
            "tables": [t.to_dict() for t in self.tables],
        }

    def frame(self) -> pd.DataFrame:
        """One row per release: its attack, risk and Bayes figures, then its utility (columns prefixed)."""
        import pandas as pd

        rows = []
        for t in self.tables:
            flat = {k: v for k, v in t.to_dict().items() if k not in ("utility", "bayes", "disclosed_by_background")}
            flat.update({f"disclosed_b{b}": n for b, n in t.disclosed_by_background.items()})
            flat.update(t.bayes)
            flat.update({f"utility_{k}": v for k, v in t.utility.items()})
            rows.append(flat)
        return pd.DataFrame(rows)
