"""Re-identification risk, ARX's risk-based models with ARX's semantics: bounds on the whole release's distribution
of class sizes (average re-identification risk, with its optional highest-risk and records-at-risk bounds, and
sample uniqueness: ARX's AverageReidentificationRisk and SampleUniqueness), population uniqueness estimated from
the release's class sizes (ARX's PopulationUniqueness: Pitman, Zayatz, SNB, Dankar), and k-map estimated from the
sample (El Emam and Dankar; ARX's KMap with a cell size estimator)."""

from __future__ import annotations

import copy
import math
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..model import uniqueness
from .base import Criterion, number, spec_of
from .k_anonymity import KAnonymity
from .presence import population_statistic
from .view import FrequencySetView, SqlFragment


class ReleaseCriterion(Criterion):
    """A bound on the release's distribution of class sizes, not on each class (`whole_release`).

    As in ARX, suppression removes the smallest classes first (ties: by their class columns) until the bound holds
    over the classes left: a class violates the criterion when the bound fails over it and every class after it in
    that order, which one window per node computes (sums over the classes from the largest down). Where other
    criteria hold too, the bound is over the classes they leave (sqlanon.engine.frequency.violating_classes_sql).

    Monotone under generalization: merging classes lowers their count and the share of small ones. Monotone under
    suppression where removing the smallest classes first suppresses the fewest tuples the bound allows (average
    risk, sample uniqueness): a generalization Y of a node X then suppresses no more than X, since suppressing in Y
    the classes made of X's suppressed ones alone leaves classes that each hold one X kept, so no more classes
    (nor uniques) over no fewer records, and those are no fewer tuples than X's. Where it is not (records at risk:
    a subset of the small classes may add up closer to what the bound asks), the search stays exact with
    suppression (ARX prunes as if it were: `search.assume_monotone`)."""

    whole_release = True

    def kept_sums(self) -> dict[str, str]:
        """Sums over the classes kept beside `kept_classes` and `kept_records` (read by `_kept_columns`): name ->
        SQL over a class's n."""
        return {}

    @abstractmethod
    def holds(self) -> SqlFragment:
        """A predicate over the kept sums, true where the bound holds over those classes."""

    @abstractmethod
    def figure(self) -> str:
        """The audit's figure, SQL over the kept sums (at the first class, those of every class)."""

    @property
    def figure_sql(self) -> str:  # type: ignore[override]
        """The figure over every class: the largest over the classes from each one on (removing the smallest
        classes first only lowers it)."""
        return f"MAX({self.figure()})"

    def class_statistic(self, fs: FrequencySetView) -> SqlFragment:
        return self._kept(fs, None)

    def violating_classes(self, fs: FrequencySetView, also: SqlFragment | None = None) -> SqlFragment:
        """The classes `also` takes (the per-class criteria's size bounds, see
        engine.frequency.violating_classes_sql), and those the bound takes from the others."""
        return self._violators(fs, self._kept(fs, also), also)

    def _kept(self, fs: FrequencySetView, taken: SqlFragment | None) -> SqlFragment:
        """Per class: n and the kept sums over it and every class ranked after it (larger, or as large and after it
        by its class columns), leaving out the classes `taken` (a predicate over n) takes."""
        nodes = [c for c in fs.class_columns if c in fs.node_columns]
        # where only each node's count of violators and their tuples are read, ties may break any way: ordering by
        # size alone sorts less (Adult, sample uniqueness at 1% with 4%: 7.7 -> 6.9 s)
        ties = [] if fs.counts_only else [c for c in fs.class_columns if c not in nodes]
        columns, windows = self._kept_columns(nodes, ties, taken)
        return SqlFragment(
            f"SELECT {fs.classes}, n, {columns} FROM ({fs.class_sizes()}) AS sizes WINDOW {windows}",
            {} if taken is None else taken.params,
        )

    def _kept_columns(self, nodes: list[str], ties: list[str], taken: SqlFragment | None) -> tuple[str, str]:
        """The kept sums as columns, and the windows they read (per node: `nodes`, ties broken by `ties`): sums
        from the largest class down."""
        sums = {"kept_classes": "1", "kept_records": "n", **self.kept_sums()}
        if taken is not None:
            sums = {name: f"CASE WHEN {taken.sql} THEN 0 ELSE {sql} END" for name, sql in sums.items()}
        summed = ", ".join(f"CAST(SUM({sql}) OVER w AS BIGINT) AS {name}" for name, sql in sums.items())
        order = ", ".join(["n DESC", *(f"{c} DESC" for c in ties)])
        return summed, f"w AS ({_partition(nodes)}ORDER BY {order} ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)"

    def violation(self) -> SqlFragment:
        holds = self.holds()
        return SqlFragment(f"NOT ({holds.sql})", holds.params)


