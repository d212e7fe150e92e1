"""Bucketized publication (Anatomy, Xiao and Tao 2006): exact QIs, sensitive values per bucket.

Two tables are published in one transaction: the QI table (every declared
column but the sensitive one, exact, plus the record's bucket) and the
sensitive table (bucket, value, count). A reader learns which records share a
bucket and which values the bucket holds, not which record holds which value.

Buckets are formed in one statement, set-based: the records are ordered by
their sensitive value, then pseudo-randomly (an MD5 of the record and
`output.seed`, so the result is reproducible) and record number p goes to
bucket p mod G + 1, with
G = floor(n / l). A value's records are consecutive in that order, and a value
holds at most G records (the eligibility condition, checked first), so no
bucket receives a value twice: every bucket holds at least l records with
pairwise different values. This is Anatomy's guarantee (each bucket l-diverse
with every value once, so no record's value is guessed with probability above
1/l); its residual records (n - G*l, fewer than l) land in different buckets,
each in a bucket that does not hold its value yet, and no record is suppressed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Connection

from ..backends import Database
from ..engine import anatomy as bucket_sql
from ..engine.anatomy import BUCKET, COUNT_COLUMN, COUNTERFEIT
from ..engine.audit import check_published_columns, check_published_values
from ..engine.invariant import invariant_buckets
from ..engine.persons import person_table
from ..engine.star import subset_rows
from ..errors import AuditError, ConfigError, DataError
from ..model.job import Job, Output
from ..model.progress import Phases, Progress, silent
from .generalize import unchanged_columns
from .identifiers import Pseudonyms
from .ledger import NewRelease, ReleaseLedger
from .methods import PublicationMethod
from .ownership import Ownership, TableName
from .staging import Destination, PublishedTable, Released, Staged, plain_rows, preview, staged_table

if TYPE_CHECKING:
    import pandas as pd


@dataclass(kw_only=True)
class AnatomyReport(Released):
    """What was published, as the audit of the two written tables found it."""

    qi_table: str
    sensitive_table: str
    rows: int
    buckets: int
    l: int
    smallest_bucket: int
    fewest_values: int  # different sensitive values in the poorest bucket (>= l)
    largest_share: float  # the highest count / bucket size: the best guess of any record's value
    preview: list[dict[str, Any]]
    counterfeits: int = 0  # values published in a bucket that no published person holds (output.invariant)
    counterfeit_table: str | None = None  # (bucket, counterfeit): how many each bucket holds
    invariant: dict[str, int] | None = None  # after a previous release: who went where (InvariantBuckets.figures)
    sensitive_release: PublishedTable | None = field(default=None, repr=False)  # the sensitive table (`release`:
    # the QI table, exact QIs and each row's bucket)

    def sensitive_frame(self) -> pd.DataFrame:
        """The whole sensitive table: each bucket's values and their counts."""
        assert self.sensitive_release is not None, "a publication's result knows its tables"
        return self.sensitive_release.frame()

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": "anatomy",
            "qi_table": self.qi_table,
            "sensitive_table": self.sensitive_table,
            "rows": self.rows,
            "buckets": self.buckets,
            "l": self.l,
            "smallest_bucket": self.smallest_bucket,
            "fewest_values": self.fewest_values,
            "largest_share": self.largest_share,
            "counterfeits": self.counterfeits,
            "counterfeit_table": self.counterfeit_table,
            "invariant": self.invariant,
            "ledger": self.ledger.to_dict() if self.ledger else None,
            "preview": plain_rows(self.preview),
        }


