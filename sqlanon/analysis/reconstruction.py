"""The distribution of a randomized column, reconstructed from its published values and the noise's distribution
(Agrawal and Srikant's Bayes reconstruction, the PPDM chapter's 20.2.1): what an analyst of a randomized release
(sqlanon.publish.randomize) mines instead of the records.

The perturbed values z are counted on a grid of `intervals` equal intervals spanning them (one scan of the
table); the estimate f of the original distribution starts uniform and is updated until it stops changing:

    f'(a) = (1/n) sum_z n_z K(z - a) f(a) / sum_b K(z - b) f(b)

over the grid's intervals a, b and the observed intervals z (K: the noise's density between the intervals'
middles, see engine.randomization.noise_weight), one statement per iteration over the interval counts. It stops
as Agrawal and Srikant do, when two successive estimates differ by less than `tolerance` (1%) of the 95%
threshold of the chi-square test between them (as counts of the n values, k - 1 degrees of freedom): iterating
further fits the noise of the sample, not the distribution; or after `max_iterations`. With the original
table (a data owner's check), the report gives the L1 distance of the perturbed and of the reconstructed
distributions to the true one on the same grid. Nothing is written but temporary tables.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..backends import Database, normalize_url, open_database
from ..backends.base import ColumnKind
from ..engine.randomization import (
    Reconstruction,
    described_noise,
    interval_counts,
    l1_distance,
    numeric_figures,
    spread,
)
from ..errors import ConfigError, DataError
from ..model.noise import Noise
from ..model.progress import Progress, silent

if TYPE_CHECKING:
    import pandas as pd
    from sqlalchemy.engine import Connection

DEFAULT_INTERVALS = 40
DEFAULT_TOLERANCE = 0.01  # of the chi-square test's threshold: Agrawal and Srikant's stopping rule
DEFAULT_MAX_ITERATIONS = 1000


@dataclass
class Interval:
    low: float
    high: float
    perturbed: float  # share of the published values in the interval
    reconstructed: float  # share of the original values, as reconstructed
    original: float | None = None  # share of the original values, where the original table was given


@dataclass
class ReconstructionReport:
    """A column's reconstructed distribution: per interval of the grid, the shares of the perturbed values, of the
    reconstruction and (with the original) of the true values; how the iterations ended; the L1 distances."""

    table: str
    column: str
    noise: Noise
    values: int
    iterations: int
    converged: bool
    change: float  # the chi-square statistic between the last two estimates
    intervals: list[Interval] = field(default_factory=list)
    statements: int = 0
    seconds: float = 0.0

    @property
    def l1_perturbed(self) -> float | None:
        """L1 distance of the perturbed values' distribution to the original's (None without the original)."""
        return self._l1(lambda i: i.perturbed)

    @property
    def l1_reconstructed(self) -> float | None:
        """L1 distance of the reconstruction to the original's distribution (None without the original)."""
        return self._l1(lambda i: i.reconstructed)

    def _l1(self, share: Callable[[Interval], float]) -> float | None:
        if not self.intervals or self.intervals[0].original is None:
            return None
        return l1_distance([share(i) for i in self.intervals], [i.original or 0.0 for i in self.intervals])

    def frame(self) -> pd.DataFrame:
        """One row per interval: low, high and the shares."""
        import pandas as pd

        return pd.DataFrame([vars(i) for i in self.intervals])

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "column": self.column,
            "noise": self.noise.describe(),
            "values": self.values,
            "iterations": self.iterations,
            "converged": self.converged,
            "change": self.change,
            "l1_perturbed": self.l1_perturbed,
            "l1_reconstructed": self.l1_reconstructed,
            "statements": self.statements,
            "seconds": round(self.seconds, 3),
            "intervals": [vars(i) for i in self.intervals],
        }


@dataclass(frozen=True, kw_only=True)
class Grid:
    """The reconstruction's settings: `intervals` of the grid, the stopping rule, and the original table (schema,
    table, column) to compare with, if any."""

    intervals: int = DEFAULT_INTERVALS
    tolerance: float = DEFAULT_TOLERANCE
    max_iterations: int = DEFAULT_MAX_ITERATIONS
    original: tuple[str | None, str, str] | None = None

    def __post_init__(self) -> None:
        if not 2 <= self.intervals <= 1000:
            raise ConfigError(f"--intervals must be between 2 and 1000, got {self.intervals}")
        if not 0 < self.tolerance <= 1:
            raise ConfigError(f"--tolerance must be above 0 and at most 1, got {self.tolerance}")
        if self.max_iterations < 1:
            raise ConfigError(f"--max-iterations must be at least 1, got {self.max_iterations}")


