"""Privacy criteria as small pluggable objects.

A criterion computes one statistic per equivalence class in SQL (its size, its
number of distinct sensitive values, its entropy, its distance to the table's
distribution, ...) from a frequency set, and says which values violate it.
The search asks which classes violate any criterion (a UNION of each
criterion's violators); the audit reports the worst class's statistic. A new
criterion is one class registered in CRITERIA.
"""
from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .errors import ConfigError
from .hierarchies import Hierarchy, read_hierarchy_file


def count_sum(column: str) -> str:
    """SQL: the SUM of a column of counts, kept BIGINT. A SUM of BIGINT is NUMERIC on PostgreSQL (HUGEINT on
    DuckDB), and the criteria's c * LN(c) over NUMERIC took 12 ms where it takes 2 ms over BIGINT (the window of
    a don't-care entropy wave)."""
    return f"CAST(SUM({column}) AS BIGINT)"


def share(part: str, whole: str) -> str:
    """SQL: part / whole in floating point. `part * 1.0 / whole` is NUMERIC on PostgreSQL, and so were class sizes
    summed without `count_sum`: Adult's 8-QI searches with 2% suppression, three alternated runs, took t equal
    8.6-9.2 s and entropy 6.3-7.3 s with NUMERIC arithmetic, 7.9-8.5 s and 5.6-5.8 s without (DuckDB divides its
    DECIMAL as DOUBLE)."""
    return f"CAST({part} AS DOUBLE PRECISION) / {whole}"


@dataclass(frozen=True)
class FrequencySetView:
    """What a criterion needs to know about a frequency set (names already quoted).

    `table` is a table, or the name of a CTE whose SELECT is `definition`.
    `reference`, when set, is a FROM item with the same sensitive and count
    columns whose distribution t-closeness compares classes with (by default,
    the set's own: the whole table at that node). `grouped`: the set has one
    row per class and sensitive values (it is a GROUP BY of them), so a single
    sensitive attribute's counts need no grouping again. `table_counts`, when the
    caller read them (only where the database binds lists): per sensitive attribute,
    how many rows of the whole table hold each value, the value as the database
    casts it to text (a criterion may then bind the table's shares as lists).
    `sizes_by_join`: the class columns are integer keys, never NULL, so a class can be
    found by an equi-join (the wave checker's sets), and the database joins the class
    sizes faster than it adds them up in a window (see `sized_counts`). `codes`: per
    sensitive attribute whose column holds integer codes instead of its values (the
    wave checker's, see WaveChecker.codes), each value's code, the value as text; the
    codes tell values apart, and criteria that compare values with others bind them
    through `value_keys` (no criterion that names or orders values reads such a set).
    """

    table: str
    class_columns: list[str]
    count_column: str
    sensitive_columns: dict[str, str]  # sensitive attribute -> its column in the set
    definition: str | None = None
    reference: str | None = None
    grouped: bool = False
    table_counts: dict[str, dict[str | None, int]] | None = None
    sizes_by_join: bool = False
    codes: dict[str, dict[str | None, int]] | None = None

    @property
    def one_row_per_class(self) -> bool:
        return not self.sensitive_columns

    @property
    def classes(self) -> str:
        return ", ".join(self.class_columns)

    def class_sizes(self) -> str:
        """Per class: n (its size)."""
        if self.one_row_per_class:
            return f"SELECT {self.classes}, {self.count_column} AS n FROM {self.table}"
        return (f"SELECT {self.classes}, {count_sum(self.count_column)} AS n FROM {self.table} GROUP BY "
                f"{self.classes}")

    def counts(self, attribute: str) -> str:
        """Per class and sensitive value s of `attribute`: c (its count)."""
        s, cnt = self.sensitive_columns[attribute], self.count_column
        if self.grouped and len(self.sensitive_columns) == 1:  # already one row per class and value
            return f"SELECT {self.classes}, {s} AS s, {cnt} AS c FROM {self.table}"
        return f"SELECT {self.classes}, {s} AS s, {count_sum(cnt)} AS c FROM {self.table} GROUP BY {self.classes}, {s}"

    def value_counts(self, attribute: str) -> str:
        """Per class and sensitive value s of `attribute`: c (its count), n (class size), r (rank by count).

        Ranks are by count descending, ties by value, so results are deterministic. Each window is a pass
        (and, on small sets, costs more than the data): read `counts` where a GROUP BY of it will do.
        """
        return (f"SELECT {self.classes}, s, c, {self._size_window()}, "
                f"ROW_NUMBER() OVER (PARTITION BY {self.classes} ORDER BY c DESC, s) AS r FROM "
                f"({self.counts(attribute)}) AS value_counts")

    def _size_window(self) -> str:
        """n, the class size, added up by a window over `counts`."""
        return f"CAST(SUM(c) OVER (PARTITION BY {self.classes}) AS BIGINT) AS n"

    def sized_counts(self, attribute: str) -> str:
        """Per class and sensitive value s of `attribute`: c (its count) and n (class size).

        By a join with the class sizes where `sizes_by_join`: DuckDB's window operator costs more than a grouping
        and a join on a wave's small sets (Adult's t-closeness waves 1 ms less each). A join on NULL-able class
        columns would lose their classes, so other sets take the window, and so does PostgreSQL, whose join reads
        the wave twice (so stores it first) and hashes it twice: Adult's 8-QI t-closeness searches with 2%
        suppression, three alternated runs, equal 8.5-9.2 -> 7.9-8.3 s, KL 8.6-8.9 -> 8.2-8.6 s, hierarchical
        13.1-13.4 -> 12.4-13.5 s; hospital 1M rows, t equal 0.3, unchanged (10.1-10.3 against 10.0-10.5 s)."""
        if not self.sizes_by_join:
            return f"SELECT {self.classes}, s, c, {self._size_window()} FROM ({self.counts(attribute)}) AS value_counts"
        on = " AND ".join(f"z.{c} = v.{c}" for c in self.class_columns)
        return (f"SELECT {', '.join(f'v.{c}' for c in self.class_columns)}, v.s, v.c, z.n FROM "
                f"({self.counts(attribute)}) v JOIN ({self.class_sizes()}) z ON {on}")

    def with_classes(self, extra: list[str], attribute: str) -> "FrequencySetView":
        """The same set with the other sensitive columns `extra` as class columns and only `attribute` sensitive
        (multi-attribute diversity). Its sizes not by a join: the extra class columns are sensitive values, which
        may be NULL."""
        others = {c for a, c in self.sensitive_columns.items() if a != attribute}
        return FrequencySetView(self.table, self.class_columns + extra, self.count_column,
                                {attribute: self.sensitive_columns[attribute]}, reference=self.reference,
                                grouped=self.grouped and others <= set(extra), table_counts=self.table_counts,
                                codes=self.codes)

    def value_keys(self, attribute: str, values: list[str | None]) -> tuple[str, list[Any], str]:
        """How `values` of `attribute` (as text) meet a set's rows `v`: the SQL type to bind them as, the list to
        bind (their codes where the column holds codes, 0 for a value the table does not hold) and the expression
        of `v.s` that equals them."""
        codes = (self.codes or {}).get(attribute)
        if codes is None:
            return "VARCHAR", values, "CAST(v.s AS VARCHAR)"
        return "BIGINT", [None if value is None else codes.get(value, 0) for value in values], "v.s"

    def distribution(self, attribute: str) -> str:
        """Per sensitive value s of `attribute`: q, its share of the whole table (or of the reference)."""
        s, cnt = self.sensitive_columns[attribute], self.count_column
        source = self.reference or self.table
        return (f"SELECT {s} AS s, {share(f'SUM({cnt})', f'(SELECT SUM({cnt}) FROM {source})')} AS q "
                f"FROM {source} GROUP BY {s}")


