"""Condensation as a publication method (`output.method: condense`, Aggarwal and Yu; the PPDM chapter's 20.3 and
exercises 5 and 6): the records grouped into groups of at least k on the numeric quasi-identifiers, and a
synthetic table of as many records drawn from each group's mean and covariance as it held; the groups'
condensed statistics kept in `output.groups_table` (by default TABLE_groups) for the dynamic version
(`condense_add`: new records join their nearest group, a group of 2k splits along its longest eigenvector). With
`output.label` (a class label), the groups are formed within each of its values, and each synthetic record
carries its group's value.

The grouping, the statistics and the synthetic records are SQL (sqlanon.engine.condensation); each group's
covariance eigen-decomposition, a d x d matrix, is numpy's. The draws' key is `output.noise_key` (as
randomization's: the same key and groups give the same records; without it, fresh draws every run).

What it guarantees: every published record is drawn from a group of at least k records' first and second
moments, and no record of the source is published. What it does not: no other criterion (criteria and
suppression are refused), and the groups table holds each group's exact sums, so it is never granted to the
output's readers.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy import select
from sqlalchemy.engine import Connection

from ..backends import Database
from ..backends.base import ColumnKind
from ..engine.audit import check_published_columns
from ..engine.condensation import (
    LABEL,
    Group,
    GroupFigures,
    Grouping,
    Moments,
    Statistics,
    checked_moments,
    group_columns,
    group_deltas,
    group_figures,
    kept_groups,
    label_counts,
    label_totals,
    nearest_groups,
    synthetic_select,
    touched_groups,
)
from ..engine.randomization import Figures, noise_key_table, numeric_figures
from ..engine.scratch import Scratch
from ..errors import AuditError, ConfigError, DataError
from ..model.job import Job
from ..model.noise import key_source, read_noise_key
from ..model.progress import Phases, Progress, silent
from .methods import PublicationMethod, refuse_criteria
from .ownership import Ownership
from .staging import Destination, PublishedTable, Released, plain_rows, preview, staged_table

__all__ = ["Condensation", "CondensationReport", "condense_and_publish"]

#: how far a synthetic attribute's mean may move, in standard errors of the draws' mean, before the audit fails
MEAN_TOLERANCE = 6.0
#: relative difference tolerated between two sums of the same products in other orders
SUM_TOLERANCE = 1e-8


class Condensation(PublicationMethod):
    """Synthetic records drawn from groups of at least k records' condensed statistics."""

    name = "condense"
    settings = ("k", "groups_table", "noise_key", "label")
    companion = ("groups_table", "groups")  # the groups' statistics

    @classmethod
    def parse(cls, output: Mapping[str, Any], base_dir: Path) -> dict[str, Any]:
        k, table, label = output.get("k"), output.get("groups_table"), output.get("label")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"output.k must be a whole number of at least 1 (the smallest group), got {k!r}")
        if table is not None and not isinstance(table, str):
            raise ConfigError(f"output.groups_table must be a table name, got {table!r}")
        if label is not None and (not isinstance(label, str) or not label):
            raise ConfigError(f"output.label must name a column (the class label), got {label!r}")
        noise_key = key_source(output.get("noise_key"), base_dir)
        return {"k": k, "groups_table": table, "noise_key": noise_key, "label": label}

    @classmethod
    def check(cls, job: Job) -> None:
        refuse_criteria(job, cls.name, "publishes synthetic records")
        label = label_of(job)
        if label is not None and not any(c.lower() == label.lower() for c in job.sensitive + job.insensitive):
            raise ConfigError(
                f"output.label {label!r} is not a sensitive or insensitive column of the job: list it there (the "
                "label is published as it is, beside the synthetic records of the quasi-identifiers)"
            )
        others = [c for c in job.sensitive + job.insensitive if label is None or c.lower() != label.lower()]
        if others:
            raise ConfigError(
                f"output.method condense publishes synthetic records of the quasi-identifiers only (and the label, "
                f"output.label), so column {others[0]!r} cannot be published: leave it out (others: drop), or publish "
                "by another method"
            )
        pseudonyms = [i.column for i in job.identifying if i.action != "drop"]
        if pseudonyms:
            raise ConfigError(
                f"identifying column {pseudonyms[0]!r}: a synthetic record belongs to nobody, so it has no pseudonym; "
                "drop it"
            )
        hierarchies = [qi.column for qi in job.quasi_identifiers if qi.hierarchy is not None or qi.generate]
        if hierarchies:
            raise ConfigError(
                f"quasi-identifier {hierarchies[0]!r} has a hierarchy; condensation reads numbers: list the numeric "
                "QIs without one (quasi_identifiers: [age, ...])"
            )


