"""Randomization as a publication method (`output.method: randomize`): every value of the chosen numeric columns
published with independent additive noise (Agrawal and Srikant; the PPDM chapter's 20.2), and the noise's
distribution published beside it (`output.noise_table`, by default TABLE_noise) so that analysts can reconstruct
each column's distribution (sqlanon.analysis.reconstruction).

The noise is drawn in the database from a secret key (sqlanon.engine.randomization): `output.noise_key`, read at
run time from an environment variable or a file as pseudonym keys are, makes a run reproducible (the same key
and table give the same release); without it every run draws a fresh key that nobody keeps. The key is never
stored, logged or part of a statement or its parameters: whoever holds it can take the noise off.

What it guarantees: each published value is its record's plus noise of the declared distribution, independent
of everything else. What it does not: no k-anonymity or other criterion (a job with criteria or suppression is
refused), and columns without noise are published as they are (a quasi-identifier must have noise).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Connection

from ..backends import Database
from ..backends.base import ColumnKind
from ..engine.audit import check_published_columns, check_published_values
from ..engine.randomization import (
    Figures,
    described_noise,
    noise_key_table,
    noise_table_select,
    numeric_figures,
    randomized_select,
)
from ..errors import AuditError, ConfigError, DataError
from ..model.job import Job
from ..model.noise import Noise, key_source, read_noise_key
from ..model.progress import Phases, Progress, silent
from .generalize import unchanged_columns
from .identifiers import Pseudonyms
from .methods import PublicationMethod, refuse_criteria
from .ownership import Ownership
from .staging import Destination, PublishedTable, Released, plain_rows, preview, staged_table

__all__ = ["Randomization", "RandomizationReport", "randomize_and_publish"]

#: how far a noised column's mean may move, in standard errors of the noise's mean, before the audit fails: a
#: declared noise moves it further with a probability below 1e-8
MEAN_TOLERANCE = 6.0


class Randomization(PublicationMethod):
    """Additive noise on numeric columns, its distribution published beside the table."""

    name = "randomize"
    settings = ("noise", "noise_table", "noise_key")
    companion = ("noise_table", "noise")  # the table describing the noise

    @classmethod
    def parse(cls, output: Mapping[str, Any], base_dir: Path) -> dict[str, Any]:
        noise, key = output.get("noise"), output.get("noise_key")
        if not isinstance(noise, Mapping) or not noise:
            raise ConfigError(
                "output.noise must map each column to its noise, e.g. noise: {age: {distribution: uniform, width: 10}}"
            )
        noises = [Noise.parse(str(column), spec, f"output.noise.{column}") for column, spec in noise.items()]
        table = output.get("noise_table")
        if table is not None and not isinstance(table, str):
            raise ConfigError(f"output.noise_table must be a table name, got {table!r}")
        return {
            "noise": {n.column: n.describe() for n in noises},
            "noise_table": table,
            "noise_key": key_source(key, base_dir),
        }

    @classmethod
    def check(cls, job: Job) -> None:
        refuse_criteria(job, cls.name, "adds noise to every record")
        assert job.output is not None
        roles = {column.lower(): role for column, role in job.column_roles()}
        noised = {n.column.lower() for n in cls.noises(job)}
        for noise in cls.noises(job):
            role = roles.get(noise.column.lower())
            if role in (None, "identifying"):
                raise ConfigError(
                    f"output.noise.{noise.column}: the job publishes no column {noise.column!r}; give noise to a "
                    "quasi-identifier, sensitive or insensitive column"
                )
        bare = [qi for qi in job.qi_names if qi.lower() not in noised]
        if bare:
            raise ConfigError(
                f"quasi-identifier {bare[0]!r} would be published as it is: give it noise under output.noise, or "
                "list it as insensitive"
            )

    @staticmethod
    def noises(job: Job) -> list[Noise]:
        assert job.output is not None
        found = job.output.settings["noise"]
        return [Noise.parse(column, spec, f"output.noise.{column}") for column, spec in found.items()]

    @staticmethod
    def key(job: Job) -> tuple[bytes, bool]:
        """The noise's key, read now, and whether it is the job's (reproducible) or drawn for this run only."""
        assert job.output is not None
        return read_noise_key(job.output.settings["noise_key"])


@dataclass(kw_only=True)
class RandomizationReport(Released):
    """What `randomize` published: the table and its noise table, the noise of each column, whether the noise can
    be drawn again (the job's key), the audit, the first rows and the seconds."""

    output: str
    noise_table: str
    rows: int
    noise: list[Noise]
    reproducible: bool
    audit: dict[str, bool]
    preview: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": Randomization.name,
            "output": self.output,
            "noise_table": self.noise_table,
            "rows": self.rows,
            "noise": {n.column: n.describe() | {"sd": n.sd} for n in self.noise},
            "reproducible": self.reproducible,
            "audit": self.audit,
            "seconds": round(self.seconds, 3),
            "preview": plain_rows(self.preview),
        }


