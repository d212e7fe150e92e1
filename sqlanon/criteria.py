"""Privacy criteria as small pluggable objects.

A criterion turns a frequency set (a table of equivalence classes with counts)
into SQL that lists the classes violating it. The search only ever asks
"which classes violate any criterion", so combining criteria is a UNION of
their violators, and a new criterion is one class registered in CRITERIA.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable

from .errors import ConfigError


@dataclass(frozen=True)
class FrequencySetView:
    """What a criterion needs to know about a frequency set (names already quoted).

    `table` is a table, or the name of a CTE whose SELECT is `definition`.
    """

    table: str
    class_columns: list[str]
    count_column: str
    sensitive_columns: dict[str, str]  # sensitive attribute -> its column in the set
    definition: str | None = None

    @property
    def one_row_per_class(self) -> bool:
        return not self.sensitive_columns

    def value_counts(self, attribute: str) -> str:
        """Per class and sensitive value of `attribute`: c (count) and n (class size)."""
        cls = ", ".join(self.class_columns)
        s = self.sensitive_columns[attribute]
        partition = f" OVER (PARTITION BY {cls})" if cls else " OVER ()"
        return (f"SELECT {cls}{', ' if cls else ''}s, c, SUM(c){partition} AS n FROM "
                f"(SELECT {cls}{', ' if cls else ''}{s} AS s, SUM({self.count_column}) AS c FROM {self.table} "
                f"GROUP BY {cls}{', ' if cls else ''}{s}) AS value_counts")


@dataclass(frozen=True)
class SqlFragment:
    sql: str
    params: dict[str, Any]


class Criterion(ABC):
    """One privacy criterion; evaluated per equivalence class, in SQL."""

    #: key of the criterion under `criteria:` in the job file
    name: str = ""
    #: holds for every generalization of a node that satisfies it (enables pruning)
    monotone: bool = True

    @abstractmethod
    def params(self) -> dict[str, Any]:
        """The criterion's parameters, as written in the config."""

    @abstractmethod
    def violating_classes(self, fs: FrequencySetView) -> SqlFragment:
        """SELECT the class columns and their size `n` for every class that violates it."""

    def sensitive_attributes(self) -> list[str]:
        """The sensitive attributes the criterion reads (their columns must be in frequency sets)."""
        return []

    def check_domain(self, attribute: str, distinct_values: int, numeric: bool) -> None:
        """Raise ConfigError if the criterion cannot hold for this sensitive attribute's values."""

    def check_table_size(self, rows: int) -> None:
        """Raise ConfigError if the criterion cannot hold on a table of this many rows."""

    def describe(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in self.params().items())
        return f"{self.name}({args})"


class KAnonymity(Criterion):
    """Every equivalence class holds at least k tuples."""

    name = "k_anonymity"

    def __init__(self, k: int):
        if isinstance(k, bool) or not isinstance(k, int):
            raise ConfigError(f"k_anonymity: k must be a whole number >= 1, got {k!r}")
        if k < 1:
            raise ConfigError(f"k_anonymity: k must be >= 1, got {k}")
        self.k = k

    @classmethod
    def from_config(cls, spec: Any) -> "KAnonymity":
        if isinstance(spec, dict):
            unknown = sorted(set(spec) - {"k"})
            if unknown or "k" not in spec:
                raise ConfigError("k_anonymity takes exactly one key, k (e.g. k_anonymity: {k: 5})")
            spec = spec["k"]
        return cls(spec)

    def params(self) -> dict[str, Any]:
        return {"k": self.k}

    def violating_classes(self, fs: FrequencySetView) -> SqlFragment:
        cols = ", ".join(fs.class_columns)
        select_cols = f"{cols}, " if cols else ""
        if fs.one_row_per_class:
            sql = f"SELECT {select_cols}{fs.count_column} AS n FROM {fs.table} WHERE {fs.count_column} < :kanon_k"
        else:
            group = f" GROUP BY {cols}" if cols else ""
            sql = (f"SELECT {select_cols}SUM({fs.count_column}) AS n FROM {fs.table}{group} "
                   f"HAVING SUM({fs.count_column}) < :kanon_k")
        return SqlFragment(sql, {"kanon_k": self.k})

    def check_table_size(self, rows: int) -> None:
        if self.k > rows:
            raise ConfigError(f"k_anonymity: k={self.k} is larger than the table ({rows} rows); "
                              "no generalization can satisfy it; choose k <= the row count")


#: floating-point slack when comparing entropies and distances with their bounds
EPSILON = 1e-9


def _number(name: str, key: str, value: Any, minimum: float | None = None, maximum: float | None = None,
            whole: bool = False) -> Any:
    ok = isinstance(value, int) if whole else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok:
        kind = "a whole number" if whole else "a number"
        raise ConfigError(f"{name}: {key} must be {kind}, got {value!r}")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        bounds = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise ConfigError(f"{name}: {key} must be {bounds}, got {value}")
    return value