@dataclass(kw_only=True)
class CondensationReport(Released):
    """What `condense` published: the synthetic table and the groups table, the groups' sizes, the rounds of the
    grouping, whether the draws can be made again (the job's key), the audit, the first rows and the seconds."""

    output: str
    groups_table: str
    rows: int
    k: int
    groups: int
    smallest: int
    largest: int
    rounds: int
    statements: int
    reproducible: bool
    audit: dict[str, bool]
    preview: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    label: str | None = None  # the column whose values the groups are formed within (`output.label`)
    added: int = 0  # records a dynamic addition joined to the groups (`condense_add`)
    splits: int = 0  # groups it split in two

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": Condensation.name,
            "label": self.label,
            "added": self.added,
            "splits": self.splits,
            "output": self.output,
            "groups_table": self.groups_table,
            "rows": self.rows,
            "k": self.k,
            "groups": self.groups,
            "smallest_group": self.smallest,
            "largest_group": self.largest,
            "rounds": self.rounds,
            "statements": self.statements,
            "reproducible": self.reproducible,
            "audit": self.audit,
            "seconds": round(self.seconds, 3),
            "preview": plain_rows(self.preview),
        }


@dataclass(frozen=True, kw_only=True)
class CondensedTables:
    """Where a condensation publishes: the synthetic table and the groups table (never granted)."""

    synthetic: Destination
    groups: Destination


def condense_and_publish(
    db: Database,
    conn: Connection,
    *,
    job: Job,
    columns: dict[str, str],
    tables: CondensedTables,
    ownership: Ownership,
    run_id: int,
    progress: Progress = silent,
) -> CondensationReport:
    """Group the job's source, publish its groups table and its synthetic table, each written and audited, in the
    caller's transaction (`columns`: the source's columns and their types)."""
    assert job.output is not None
    started = time.perf_counter()
    phases = Phases(progress, "condense", 2)
    phases.step("grouping")
    names, label = numeric_qis(db, job, columns), source_label(db, job, columns)
    k = int(job.output.settings["k"])
    source = db.q(tables.synthetic.source.schema, tables.synthetic.source.table)
    grouping = Grouping(db, conn, source, names, k, f"condense_{run_id}", label)
    moments = grouping.check()
    grouped = grouping.run(progress)
    phases.step("writing and auditing the tables")
    key, reproducible = read_noise_key(job.output.settings["noise_key"])
    scratch = Scratch(db, conn, f"condensed_{run_id}")
    audit, figures = publish_groups(
        db,
        conn,
        groups=scratch,
        made=groups_scratch(scratch, len(names), grouped.statistics.rows(), (source, label)),
        k=k,
        names=names,
        label=label,
        key=key,
        tables=tables,
        expected=Expected(moments, grouping.counted),
        ownership=ownership,
        run_id=run_id,
    )
    scratch.drop_all()
    return CondensationReport(
        output=str(tables.synthetic.name),
        groups_table=str(tables.groups.name),
        rows=moments[0],
        k=k,
        groups=figures.groups,
        smallest=figures.smallest,
        largest=figures.largest,
        rounds=grouped.rounds,
        label=label,
        statements=grouped.statements + scratch.statements,
        reproducible=reproducible,
        audit=audit,
        preview=preview(db, conn, tables.synthetic.name),
        seconds=time.perf_counter() - started,
        release=PublishedTable.of(db, tables.synthetic.name),
    )