def randomize_and_publish(
    db: Database,
    conn: Connection,
    *,
    job: Job,
    columns: dict[str, str],
    destination: Destination,
    noise_destination: Destination,
    pseudonyms: Pseudonyms,
    ownership: Ownership,
    run_id: int,
    progress: Progress = silent,
) -> RandomizationReport:
    """Publish the job's source with noise and its noise table, each written and audited, in the caller's
    transaction (`columns`: the source's columns and their types)."""
    started = time.perf_counter()
    phases = Phases(progress, "randomize", 3)
    phases.step("reading the source")
    noises = [_on_source(db, noise, columns) for noise in Randomization.noises(job)]
    source = db.q(destination.source.schema, destination.source.table)
    rows, before = numeric_figures(db, conn, source, [n.column for n in noises])
    for noise, figures in zip(noises, before, strict=True):
        if figures.finite != figures.values:
            raise DataError(
                f"column {noise.column!r} holds {figures.values - figures.finite} values that are not finite "
                "numbers (NaN or infinite); noise cannot hide them: set them to NULL, or leave the column out"
            )
    key, reproducible = Randomization.key(job)
    identifying = list(job.identifying)
    phases.step("writing the table")
    name = str(destination.name)
    with noise_key_table(db, conn, key) as keys:
        select, published = randomized_select(
            db,
            conn,
            source=source,
            keys=keys,
            columns=list(columns),
            noises=noises,
            select_other=lambda column, value: pseudonyms.select(db, identifying, column, value),
        )
        with staged_table(
            db, conn, destination=destination, select=select, ownership=ownership, run_id=run_id
        ) as staged:
            phases.step("auditing")
            check_published_columns(db, conn, staged.ref, name, published)
            noised = {db.name_key(n.column) for n in noises}
            kept = [c for c in published if db.name_key(c) not in noised]
            unchanged = unchanged_columns(db, pseudonyms, identifying, kept)
            check_published_values(db, conn, staged.ref, name, source, unchanged, every_row=True)
            written, after = numeric_figures(db, conn, staged.ref, [n.column for n in noises])
            audit = audit_noise(name, noises, (rows, before), (written, after))
            staged.audited(written)
    described, params = noise_table_select(noises)
    with staged_table(
        db, conn, destination=noise_destination, select=described, params=params, ownership=ownership, run_id=run_id
    ) as staged:
        staged.audited(_check_noise_table(db, conn, staged.ref, str(noise_destination.name), noises))
    return RandomizationReport(
        output=name,
        noise_table=str(noise_destination.name),
        rows=written,
        noise=noises,
        reproducible=reproducible,
        audit=audit,
        preview=preview(db, conn, destination.name),
        seconds=time.perf_counter() - started,
        release=PublishedTable.of(db, destination.name),
    )


def _on_source(db: Database, noise: Noise, columns: dict[str, str]) -> Noise:
    """`noise` on the source's column of its name (as the source spells it), which must hold numbers."""
    column = next((c for c in columns if db.same_name(c, noise.column)), None)
    if column is None:
        raise DataError(f"output.noise.{noise.column}: the source has no column {noise.column!r}")
    if db.column_kind(columns[column]) is ColumnKind.OTHER:
        raise DataError(
            f"output.noise.{noise.column}: column {column!r} holds {columns[column]}, not numbers; noise is added "
            "to numeric columns only (publish the others generalized, or leave them out)"
        )
    return Noise(column, noise.distribution, noise.scale)


def audit_noise(
    name: str, noises: list[Noise], source: tuple[int, list[Figures]], written: tuple[int, list[Figures]]
) -> dict[str, bool]:
    """What can be checked of the written table without pairing its rows with the source's: as many rows, each
    noised column NULL as often and finite, a bounded noise's values within its reach of the source's range, and
    every column's mean within MEAN_TOLERANCE standard errors of the source's. Raises AuditError on the first that
    fails."""
    rows = source[0]
    holds = {"rows": written[0] == rows}
    for noise, before, after in zip(noises, source[1], written[1], strict=True):
        slack = 1e-9 * max(1.0, abs(before.low or 0), abs(before.high or 0))
        holds[f"{noise.column}: values where the source has them"] = after.values == after.finite == before.values
        if noise.bound is not None and before.finite:
            assert before.low is not None and before.high is not None and after.low is not None
            assert after.high is not None
            reach = noise.bound + slack
            holds[f"{noise.column}: within the noise's width"] = (
                after.low >= before.low - reach and after.high <= before.high + reach
            )
        if before.finite:
            assert before.mean is not None and after.mean is not None
            error = MEAN_TOLERANCE * noise.sd / math.sqrt(before.finite) + slack
            holds[f"{noise.column}: mean kept"] = abs(after.mean - before.mean) <= error
    failed = [what for what, ok in holds.items() if not ok]
    if failed:
        raise AuditError(f"the randomized table {name!r} failed its audit ({failed[0]}); nothing was written")
    return holds


def _check_noise_table(db: Database, conn: Connection, ref: str, name: str, noises: list[Noise]) -> int:
    """The noise table as written describes `noises`, one row each; its rows."""
    if described_noise(db, conn, ref) != sorted(noises, key=lambda n: n.column):
        raise AuditError(f"the noise table {name!r} does not describe the noise added; nothing was written")
    return len(noises)