@dataclass(frozen=True)
class SqlFragment:
    sql: str
    params: dict[str, Any]

    def bound(self, suffix: str, params: dict[str, Any]) -> str:
        """The SQL with its parameters renamed with `suffix` (so that fragments sharing parameter names share a
        statement) and added to `params`."""
        params.update((f"{name}_{suffix}", value) for name, value in self.params.items())
        if not self.params:
            return self.sql
        # one pass over the SQL, whatever the number of parameters (hierarchical t-closeness binds dozens)
        return re.sub(r":(\w+)\b", lambda m: f":{m[1]}_{suffix}" if m[1] in self.params else m[0], self.sql)


class Criterion(ABC):
    """One privacy criterion, evaluated per equivalence class in SQL."""

    #: key of the criterion under `criteria:` in the job file
    name: str = ""
    #: holds for every generalization of a node that satisfies it (enables pruning)
    monotone: bool = True
    #: a merged class violates only if every class merged into it does, so a node's violating
    #: (suppressed) tuples can only shrink under generalization: pruning stays sound with suppression
    monotone_under_suppression: bool = False
    #: reads the table's distribution of its sensitive values (FrequencySetView.distribution)
    reads_distribution: bool = False
    #: binds the table's counts of its sensitive values instead, when the caller read them
    #: (FrequencySetView.table_counts)
    reads_table_counts: bool = False
    #: what the audit reports: the worst class's statistic (SQL over column `stat`)
    figure_name: str = ""
    figure_sql: str = "MIN(stat)"

    def monotone_part(self) -> list["Criterion"]:
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

    def size_violation(self) -> SqlFragment | None:
        """When the criterion reads class sizes alone: its predicate over n (another criterion's statistic, which
        has a row and n for every class, then tests it too, instead of a pass of its own)."""
        return None

    def violating_classes(self, fs: FrequencySetView, also: SqlFragment | None = None) -> SqlFragment:
        """SELECT the class columns and their size n for every class that violates it (or `also`, a predicate
        over n)."""
        stat, bad = self.class_statistic(fs), self.violation()
        where = bad.sql if also is None else f"({bad.sql}) OR ({also.sql})"
        return SqlFragment(f"SELECT {fs.classes}, n FROM ({stat.sql}) AS st WHERE {where}",
                           {**stat.params, **bad.params, **(also.params if also else {})})

    def audit_figure(self, fs: FrequencySetView) -> SqlFragment:
        """SELECT the worst class's statistic (one row, one column)."""
        stat = self.class_statistic(fs)
        return SqlFragment(f"SELECT {self.figure_sql} FROM ({stat.sql}) AS st", stat.params)

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

    def check_table_size(self, rows: int) -> None:
        """Raise ConfigError if the criterion cannot hold on a table of this many rows."""

    def describe(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in self.params().items())
        return f"{self.name}({args})"


#: floating-point slack when comparing entropies and distances with their bounds
EPSILON = 1e-9


def _number(name: str, key: str, value: Any, minimum: float | None = None, maximum: float | None = None,
            whole: bool = False) -> Any:
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