def _spec(name: str, spec: Any, required: set[str], optional: set[str] = frozenset()) -> dict[str, Any]:
    if not isinstance(spec, dict):
        raise ConfigError(f"{name} takes a mapping with {', '.join(sorted(required))}")
    unknown = sorted(set(spec) - required - optional)
    missing = sorted(required - set(spec))
    if unknown or missing:
        raise ConfigError(f"{name}: {'unknown key ' + repr(unknown[0]) if unknown else 'missing key ' + repr(missing[0])}"
                          f"; it takes {', '.join(sorted(required | optional))}")
    if not isinstance(spec["attribute"], str):
        raise ConfigError(f"{name}: attribute must be a column name")
    return spec


class _LDiversity(Criterion):
    """Shared by the l-diversity instantiations: one sensitive attribute and an l."""

    def __init__(self, attribute: str, l: int):
        self.attribute = attribute
        self.l = _number(self.name, "l", l, minimum=1, whole=True)

    def sensitive_attributes(self) -> list[str]:
        return [self.attribute]

    def check_domain(self, attribute: str, distinct_values: int, numeric: bool) -> None:
        if attribute == self.attribute and self.l > distinct_values:
            raise ConfigError(f"{self.name}: l={self.l} is larger than the {distinct_values} distinct values of "
                              f"{attribute!r}; no class can be {self.l}-diverse; choose l <= {distinct_values}")

    def _per_class(self, fs: FrequencySetView, having: str, params: dict[str, Any],
                   source: str | None = None) -> SqlFragment:
        cls = ", ".join(f"v.{c}" for c in fs.class_columns)
        select = f"{cls}, " if cls else ""
        group = f" GROUP BY {cls}" if cls else ""
        return SqlFragment(f"SELECT {select}MAX(v.n) AS n FROM ({source or fs.value_counts(self.attribute)}) v"
                           f"{group} HAVING {having}", params)


class DistinctLDiversity(_LDiversity):
    """At least l distinct sensitive values in every class."""

    name = "distinct_l_diversity"

    @classmethod
    def from_config(cls, spec: Any) -> "DistinctLDiversity":
        spec = _spec(cls.name, spec, {"attribute", "l"})
        return cls(spec["attribute"], spec["l"])

    def params(self) -> dict[str, Any]:
        return {"attribute": self.attribute, "l": self.l}

    def violating_classes(self, fs: FrequencySetView) -> SqlFragment:
        return self._per_class(fs, "COUNT(*) < :distinct_l", {"distinct_l": self.l})


class EntropyLDiversity(_LDiversity):
    """Entropy of every class's sensitive values at least log(l)."""

    name = "entropy_l_diversity"

    @classmethod
    def from_config(cls, spec: Any) -> "EntropyLDiversity":
        spec = _spec(cls.name, spec, {"attribute", "l"})
        return cls(spec["attribute"], spec["l"])

    def params(self) -> dict[str, Any]:
        return {"attribute": self.attribute, "l": self.l}

    def violating_classes(self, fs: FrequencySetView) -> SqlFragment:
        # H = -sum p log p = log n - (sum c log c) / n
        entropy = "LN(MAX(v.n)) - SUM(v.c * LN(v.c)) / MAX(v.n)"
        return self._per_class(fs, f"{entropy} < LN(:entropy_l) - :entropy_eps",
                               {"entropy_l": float(self.l), "entropy_eps": EPSILON})


class RecursiveLDiversity(_LDiversity):
    """Recursive (c,l)-diversity: r1 < c (r_l + ... + r_m), counts sorted descending."""

    name = "recursive_l_diversity"

    def __init__(self, attribute: str, c: float, l: int):
        super().__init__(attribute, l)
        self.c = _number(self.name, "c", c)
        if self.c <= 0:
            raise ConfigError(f"{self.name}: c must be > 0, got {c}")

    @classmethod
    def from_config(cls, spec: Any) -> "RecursiveLDiversity":
        spec = _spec(cls.name, spec, {"attribute", "c", "l"})
        return cls(spec["attribute"], spec["c"], spec["l"])

    def params(self) -> dict[str, Any]:
        return {"attribute": self.attribute, "c": self.c, "l": self.l}

    def violating_classes(self, fs: FrequencySetView) -> SqlFragment:
        if self.l == 1:  # holds by definition
            return self._per_class(fs, "1 = 0", {})
        cls = ", ".join(fs.class_columns)
        partition = f"PARTITION BY {cls} " if cls else ""
        ranked = (f"SELECT {cls}{', ' if cls else ''}c, n, "
                  f"ROW_NUMBER() OVER ({partition}ORDER BY c DESC) AS r FROM ({fs.value_counts(self.attribute)}) rc")
        having = "MAX(v.c) >= :recursive_c * SUM(CASE WHEN v.r >= :recursive_l THEN v.c ELSE 0 END)"
        return self._per_class(fs, having, {"recursive_c": float(self.c), "recursive_l": self.l}, ranked)


