"""The `Criterion` interface, its registry, and the checks its subclasses share for their parameters."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from ..errors import ConfigError
from ..model.hierarchies import Hierarchy
from ..model.quality import CostBenefit
from .view import FrequencySetView, SqlFragment


class Criterion(ABC):
    """One privacy criterion, evaluated per equivalence class in SQL."""

    #: every criterion by its name, filled by the subclasses that have one as they are defined
    registry: ClassVar[dict[str, type[Criterion]]] = {}
    #: key of the criterion under `criteria:` in the job file
    name: str = ""
    #: keys of its settings that name files (resolved against the job file's folder)
    file_keys: tuple[str, ...] = ()
    #: a merged class violates only if every class merged into it does, so a node's violating
    #: (suppressed) tuples can only shrink under generalization: pruning stays sound with suppression
    monotone_under_suppression: bool = False
    #: a class merged from classes that satisfy it satisfies it, so without suppression a node with no violating
    #: class settles its generalizations (all but delta-disclosure privacy and Grassberger's entropy); where
    #: False, no pruning on passing is sound, with or without suppression
    monotone_under_generalization: bool = True
    #: bounds the release's distribution of class sizes rather than each class (risk.ReleaseCriterion): its
    #: violating classes are the smallest, over the classes the others leave
    whole_release: bool = False
    #: decided in Python over each release's class-size histogram, read from SQL (risk.PopulationUniqueness; see
    #: engine.histograms): a whole-release bound whose classes to suppress are chosen there, then taken by rank
    decided_by_histogram: bool = False
    #: compares each class with the population the table's rows were drawn from (a job's research subset: its
    #: classes' sizes in the population are FrequencySetView.population)
    reads_population: bool = False
    #: where it reads the population: what it takes instead, where the job declares no research subset
    population_hint: str = ""
    #: depends on the size of the table it is checked on (`fit_table`)
    fits_table: bool = False
    #: reads the table's distribution of its sensitive values (FrequencySetView.distribution)
    reads_distribution: bool = False
    #: binds the table's counts of its sensitive values instead, when the caller read them
    #: (FrequencySetView.table_counts)
    reads_table_counts: bool = False
    #: what the audit reports: the worst class's statistic (SQL over column `stat`)
    figure_name: str = ""
    figure_sql: str = "MIN(stat)"
    #: the columns of `class_statistic` beside the classes and n (what `violation` reads)
    statistic_columns: tuple[str, ...] = ("stat",)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.name:
            Criterion.registry[cls.name] = cls

    @classmethod
    def from_config(cls, spec: Any) -> Criterion:
        """The criterion from its settings under `criteria:` (checked: ConfigError names what is wrong)."""
        raise NotImplementedError

    @classmethod
    def from_job(cls, spec: Any, cost_benefit: CostBenefit) -> Criterion:
        """The criterion from its settings and the job's settings outside `criteria:` it may read (the cost/benefit
        model); most read none."""
        return cls.from_config(spec)

    def monotone_part(self) -> list[Criterion]:
        """Criteria monotone under suppression that hold in every class where this one holds (itself, when it is
        monotone): the filtered search settles them first."""
        return [self] if self.monotone_under_suppression else []

    @abstractmethod
    def params(self) -> dict[str, Any]:
        """The criterion's parameters, as written in the config."""

    @abstractmethod
    def class_statistic(self, fs: FrequencySetView) -> SqlFragment:
        """SELECT the class columns, n (class size) and stat for every class (one row each)."""

    @abstractmethod
    def violation(self) -> SqlFragment:
        """A predicate over `stat` (and n) that is true for classes violating the criterion."""

    def least_class_size(self, table_counts: dict[str, dict[str | None, int]]) -> int:
        """A class smaller than this violates the criterion whatever values it holds (1: any size may hold), given
        the table's count of each value of the sensitive attributes where they were read (StarSchema.domain_counts):
        a k-anonymity that a search may settle first, over frequency sets without the sensitive values."""
        return 1

    def size_violation(self) -> SqlFragment | None:
        """When the criterion reads class sizes alone: its predicate over n (another criterion's statistic, which
        has a row and n for every class, then tests it too, instead of a pass of its own)."""
        return None

    def holders_guard(self) -> int:
        """Where persons may hold several values (FrequencySetView.counts_holders): how many of a class's persons
        must lack each value (0: no such bound). l-diversity asks l - 1, which its statistic implies where each
        person holds one value, and which bounds at (n - l + 1) / n the confidence that a person of the class holds
        any value where some hold several (n persons, each holding every value, would pass on their values
        alone)."""
        return 0

    def violating_classes(self, fs: FrequencySetView, also: SqlFragment | None = None) -> SqlFragment:
        """SELECT the class columns and their size n for every class that violates it (or `also`, a predicate
        over n)."""
        return self._violators(fs, self._statistic(fs), also)

    def _violators(self, fs: FrequencySetView, stat: SqlFragment, also: SqlFragment | None) -> SqlFragment:
        """SELECT the class columns and n of the classes of `stat` (a statistic) that violate it or `also`."""
        bad = self.violation()
        conditions = [bad] + ([also] if also is not None else [])
        if self._counts_holders(fs) and self.holders_guard():
            conditions.append(SqlFragment("top > n - :holders_guard", {"holders_guard": self.holders_guard()}))
        where = " OR ".join(f"({c.sql})" for c in conditions)
        return SqlFragment(
            f"SELECT {fs.classes}, n FROM ({stat.sql}) AS st WHERE {where}",
            {**stat.params, **{k: v for c in conditions for k, v in c.params.items()}},
        )

    def audit_figure(self, fs: FrequencySetView) -> SqlFragment:
        """SELECT the worst class's statistic (one row, one column)."""
        stat = self._statistic(fs)
        return SqlFragment(f"SELECT {self.figure_sql} FROM ({stat.sql}) AS st", stat.params)

    def _counts_holders(self, fs: FrequencySetView) -> bool:
        return any(fs.counts_holders(a) for a in self.sensitive_attributes())

    def _statistic(self, fs: FrequencySetView) -> SqlFragment:
        """`class_statistic`, where persons may hold several values with n their class's persons (the statistic
        reads the values' holders) and `top`, the most persons holding one value: the statistic, the class sizes
        and the top counts grouped by class (a grouping matches NULL classes and hashes, where a join on IS NOT
        DISTINCT FROM is a nested loop on PostgreSQL)."""
        stat = self.class_statistic(fs)
        if not self._counts_holders(fs):
            return stat
        columns = self.statistic_columns
        nulls = ", ".join(["NULL"] * len(columns))
        guarded = self.sensitive_attributes() if self.holders_guard() else []
        parts = [  # each branch's columns beyond the classes (p, the statistic's, top), FROM item and grouping
            (f"CAST(NULL AS BIGINT) AS p, {', '.join(columns)}, CAST(NULL AS BIGINT) AS top", stat.sql, ""),
            (f"n, {nulls}, NULL", fs.class_sizes(), ""),
            *((f"NULL, {nulls}, MAX(c)", fs.counts(a), f" GROUP BY {fs.classes}") for a in guarded),
        ]
        union = " UNION ALL ".join(
            f"SELECT {fs.classes}, {selected} FROM ({source}) AS b{i}{grouped}"
            for i, (selected, source, grouped) in enumerate(parts)
        )
        kept = ", ".join(f"MAX({c}) AS {c}" for c in columns)
        return SqlFragment(
            f"SELECT {fs.classes}, MAX(p) AS n, {kept}, MAX(top) AS top FROM ({union}) AS u GROUP BY {fs.classes}",
            stat.params,
        )

    def sensitive_attributes(self) -> list[str]:
        """The sensitive attributes the criterion reads (their columns must be in frequency sets)."""
        return []

    def named_values(self) -> dict[str, list[str]]:
        """Sensitive values the config names (don't-care sets), by attribute: checked against the data."""
        return {}

    def reads_values(self) -> set[str]:
        """The sensitive attributes whose values the criterion's SQL compares with named ones or orders (not only
        tells apart): their frequency sets carry the values, never codes for them (FrequencySetView.codes)."""
        return {attribute for attribute, values in self.named_values().items() if values}

    def check_domain(self, attribute: str, distinct_values: int, numeric: bool) -> None:
        """Raise ConfigError if the criterion cannot hold for this sensitive attribute's values."""

    def covered_values(self) -> dict[str, Hierarchy]:
        """Hierarchies that must cover every value of a sensitive attribute (checked against the data)."""
        return {}

    def fit_table(self, rows: int) -> None:
        """Fix what depends on the size of the table the criterion is checked on (k-map's estimated k), before any
        check."""

    def fit_limit(self, max_suppressed: int) -> None:
        """Know the search's suppression limit in tuples (a criterion decided by histogram stops its own search for
        the classes to suppress once past it)."""

    def check_table_size(self, rows: int) -> None:
        """Raise ConfigError if the criterion cannot hold on a table of this many rows."""

    def describe(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in self.params().items())
        return f"{self.name}({args})"

    def guarantee(self) -> str:
        """What the criterion guarantees of every published group (the records sharing their quasi-identifiers),
        in plain words, for a data owner's report."""
        return f"every group satisfies {self.describe()}"


