"""Attacks and risk of a release, as SQL over its classes (never its rows in Python; the statements are
sqlanon.engine.attacks', which returns named figures that this module turns into a TableAnalysis).

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

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Connection

from ..criteria import Criterion
from ..engine import attacks as attack_sql
from ..errors import ConfigError, DataError
from ..model.uniqueness import Histogram

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


#: the figures of the attacks on a sensitive value (TableAnalysis), which a job without one has not
ATTACK_FIGURES = (
    "homogeneous_classes",
    "homogeneous_tuples",
    "nearly_homogeneous_classes",
    "nearly_homogeneous_tuples",
    "revealed_values",
    "disclosed_by_background",
    "bayes",
)


@dataclass(kw_only=True)
class TableAnalysis:
    """The attack and risk figures of one release (a node of the lattice, or a published table)."""

    label: str  # the node's levels joined by commas, or the table's name
    sensitive: str | None  # the attribute the attacks analyze (None: the job has none, and no attack applies)
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
    # with the job's population uniqueness: its model's estimate of the population's uniques (criteria.risk)
    population_unique_share: float | None = None
    bayes: dict[str, int] = field(default_factory=dict)  # the Bayes-optimal audit (nodes only: engine.node_releases)

    def to_dict(self) -> dict[str, Any]:
        """Every figure; without a sensitive attribute, those of the attacks on one are left out (no release
        reveals a value it does not hold)."""
        data = asdict(self)
        data["disclosed_by_background"] = {str(b): n for b, n in self.disclosed_by_background.items()}
        if self.sensitive is None:
            for name in ATTACK_FIGURES:
                data.pop(name)
        return data


def analyze_frequency_set(
    conn: Connection,
    *,
    label: str,
    sensitive: str | None,
    definition: str,
    class_columns: list[str],
    value_column: str,
    settings: AnalysisSettings,
    uniqueness: Criterion | None = None,
    persons: str | None = None,
) -> TableAnalysis:
    """The figures of one release from `definition`: a SELECT of `class_columns`, `value_column` and cnt (and with
    several values per person, a value's holders, the column `persons` summing to a class's persons)."""
    release = attack_sql.Release(definition=definition, classes=class_columns, persons=persons)
    [analysis] = analyze_frequency_sets(
        conn,
        release,
        labels={(): label},
        sensitive=sensitive,
        value_column=value_column,
        settings=settings,
        uniqueness=uniqueness,
    ).values()
    return analysis


def analyze_frequency_sets(
    conn: Connection,
    release: attack_sql.Release,
    *,
    labels: dict[tuple[Any, ...], str],
    sensitive: str | None,
    value_column: str,
    settings: AnalysisSettings,
    population: str | None = None,
    uniqueness: Criterion | None = None,
) -> dict[tuple[Any, ...], TableAnalysis]:
    """The figures of each release of `release` (by its `by` values, each with its label in `labels`), in two
    statements whatever their number (three with `population`: a SELECT of the same class columns and cnt over
    the population the releases were drawn from)."""
    figures = attack_sql.release_figures(
        conn, release, near=settings.near, risk=settings.risk_threshold, background=settings.background
    )
    revealed = attack_sql.revealed_values(conn, release, value=value_column, limit=REVEALED_SHOWN) if sensitive else {}
    none: dict[str, Any] = dict.fromkeys(attack_sql.RELEASE_FIGURES, 0)
    none["disclosed_by_background"] = dict.fromkeys(range(settings.background + 1), 0)
    analyses = {}
    for key, label in labels.items():
        found = figures.get(key, none)
        rows, classes = int(found["rows"]), int(found["classes"])
        analyses[key] = TableAnalysis(
            label=label,
            sensitive=sensitive,
            rows=rows,
            classes=classes,
            suppressed=int(found["every_tuple"]) - rows,
            homogeneous_classes=int(found["homogeneous_classes"]),
            homogeneous_tuples=int(found["homogeneous_tuples"]),
            nearly_homogeneous_classes=int(found["nearly_homogeneous_classes"]),
            nearly_homogeneous_tuples=int(found["nearly_homogeneous_tuples"]),
            revealed_values=["NULL" if v is None else v for v in revealed.get(key, [])],
            disclosed_by_background=found["disclosed_by_background"],
            highest_risk=float(found["highest_risk"]),
            average_risk=classes / rows if rows else 0.0,
            records_at_risk=int(found["records_at_risk"]),
            unique_share=int(found["unique"]) / rows if rows else 0.0,
        )
    if population is not None:
        _population_risk(conn, analyses, release, population, settings)
    if uniqueness is not None:
        _population_uniques(conn, analyses, release, uniqueness)
    return analyses


def _population_uniques(
    conn: Connection, analyses: dict[tuple[Any, ...], TableAnalysis], release: attack_sql.Release, model: Criterion
) -> None:
    """Each release's population uniques as the job's population uniqueness estimates them (one statement for
    every release's class sizes, the models solved together)."""
    sizes = attack_sql.class_sizes(conn, release)
    keys = list(analyses)
    estimate: Any = model  # criteria.risk.PopulationUniqueness
    shares = estimate.unique_shares([Histogram.of(sizes.get(key, {})) for key in keys])
    for key, share in zip(keys, shares):
        analyses[key].population_unique_share = share


def _population_risk(
    conn: Connection,
    analyses: dict[tuple[Any, ...], TableAnalysis],
    release: attack_sql.Release,
    population: str,
    settings: AnalysisSettings,
) -> None:
    """Journalist and marketer risk: each released class matched with its size in the population."""
    by_release = attack_sql.population_figures(conn, release, population=population, risk=settings.risk_threshold)
    for key, analysis in analyses.items():
        figures = by_release.get(key, {"highest_risk": 0, "records_at_risk": 0, "marketer_sum": 0})
        if int(figures.get("uncontained_classes", 0)):
            raise DataError(
                f"the population table holds fewer tuples than the release in {int(figures['uncontained_classes'])} "
                f"class(es) of {analysis.label}: a population must contain the table it is compared with"
            )
        analysis.journalist_highest_risk = float(figures["highest_risk"])
        analysis.journalist_records_at_risk = int(figures["records_at_risk"])
        analysis.marketer_risk = float(figures["marketer_sum"]) / analysis.rows if analysis.rows else 0.0


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


@dataclass
class AnalysisReport:
    """Every analyzed release, and the homogeneity attack over all of them (the paper's per-table averages); a
    job without a sensitive attribute (`sensitive` None) has the risk and utility figures only."""

    sensitive: str | None
    settings: AnalysisSettings
    tables: list[TableAnalysis]
    search_seconds: float = 0.0  # finding the minimal releases (0: the releases were given)
    analysis_seconds: float = 0.0  # what followed: the releases analyzed

    @property
    def affected_tables(self) -> int:
        """Releases with at least one homogeneous class."""
        return sum(1 for t in self.tables if t.homogeneous_classes)

    def summary(self) -> dict[str, Any]:
        count = len(self.tables) or 1
        if self.sensitive is None:
            return {"tables": len(self.tables), "highest_risk": max((t.highest_risk for t in self.tables), default=0)}
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
            if self.sensitive is not None:
                flat.update({f"disclosed_b{b}": n for b, n in t.disclosed_by_background.items()})
                flat.update(t.bayes)
            flat.update({f"utility_{k}": v for k, v in t.utility.items()})
            rows.append(flat)
        return pd.DataFrame(rows)