def _partition(columns: list[str]) -> str:
    return f"PARTITION BY {', '.join(columns)} " if columns else ""


def _share(part: str) -> str:
    """SQL: a kept sum's share of the kept records (as ARX divides them, in floating point; NULL where the classes
    from a taken one on are all taken)."""
    return f"CAST({part} AS DOUBLE PRECISION) / NULLIF(kept_records, 0)"


def size_threshold(risk: float) -> int:
    """The smallest class size whose risk (1 / size) is at most `risk`, within ARX's 1% relative precision
    (ParameterTranslation.getSizeThreshold): 0.1 -> 10, 0.33 -> 3."""
    size = 1 / risk
    floor = math.floor(size)
    return floor + 1 if (1 / floor) - (1 / size) >= 0.01 * risk else floor


class AverageRisk(ReleaseCriterion):
    """The average re-identification risk (prosecutor: the classes over the records, the mean of 1 / class size
    over the records) is at most `threshold`; with `highest_risk`, at most a share `records_at_risk` of the records
    are in classes smaller than the size whose risk is `highest_risk` (ARX's AverageReidentificationRisk)."""

    name = "average_risk"
    figure_name = "average_risk"

    def __init__(self, *, threshold: float, highest_risk: float | None = None, records_at_risk: float | None = None):
        self.threshold = _risk(self.name, "threshold", threshold)
        if records_at_risk is not None and highest_risk is None:
            raise ConfigError(f"{self.name}: records_at_risk bounds the records above highest_risk; give highest_risk")
        self.highest_risk = None if highest_risk is None else _risk(self.name, "highest_risk", highest_risk)
        self.records_at_risk = None
        if highest_risk is not None:
            self.records_at_risk = float(number(self.name, "records_at_risk", records_at_risk or 0.0, 0.0, 1.0))
        self.monotone_under_suppression = highest_risk is None

    @classmethod
    def from_config(cls, spec: Any) -> AverageRisk:
        if not isinstance(spec, dict):
            spec = {"threshold": spec}
        return cls(**spec_of(cls.name, spec, {"threshold"}, {"highest_risk", "records_at_risk"}))

    def params(self) -> dict[str, Any]:
        bounds = {"highest_risk": self.highest_risk, "records_at_risk": self.records_at_risk}
        return {"threshold": self.threshold, **(bounds if self.highest_risk is not None else {})}

    def guarantee(self) -> str:
        text = (
            f"the average re-identification risk (one over the size of a record's group, averaged over the records) "
            f"is at most {self.threshold}"
        )
        if self.highest_risk is None:
            return text
        return (
            f"{text}, and at most a share {self.records_at_risk} of the records are in groups of fewer than "
            f"{size_threshold(self.highest_risk)} records (a risk above {self.highest_risk})"
        )

    def monotone_part(self) -> list[Criterion]:
        """The average alone, where records at risk are bounded too: the least suppression it needs is at most
        what both need, and it is monotone."""
        return [self] if self.highest_risk is None else [AverageRisk(threshold=self.threshold)]

    def kept_sums(self) -> dict[str, str]:
        if self.highest_risk is None:
            return {}
        return {"kept_at_risk": f"CASE WHEN n < {size_threshold(self.highest_risk)} THEN n ELSE 0 END"}

    def holds(self) -> SqlFragment:
        # as ARX computes it: one over the average class size
        average = "1.0 / (CAST(kept_records AS DOUBLE PRECISION) / NULLIF(kept_classes, 0)) <= :avgrisk_t"
        if self.highest_risk is None:
            return SqlFragment(average, {"avgrisk_t": self.threshold})
        return SqlFragment(
            f"{average} AND {_share('kept_at_risk')} <= :avgrisk_r",
            {"avgrisk_t": self.threshold, "avgrisk_r": self.records_at_risk},
        )

    def figure(self) -> str:
        return _share("kept_classes")

    def check_table_size(self, rows: int) -> None:
        if self.threshold < 1 / rows:
            raise ConfigError(
                f"{self.name}: threshold={self.threshold} is below 1/{rows}, the risk of the whole table as one "
                f"group ({rows} rows); no generalization can satisfy it; choose a threshold >= {1 / rows:.3g}"
            )