class Anatomy(PublicationMethod):
    """Anatomy: a QI table with exact QIs and a bucket number, and a sensitive table of l-diverse buckets."""

    name = "anatomy"
    counts_persons = True
    settings = ("l", "sensitive_table", "seed", "invariant")
    companion = ("sensitive_table", "sensitive")  # the bucket, value, count table

    @classmethod
    def parse(cls, output: Mapping[str, Any], base_dir: Path) -> dict[str, Any]:
        l_value, seed, sensitive_table = output.get("l"), output.get("seed", 0), output.get("sensitive_table")
        invariant = output.get("invariant", False)
        if not isinstance(invariant, bool):
            raise ConfigError(f"output.invariant must be true or false, got {invariant!r}")
        if isinstance(l_value, bool) or not isinstance(l_value, int) or l_value < 2:
            raise ConfigError(
                f"output.l must be a whole number >= 2 with method anatomy (every bucket holds l "
                f"different sensitive values), got {l_value!r}"
            )
        if isinstance(seed, bool) or not isinstance(seed, (int, str)):
            raise ConfigError(f"output.seed must be a whole number or a word, got {seed!r}")
        if sensitive_table is not None and (
            not isinstance(sensitive_table, str) or not sensitive_table or "\x00" in sensitive_table
        ):
            raise ConfigError(f"output.sensitive_table must be a non-empty name, got {sensitive_table!r}")
        return {"l": l_value, "sensitive_table": sensitive_table, "seed": seed, "invariant": invariant}

    @classmethod
    def counterfeit_table(cls, output: Output) -> str | None:
        """With output.invariant, the (bucket, counterfeit) table: TABLE_counterfeits."""
        return f"{output.table}_counterfeits" if output.settings.get("invariant") else None

    @classmethod
    def tables(cls, output: Output) -> list[str]:
        return [*super().tables(output), *filter(None, [cls.counterfeit_table(output)])]

    @classmethod
    def check(cls, job: Job) -> None:
        cut = [qi.column for qi in job.quasi_identifiers if qi.has_hierarchy]
        if cut:
            raise ConfigError(
                f"output.method anatomy publishes quasi-identifiers exact, so {', '.join(cut)} would "
                "ignore the hierarchy given; list them without one (quasi_identifiers: [...]), or "
                "publish by generalization"
            )
        if job.suppression.limit:
            raise ConfigError("output.method anatomy suppresses no tuples; remove suppression")
        if job.ledger is not None and job.ledger.suppress:
            raise ConfigError(
                "output.method anatomy's releases are not repaired by suppression (ledger.suppress): their buckets "
                "hold l values each, which removing persons would break; remove ledger.suppress, or re-publish a "
                "changing table with invariant: true and ledger.check m-invariance"
            )
        if job.criteria:
            raise ConfigError(
                "output.method anatomy guarantees l different sensitive values per bucket (output.l) "
                "and searches no lattice; remove criteria, or publish by generalization"
            )
        if len(job.sensitive) != 1:
            raise ConfigError(
                f"output.method anatomy publishes one sensitive column; the job lists "
                f"{len(job.sensitive)} ({', '.join(job.sensitive) or 'none'}): list exactly one under "
                "sensitive"
            )
        if job.output is not None and job.output.settings.get("invariant"):
            _check_invariant(job, int(job.output.settings["l"]))


def _check_invariant(job: Job, l: int) -> None:
    """output.invariant keeps the signatures of the job's ledger's previous release: the ledger checks them."""
    ledger = job.ledger
    if ledger is None or ledger.check != "m-invariance" or ledger.m != l:
        raise ConfigError(
            f"output.invariant bucketizes after the job's previous release, which its ledger names: add ledger: "
            f"{{person: ID, check: m-invariance, m: {l}}} (m = output.l)"
        )
    if job.unit_column and ledger.person != job.unit_column:
        raise ConfigError(
            f"output.invariant bucketizes persons by the unit column {job.unit_column!r}: set ledger.person to it"
        )