def groups_scratch(
    scratch: Scratch, d: int, rows: list[list[Any]], label: tuple[str, str | None] = ("", None)
) -> sa.TableClause:
    """A scratch groups table (`group_columns` of d attributes) holding `rows`; with a `label` (a table and its
    label column), the groups' label last, of that column's type."""
    source, column = label
    if column is None:
        kinds = ["BIGINT", "BIGINT"] + ["DOUBLE PRECISION"] * (len(group_columns(d)) - 2)
        return scratch.make_from_rows("groups", list(zip(group_columns(d), kinds, strict=True)), rows)
    typed = [sa.cast(sa.literal(0), sa.BigInteger).label(c) for c in group_columns(d)[:2]]
    typed += [sa.cast(sa.literal(0.0), sa.Double).label(c) for c in group_columns(d)[2:]]
    t = scratch.db.ref_table(source, [column])
    made = scratch.make("groups", select(*typed, t.c[column].label(LABEL)).where(sa.false()))
    scratch.db.insert_rows(scratch.conn, scratch.ref_of(made), group_columns(d, True), rows)
    return made


def source_label(db: Database, job: Job, columns: dict[str, str]) -> str | None:
    """The job's label column (`output.label`) as the source spells it, or None."""
    label = label_of(job)
    return None if label is None else next((c for c in columns if db.same_name(c, label)), label)


def label_of(job: Job) -> str | None:
    assert job.output is not None
    found: str | None = job.output.settings.get("label")
    return found


def numeric_qis(db: Database, job: Job, columns: dict[str, str]) -> list[str]:
    """The job's QIs as the source spells them, each of which must hold numbers."""
    found = []
    for qi in job.qi_names:
        column = next((c for c in columns if db.same_name(c, qi)), qi)
        if db.column_kind(columns.get(column, "")) is ColumnKind.OTHER:
            raise DataError(
                f"quasi-identifier {column!r} holds {columns.get(column)}, not numbers; condensation reads numbers: "
                "publish the others generalized, or leave them out"
            )
        found.append(column)
    return found


@dataclass(frozen=True)
class Expected:
    """What the groups must add up to, read from the records by a query of their own: their count, sums and sums of
    products (`checked_moments`), and their count per value of the label (`label_counts`; none without one)."""

    moments: Moments
    labels: dict[Any, int] = field(default_factory=dict)


def publish_groups(
    db: Database,
    conn: Connection,
    *,
    groups: Scratch,
    made: sa.TableClause,
    k: int,
    names: list[str],
    label: str | None,
    key: bytes,
    tables: CondensedTables,
    expected: Expected,
    ownership: Ownership,
    run_id: int,
) -> tuple[dict[str, bool], GroupFigures]:
    """Write the groups table from the scratch table `made` (of `groups`, `group_columns`) and the synthetic table
    drawn from it (`key`; with the groups' `label` column), each audited: the groups against `expected`, the
    synthetic records against the groups. The audit's holds and the groups table's figures."""
    d = len(names)
    with staged_table(
        db,
        conn,
        destination=tables.groups,
        select=db.as_text(conn, select(made)),
        ownership=ownership,
        run_id=run_id,
    ) as staged:
        figures = group_figures(db, conn, staged.ref, d)
        totals = label_totals(db, conn, staged.ref, d) if label else {}
        audit = audit_groups(str(tables.groups.name), figures, totals, expected, k)
        staged.audited(figures.groups)
    numbers = groups.make_from_rows("numbers", [("i", "BIGINT")], [(i,) for i in range(1, figures.largest + 1)])
    with noise_key_table(db, conn, key) as keys:
        synthetic = synthetic_select(
            db, conn, groups=groups.ref_of(made), numbers=groups.ref_of(numbers), keys=keys, names=names, label=label
        )
        name = str(tables.synthetic.name)
        with staged_table(
            db, conn, destination=tables.synthetic, select=synthetic, ownership=ownership, run_id=run_id
        ) as staged:
            check_published_columns(db, conn, staged.ref, name, [*names, *([label] if label else [])])
            drawn = numeric_figures(db, conn, staged.ref, names)
            audit |= audit_synthetic(name, names, drawn, figures)
            if label:
                audit |= audit_labels(name, label_counts(db, conn, staged.ref, label), totals)
            staged.audited(drawn[0])
    groups.statements += 6 + (3 if label else 0)  # the two tables' writes and their audits
    return audit, figures