class SampleUniqueness(ReleaseCriterion):
    """At most a share `threshold` of the records are unique in the release (ARX's SampleUniqueness)."""

    name = "sample_uniqueness"
    figure_name = "unique_share"
    monotone_under_suppression = True

    def __init__(self, *, threshold: float):
        self.threshold = float(number(self.name, "threshold", threshold, 0.0, 1.0))

    @classmethod
    def from_config(cls, spec: Any) -> SampleUniqueness:
        if not isinstance(spec, dict):
            spec = {"threshold": spec}
        return cls(**spec_of(cls.name, spec, {"threshold"}))

    def params(self) -> dict[str, Any]:
        return {"threshold": self.threshold}

    def guarantee(self) -> str:
        return f"at most a share {self.threshold} of the records are unique (the only one of their group)"

    def _kept_columns(self, nodes: list[str], ties: list[str], taken: SqlFragment | None) -> tuple[str, str]:
        """Only unique classes are ever taken (the smallest go first, and once the uniques are gone the bound
        holds): from the r-th unique kept on (by `ties`), the kept uniques and records are the node's less r - 1,
        and from a larger class on, no unique is kept. Numbering the uniques first, in no order among them where
        ties may break any way, sorts on less than sums from the largest class down (Adult, 1% with 4%: 6.9 ->
        3.2-3.4 s; 2.0 -> 1.7-1.9 s without suppression); the node's totals read the same order, so PostgreSQL
        sorts once (22.8 s where two windows took 27.6 s)."""
        unique = "n = 1" if taken is None else f"n = 1 AND NOT ({taken.sql})"
        records = "n" if taken is None else f"CASE WHEN {taken.sql} THEN 0 ELSE n END"
        rank = "(ROW_NUMBER() OVER u - 1)"
        columns = (
            f"CASE WHEN {unique} THEN CAST(SUM(CASE WHEN {unique} THEN 1 ELSE 0 END) OVER a AS BIGINT) - {rank} "
            f"ELSE 0 END AS kept_unique, CAST(SUM({records}) OVER a AS BIGINT) - CASE WHEN {unique} THEN {rank} "
            "ELSE 0 END AS kept_records"
        )
        # the uniques first, then by `ties`; the node's totals over the same order (one sort for both)
        order = ", ".join([f"CASE WHEN {unique} THEN 0 ELSE 1 END", *ties])
        within = f"{_partition(nodes)}ORDER BY {order}"
        return columns, f"u AS ({within}), a AS ({within} ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)"

    def holds(self) -> SqlFragment:
        return SqlFragment(f"{_share('kept_unique')} <= :uniq_t", {"uniq_t": self.threshold})

    def figure(self) -> str:
        return _share("kept_unique")


def _risk(name: str, key: str, value: Any) -> float:
    """A share in (0, 1] (a risk of 0 holds for no release, nor samples a fraction 0 anything)."""
    share = float(number(name, key, value, 0.0, 1.0))
    if share == 0:
        raise ConfigError(f"{name}: {key} must be > 0, got {share}")
    return share