def check_eligible(db: Database, conn: Connection, source: str, sensitive: str, l: int, spread: bool = True) -> int:
    """The table's rows, after checking that an l-diverse bucketization exists (no NULL value, no value in
    more than floor(n / l) records; those two only with `spread`: an m-invariant bucketization checks the
    records it bucketizes afresh, see engine.invariant)."""
    rows, nulls, values = bucket_sql.sensitive_figures(db, conn, source, sensitive)
    if rows == 0:
        raise DataError("the source table is empty; there is nothing to publish")
    if nulls:
        raise DataError(
            f"sensitive column {sensitive!r} is NULL in {nulls} row(s); a bucket lists its values, so "
            "give them a value (e.g. 'unknown') or remove those rows first"
        )
    if spread and values < l:
        raise DataError(
            f"sensitive column {sensitive!r} has {values} different value(s); buckets of l = {l} "
            f"different values need at least {l}: lower output.l"
        )
    value, largest = bucket_sql.most_frequent_value(db, conn, source, sensitive)
    if spread and largest > rows // l:
        raise DataError(
            f"value {value!r} of {sensitive!r} is in {largest} of {rows} rows, more than n / l = "
            f"{rows // l}, so no bucketization gives every bucket {l} different values; lower output.l "
            f"to {max(1, rows // largest)} or less"
        )
    return rows


@dataclass(frozen=True, kw_only=True)
class BucketTargets:
    """Where a bucketized publication goes: the QI table, the sensitive table, and with output.invariant the
    counterfeits table."""

    qi: TableName
    sensitive: TableName
    counterfeits: TableName | None = None


@dataclass(frozen=True, kw_only=True)
class _Drawing:
    """What draws the buckets: the records (`source`, alias t), their published values (`select`, u<k>), what
    orders a value's records at random (`others`, with the seed), and l."""

    source: str
    select: list[str]
    sensitive: str
    others: list[str]
    rows: int
    l: int
    seed: str
    scratch: str

    def assign(self, db: Database, conn: Connection, buckets: int | None = None, name: str = "") -> str:
        """Anatomy's assignment (see the module) as a scratch table; `buckets` 1 gives the records unassigned."""
        assignment, params = bucket_sql.bucket_assignment(
            db,
            source=self.source,
            select=self.select,
            sensitive=self.sensitive,
            others=self.others,
            buckets=self.rows // self.l if buckets is None else buckets,
            seed=self.seed,
        )
        return db.create_scratch(conn, self.scratch + name, assignment, params)