def reconstruct_distribution(
    db_url: str,
    table: str,
    column: str,
    schema: str | None = None,
    *,
    noise: Noise | None = None,
    noise_table: str | None = None,
    grid: Grid | None = None,
    progress: Progress = silent,
) -> ReconstructionReport:
    """Reconstruct `column`'s original distribution from `table` (see the module). The noise is `noise` where
    given, else the row of `noise_table` (by default TABLE_noise, in the same schema) for the column."""
    grid = grid or Grid()
    started = time.perf_counter()
    db = open_database(normalize_url(db_url, Path.cwd()))
    try:
        with db.connect() as conn, conn.begin():
            named = _numeric_column(db, conn, schema, table, column, "name a column of the randomized table")
            noise = _noise(db, conn, schema, noise_table or f"{table}_noise", named, noise)
            ref = db.q(schema, table)
            progress("reconstruct: counting the published values", 0, grid.max_iterations)
            _, (figures,) = numeric_figures(db, conn, ref, [named])
            if not figures.finite or figures.low is None or figures.high is None:
                raise DataError(f"column {named!r} of {table!r} holds no numbers to reconstruct a distribution from")
            low, width = figures.low, (figures.high - figures.low) / grid.intervals or 1.0
            counts = interval_counts(db, conn, ref, named, low, width, grid.intervals)
            report = ReconstructionReport(
                table=table, column=named, noise=noise, values=figures.finite, iterations=0, converged=False, change=0
            )
            estimate = _iterate(db, conn, counts, noise, width, grid, report, progress)
            original = _original(db, conn, grid, low, width)
            perturbed = spread(counts)
            report.intervals = [
                Interval(
                    low + b * width,
                    low + (b + 1) * width,
                    perturbed[b],
                    estimate[b],
                    None if original is None else original[b],
                )
                for b in range(grid.intervals)
            ]
            report.statements += 2 + (2 if original else 0)
    finally:
        db.dispose()
    report.seconds = time.perf_counter() - started
    return report


def _iterate(
    db: Database,
    conn: Connection,
    counts: list[int],
    noise: Noise,
    width: float,
    grid: Grid,
    report: ReconstructionReport,
    progress: Progress,
) -> list[float]:
    """Iterate from the uniform estimate until the stopping rule holds; the last estimate (the report's
    iterations, convergence, last change and statements set)."""
    work = Reconstruction(db, conn, "reconstruction", counts, noise, width)  # gone with the transaction on error
    estimate = [1 / grid.intervals] * grid.intervals
    threshold = grid.tolerance * chi_square_threshold(grid.intervals - 1)
    for iteration in range(grid.max_iterations):
        following = work.iterate(iteration)
        report.change, estimate = chi_square(following, estimate, report.values), following
        report.iterations = iteration + 1
        if iteration % 25 == 0:
            progress(f"reconstruct: iterating (change {report.change:.2g})", iteration, grid.max_iterations)
        if report.change < threshold:
            report.converged = True
            break
    progress("reconstruct: iterating", grid.max_iterations, grid.max_iterations)
    report.statements += work.scratch.statements
    work.drop()
    return estimate


def chi_square(following: list[float], estimate: list[float], values: int) -> float:
    """The chi-square statistic of `following` against `estimate`, both as counts of `values` (intervals that
    `estimate` holds nothing of are left out: they stay empty)."""
    return values * math.fsum((f - e) ** 2 / e for f, e in zip(following, estimate, strict=True) if e > 0)


def chi_square_threshold(degrees: int) -> float:
    """The chi-square distribution's 95% quantile with `degrees` of freedom (Wilson and Hilferty's
    approximation: within 0.5% from 3 degrees on; the rule it serves takes 1% of it)."""
    z, d = 1.6448536269514722, max(1, degrees)
    return d * (1 - 2 / (9 * d) + z * math.sqrt(2 / (9 * d))) ** 3


def _original(db: Database, conn: Connection, grid: Grid, low: float, width: float) -> list[float] | None:
    """The original column's distribution on the grid, where the grid names it."""
    if grid.original is None:
        return None
    schema, table, column = grid.original
    named = _numeric_column(db, conn, schema, table, column, "name the original table's column (--original-column)")
    return spread(interval_counts(db, conn, db.q(schema, table), named, low, width, grid.intervals))


def _numeric_column(db: Database, conn: Connection, schema: str | None, table: str, column: str, fix: str) -> str:
    """`column` of `table` as the table spells it, which must hold numbers."""
    types = db.column_types(conn, schema, table, fix="name a table of this database (and --schema)")
    named = next((c for c in types if db.same_name(c, column)), None)
    if named is None:
        raise DataError(f"table {table!r} has no column {column!r} (its columns: {', '.join(types)}); {fix}")
    if db.column_kind(types[named]) is ColumnKind.OTHER:
        raise DataError(f"column {named!r} of {table!r} holds {types[named]}, not numbers; {fix}")
    return named


def _noise(db: Database, conn: Connection, schema: str | None, table: str, column: str, given: Noise | None) -> Noise:
    """The noise of `column`: `given`, else the noise table's row for it."""
    if given is not None:
        return Noise(column, given.distribution, given.scale)
    if not db.table_exists(conn, schema, table):
        raise DataError(
            f"no noise table {table!r}: name the table that describes the noise (--noise-table), or give the noise "
            "(--uniform WIDTH or --gaussian SD)"
        )
    found = next((n for n in described_noise(db, conn, db.q(schema, table)) if db.same_name(n.column, column)), None)
    if found is None:
        raise DataError(f"the noise table {table!r} describes no noise of column {column!r}; name the noised column")
    return found