@dataclass(frozen=True)
class Sampled:
    """The population a table samples, as a criterion on it names it: `population_size` people, or the table's rows
    over `sampling_fraction` (one of the two)."""

    population_size: int | None
    sampling_fraction: float | None

    @staticmethod
    def of(name: str, population_size: Any, sampling_fraction: Any) -> Sampled:
        if (population_size is None) == (sampling_fraction is None):
            raise ConfigError(
                f"{name}: give the population the table samples, as population_size or sampling_fraction (one of them)"
            )
        return Sampled(
            None if population_size is None else number(name, "population_size", population_size, 1, whole=True),
            None if sampling_fraction is None else _risk(name, "sampling_fraction", sampling_fraction),
        )

    def params(self) -> dict[str, Any]:
        if self.population_size is not None:
            return {"population_size": self.population_size}
        return {"sampling_fraction": self.sampling_fraction}

    def fraction(self, name: str, rows: int) -> float:
        """The table's share of the population (a population smaller than the table is refused)."""
        if self.population_size is not None and self.population_size < rows:
            raise ConfigError(
                f"{name}: population_size={self.population_size} is smaller than the table ({rows} rows), "
                "which samples it; give the size of the population the table was drawn from"
            )
        return self.sampling_fraction or rows / (self.population_size or rows)

    def size(self, name: str, rows: int) -> int:
        """The population's size, for a table of `rows` (ARX's population model: rows over the fraction, rounded)."""
        fraction = self.fraction(name, rows)  # checks the population holds the table
        return self.population_size or round(rows / fraction)


class KMap(KAnonymity):
    """k-map (El Emam and Dankar; ARX's KMap): each class matches at least k people of the population the table
    samples. Counted where the job names the population (a research subset of its table, `subset:`): a class's
    rows in the population, which must be at least k (ARX's KMap with a DataSubset; monotone under generalization
    and suppression, as k-anonymity; the classes of the population without a row of the subset publish nothing
    and are not checked). Else estimated from the sample, as ARX's KMap with a cell size estimator: k', the least
    class size whose population count is at least k with probability 1 - significance under a Poisson (or
    zero-truncated Poisson) model of that count with mean k times the sampling fraction; the classes must then hold
    k' records (k-anonymity with k', so `k` below is k' once the table's size is known, and the job's k until
    then)."""

    name = "k_map"
    figure_name = "min_class_size"
    ESTIMATORS = ("poisson", "zero_truncated_poisson")
    population_hint = "or estimate it from the sample: give population_size or sampling_fraction"

    def __init__(
        self,
        *,
        k: int,
        population_size: int | None = None,
        sampling_fraction: float | None = None,
        significance: float | None = None,
        estimator: str | None = None,
    ):
        super().__init__(k)
        self.map_k = k
        # without a size of the population: the job's research subset names it (config checks there is one)
        self.reads_population = population_size is None and sampling_fraction is None
        self.fits_table = not self.reads_population
        self.type_1_error: float | None = None
        if self.reads_population:
            if significance is not None or estimator is not None:
                raise ConfigError(
                    f"{self.name}: significance and estimator apply to an estimate from population_size or "
                    "sampling_fraction; without them, the population is the table a research subset is drawn from"
                )
            self.figure_name = "min_population_size"
            return
        self.sampled = Sampled.of(self.name, population_size, sampling_fraction)
        self.significance = float(
            number(self.name, "significance", 0.01 if significance is None else significance, 0.0, 1.0)
        )
        estimator = estimator or "poisson"
        if estimator not in self.ESTIMATORS:
            raise ConfigError(
                f"{self.name}: estimator {estimator!r} is unknown; choose one of {', '.join(self.ESTIMATORS)}"
            )
        self.estimator = estimator

    @classmethod
    def from_config(cls, spec: Any) -> KMap:
        optional = {"population_size", "sampling_fraction", "significance", "estimator"}
        return cls(**spec_of(cls.name, spec, {"k"}, optional))

    def params(self) -> dict[str, Any]:
        if self.reads_population:
            return {"k": self.map_k}
        population = self.sampled.params()
        return {"k": self.map_k, **population, "significance": self.significance, "estimator": self.estimator}

    def guarantee(self) -> str:
        if self.reads_population:
            return (
                f"every group matches at least {self.map_k} people of the population (the table the published "
                "research subset was drawn from)"
            )
        return (
            f"every group holds at least {self.k} records, so that it matches at least {self.map_k} people of the "
            f"population (estimated: {self.estimator.replace('_', '-')} model, significance {self.significance})"
        )

    def fit_table(self, rows: int) -> None:
        if self.reads_population:
            return
        fraction = self.sampled.fraction(self.name, rows)
        derived, error = derived_k(self.map_k, fraction * self.map_k, self.significance, self.estimator)
        self.k, self.type_1_error = min(self.map_k, derived, rows), error

    def class_statistic(self, fs: FrequencySetView) -> SqlFragment:
        """Counted in the population: per class of the subset, n and its rows in the population as stat (which
        `violation`, k-anonymity's, bounds)."""
        if not self.reads_population:
            return super().class_statistic(fs)
        return population_statistic(self.name, fs, SqlFragment("n, pn AS stat", {}), SqlFragment("FALSE", {}))

    def size_violation(self) -> SqlFragment | None:
        return None if self.reads_population else super().size_violation()

    def least_class_size(self, table_counts: dict[str, dict[str | None, int]]) -> int:
        return 1 if self.reads_population else super().least_class_size(table_counts)

    def check_table_size(self, rows: int) -> None:
        if not self.reads_population:  # the population may hold k people where the subset has fewer rows
            super().check_table_size(rows)