def _positive(name: str, key: str, value: Any) -> float:
    value = _number(name, key, value)
    if value <= 0:
        raise ConfigError(f"{name}: {key} must be > 0, got {value}")
    return value


def _spec(name: str, spec: Any, required: set[str], optional: set[str] = frozenset()) -> dict[str, Any]:
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


def _values(name: str, key: str, raw: Any) -> list[str]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(v, (str, int, float)) for v in raw):
        raise ConfigError(f"{name}: {key} must be a list of sensitive values")
    return [str(v) for v in raw]


def _in_list(column: str, values: list[str], prefix: str) -> SqlFragment:
    """`CAST(column AS VARCHAR) IN (...)` with bound values (FALSE for an empty list)."""
    if not values:
        return SqlFragment("FALSE", {})
    names = {f"{prefix}{i}": v for i, v in enumerate(values)}
    return SqlFragment(f"CAST({column} AS VARCHAR) IN ({', '.join(':' + n for n in names)})", names)


# --- k-anonymity -----------------------------------------------------------------

class KAnonymity(Criterion):
    """Every equivalence class holds at least k tuples."""

    name = "k_anonymity"
    monotone_under_suppression = True  # a merged class smaller than k is made of classes smaller than k
    figure_name = "min_class_size"

    def __init__(self, k: int):
        if isinstance(k, bool) or not isinstance(k, int):
            raise ConfigError(f"k_anonymity: k must be a whole number >= 1, got {k!r}")
        if k < 1:
            raise ConfigError(f"k_anonymity: k must be >= 1, got {k}")
        self.k = k

    @classmethod
    def from_config(cls, spec: Any) -> "KAnonymity":
        if isinstance(spec, dict):
            if set(spec) != {"k"}:
                raise ConfigError("k_anonymity takes exactly one key, k (e.g. k_anonymity: {k: 5})")
            spec = spec["k"]
        return cls(spec)

    def params(self) -> dict[str, Any]:
        return {"k": self.k}

    def class_statistic(self, fs: FrequencySetView) -> SqlFragment:
        return SqlFragment(f"SELECT {fs.classes}, n, n AS stat FROM ({fs.class_sizes()}) AS sizes", {})

    def violation(self) -> SqlFragment:
        return SqlFragment("stat < :kanon_k", {"kanon_k": self.k})

    def size_violation(self) -> SqlFragment:
        return SqlFragment("n < :kanon_k", {"kanon_k": self.k})

    def check_table_size(self, rows: int) -> None:
        if self.k > rows:
            raise ConfigError(f"k_anonymity: k={self.k} is larger than the table ({rows} rows); "
                              "no generalization can satisfy it; choose k <= the row count")


# --- l-diversity ----------------------------------------------------------------

class _LDiversity(Criterion):
    """One sensitive attribute and an l; the instantiations differ in their statistic."""

    extra_keys: set[str] = set()

    def __init__(self, attribute: str, l: int):
        self.attribute = attribute
        self.l = _number(self.name, "l", l, minimum=1, whole=True)

    @classmethod
    def from_config(cls, spec: Any) -> "_LDiversity":
        spec = _spec(cls.name, spec, {"attribute", "l"} | cls.required_keys(), cls.extra_keys)
        return cls(**spec)

    @classmethod
    def required_keys(cls) -> set[str]:
        return set()

    def params(self) -> dict[str, Any]:
        return {"attribute": self.attribute, "l": self.l}

    def sensitive_attributes(self) -> list[str]:
        return [self.attribute]

    def check_domain(self, attribute: str, distinct_values: int, numeric: bool) -> None:
        if attribute == self.attribute and self.l > distinct_values:
            raise ConfigError(f"{self.name}: l={self.l} is larger than the {distinct_values} distinct values of "
                              f"{attribute!r}; no class can be {self.l}-diverse; choose l <= {distinct_values}")

    def _per_class(self, fs: FrequencySetView, stat: str, params: dict[str, Any] | None = None,
                   ranked: bool = False) -> SqlFragment:
        """`stat`, an aggregate over the class's values' counts v.c (and their ranks v.r when `ranked`)."""
        cls = ", ".join(f"v.{c}" for c in fs.class_columns)
        counts = fs.value_counts(self.attribute) if ranked else fs.counts(self.attribute)
        return SqlFragment(f"SELECT {cls}, {count_sum('v.c')} AS n, {stat} AS stat FROM ({counts}) v GROUP BY {cls}",
                           params or {})


class DistinctLDiversity(_LDiversity):
    """At least l distinct sensitive values in every class."""

    name = "distinct_l_diversity"
    monotone_under_suppression = True  # fewer than l values in a merged class: fewer in each part too
    figure_name = "distinct_l"

    def class_statistic(self, fs: FrequencySetView) -> SqlFragment:
        return self._per_class(fs, "COUNT(*)")

    def violation(self) -> SqlFragment:
        return SqlFragment("stat < :distinct_l", {"distinct_l": self.l})