def publish_bucketized(
    db: Database,
    conn: Connection,
    *,
    job: Job,
    source: TableName,
    targets: BucketTargets,
    pseudonyms: Pseudonyms,
    columns: list[str],
    run_id: int,
    ownership: Ownership,
    replace: bool,
    progress: Progress = silent,
    ledger: ReleaseLedger | None = None,
) -> AnatomyReport:
    """Write the tables in one transaction, audit them, and commit only if the audit passes (and, with a `ledger`,
    only if the release and the job's earlier ones together pass its check)."""
    assert job.output is not None and job.output.method == Anatomy.name
    phases = Phases(progress, "anatomy", 4 + (ledger is not None))
    phases.step("checking the sensitive values")
    l, [sensitive] = int(job.output.settings["l"]), job.sensitive
    invariant = bool(job.output.settings.get("invariant"))
    source_ref = counted = db.q(source.schema, source.table)
    if job.subset is not None:  # the research subset's rows alone (with a unit, its persons) are bucketized
        source_ref = counted = subset_rows(db, conn, job, source_ref, run_id)
    drawn = [c for c in columns if not db.same_name(c, sensitive)]  # what orders a value's records at random
    if job.unit_column:  # the buckets are drawn over the persons, one row each; a person's rows share theirs
        counted = person_table(db, conn, job, source_ref, run_id)  # each row's QIs are published
        drawn = [job.unit_column]
    rows = check_eligible(db, conn, counted, sensitive, l, spread=not invariant)
    if conn.in_transaction():
        conn.commit()
    with conn.begin(), pseudonyms.loaded(db, conn):
        published, values = _qi_columns(db, job, columns, pseudonyms)
        _refuse_collisions(db, published, sensitive)
        # within a value, a keyed pseudo-random order (as Anatomy draws records at random): sorted by the QIs, two
        # releases of a changing table would put the same neighbours together again and again and give far more
        # away when combined (bench/bench_releases.py); the same job and seed give the same buckets on every database
        phases.step("drawing the buckets")
        drawing = _Drawing(
            source=counted,
            # the scratch table's k-th column is u<k>: no name of the source's is ever one of its own
            select=[f"{value} AS u{k}" for k, value in enumerate(values)],
            sensitive=sensitive,
            others=[f"t.{db.q(c)}" for c in drawn],
            rows=rows,
            l=l,
            seed=str(job.output.settings["seed"]),
            scratch=f"anatomy_{run_id}",
        )
        by_person = (source_ref, values, job.unit_column) if job.unit_column else None
        assert ledger is not None or not invariant, "output.invariant needs the job's ledger (Anatomy.check)"
        assigned, counterfeits, kept = _draw(db, conn, job, drawing, published, values, ledger if invariant else None)
        phases.step("writing the tables")
        selects = bucket_sql.published_selects(db, conn, assigned, published, sensitive, by_person, counterfeits)
        checked = source_ref
        if job.unit_column:  # the rows with their person's pseudonym, as the QI table writes them
            checked = bucket_sql.rows_of_persons(db, conn, source_ref, columns, job.unit_column, assigned)
        written = _Written(
            targets=targets,
            published=published,
            source_ref=source_ref,
            checked=checked,
            counted=counted,
            rows=rows,
            counterfeits=counterfeits,
        )
        with _staged(db, conn, job, source, written, selects, ownership, run_id, replace) as staged:
            phases.step("auditing")
            report = _audit(db, conn, job, staged, written, pseudonyms)
        if ledger is not None:
            phases.step("checking the earlier releases")
            release = NewRelease(
                method=Anatomy.name,
                table=targets.qi,
                sensitive_table=targets.sensitive,
                bucket=BUCKET,
                counterfeits=targets.counterfeits,
            )
            ledger.admit(conn, release, pseudonyms)
        subset = source_ref if job.subset is not None else None
        for table in filter(None, (assigned, counterfeits, counted if counted != source_ref else None, subset)):
            db.drop_table(conn, table)
        first_rows = preview(db, conn, targets.qi, BUCKET)
    return AnatomyReport(
        qi_table=str(targets.qi),
        sensitive_table=str(targets.sensitive),
        rows=rows,
        buckets=report["buckets"],
        l=l,
        smallest_bucket=report["smallest"],
        fewest_values=report["fewest"],
        largest_share=report["share"],
        preview=first_rows,
        release=PublishedTable.of(db, targets.qi),
        sensitive_release=PublishedTable.of(db, targets.sensitive),
        ledger=ledger.outcome if ledger else None,
        counterfeits=report["counterfeits"],
        counterfeit_table=str(targets.counterfeits) if targets.counterfeits else None,
        invariant=kept,
    )


def _draw(
    db: Database,
    conn: Connection,
    job: Job,
    drawing: _Drawing,
    published: list[str],
    values: list[str],
    invariant: ReleaseLedger | None,
) -> tuple[str, str | None, dict[str, int] | None]:
    """The buckets as a scratch table (u<k>, VALUE, BUCKET): anatomy's, or with `invariant` (the job's ledger, for
    output.invariant) m-invariant after its previous release, with the counterfeits' scratch table and who went
    where. With a unit, persons are bucketized (u0: the person; u1: their pseudonym, for the invariant buckets)."""
    person = next((k for k, c in enumerate(published) if job.ledger and db.same_name(c, job.ledger.person)), None)
    layout = ([f"u{k}" for k in range(len(values))], f"u{person}")  # the records' columns, the pseudonym's
    if job.unit_column:  # u1: the unit's pseudonym, once per person (with the ledger, its person: Anatomy.check)
        unit = next(k for k, c in enumerate(published) if db.same_name(c, job.unit_column))
        drawn_person = [f"t.{db.q(job.unit_column)} AS u0", f"{values[unit]} AS u1"]
        drawing, layout = dataclasses.replace(drawing, select=drawn_person), (["u0", "u1"], "u1")
    if invariant is None:
        return drawing.assign(db, conn), None, None
    return _invariant_buckets(db, conn, drawing, invariant, *layout)