#: floating-point slack when comparing entropies and distances with their bounds
EPSILON = 1e-9


def number(
    name: str, key: str, value: Any, minimum: float | None = None, maximum: float | None = None, whole: bool = False
) -> Any:
    ok = isinstance(value, int) if whole else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok:
        kind = "a whole number" if whole else "a number"
        raise ConfigError(f"{name}: {key} must be {kind}, got {value!r}")
    if not math.isfinite(value):  # NaN compares false with every bound and would switch the criterion off
        raise ConfigError(f"{name}: {key} must be a finite number, got {value}")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        bounds = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise ConfigError(f"{name}: {key} must be {bounds}, got {value}")
    return value


def positive(name: str, key: str, value: Any) -> float:
    value = number(name, key, value)
    if value <= 0:
        raise ConfigError(f"{name}: {key} must be > 0, got {value}")
    return float(value)


def spec_of(
    name: str, spec: Any, required: set[str], optional: frozenset[str] | set[str] = frozenset()
) -> dict[str, Any]:
    if not isinstance(spec, dict):
        raise ConfigError(f"{name} takes a mapping with {', '.join(sorted(required))}")
    unknown = sorted(set(spec) - required - optional)
    missing = sorted(required - set(spec))
    if unknown or missing:
        problem = f"unknown key {unknown[0]!r}" if unknown else f"missing key {missing[0]!r}"
        raise ConfigError(f"{name}: {problem}; it takes {', '.join(sorted(required | optional))}")
    for key in ("attribute",):
        if key in spec and not isinstance(spec[key], str):
            raise ConfigError(f"{name}: {key} must be a column name")
    return spec


def values_of(name: str, key: str, raw: Any) -> list[str]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(v, (str, int, float)) for v in raw):
        raise ConfigError(f"{name}: {key} must be a list of sensitive values")
    return [str(v) for v in raw]


def in_list(column: str, values: list[str], prefix: str) -> SqlFragment:
    """`CAST(column AS VARCHAR) IN (...)` with bound values (FALSE for an empty list)."""
    if not values:
        return SqlFragment("FALSE", {})
    names = {f"{prefix}{i}": v for i, v in enumerate(values)}
    return SqlFragment(f"CAST({column} AS VARCHAR) IN ({', '.join(':' + n for n in names)})", names)