class EntropyLDiversity(_LDiversity):
    """Entropy of every class's sensitive values at least log(l); with a don't-care set Y,
    the adjusted entropy (don't-care counts lowered where that raises the entropy)."""

    name = "entropy_l_diversity"
    figure_name = "entropy_l"
    figure_sql = "EXP(MIN(stat))"
    extra_keys = {"dont_care"}

    def __init__(self, attribute: str, l: int, dont_care: list[str] | None = None):
        super().__init__(attribute, l)
        self.dont_care = _values(self.name, "dont_care", dont_care)

    def params(self) -> dict[str, Any]:
        return {**super().params(), **({"dont_care": self.dont_care} if self.dont_care else {})}

    def named_values(self) -> dict[str, list[str]]:
        return {self.attribute: self.dont_care}

    def class_statistic(self, fs: FrequencySetView) -> SqlFragment:
        if not self.dont_care:  # H = log n - (sum c log c) / n
            n = count_sum("v.c")
            return self._per_class(fs, f"LN({n}) - SUM(v.c * LN(v.c)) / {n}")
        return self._adjusted(fs)

    def violation(self) -> SqlFragment:
        return SqlFragment("stat < LN(:entropy_l) - :entropy_eps", {"entropy_l": float(self.l), "entropy_eps": EPSILON})

    def monotone_part(self) -> list[Criterion]:
        """An entropy of log l needs l distinct values (m values give at most log m); with don't-care values the
        adjusted entropy needs no such thing."""
        return [] if self.dont_care else [DistinctLDiversity(self.attribute, self.l)]

    def _adjusted(self, fs: FrequencySetView) -> SqlFragment:
        """Adjusted entropy: don't-care counts, smallest first, join the fixed set while their log is at most
        the log-entropic mean (sum c log c / sum c) of the fixed set and the counts joined before them; the rest
        are lowered to exp(mean).

        One ordered window, the fixed values first, then the don't-care counts ascending: the sums over the rows
        before a count are those of the joined ones up to the first count that does not join, and every later
        count fails as well (a failed count lifts the mean, but not up to its own log, which later logs are not
        below), so a count joins exactly when it passes against every row before it. Where rounding decides a
        tie, the count's log is the mean itself and joining or lowering it gives the same entropy.
        Internal column names must not look like class columns (a<i>, g<i>, s<j>).
        """
        cls = fs.classes
        in_y = _in_list("s", self.dont_care, "entropy_y")
        before = f"PARTITION BY {cls} ORDER BY dc, c ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING"
        ordered = (f"SELECT {cls}, c, dc, SUM(c * LN(c)) OVER ({before}) AS a_prev, SUM(c) OVER ({before}) AS b_prev "
                   f"FROM (SELECT {cls}, c, ({in_y.sql}) AS dc FROM ({fs.counts(self.attribute)}) vc) f")
        lowered = "dc AND b_prev > 0 AND LN(c) > a_prev / b_prev"  # b_prev is NULL on a class's first row: joins
        totals = (f"SELECT {cls}, {count_sum('c')} AS n, SUM(CASE WHEN {lowered} THEN 0 ELSE c * LN(c) END) AS a, "
                  f"SUM(CASE WHEN {lowered} THEN 0 ELSE c END) AS b, "
                  f"SUM(CASE WHEN {lowered} THEN 1 ELSE 0 END) AS lowered FROM ({ordered}) o GROUP BY {cls}")
        # lowered counts are exp(mean) each: Z = b + lowered * e^m, sum z log z = a + lowered * e^m * m
        z = "(b + lowered * EXP(a / b))"
        stat = f"LN({z}) - (a + lowered * EXP(a / b) * (a / b)) / {z}"
        return SqlFragment(f"SELECT {cls}, n, {stat} AS stat FROM ({totals}) tot", in_y.params)


class RecursiveLDiversity(_LDiversity):
    """Recursive (c,l)-diversity: r1 < c (r_l + ... + r_m), counts sorted descending.

    With a don't-care set Y it is positive-disclosure recursive (c,l)-diversity:
    the bound applies to the most frequent value outside Y (domain.md, section 2).
    The statistic is r / (its tail): the criterion holds for every c above it.
    """

    name = "recursive_l_diversity"
    figure_name = "smallest_c"
    figure_sql = "CASE WHEN COUNT(*) > COUNT(stat) THEN NULL ELSE MAX(stat) END"
    extra_keys = {"dont_care"}

    def __init__(self, attribute: str, c: float, l: int, dont_care: list[str] | None = None):
        super().__init__(attribute, l)
        self.c = _positive(self.name, "c", c)
        self.dont_care = _values(self.name, "dont_care", dont_care)

    @classmethod
    def required_keys(cls) -> set[str]:
        return {"c"}

    def params(self) -> dict[str, Any]:
        return {"attribute": self.attribute, "c": self.c, "l": self.l,
                **({"dont_care": self.dont_care} if self.dont_care else {})}

    def named_values(self) -> dict[str, list[str]]:
        return {self.attribute: self.dont_care}

    def class_statistic(self, fs: FrequencySetView) -> SqlFragment:
        if not self.dont_care:
            if self.l == 1:  # holds by definition
                return self._per_class(fs, "0.0")
            ratio = share("MAX(v.c)", "NULLIF(SUM(CASE WHEN v.r >= :rec_l THEN v.c ELSE 0 END), 0)")
            return self._per_class(fs, ratio, {"rec_l": self.l}, ranked=True)
        return _positive_disclosure_ratio(fs, self.attribute, self.dont_care, self.l, "rec")

    def violation(self) -> SqlFragment:
        return SqlFragment("(stat IS NULL OR stat >= :rec_c)", {"rec_c": float(self.c)})

    def monotone_part(self) -> list[Criterion]:
        """r1 < c (r_l + ... + r_m) needs an l-th value (positive disclosure, with don't-care values, does not)."""
        return [] if self.dont_care else [DistinctLDiversity(self.attribute, self.l)]


