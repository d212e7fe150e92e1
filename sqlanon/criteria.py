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
    sensitive_columns: list[str]
    definition: str | None = None

    @property
    def one_row_per_class(self) -> bool:
        return not self.sensitive_columns


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

    @abstractmethod
    def audit_check(self, class_sizes_sql: str) -> SqlFragment:
        """SELECT one boolean `holds` over a subquery of published class sizes (column n)."""

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

    def audit_check(self, class_sizes_sql: str) -> SqlFragment:
        return SqlFragment(f"SELECT COALESCE(MIN(n), 0) >= :audit_k AS holds FROM ({class_sizes_sql}) AS classes",
                           {"audit_k": self.k})

    def check_table_size(self, rows: int) -> None:
        if self.k > rows:
            raise ConfigError(f"k_anonymity: k={self.k} is larger than the table ({rows} rows); "
                              "no generalization can satisfy it; choose k <= the row count")


CRITERIA: dict[str, Callable[[Any], Criterion]] = {
    KAnonymity.name: KAnonymity.from_config,
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
