"""Privacy criteria as small pluggable objects, one module per family.

A criterion computes one statistic per equivalence class in SQL (its size, its number of distinct sensitive
values, its entropy, its distance to the table's distribution, ...) from a frequency set, and says which classes
violate it. The search asks which classes violate any criterion (a UNION of each criterion's violators); the audit
reports the worst class's statistic.

Contract: a criterion reads a frequency set only through `view.FrequencySetView` (its interface, in this
package, with the SQL fragments criteria build with), and imports nothing of sqlanon's above `model` (no
connection, no backend). Adding one: a `Criterion` subclass with a `name` in a module
here (it registers itself in `Criterion.registry` as it is defined; import the module below), declaring its
monotonicity and the settings that name files as class attributes, and one entry in the tests' list of criteria
checked against the exhaustive oracle.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..model.quality import CostBenefit
from . import k_anonymity, l_diversity, likeness, presence, profitability, risk, t_closeness
from .base import EPSILON, Criterion
from .k_anonymity import KAnonymity
from .l_diversity import (
    DistinctLDiversity,
    EntropyLDiversity,
    MultiAttributeLDiversity,
    NpdRecursiveLDiversity,
    RecursiveLDiversity,
)
from .likeness import BetaLikeness, DeltaDisclosure
from .presence import DeltaPresence
from .profitability import Profitability
from .risk import AverageRisk, KMap, PopulationUniqueness, ReleaseCriterion, SampleUniqueness
from .t_closeness import TCloseness

#: every criterion by its name under `criteria:`
CRITERIA = Criterion.registry

__all__ = [
    "CRITERIA",
    "EPSILON",
    "AverageRisk",
    "BetaLikeness",
    "Criterion",
    "DeltaDisclosure",
    "DeltaPresence",
    "DistinctLDiversity",
    "EntropyLDiversity",
    "KAnonymity",
    "KMap",
    "MultiAttributeLDiversity",
    "NpdRecursiveLDiversity",
    "PopulationUniqueness",
    "Profitability",
    "RecursiveLDiversity",
    "ReleaseCriterion",
    "SampleUniqueness",
    "TCloseness",
    "criteria_from_config",
    "k_anonymity",
    "l_diversity",
    "least_size_first",
    "likeness",
    "presence",
    "profitability",
    "risk",
    "t_closeness",
]


def criteria_from_config(
    raw: Any, base_dir: Path | str = ".", cost_benefit: CostBenefit | None = None
) -> list[Criterion]:
    """Build the criteria listed under `criteria:`; all of them must hold.

    Settings that name files (a criterion's `file_keys`, e.g. t-closeness's hierarchy) resolve against base_dir;
    the profitability criterion reads the job's `cost_benefit` (ARX's defaults where it has none).
    """
    if not isinstance(raw, dict) or not raw:
        raise ConfigError("criteria must map criterion names to their parameters, e.g. k_anonymity: {k: 5}")
    criteria = []
    for name, spec in raw.items():
        if name not in CRITERIA:
            raise ConfigError(f"unknown criterion {name!r}; available: {', '.join(sorted(CRITERIA))}")
        kind = CRITERIA[name]
        if isinstance(spec, dict):
            spec = {
                **spec,
                **{key: Path(base_dir) / str(spec[key]) for key in kind.file_keys if spec.get(key) is not None},
            }
        criteria.append(kind.from_job(spec, cost_benefit or CostBenefit()))
    _check_histograms(criteria)
    return criteria


def _check_histograms(criteria: list[Criterion]) -> None:
    """A criterion decided over the release's histogram chooses the classes to suppress in Python, over the classes
    the per-class criteria leave: beside another bound on the whole release, which chooses its own in SQL, neither
    would see the other's."""
    decided = [c.name for c in criteria if c.decided_by_histogram]
    release = [c.name for c in criteria if c.whole_release and not c.decided_by_histogram]
    if decided and (release or len(decided) > 1):
        raise ConfigError(
            f"{decided[0]} cannot be combined with {', '.join(release + decided[1:])} (both bound the whole "
            "release); keep one of them, with per-class criteria such as k_anonymity beside it"
        )


def least_size_first(criteria: list[Criterion], table_counts: dict[str, dict[str | None, int]]) -> list[Criterion]:
    """k-anonymity at the least class size the criteria allow (`Criterion.least_class_size`), or nothing where
    any size may hold: monotone under suppression, and read from frequency sets without the sensitive values, it
    is what a search settles first (every node it fails, the criteria fail)."""
    least = max((c.least_class_size(table_counts) for c in criteria), default=1)
    return [KAnonymity(least)] if least > 1 else []