def derived_k(k: int, mean: float, significance: float, estimator: str) -> tuple[int, float]:
    """ARX's k' for k-map (KMap.calculateKPoisson, calculateKZeroPoisson) and its type I error: the count of a
    class in the population is modelled as Poisson with `mean` (k times the sampling fraction), or zero-truncated
    Poisson; k' is one past the least count whose cumulative probability reaches 1 - significance (capped at
    k)."""

    def probability(i: int) -> float:
        return math.exp(-mean + i * math.log(mean) - math.lgamma(i + 1)) if mean > 0 else float(i == 0)

    threshold, value = 1 - significance, 0.0
    if estimator == "poisson":
        counter = 0
        while value < threshold:
            value += probability(counter)
            counter += 1
            if counter >= k:
                value = 1.0
                break
        return counter + 1, 1 - value
    truncated, counter = 1 - probability(0), 1
    while value < threshold:
        value += probability(counter) / truncated
        counter += 1
        if counter >= k:
            value = 1.0
            break
    return counter, 1 - value


class PopulationUniqueness(Criterion):
    """At most a share `threshold` of the population the table samples is estimated unique on the released QIs
    (ARX's PopulationUniqueness), by a model of the release's class-size histogram (model.uniqueness: Dankar's
    rule by default, or Pitman's, Zayatz's or SNB's), for a population of `population_size` people, or of the
    table's rows over `sampling_fraction`.

    Decided in Python over each release's histogram (`decided_by_histogram`: the histogram comes from SQL, see
    engine.histograms, and the model is a small numeric solve): with suppression, ARX's binary search over how
    many of the smallest classes to suppress (`classes_to_suppress`), which the engine then takes in SQL by rank
    (`with_cuts`). Monotone neither under generalization nor under suppression (ARX claims the first for Zayatz's
    model; sqlanon does not prune on it): the search checks every node."""

    name = "population_uniqueness"
    figure_name = "population_unique_share"
    whole_release = True
    decided_by_histogram = True
    fits_table = True
    monotone_under_generalization = False

    def __init__(
        self,
        *,
        threshold: float,
        model: str = "dankar",
        population_size: int | None = None,
        sampling_fraction: float | None = None,
        accuracy: float = uniqueness.ACCURACY,
        iterations_per_try: int = uniqueness.ITERATIONS_PER_TRY,
    ):
        self.threshold = float(number(self.name, "threshold", threshold, 0.0, 1.0))
        if model not in uniqueness.MODELS:
            raise ConfigError(f"{self.name}: model {model!r} is unknown; choose one of {', '.join(uniqueness.MODELS)}")
        self.model = model
        self.sampled = Sampled.of(self.name, population_size, sampling_fraction)
        self.solver = uniqueness.Solver(
            accuracy=_risk(self.name, "accuracy", accuracy),
            iterations_per_try=int(number(self.name, "iterations_per_try", iterations_per_try, 1, 1000, True)),
        )
        self.population = self.sampled.population_size or 0  # fit_table fixes it from the sampling fraction
        self.suppression_limit: int | None = None  # tuples: ARX's search stops once past it (fit_limit)
        self.cuts: dict[Any, int] | None = None  # per node: the smallest classes to suppress (with_cuts)

    @classmethod
    def from_config(cls, spec: Any) -> PopulationUniqueness:
        optional = {"model", "population_size", "sampling_fraction", "accuracy", "iterations_per_try"}
        return cls(**spec_of(cls.name, spec, {"threshold"}, optional))

    def params(self) -> dict[str, Any]:
        solver = {"accuracy": self.solver.accuracy, "iterations_per_try": self.solver.iterations_per_try}
        return {"threshold": self.threshold, "model": self.model, **self.sampled.params(), **solver}

    def guarantee(self) -> str:
        return (
            f"at most a share {self.threshold} of the population of {self.population or 'the'} people the table "
            f"samples is estimated unique on the published quasi-identifiers ({self.model.capitalize()}'s model)"
        )

    def fit_table(self, rows: int) -> None:
        self.population = self.sampled.size(self.name, rows)

    def fit_limit(self, max_suppressed: int) -> None:
        self.suppression_limit = max_suppressed

    def unique_shares(self, histograms: list[uniqueness.Histogram]) -> list[float | None]:
        """Per release, the estimated share of population uniques (None: the model found no estimate)."""
        return uniqueness.unique_shares(self.model, histograms, self.population, self.solver)

    def holds_at(self, histogram: uniqueness.Histogram, share: float | None) -> bool:
        """Whether it holds over a release whose share is known (`unique_shares`): the audit solves it once."""
        return uniqueness.holds_at(histogram, share, self.threshold)

    def holds_over(self, histograms: list[uniqueness.Histogram]) -> list[bool]:
        return uniqueness.holds(self.model, histograms, self.population, self.threshold, self.solver)

    def classes_to_suppress(
        self, histograms: list[uniqueness.Histogram], budgets: list[int | None]
    ) -> list[int | None]:
        """Per release (the classes the other criteria leave), how many of its smallest classes to suppress, or
        None where it cannot hold within its budget of tuples (ARX's binary search: uniqueness.suppressed_classes)."""
        return uniqueness.suppressed_classes(self.holds_over, histograms, budgets)

    def with_cuts(self, cuts: dict[Any, int]) -> PopulationUniqueness:
        """A copy that takes, per node (its `node` column's value, or None for a set of one node), that many of
        the smallest classes (ties by their class columns), where engine.histograms decided them."""
        bound = copy.copy(self)
        bound.cuts = dict(cuts)
        return bound

    def violating_classes(self, fs: FrequencySetView, also: SqlFragment | None = None) -> SqlFragment:
        """The classes `also` takes, and per node the smallest others by rank, as many as its cut (none before
        `with_cuts`: the engine reads the histogram first)."""
        nodes = [c for c in fs.class_columns if c in fs.node_columns]
        assert len(nodes) <= 1, "a set's nodes are named by one column"
        ties = [c for c in fs.class_columns if c not in nodes]
        cuts = self.cuts or {}
        if nodes:
            cases = " ".join(f"WHEN {int(node)} THEN {int(cut)}" for node, cut in cuts.items() if node is not None)
            cut = f"CASE {nodes[0]} {cases} ELSE 0 END" if cases else "0"
        else:
            cut = str(int(cuts.get(None, 0)))
        # the classes `also` takes are ranked apart: the cut counts the others only
        partition = [*nodes, *([f"CASE WHEN {also.sql} THEN 1 ELSE 0 END"] if also is not None else [])]
        ranked = SqlFragment(
            f"SELECT {fs.classes}, n, ROW_NUMBER() OVER ({_partition(partition)}ORDER BY {', '.join(['n', *ties])}) "
            f"AS r, {cut} AS cut FROM ({fs.class_sizes()}) AS sizes",
            {} if also is None else also.params,
        )
        return self._violators(fs, ranked, also)

    def class_statistic(self, fs: FrequencySetView) -> SqlFragment:
        raise AssertionError("decided over the release's class sizes: engine.histograms, not a class's statistic")

    def violation(self) -> SqlFragment:
        return SqlFragment("r <= cut", {})

    def audit_figure(self, fs: FrequencySetView) -> SqlFragment:
        """None in SQL: the audit estimates it from the published histogram (engine.histograms)."""
        return SqlFragment("SELECT CAST(NULL AS DOUBLE PRECISION)", {})