def _positive_disclosure_ratio(fs: FrequencySetView, attribute: str, dont_care: list[str], l: int,
                               prefix: str, extra: str = "") -> SqlFragment:
    """r_y over its tail, s_y the most frequent value outside Y at rank y (ties rank values outside Y first):
    y <= l-1: tail = r_l + ... + r_m;  y > l-1: tail = r_{l-1} + ... + r_m - r_y.  0 when no value is outside Y.
    `extra`: more aggregates over the class's values (s, c), selected after stat."""
    cls = fs.classes
    in_y = _in_list("s", dont_care, f"{prefix}_y")
    ranked = (f"SELECT {cls}, s, c, dc, ROW_NUMBER() OVER (PARTITION BY {cls} ORDER BY c DESC, dc, s) AS r "
              f"FROM (SELECT vc.*, ({in_y.sql}) AS dc FROM ({fs.counts(attribute)}) vc) f")
    y = "MIN(CASE WHEN NOT dc THEN r END)"
    r_y = "MAX(CASE WHEN NOT dc THEN c END)"  # rank y is the first outside Y: the largest count outside Y
    tail_low = f"SUM(CASE WHEN r >= :{prefix}_l THEN c ELSE 0 END)"
    tail_high = f"SUM(CASE WHEN r >= :{prefix}_l - 1 THEN c ELSE 0 END) - {r_y}"  # y > l-1: r_y is in that sum
    stat = (f"CASE WHEN {y} IS NULL THEN 0.0 "
            f"WHEN {y} <= :{prefix}_l - 1 THEN {share(r_y, f'NULLIF({tail_low}, 0)')} "
            f"ELSE {share(r_y, f'NULLIF({tail_high}, 0)')} END")
    return SqlFragment(f"SELECT {cls}, {count_sum('c')} AS n, {stat} AS stat{extra} FROM ({ranked}) rk GROUP BY {cls}",
                       {**in_y.params, f"{prefix}_l": l})


class NpdRecursiveLDiversity(_LDiversity):
    """npd-recursive (c1,c2,l): pd-recursive (c1,l) with Y, and every value of W in at least c2 percent
    of each class."""

    name = "npd_recursive_l_diversity"
    figure_name = "smallest_c1"
    figure_sql = RecursiveLDiversity.figure_sql
    extra_keys = {"dont_care"}

    def __init__(self, attribute: str, c1: float, c2: float, l: int, w: list[str],
                 dont_care: list[str] | None = None):
        super().__init__(attribute, l)
        self.c1 = _positive(self.name, "c1", c1)
        self.c2 = _number(self.name, "c2", c2, minimum=0, maximum=100)
        self.w = _values(self.name, "w", w)
        self.dont_care = _values(self.name, "dont_care", dont_care)

    @classmethod
    def required_keys(cls) -> set[str]:
        return {"c1", "c2", "w"}

    def params(self) -> dict[str, Any]:
        return {"attribute": self.attribute, "c1": self.c1, "c2": self.c2, "l": self.l, "w": self.w,
                **({"dont_care": self.dont_care} if self.dont_care else {})}

    def named_values(self) -> dict[str, list[str]]:
        return {self.attribute: self.dont_care + self.w}

    def class_statistic(self, fs: FrequencySetView) -> SqlFragment:
        """stat: the pd ratio; w_share: the smallest share (percent) of a W value in the class (0 when one is
        missing)."""
        in_w = _in_list("s", self.w, "npd_w")
        shares = (f", 100.0 * MIN(CASE WHEN {in_w.sql} THEN c END) / SUM(c) AS w_share, "
                  f"COUNT(CASE WHEN {in_w.sql} THEN 1 END) AS present")
        pd = _positive_disclosure_ratio(fs, self.attribute, self.dont_care, self.l, "npd", shares)
        sql = (f"SELECT {fs.classes}, n, stat, CASE WHEN present < :npd_wcount THEN 0.0 ELSE w_share END AS w_share "
               f"FROM ({pd.sql}) p")
        return SqlFragment(sql, {**pd.params, **in_w.params, "npd_wcount": len(self.w)})

    def violation(self) -> SqlFragment:
        return SqlFragment("(stat IS NULL OR stat >= :npd_c1 OR w_share < :npd_c2)",
                           {"npd_c1": float(self.c1), "npd_c2": float(self.c2)})


INSTANTIATIONS: dict[str, type[_LDiversity]] = {"distinct": DistinctLDiversity, "entropy": EntropyLDiversity,
                                                "recursive": RecursiveLDiversity, "npd": NpdRecursiveLDiversity}