def _refuse_collisions(db: Database, published: list[str], sensitive: str) -> None:
    if (
        any(db.same_name(c, BUCKET) for c in published)
        or db.same_name(sensitive, COUNT_COLUMN)
        or db.same_name(sensitive, BUCKET)
    ):
        raise DataError(
            f"a source column named {BUCKET!r} or a sensitive column named {COUNT_COLUMN!r} would "
            "collide with the columns anatomy adds; rename it in the source (or drop it as "
            "identifying)"
        )


def _invariant_buckets(
    db: Database, conn: Connection, drawing: _Drawing, ledger: ReleaseLedger, columns: list[str], person: str
) -> tuple[str, str | None, dict[str, int] | None]:
    """The buckets m-invariant with the job's previous release (engine.invariant; the records' `columns`, `person`
    the one holding each record's pseudonym), the counterfeits' scratch table, and who went where; anatomy's own
    buckets before the first release."""
    previous = ledger.previous_groups(conn, drawing.sensitive)
    if previous is None:
        check_eligible(db, conn, drawing.source, drawing.sensitive, drawing.l)
        return drawing.assign(db, conn), None, None
    groups, tables = previous
    records = drawing.assign(db, conn, buckets=1, name="_records")
    buckets = invariant_buckets(
        db,
        conn,
        records=records,
        columns=columns,
        person=person,
        previous=groups,
        m=drawing.l,
        seed=drawing.seed,
        prefix=drawing.scratch,
    )
    tables.drop_all()
    db.drop_table(conn, records)
    return buckets.assigned, buckets.counterfeits, buckets.figures()


@dataclass(frozen=True, kw_only=True)
class _Written:
    """What a bucketized publication writes, and from what: its targets and published columns, the source, the
    records bucketized (the source, or its persons' table) and how many, and the counterfeits' scratch table."""

    targets: BucketTargets
    published: list[str]
    source_ref: str
    checked: str  # what the QI table's values are checked against: the source, or its rows with persons' pseudonyms
    counted: str
    rows: int
    counterfeits: str | None


@contextmanager
def _staged(
    db: Database,
    conn: Connection,
    job: Job,
    source: TableName,
    plan: _Written,
    selects: tuple[str, str],
    ownership: Ownership,
    run_id: int,
    replace: bool,
) -> Iterator[dict[str, Staged]]:
    """The publication's tables staged (see staging.staged_table), by kind: qi, sensitive, counterfeits."""
    assert job.output is not None
    targets = plan.targets
    written = {"qi": (targets.qi, selects[0]), "sensitive": (targets.sensitive, selects[1])}
    if targets.counterfeits is not None:
        written["counterfeits"] = (targets.counterfeits, bucket_sql.counterfeit_rows(db, conn, plan.counterfeits))
    with ExitStack() as stack:
        staged = {
            kind: stack.enter_context(
                staged_table(
                    db,
                    conn,
                    destination=Destination(name=name, source=source, replace=replace, grant_to=job.output.grant_to),
                    select=select,
                    ownership=ownership,
                    run_id=run_id,
                )
            )
            for kind, (name, select) in written.items()
        }
        yield staged