def audit_groups(name: str, found: GroupFigures, labels: dict[Any, int], expected: Expected, k: int) -> dict[str, bool]:
    """The groups table as written (`group_figures`, and its records per label: `label_totals`) against the
    records' own figures (`expected`): every group holds k to 2k - 1 records, and the groups' counts, sums and sums
    of products add up to the records', and so do their counts per label. Raises AuditError on the first that
    fails."""
    rows, record_sums, record_products = expected.moments
    holds = {
        f"every group holds k = {k} to 2k - 1 records": k <= found.smallest and found.largest < 2 * k,
        "the groups hold every record": found.total == rows,
        "the groups' sums are the records'": all(map(_close, found.sums, record_sums)),
        "the groups' sums of products are the records'": all(map(_close, found.products, record_products)),
    }
    if expected.labels:
        holds["the groups of each label hold its records"] = labels == expected.labels
    return _passed(name, holds)


def audit_labels(name: str, drawn: dict[Any, int], groups: dict[Any, int]) -> dict[str, bool]:
    """The synthetic table's records per label against its groups'."""
    return _passed(name, {"as many synthetic records of each label as its groups hold": drawn == groups})


def audit_synthetic(
    name: str, names: list[str], figures: tuple[int, list[Figures]], groups: GroupFigures
) -> dict[str, bool]:
    """The synthetic table as written, against its groups: as many records as they hold, every value a finite
    number, and each attribute's mean within MEAN_TOLERANCE standard errors of the groups' (the draws are centred
    on each group's mean, with its covariance: the mean of all of them has a variance of the sum over groups of
    n C_jj, over the count squared)."""
    written, found = figures
    holds = {"as many synthetic records as the groups hold": written == groups.total}
    for column, f, total, spread in zip(names, found, groups.sums, groups.spread, strict=True):
        expected = total / groups.total
        bound = MEAN_TOLERANCE * math.sqrt(max(spread, 0.0)) / groups.total + SUM_TOLERANCE * max(1.0, abs(expected))
        holds[f"{column}: finite numbers"] = f.finite == written
        holds[f"{column}: mean kept"] = f.mean is not None and abs(f.mean - expected) <= bound
    return _passed(name, holds)


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= SUM_TOLERANCE * max(1.0, abs(a), abs(b))


def _passed(name: str, holds: dict[str, bool]) -> dict[str, bool]:
    failed = [what for what, ok in holds.items() if not ok]
    if failed:
        raise AuditError(f"table {name!r} failed its audit ({failed[0]}); nothing was written")
    return holds


def add_and_publish(
    db: Database,
    conn: Connection,
    *,
    job: Job,
    columns: dict[str, str],
    tables: CondensedTables,
    ownership: Ownership,
    run_id: int,
    progress: Progress = silent,
) -> CondensationReport:
    """The dynamic version: the records of the batch (`tables.synthetic.source`, its `columns`) join the groups of
    the job's groups table, each the one whose mean is nearest (squared distance, each attribute weighted by one
    over its variance over the groups' records); a group that reaches 2k records splits in two along its longest
    eigenvector (`Group.halves`) until none does; the groups table and the synthetic table are written anew and
    audited, in the caller's transaction. The batch's records join the groups as they stood before it (a set
    at once, where Aggarwal and Yu take one record at a time: the means do not move between its records)."""
    assert job.output is not None
    started = time.perf_counter()
    phases = Phases(progress, "condense-add", 2)
    phases.step("joining the groups")
    names, k = numeric_qis(db, job, columns), int(job.output.settings["k"])
    label = source_label(db, job, columns)
    d, kept = len(names), tables.groups.name
    if not db.table_exists(conn, kept.schema, kept.table):
        raise DataError(
            f"no groups table {str(kept)!r}: publish the job first (sqlanon anonymize JOB), then add records to it"
        )
    groups_ref = db.q(kept.schema, kept.table)
    labelled = any(db.same_name(c, LABEL) for c in db.column_types(conn, kept.schema, kept.table))
    if labelled != (label is not None):
        how = "within each value of a label" if labelled else "without a label"
        raise ConfigError(
            f"groups table {str(kept)!r} was made {how}, and the job {'names none' if labelled else 'names one'} "
            "(output.label): add records with the job that published it, or publish anew (--replace)"
        )
    batch = db.q(tables.synthetic.source.schema, tables.synthetic.source.table)
    records, sums, products = checked_moments(db, conn, batch, names)  # the check, and the audit's figures
    if not records:
        raise DataError(f"table {str(tables.synthetic.source)!r} holds no records to add")
    before = group_figures(db, conn, groups_ref, d)
    labels = _batch_labels(db, conn, batch, label, label_totals(db, conn, groups_ref, d) if label else {})
    scratch = Scratch(db, conn, f"condense_add_{run_id}")
    joined = nearest_groups(scratch, batch, names, groups_ref, _weights(before, d), label)
    deltas = group_deltas(db, conn, joined, d)
    touched = touched_groups(db, conn, groups_ref, joined, d, label is not None)
    following, splits = _joined(touched, deltas, k, _next_group(db, conn, groups_ref, d))
    made = kept_groups(scratch, groups_ref, joined, d, label is not None)
    if following:
        rows = Statistics.of(following).rows()
        db.insert_rows(conn, scratch.ref_of(made), group_columns(d, label is not None), rows)
    phases.step("writing and auditing the tables")
    moments = (
        before.total + records,
        [a + b for a, b in zip(before.sums, sums, strict=True)],
        [a + b for a, b in zip(before.products, products, strict=True)],
    )
    key, reproducible = read_noise_key(job.output.settings["noise_key"])
    audit, figures = publish_groups(
        db,
        conn,
        groups=scratch,
        made=made,
        k=k,
        names=names,
        label=label,
        key=key,
        tables=tables,
        expected=Expected(moments, labels),
        ownership=ownership,
        run_id=run_id,
    )
    scratch.drop_all()
    return CondensationReport(
        output=str(tables.synthetic.name),
        groups_table=str(kept),
        rows=figures.total,
        k=k,
        groups=figures.groups,
        smallest=figures.smallest,
        largest=figures.largest,
        rounds=0,
        label=label,
        statements=scratch.statements,
        reproducible=reproducible,
        audit=audit,
        preview=preview(db, conn, tables.synthetic.name),
        seconds=time.perf_counter() - started,
        release=PublishedTable.of(db, tables.synthetic.name),
        added=records,
        splits=splits,
    )


