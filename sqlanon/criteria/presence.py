"""delta-presence (Nergiz, Atzori and Clifton, SIGMOD 2007): whoever knows the population a research subset was
drawn from learns from the published subset, of each person of the population, a probability that they are in it
of at least d_min and at most d_max (ARX's DPresence)."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from .base import Criterion, number, spec_of
from .view import FrequencySetView, SqlFragment, count_sum, share


class DeltaPresence(Criterion):
    """Every class of the population (the source table, of which the job's `subset:` is published) holds a share of
    the subset's rows within [d_min, d_max]: n / pn, the class's rows of the subset over its rows of the population.

    As in ARX: monotone under generalization (a merged class's share lies between those of the classes merged), not
    under suppression; a class of the subset that breaks it may be suppressed, but a class of the population without
    a row of the subset (a share of 0, below any d_min > 0) holds nothing that could be, so the node fails whatever
    the suppression limit (in a search's wave such a class counts as more tuples than the subset holds). Unlike
    ARX, which checks a smallest class size first and so passes such classes where k-anonymity is asked too, they
    fail whatever the other criteria."""

    name = "delta_presence"
    reads_population = True
    fits_table = True
    figure_name = "max_presence"  # the largest share of the subset in a class
    figure_sql = "MAX(stat)"

    def __init__(self, *, d_min: float, d_max: float):
        self.d_min = float(number(self.name, "d_min", d_min, 0.0, 1.0))
        self.d_max = float(number(self.name, "d_max", d_max, 0.0, 1.0))
        if self.d_min > self.d_max:
            raise ConfigError(f"{self.name}: d_min={self.d_min} is above d_max={self.d_max}; no share lies between")
        self.unfixable = 1  # more tuples than the subset holds (fit_table)

    @classmethod
    def from_config(cls, spec: Any) -> DeltaPresence:
        return cls(**spec_of(cls.name, spec, {"d_min", "d_max"}))

    def params(self) -> dict[str, Any]:
        return {"d_min": self.d_min, "d_max": self.d_max}

    def guarantee(self) -> str:
        return (
            f"whoever knows the population the published rows were drawn from can tell of no one that they are in "
            f"the release with a probability below {self.d_min} or above {self.d_max}"
        )

    def fit_table(self, rows: int) -> None:
        self.unfixable = rows + 1

    def class_statistic(self, fs: FrequencySetView) -> SqlFragment:
        """Per class of the subset, and per class of the population without a row of the subset that breaks d_min
        (n = 0: unless the release suppressed its rows, see FrequencySetView.population_withheld): n, pn and stat,
        n / pn. In a search's wave (`counts_only`) such a class counts as more tuples than the subset holds: no
        suppression makes the node pass."""
        n = "CASE WHEN n = 0 THEN :presence_unfixable ELSE n END" if fs.counts_only else "n"
        return population_statistic(
            self.name,
            fs,
            SqlFragment(f"{n} AS n, pn, {share('n', 'pn')} AS stat", {"presence_unfixable": self.unfixable}),
            SqlFragment("withheld = 0 AND :presence_min > 0", {"presence_min": self.d_min}),
        )

    def violation(self) -> SqlFragment:
        # as ARX compares them: exactly, in floating point
        bounds = {"presence_min": self.d_min, "presence_max": self.d_max}
        return SqlFragment("stat < :presence_min OR stat > :presence_max", bounds)


def population_statistic(name: str, fs: FrequencySetView, selected: SqlFragment, empty: SqlFragment) -> SqlFragment:
    """SELECT the class columns and `selected` (SQL over n, the class's rows of the subset, pn, its rows in the
    population, and withheld: see FrequencySetView.population) for every class of the subset, and every class of
    the population without a row of it where `empty` holds. Grouped over the subset's class sizes and the
    population's classes (a grouping matches NULL classes and hashes)."""
    if fs.population is None:
        raise ConfigError(
            f"{name} is not supported by this verb yet (it needs the population's classes); it is by the search, the "
            "publication and its audit, and `sqlanon audit` of a published table"
        )
    classes, withheld = fs.classes, "withheld" if fs.population_withheld else "0"
    return SqlFragment(
        f"SELECT {classes}, {selected.sql} FROM (SELECT {classes}, {count_sum('n')} AS n, {count_sum('pn')} AS pn, "
        f"{count_sum('withheld')} AS withheld FROM (SELECT {classes}, n, 0 AS pn, 0 AS withheld FROM "
        f"({fs.class_sizes()}) AS s UNION ALL SELECT {classes}, 0, cnt, {withheld} FROM {fs.population}) AS u "
        f"GROUP BY {classes}) AS c WHERE n > 0 OR ({empty.sql})",
        {**selected.params, **empty.params},
    )
