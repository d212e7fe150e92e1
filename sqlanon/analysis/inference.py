"""Inference across releases (the `infer` verb): the job's checks, where P(s | person) goes, and the solve.

The solver itself (propagation and iterative proportional fitting, in SQL) is sqlanon.engine.maxent; this
module checks what the job asks (releases, one sensitive column, tables that are releases and not the
source), resolves and owns the output table, and runs the solve in the caller's transaction.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from sqlalchemy.engine import Connection

from ..backends import Database
from ..engine.maxent import InferenceReport, ReleaseTables, analyze_releases
from ..errors import ConfigError
from ..model.hierarchies import Hierarchy
from ..model.job import Job
from ..model.progress import Progress, silent
from ..publish.ownership import Ownership, TableName

__all__ = ["InferenceReport", "InferenceTarget", "check_inference_job", "check_release_tables", "infer"]


def check_release_tables(db: Database, conn: Connection, job: Job, target: TableName | None) -> None:
    """A release is a table sqlanon published: not the job's source; and inference.table is a table of its own,
    none of the releases' (names compared as the database resolves them)."""
    assert job.releases is not None
    source = TableName(db.resolved_schema(conn, job.source.schema), job.source.table)
    for release in job.releases.releases:
        for table in filter(None, (release.table, release.sensitive_table)):
            name = TableName(db.resolved_schema(conn, release.schema), table)
            if name.same_as(source, db):
                raise ConfigError(
                    f"release {release.name!r}: table {str(name)!r} is the job's source table; a "
                    "release is a table sqlanon published (generalized, or a bucketized pair): name the "
                    "published tables under releases.series"
                )
            if target is not None and name.same_as(target, db):
                raise ConfigError(
                    f"inference.table {str(target)!r} is a table of release {release.name!r}; write "
                    "the probabilities to a table of their own"
                )


def check_inference_job(job: Job) -> None:
    """What inference needs of a job, before any database is opened: releases, one sensitive column, and with a
    `unit` column, releases whose pseudonym is the unit's."""
    if job.releases is None:
        raise ConfigError(
            "the config has no releases; add releases: {pseudonym: COLUMN, series: [{name: N, table: "
            "T, sensitive_table: S}, ...]}"
        )
    if job.unit_column and job.releases.pseudonym != job.unit_column:
        raise ConfigError(
            f"releases.pseudonym is {job.releases.pseudonym!r}, but the persons are named by unit column "
            f"{job.unit_column!r}: set releases.pseudonym to it (each person's rows are read as one)"
        )
    if len(job.sensitive) != 1:
        raise ConfigError(
            f"inference follows one sensitive column; the job lists {len(job.sensitive)} "
            f"({', '.join(job.sensitive) or 'none'}): list exactly one under sensitive"
        )


@dataclass(kw_only=True)
class InferenceTarget:
    """Where P(s | person) goes (`inference.table`), checked with the releases' tables before any work (a run's
    target, see sqlanon.session.Checked); its name stays None when the job names no table."""

    job: Job
    replace: bool
    setting: str = "inference.table"
    name: TableName | None = None

    def check(self, db: Database, conn: Connection, ownership: Ownership, source: TableName | None) -> TableName | None:
        settings = self.job.inference
        if settings.table is not None:
            self.name = ownership.resolve(conn, settings.schema or self.job.source.schema, settings.table, self.setting)
        check_release_tables(db, conn, self.job, self.name)
        if self.name is not None:
            ownership.check_target(conn, self.name, self.replace, self.setting)
        return self.name


def infer(
    db: Database,
    conn: Connection,
    *,
    job: Job,
    hierarchies: dict[str, Hierarchy],
    target: TableName | None,
    ownership: Ownership,
    replace: bool,
    run_id: int,
    progress: Progress = silent,
) -> InferenceReport:
    """Solve the job's inference in the caller's transaction; with a `target`, write P(s | person) there (replacing
    only sqlanon's own earlier table) and record it as sqlanon's."""
    assert job.releases is not None
    output = None
    if target is not None:
        if ownership.check_target(conn, target, replace, "inference.table"):
            db.drop_table(conn, db.q(target.schema, target.table))
        output = (target.schema, target.table)
    series = job.releases
    if job.unit_column:  # each person's rows in a release are one (their class or bucket, their sensitive value)
        distinct = tuple(dataclasses.replace(r, distinct=True) for r in series.releases)
        series = dataclasses.replace(series, releases=distinct)
    tables = ReleaseTables(
        db=db,
        conn=conn,
        series=series,
        sensitive=job.sensitive[0],
        hierarchies=hierarchies,
        qi_columns=list(hierarchies),
        prefix=f"inference_{run_id}",
    )
    report = analyze_releases(tables, settings=job.inference, output=output, progress=progress)
    if target is not None:
        report.table = str(target)
        ownership.record(conn, target, "output", report.persons, run_id)
    return report