class MultiAttributeLDiversity(Criterion):
    """Definition 4.5: for each sensitive attribute S_i, l-diversity of S_i with the QIs and all other
    sensitive attributes as the class, in any instantiation (its options pass through). The statistic
    counts (sub-class, attribute) pairs that violate."""

    # Not monotone under suppression, even with the distinct instantiation: a QI class violates when
    # one of its (QI + other sensitive values) subclasses does, and after a merge that subclass may lie
    # in only some of the merged classes, so the violating tuples can grow upward.
    name = "multi_attribute_l_diversity"
    figure_name = "violating_subclasses"
    figure_sql = "MAX(stat)"

    def __init__(self, attributes: list[str], instantiation: str = "distinct", **options: Any):
        if not isinstance(attributes, list) or len(attributes) < 2 or not all(isinstance(a, str) for a in attributes):
            raise ConfigError(f"{self.name}: attributes must list two or more sensitive columns")
        if instantiation not in INSTANTIATIONS:
            raise ConfigError(f"{self.name}: instantiation {instantiation!r} is unknown; choose one of "
                              f"{', '.join(INSTANTIATIONS)}")
        self.attributes, self.instantiation, self.options = attributes, instantiation, options
        self.inner = [INSTANTIATIONS[instantiation](attribute=a, **options) for a in attributes]

    @classmethod
    def from_config(cls, spec: Any) -> "MultiAttributeLDiversity":
        if not isinstance(spec, dict):
            raise ConfigError(f"{cls.name} takes a mapping with attributes, l and instantiation options")
        instantiation = spec.get("instantiation", "distinct")
        kind = INSTANTIATIONS.get(instantiation)
        if kind is None:
            raise ConfigError(f"{cls.name}: instantiation {instantiation!r} is unknown; choose one of "
                              f"{', '.join(INSTANTIATIONS)}")
        return cls(**_spec(cls.name, spec, {"attributes", "l"} | kind.required_keys(),
                           {"instantiation"} | kind.extra_keys))

    def params(self) -> dict[str, Any]:
        return {"attributes": self.attributes, "instantiation": self.instantiation, **self.options}

    def named_values(self) -> dict[str, list[str]]:
        return {a: v for inner in self.inner for a, v in inner.named_values().items()}

    def sensitive_attributes(self) -> list[str]:
        return list(self.attributes)

    def check_domain(self, attribute: str, distinct_values: int, numeric: bool) -> None:
        for inner in self.inner:
            inner.check_domain(attribute, distinct_values, numeric)

    def class_statistic(self, fs: FrequencySetView) -> SqlFragment:
        parts, params = [], {}
        for i, inner in enumerate(self.inner):
            others = [fs.sensitive_columns[a] for a in self.attributes if a != inner.attribute]
            sub = inner.violating_classes(fs.with_classes(others, inner.attribute))
            sql = sub.bound(f"m{i}", params)  # the inner criteria share parameter names
            parts.append(f"SELECT {fs.classes}, NULL AS n, 1 AS bad FROM ({sql}) AS sub{i}")
        # stat: the class's subclasses that violate, counted by grouping the classes with them (a grouping matches
        # NULLs as equal and hashes; a join on IS NOT DISTINCT FROM is a nested loop on PostgreSQL)
        sizes = f"SELECT {fs.classes}, n, 0 AS bad FROM ({fs.class_sizes()}) s"
        sql = (f"SELECT {fs.classes}, MAX(n) AS n, SUM(bad) AS stat FROM ({sizes} UNION ALL "
               f"{' UNION ALL '.join(parts)}) c GROUP BY {fs.classes}")
        return SqlFragment(sql, params)

    def violation(self) -> SqlFragment:
        return SqlFragment("stat > 0", {})


# --- t-closeness ---------------------------------------------------------------------