def _audit(
    db: Database,
    conn: Connection,
    job: Job,
    staged: dict[str, Staged],
    plan: _Written,
    pseudonyms: Pseudonyms,
) -> dict[str, Any]:
    """Audit the staged tables (see audit_bucketized) and their columns and values; mark each audited."""
    l, [sensitive] = int(job.output.settings["l"]) if job.output else 0, job.sensitive
    targets, published, rows = plan.targets, plan.published, plan.rows
    qi, sa = staged["qi"], staged["sensitive"]
    fake = staged.get("counterfeits")
    fakes = (fake.ref, plan.counterfeits) if fake else None
    report = audit_bucketized(db, conn, qi.ref, sa.ref, sensitive, l, plan.counted, job.unit_column, fakes)
    if report["rows"] != rows:
        what = "rows" if job.unit_column is None else "persons (counted once in each bucket)"
        raise AuditError(f"the QI table has {report['rows']} {what}, the source {rows}; nothing was written")
    check_published_columns(db, conn, qi.ref, str(targets.qi), published + [BUCKET])
    # by persons, `checked` holds the unit's pseudonym already: it is compared as it is, not as an identifier
    identifying = [i for i in job.identifying if not (job.unit_column and db.same_name(i.column, job.unit_column))]
    check_published_values(
        db,
        conn,
        qi.ref,
        str(targets.qi),
        plan.checked,
        unchanged_columns(db, pseudonyms, identifying, published),
        every_row=True,
    )
    check_published_columns(db, conn, sa.ref, str(targets.sensitive), [BUCKET, sensitive, COUNT_COLUMN])
    qi.audited(rows if job.unit_column is None else db.count_rows(conn, qi.ref))
    sa.audited(report["cells"])
    if fake is not None and targets.counterfeits is not None:
        check_published_columns(db, conn, fake.ref, str(targets.counterfeits), [BUCKET, COUNTERFEIT])
        fake.audited(report["counterfeits"])
    return report


def _qi_columns(db: Database, job: Job, columns: list[str], pseudonyms: Pseudonyms) -> tuple[list[str], list[str]]:
    """The QI table's columns in source order (all but the sensitive one and dropped identifiers), and the value of
    each over the source's rows (t; pseudonyms computed in SQL)."""
    sensitive = db.name_key(job.sensitive[0])
    published, values = list[str](), list[str]()
    for column in columns:
        if db.name_key(column) == sensitive:
            continue
        value = pseudonyms.select(db, job.identifying, column, f"t.{db.q(column)}")
        if value is None:
            continue
        values.append(value)
        published.append(column)
    return published, values


def audit_bucketized(
    db: Database,
    conn: Connection,
    qi_ref: str,
    sensitive_ref: str,
    sensitive: str,
    l: int,
    source_ref: str | None = None,
    unit: str | None = None,
    counterfeits: tuple[str, str | None] | None = None,
) -> dict[str, Any]:
    """Re-check a bucketized pair from the two tables alone (and the source's value counts, when given).

    Every bucket's records and value counts agree, every bucket holds at
    least `l` different values, and, with the source, every value is
    published as often as the source holds it. Raises AuditError otherwise.
    With `unit` (the QI table's column naming each record's person), records
    are persons, and the source is their table (one row each). With
    `counterfeits` (the published counterfeits table, and the scratch table
    of their values, or None when there are none), a bucket's values are its
    records and its counterfeits, and the source's values with the
    counterfeits' are what is published.
    """
    published_fakes, fake_values = counterfeits or (None, None)
    figures = bucket_sql.bucket_figures(
        db,
        conn,
        qi_ref=qi_ref,
        sensitive_ref=sensitive_ref,
        sensitive=sensitive,
        l=l,
        unit=unit,
        counterfeits_ref=published_fakes,
    )
    mismatched, poor = figures["mismatched"], figures["poor"]
    if mismatched:
        raise AuditError(
            f"{mismatched} bucket(s) list a different number of values than of records; nothing was written"
        )
    if poor:
        raise AuditError(f"{poor} bucket(s) hold fewer than l = {l} different values; nothing was written")
    if source_ref is not None:
        differ = bucket_sql.value_count_differences(
            db, conn, source=source_ref, sensitive_ref=sensitive_ref, sensitive=sensitive, counterfeits=fake_values
        )
        if differ:
            raise AuditError(
                f"{differ} sensitive value(s) are published a different number of times than the "
                "source holds them; nothing was written"
            )
    cells = db.count_rows(conn, sensitive_ref)
    return {
        "counterfeits": db.count_rows(conn, published_fakes) if published_fakes else 0,
        "buckets": int(figures["buckets"]),
        "rows": int(figures["rows"] or 0),
        "smallest": int(figures["smallest"] or 0),
        "fewest": int(figures["fewest"] or 0),
        "share": float(figures["share"] or 0),
        "cells": int(cells),
    }