def _batch_labels(
    db: Database, conn: Connection, batch: str, label: str | None, groups: dict[Any, int]
) -> dict[Any, int]:
    """The records per label after an addition (the groups' `groups`, and the batch's), refused where a batch record
    has no label or a value no group has (its records would have no group to join); none without a label."""
    if label is None:
        return {}
    added = label_counts(db, conn, batch, label)
    if None in added:
        raise DataError(
            f"column {label!r} (output.label) holds {added[None]} records without a value (NULL); the label groups "
            "the records: fill or remove them"
        )
    new = next((value for value in added if value not in groups), None)
    if new is not None:
        raise DataError(
            f"column {label!r} (output.label): value {new!r} has no group to join ({added[new]} records of the "
            "batch); a value needs k records of its own: publish the table anew (sqlanon anonymize JOB --replace)"
        )
    return {value: groups.get(value, 0) + added.get(value, 0) for value in groups}


def _weights(figures: GroupFigures, d: int) -> list[float]:
    """One over each attribute's variance over the groups' records (0 for an attribute that does not vary)."""
    diagonal = [k for k, (i, j) in enumerate((i, j) for i in range(d) for j in range(i, d)) if i == j]
    weights = []
    for j in range(d):
        mean = figures.sums[j] / figures.total
        variance = figures.products[diagonal[j]] / figures.total - mean * mean
        weights.append(1 / variance if variance > 0 else 0.0)
    return weights


def _next_group(db: Database, conn: Connection, groups: str, d: int) -> int:
    g = db.ref_table(groups, group_columns(d))
    return int(db.execute(conn, select(sa.func.max(g.c.grp))).scalar_one() or 0) + 1


def _joined(
    touched: list[Group], deltas: dict[int, tuple[int, list[float], list[list[float]]]], k: int, next_group: int
) -> tuple[list[Group], int]:
    """The touched groups with the records that joined them, split while any holds 2k or more (new numbers from
    `next_group` on); and how many splits that took."""
    queue = [
        dataclasses.replace(
            g,
            n=g.n + deltas[g.grp][0],
            sums=g.sums + np.array(deltas[g.grp][1]),
            products=g.products + np.array(deltas[g.grp][2]),
        )
        for g in touched
    ]
    final, splits = [], 0
    while queue:
        group = queue.pop()
        if group.n < 2 * k:
            final.append(group)
            continue
        queue += group.halves(next_group, next_group + 1)
        next_group, splits = next_group + 2, splits + 1
    return sorted(final, key=lambda g: g.grp), splits