class TCloseness(Criterion):
    """Distance between each class's sensitive distribution and the whole table's at most t."""

    name = "t_closeness"
    reads_distribution = True
    figure_name = "max_t"
    figure_sql = "MAX(stat)"
    DISTANCES = ("equal", "ordered", "hierarchical", "kl")

    def __init__(self, attribute: str, t: float, distance: str = "equal", hierarchy: Path | str | None = None):
        self.attribute = attribute
        self.t = _number(self.name, "t", t, minimum=0, maximum=1)
        if distance not in self.DISTANCES:
            raise ConfigError(f"{self.name}: distance {distance!r} is unknown; choose one of "
                              f"{', '.join(self.DISTANCES)}")
        if (hierarchy is None) == (distance == "hierarchical"):
            raise ConfigError(f"{self.name}: hierarchy: FILE goes with distance: hierarchical, and only with it")
        self.distance = distance
        self.hierarchy_path = Path(hierarchy) if hierarchy is not None else None
        self.hierarchy = read_hierarchy_file(attribute, self.hierarchy_path) if self.hierarchy_path else None
        self.reads_table_counts = distance != "ordered"

    @classmethod
    def from_config(cls, spec: Any) -> "TCloseness":
        return cls(**_spec(cls.name, spec, {"attribute", "t"}, {"distance", "hierarchy"}))

    def params(self) -> dict[str, Any]:
        extra = {"hierarchy": str(self.hierarchy_path)} if self.hierarchy_path else {}
        return {"attribute": self.attribute, "t": self.t, "distance": self.distance, **extra}

    def covered_values(self) -> dict[str, Hierarchy]:
        return {self.attribute: self.hierarchy} if self.hierarchy else {}

    def sensitive_attributes(self) -> list[str]:
        return [self.attribute]

    def reads_values(self) -> set[str]:
        return {self.attribute} if self.distance == "ordered" else set()

    def check_domain(self, attribute: str, distinct_values: int, numeric: bool) -> None:
        if attribute == self.attribute and self.distance == "ordered" and not numeric:
            raise ConfigError(f"{self.name}: the ordered distance needs a numeric attribute, and {attribute!r} is "
                              "not numeric; use distance: equal (or kl)")

    def violation(self) -> SqlFragment:
        return SqlFragment("stat > :tclose_t + :tclose_eps", {"tclose_t": float(self.t), "tclose_eps": EPSILON})

    def class_statistic(self, fs: FrequencySetView) -> SqlFragment:
        if self.distance == "ordered":
            return SqlFragment(self._ordered(fs, fs.value_counts(self.attribute), fs.distribution(self.attribute)), {})
        counts, known = fs.sized_counts(self.attribute), (fs.table_counts or {}).get(self.attribute)
        if self.distance == "hierarchical":
            return self._hierarchical(fs, counts, known)
        match = "v.s IS NOT DISTINCT FROM q.s"
        if known is None:
            table, params = fs.distribution(self.attribute), {}
        else:  # the table's shares bound as lists (a wave over Adult's cube: 1 ms less than grouping the cube)
            sql_type, keys, value = fs.value_keys(self.attribute, list(known))
            table, params = _unnested({"s": (sql_type, keys), "q": ("DOUBLE PRECISION", _shares(known.values()))},
                                      "tq_")
            # without a NULL value, an equality: PostgreSQL joins IS NOT DISTINCT FROM by a nested loop
            match = f"{value} {'IS NOT DISTINCT FROM' if None in known else '='} q.s"
        if self.distance == "kl":
            p = share("v.c", "v.n")
            distance = f"SUM(({p}) * LN(({p}) / q.q))"
        else:  # equal ground distance: half the L1 distance; values absent from the class contribute q
            distance = f"0.5 * (SUM(ABS({share('v.c', 'v.n')} - q.q)) + 1 - SUM(q.q))"
        cls_v = ", ".join(f"v.{c}" for c in fs.class_columns)
        return SqlFragment(f"SELECT {cls_v}, MAX(v.n) AS n, {distance} AS stat FROM ({counts}) v "
                           f"JOIN ({table}) q ON {match} GROUP BY {cls_v}", params)

    def _hierarchical(self, fs: FrequencySetView, counts: str, known: dict[str | None, int] | None) -> SqlFragment:
        """The sum over internal nodes N of (level(N)/H) min(pos(N), |neg(N)|), where pos/neg add up the
        positive/negative extra(child) = P(child) - Q(child), the class's and the table's shares of its leaves.

        Computed from the nodes the class reaches alone: min(pos, |neg|) = (sum over children |extra| -
        |extra(N)|) / 2, and a node below the top is a child once and (unless a leaf) a parent once, so the
        distance is the sum over nodes of w(level) |extra|, w = 1/(2H) below the top level, -1/2 at the top. A
        node the class does not reach has |extra| = Q, and Q adds up to 1 per level: the sum over the nodes
        reached of w (|P - Q| - Q) is the distance. A single root, reached by every class, adds its 1/2 without
        being grouped (a third fewer rows to group for a hierarchy of three levels: on PostgreSQL, Adult's 8-QI
        search with 2% suppression 14.5-15.6 -> 13.0-13.6 s in three alternated runs).
        Hierarchy nodes are numbered (hn; not `node`, a wave's class column): `leaves` maps each leaf to the nodes
        above it (itself included, a single root left out), each with its w and Q (from the table's counts, bound as
        lists, where the caller read them; else from the distribution, in SQL), so that a class's counts meet them
        in one join (a second join for the weights took the same time on DuckDB and PostgreSQL).
        """
        value = "CAST(v.s AS VARCHAR)"
        if known is None:
            leaves, params = self._hierarchy_nodes(fs.distribution(self.attribute))
        else:
            leaves, params, value = self._hierarchy_lists(fs, known)
        cls = fs.class_columns
        cls_v, cls_r = ", ".join(f"v.{c}" for c in cls), ", ".join(f"r.{c}" for c in cls)
        reached = (f"SELECT {cls_v}, t.hn, MAX(t.w) AS w, MAX(t.q) AS q, MAX(v.n) AS n, SUM(v.c) AS c FROM "
                   f"({counts}) v JOIN ({leaves}) t ON t.leaf = {value} GROUP BY {cls_v}, t.hn")
        root = 0.5 if len(self.hierarchy.top_labels) == 1 else 0.0
        distance = f"SUM(r.w * (ABS({share('r.c', 'r.n')} - r.q) - r.q))"
        return SqlFragment(f"SELECT {cls_r}, MAX(r.n) AS n, GREATEST({root!r} + {distance}, 0.0) AS stat FROM "
                           f"({reached}) r GROUP BY {cls_r}", params)

    def _numbered_paths(self) -> list[tuple[str, int, int]]:
        """(leaf, hn, level) of every node above every leaf (the leaf's own included, a single root left out), each
        node (a level and a label) numbered from 1."""
        numbers: dict[tuple[int, str], int] = {}
        levels = self.hierarchy.height + (len(self.hierarchy.top_labels) > 1)
        return [(path[0], numbers.setdefault((level, path[level]), len(numbers) + 1), level)
                for path in self.hierarchy.paths for level in range(levels)]

    def _weight(self, level: int) -> float:
        return -0.5 if level == self.hierarchy.height else 0.5 / self.hierarchy.height

    def _hierarchy_nodes(self, table: str) -> tuple[str, dict[str, Any]]:
        """`_hierarchical`'s leaves (leaf, hn, w, q) as a SELECT, q from `table` (the distribution), and its
        parameters (the leaves' names)."""
        paths = self._numbered_paths()
        names = {leaf: f"thv{i}" for i, leaf in enumerate(dict.fromkeys(leaf for leaf, _, _ in paths))}
        rows = ", ".join(f"(:{names[leaf]}, {node}, {self._weight(level)!r})" for leaf, node, level in paths)
        values = f"(VALUES {rows}) AS t(leaf, hn, w)"
        shares = (f"SELECT t.hn, SUM(d.q) AS q FROM {values} LEFT JOIN ({table}) d ON CAST(d.s AS VARCHAR) = t.leaf "
                  "GROUP BY t.hn")
        return (f"SELECT t.leaf, t.hn, t.w, x.q FROM {values} JOIN ({shares}) x ON x.hn = t.hn",
                {n: leaf for leaf, n in names.items()})

    def _hierarchy_lists(self, fs: FrequencySetView, counts: dict[str | None, int]
                         ) -> tuple[str, dict[str, Any], str]:
        """`_hierarchy_nodes`, computed here from the table's `counts` of each value, bound as lists, and the
        expression of a class's value that equals its leaf (FrequencySetView.value_keys). A DuckDB wave over
        Adult's cube (occupation) took 12.8 ms with a VALUES list and a window adding up the shares, 9.0 ms with
        lists (12.1 ms with a VALUES list of the same numbers)."""
        paths, total = self._numbered_paths(), sum(counts.values()) or 1
        shares: dict[int, float] = {}  # not `share`: the module's SQL helper
        for leaf, node, _ in paths:
            shares[node] = shares.get(node, 0.0) + counts.get(leaf, 0) / total
        sql_type, leaves, value = fs.value_keys(self.attribute, [leaf for leaf, _, _ in paths])
        select, params = _unnested({"leaf": (sql_type, leaves), "hn": ("INTEGER", [node for _, node, _ in paths]),
                                    "w": ("DOUBLE PRECISION", [self._weight(level) for _, _, level in paths]),
                                    "q": ("DOUBLE PRECISION", [shares[node] for _, node, _ in paths])}, "thl_")
        return select, params, value

    @staticmethod
    def _ordered(fs: FrequencySetView, counts: str, table: str) -> str:
        """(1/(m-1)) sum_i |sum_{j<=i} (p_j - q_j)| over the table's m values in ascending order.

        One running sum per class over the table's values (q, from the classes crossed with the values) and the
        class's own counts (p), each own count ahead of its value's row, which reads the sum. No join matches
        the counts with the values: a join on IS NOT DISTINCT FROM (values may be NULL) is a nested loop of
        every class with every other on PostgreSQL."""
        cls = fs.classes
        classes = f"SELECT DISTINCT {cls}, n FROM ({counts}) c"
        every = f"SELECT {cls}, n, d.s, d.q, 0 AS c, 1 AS at_value FROM ({classes}) g CROSS JOIN ({table}) d"
        own = f"SELECT {cls}, n, s, 0 AS q, c, 0 AS at_value FROM ({counts}) v"
        cumulative = (f"SELECT {cls}, n, at_value, SUM({share('c', 'n')} - q) OVER (PARTITION BY {cls} ORDER BY s, "
                      f"at_value ROWS UNBOUNDED PRECEDING) AS cum FROM ({every} UNION ALL {own}) x")
        steps = f"(SELECT COUNT(*) - 1 FROM ({table}) m)"
        return (f"SELECT {cls}, MAX(n) AS n, SUM(CASE WHEN at_value = 1 THEN ABS(cum) ELSE 0 END) / "
                f"GREATEST({steps}, 1) AS stat FROM ({cumulative}) w GROUP BY {cls}")


