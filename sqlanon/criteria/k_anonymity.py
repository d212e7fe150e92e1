"""k-anonymity (Samarati and Sweeney): every equivalence class holds at least k tuples."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from .base import Criterion
from .view import FrequencySetView, SqlFragment


class KAnonymity(Criterion):
    """Every equivalence class holds at least k tuples."""

    name = "k_anonymity"
    monotone_under_suppression = True  # a merged class smaller than k is made of classes smaller than k
    figure_name = "min_class_size"

    def __init__(self, k: int, *, implied_by: str = "", remedy: str = ""):
        """`implied_by`: what sets k when the job does not name it (a guarantee whose parameters imply it), and
        `remedy`, what lowers it: a table smaller than k is refused in those terms."""
        if isinstance(k, bool) or not isinstance(k, int):
            raise ConfigError(f"{self.name}: k must be a whole number >= 1, got {k!r}")
        if k < 1:
            raise ConfigError(f"{self.name}: k must be >= 1, got {k}")
        self.k = k
        self.implied_by, self.remedy = implied_by, remedy

    @classmethod
    def from_config(cls, spec: Any) -> KAnonymity:
        if isinstance(spec, dict):
            if set(spec) != {"k"}:
                raise ConfigError("k_anonymity takes exactly one key, k (e.g. k_anonymity: {k: 5})")
            spec = spec["k"]
        return cls(spec)

    def params(self) -> dict[str, Any]:
        return {"k": self.k}

    def guarantee(self) -> str:
        return f"every group holds at least {self.k} records: no record can be told apart from {self.k - 1} others"

    def class_statistic(self, fs: FrequencySetView) -> SqlFragment:
        return SqlFragment(f"SELECT {fs.classes}, n, n AS stat FROM ({fs.class_sizes()}) AS sizes", {})

    def violation(self) -> SqlFragment:
        return SqlFragment("stat < :kanon_k", {"kanon_k": self.k})

    def least_class_size(self, table_counts: dict[str, dict[str | None, int]]) -> int:
        return self.k

    def size_violation(self) -> SqlFragment | None:
        return SqlFragment("n < :kanon_k", {"kanon_k": self.k})

    def check_table_size(self, rows: int) -> None:
        if self.k <= rows:
            return
        if self.implied_by:
            raise ConfigError(
                f"{self.implied_by} needs classes of at least k={self.k} rows, more than the {rows} rows it reads: "
                f"every row would be suppressed; {self.remedy}"
            )
        raise ConfigError(
            f"k_anonymity: k={self.k} is larger than the table ({rows} rows); "
            "no generalization can satisfy it; choose k <= the row count"
        )