class TCloseness(Criterion):
    """Distance between each class's sensitive distribution and the whole table's at most t."""

    name = "t_closeness"
    DISTANCES = ("equal", "ordered", "kl")

    def __init__(self, attribute: str, t: float, distance: str = "equal"):
        self.attribute = attribute
        self.t = _number(self.name, "t", t, minimum=0, maximum=1)
        if distance not in self.DISTANCES:
            raise ConfigError(f"{self.name}: distance {distance!r} is unknown; choose one of "
                              f"{', '.join(self.DISTANCES)}")
        self.distance = distance

    @classmethod
    def from_config(cls, spec: Any) -> "TCloseness":
        spec = _spec(cls.name, spec, {"attribute", "t"}, {"distance"})
        return cls(spec["attribute"], spec["t"], spec.get("distance", "equal"))

    def params(self) -> dict[str, Any]:
        return {"attribute": self.attribute, "t": self.t, "distance": self.distance}

    def sensitive_attributes(self) -> list[str]:
        return [self.attribute]

    def check_domain(self, attribute: str, distinct_values: int, numeric: bool) -> None:
        if attribute == self.attribute and self.distance == "ordered" and not numeric:
            raise ConfigError(f"{self.name}: the ordered distance needs a numeric attribute, and {attribute!r} is "
                              "not numeric; use distance: equal (or kl)")

    def violating_classes(self, fs: FrequencySetView) -> SqlFragment:
        counts = fs.value_counts(self.attribute)
        cls_v = ", ".join(f"v.{c}" for c in fs.class_columns)
        table = (f"SELECT s, SUM(c) * 1.0 / (SELECT SUM(c) FROM ({counts}) a) AS q "
                 f"FROM ({counts}) b GROUP BY s")
        if self.distance == "ordered":
            return self._ordered(fs, counts, table)
        if self.distance == "kl":
            per_value = "(v.c * 1.0 / v.n) * LN((v.c * 1.0 / v.n) / q.q)"
            distance = f"SUM({per_value})"
        else:  # equal ground distance: half the L1 distance; values absent from the class contribute q
            distance = "0.5 * (SUM(ABS(v.c * 1.0 / v.n - q.q)) + 1 - SUM(q.q))"
        group = f" GROUP BY {cls_v}" if cls_v else ""
        select = f"{cls_v}, " if cls_v else ""
        sql = (f"SELECT {select}MAX(v.n) AS n FROM ({counts}) v JOIN ({table}) q ON v.s IS NOT DISTINCT FROM q.s"
               f"{group} HAVING {distance} > :tclose_t + :tclose_eps")
        return SqlFragment(sql, {"tclose_t": float(self.t), "tclose_eps": EPSILON})

    def _ordered(self, fs: FrequencySetView, counts: str, table: str) -> SqlFragment:
        """(1/(m-1)) sum_i |sum_{j<=i} (p_j - q_j)| over the table's values in ascending order."""
        cls = fs.class_columns
        cls_g = ", ".join(f"g.{c}" for c in cls)
        on = " AND ".join(f"v.{c} IS NOT DISTINCT FROM g.{c}" for c in cls)
        partition = f"PARTITION BY {cls_g} " if cls else ""
        classes = f"SELECT DISTINCT {', '.join(cls) + ', ' if cls else ''}n FROM ({counts}) c"
        grid = (f"SELECT {cls_g + ', ' if cls else ''}g.n, d.rank_, "
                f"COALESCE(v.c, 0) * 1.0 / g.n - d.q AS diff "
                f"FROM ({classes}) g CROSS JOIN (SELECT s, q, ROW_NUMBER() OVER (ORDER BY s) AS rank_ FROM ({table}) t) d "
                f"LEFT JOIN ({counts}) v ON {on + ' AND ' if on else ''}v.s IS NOT DISTINCT FROM d.s")
        cumulative = (f"SELECT {cls_g + ', ' if cls else ''}g.n, SUM(g.diff) OVER ({partition}ORDER BY g.rank_ "
                      f"ROWS UNBOUNDED PRECEDING) AS cum FROM ({grid}) g")
        cls_w = ", ".join(f"w.{c}" for c in cls)
        steps = f"(SELECT COUNT(*) - 1 FROM ({table}) m)"
        sql = (f"SELECT {cls_w + ', ' if cls else ''}MAX(w.n) AS n FROM ({cumulative}) w"
               f"{' GROUP BY ' + cls_w if cls else ''} "
               f"HAVING SUM(ABS(w.cum)) > (:tclose_t + :tclose_eps) * GREATEST({steps}, 1)")
        return SqlFragment(sql, {"tclose_t": float(self.t), "tclose_eps": EPSILON})


CRITERIA: dict[str, Callable[[Any], Criterion]] = {
    c.name: c.from_config for c in (KAnonymity, DistinctLDiversity, EntropyLDiversity, RecursiveLDiversity,
                                    TCloseness)
}


def criteria_from_config(raw: Any) -> list[Criterion]:
    """Build the criteria listed under `criteria:`; all of them must hold."""
    if not isinstance(raw, dict) or not raw:
        raise ConfigError("criteria must map criterion names to their parameters, e.g. k_anonymity: {k: 5}")
    criteria = []
    for name, spec in raw.items():
        if name not in CRITERIA:
            raise ConfigError(f"unknown criterion {name!r}; available: {', '.join(sorted(CRITERIA))}")
        criteria.append(CRITERIA[name](spec))
    return criteria