def _shares(counts: Any) -> list[float]:
    """Each count's share of their sum."""
    counts = list(counts)
    total = sum(counts) or 1
    return [count / total for count in counts]


def _unnested(columns: dict[str, tuple[str, list[Any]]], prefix: str = "") -> tuple[str, dict[str, Any]]:
    """A SELECT of rows from lists bound as parameters (column name -> SQL type and values; the parameters are
    named prefix + column), and the parameters. For databases that bind a list as one parameter."""
    select = ", ".join(f"UNNEST(CAST(:{prefix}{name} AS {sql_type}[])) AS {name}"
                       for name, (sql_type, _) in columns.items())
    return f"SELECT {select}", {f"{prefix}{name}": values for name, (_, values) in columns.items()}


CRITERIA: dict[str, Callable[[Any], Criterion]] = {
    c.name: c.from_config for c in (KAnonymity, DistinctLDiversity, EntropyLDiversity, RecursiveLDiversity,
                                    NpdRecursiveLDiversity, MultiAttributeLDiversity, TCloseness)
}


def criteria_from_config(raw: Any, base_dir: Path | str = ".") -> list[Criterion]:
    """Build the criteria listed under `criteria:`; all of them must hold.

    Files a criterion names (a sensitive hierarchy) resolve against base_dir.
    """
    if not isinstance(raw, dict) or not raw:
        raise ConfigError("criteria must map criterion names to their parameters, e.g. k_anonymity: {k: 5}")
    criteria = []
    for name, spec in raw.items():
        if name not in CRITERIA:
            raise ConfigError(f"unknown criterion {name!r}; available: {', '.join(sorted(CRITERIA))}")
        if name == TCloseness.name and isinstance(spec, dict) and spec.get("hierarchy") is not None:
            spec = {**spec, "hierarchy": Path(base_dir) / str(spec["hierarchy"])}
        criteria.append(CRITERIA[name](spec))
    return criteria
