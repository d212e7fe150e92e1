"""Mondrian as a publication method (`output.method: mondrian`): its settings, and its partitioned table written
through the staged, audited path. The partitioning itself (the rounds, in SQL) is sqlanon.engine.mondrian.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Connection

from ..backends import Database
from ..engine.audit import AuditReport, PublishedClasses, check_published_columns, check_published_values
from ..engine.mondrian import Mondrian, MondrianQI, MondrianResult, PersonRows, published_rows
from ..engine.persons import PERSON_KEY, Persons, counted_persons, person_columns
from ..engine.star import kinds_by_key, needed_sensitive, subset_rows
from ..errors import AuditError, ConfigError, DataError
from ..model.hierarchies import Hierarchy
from ..model.job import Identifier, Job, _choice
from ..model.progress import Phases, Progress, silent
from .generalize import unchanged_columns
from .identifiers import Pseudonyms
from .ledger import NewRelease, ReleaseLedger, Repairable, refuse_held_values
from .methods import PublicationMethod
from .ownership import Ownership
from .staging import Destination, PublishedTable, Released, plain_rows, preview, staged_table

__all__ = ["MondrianMethod", "MondrianReport", "partition_and_publish"]


class MondrianMethod(PublicationMethod):
    """Mondrian's multidimensional partitioning: every partition satisfies the criteria as it is cut."""

    name = "mondrian"
    counts_persons = True
    settings = ("relaxed", "numeric")
    numeric_outputs = ("range", "mean")  # a numeric QI published as its partition's range, or its mean

    @classmethod
    def parse(cls, output: Mapping[str, Any], base_dir: Path) -> dict[str, Any]:
        relaxed, numeric = output.get("relaxed", False), output.get("numeric", "range")
        if not isinstance(relaxed, bool):
            raise ConfigError(f"output.relaxed must be true or false, got {relaxed!r}")
        return {"relaxed": relaxed, "numeric": _choice(numeric, cls.numeric_outputs, "output.numeric")}

    @classmethod
    def check(cls, job: Job) -> None:
        if not job.criteria:
            raise ConfigError("output.method mondrian needs criteria, e.g. criteria: {k_anonymity: {k: 5}}")
        release = [c.name for c in job.criteria if c.whole_release]
        if release:
            raise ConfigError(
                f"output.method mondrian checks each partition as it cuts it, and {', '.join(release)} bounds the "
                "whole release; publish by generalization, or bound each group with k_anonymity"
            )
        if job.suppression.limit:
            raise ConfigError(
                "output.method mondrian suppresses no tuples (every partition satisfies the criteria "
                "as it is cut); remove suppression, or publish by generalization"
            )


@dataclass(kw_only=True)
class MondrianReport(Released):
    """What `partition` published: the table, its partitions, its audit and first rows, and where the time went:
    partitioning (the rounds, with the work table's set-up) and publishing (writing, auditing, committing)."""

    output: str
    rows: int
    result: MondrianResult
    audit: Any
    preview: list[dict[str, Any]]
    partitioning_seconds: float = 0.0
    publishing_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        r = self.result
        return {
            "method": "mondrian",
            "output": self.output,
            "rows": self.rows,
            "partitions": r.partitions,
            "rounds": r.rounds,
            "statements": r.statements,
            "smallest_partition": r.smallest,
            "largest_partition": r.largest,
            "average_partition": self.rows / max(1, r.partitions),
            "partitioning_seconds": round(self.partitioning_seconds, 3),
            "publishing_seconds": round(self.publishing_seconds, 3),
            "audit": self.audit.to_dict(),
            "ledger": self.ledger.to_dict() if self.ledger else None,
            "preview": plain_rows(self.preview),
        }


def publish_partitioned(
    db: Database,
    conn: Connection,
    *,
    work: Mondrian,
    job: Job,
    destination: Destination,
    pseudonyms: Pseudonyms,
    ownership: Ownership,
    run_id: int,
    rows: int,
    source_columns: list[str],
    published_source: str,
    persons: str | None = None,
    progress: Progress = silent,
    ledger: ReleaseLedger | None = None,
) -> tuple[AuditReport, list[dict[str, Any]]]:
    """Write the partitioned table of a finished `work` through the staged, audited path (in the caller's
    transaction), drop the work tables; the audit's report and the first published rows. `rows`: what `work`
    partitioned (the source's rows, or its persons, `persons` their table, where the job names their column);
    `source_columns`: the source's; `published_source`: the rows published (the source, or its research subset).
    With a `ledger`, the release is checked against the job's earlier ones before it is counted (a repair may
    remove persons)."""
    assert job.output is not None
    phases = Phases(progress, "publish", 3)
    phases.step("writing the table")
    with _rows_of(db, conn, job, published_source, source_columns, persons, pseudonyms, run_id) as found:
        published_from, person_rows, identifying = found
        select, published = published_rows(
            db,
            work,
            lambda column, value: pseudonyms.select(db, identifying, column, value),
            job.output.settings["numeric"] == "mean",
            person_rows,
        )
        with staged_table(
            db, conn, destination=destination, select=select, ownership=ownership, run_id=run_id
        ) as staged:
            phases.step("checking its columns and values")
            check_published_columns(db, conn, staged.ref, str(destination.name), published)
            qis = {db.name_key(q) for q in job.qi_names}
            check_published_values(
                db,
                conn,
                staged.ref,
                str(destination.name),
                published_from,
                unchanged_columns(db, pseudonyms, identifying, [c for c in published if db.name_key(c) not in qis]),
                every_row=True,
            )
            phases.step("auditing")
            unit = job.unit_column  # published under the job's name for it, as a pseudonym
            classes = PublishedClasses(
                qi_columns=job.qi_names,
                sensitive=job.sensitive,
                criteria=job.criteria,
                unit=unit,
                holders=bool(work.held),  # a person may hold several values of a column the criteria read
            )
            report = classes.audit(db, conn, staged.ref)
            if not report.ok or report.rows != rows:
                failed = ", ".join(name for name, ok in report.holds.items() if not ok) or f"{report.counted} count"
                raise AuditError(f"the partitioned table failed its audit ({failed}); nothing was written")
            if ledger is not None:  # in the caller's transaction, after the audit; a repair removes persons
                release = NewRelease(method=MondrianMethod.name, table=destination.name)
                admitted = ledger.admit(conn, release, pseudonyms, progress, Repairable(staged.ref, classes))
                report = admitted.audit or report
            staged.audited(report.rows if unit is None else db.count_rows(conn, staged.ref))
    work.drop()
    return report, preview(db, conn, destination.name)


@contextmanager
def _rows_of(
    db: Database,
    conn: Connection,
    job: Job,
    source: str,
    columns: list[str],
    persons: str | None,
    pseudonyms: Pseudonyms,
    run_id: int,
) -> Iterator[tuple[str, PersonRows | None, list[Identifier]]]:
    """Within: what the published rows are read from (the source, or with `persons` its rows with each person's
    pseudonym computed once, see Persons.pseudonymized_rows), where Mondrian's persons are joined to them, and the
    identifiers still to pseudonymize row by row (all but a unit, already done)."""
    unit = job.unit_column
    if unit is None or persons is None:
        yield source, None, list(job.identifying)
        return
    pseudonym = pseudonyms.sql_of(db, job.identifying, unit)
    holder = Persons(table=persons, rows=source, source=source, unit=unit)
    with holder.pseudonymized_rows(db, conn, columns, pseudonym, f"pseudonyms_{run_id}", keyed=True) as rows:
        identifying = [i for i in job.identifying if not db.same_name(i.column, unit)]
        yield rows, PersonRows(ref=rows, columns=columns, unit=unit, key=PERSON_KEY), identifying


def partition_and_publish(
    db: Database,
    conn: Connection,
    *,
    job: Job,
    columns: dict[str, str],
    hierarchies: dict[str, Hierarchy],
    destination: Destination,
    pseudonyms: Pseudonyms,
    ownership: Ownership,
    run_id: int,
    progress: Progress = silent,
    ledger: ReleaseLedger | None = None,
) -> MondrianReport:
    """Partition the job's source (`destination.source`) and publish it through the staged, audited path, in the
    caller's transaction; the report times both halves. QIs with a hierarchy are cut along it, the others as
    numbers of their source type (`columns`: the source's columns and types, as `engine.star.check_columns`
    returns)."""
    assert job.output is not None
    kinds, source = kinds_by_key(db, columns), destination.source
    partitioned_source = published_source = db.q(source.schema, source.table)
    partitioned_columns, found, highs = list(columns), None, {}
    if job.subset is not None:  # the research subset's rows alone (with a unit, its persons) are partitioned
        partitioned_source = published_source = subset_rows(db, conn, job, partitioned_source, run_id)
    if job.unit_column:  # Mondrian cuts the persons, one row each; every row of a person goes to their partition
        found = _persons(db, conn, job, partitioned_source, run_id, hierarchies, ledger)
        partitioned_source = found.table
        hierarchies, highs = {**hierarchies, **found.hierarchies}, found.highs
        partitioned_columns = person_columns(job) + list(highs.values())
    qis = [
        MondrianQI(qi.column, hierarchies[qi.column])
        if qi.column in hierarchies
        else MondrianQI(qi.column, None, kinds[db.name_key(qi.column)])
        for qi in job.quasi_identifiers
    ]
    sensitive = needed_sensitive(job.criteria)
    work = Mondrian(
        db=db,
        conn=conn,
        source=partitioned_source,
        columns=partitioned_columns,
        qis=qis,
        sensitive=sensitive,
        criteria=job.criteria,
        prefix=f"mondrian_{run_id}",
        relaxed=bool(job.output.settings["relaxed"]),
        progress=progress,
        highs=highs,
        held={c: h.members for c, h in found.held.items() if c in sensitive} if found else {},
    )
    started = time.perf_counter()
    rows = work.prepare()
    for criterion in job.criteria:
        criterion.fit_table(rows)
    result = work.run()
    partitioned = time.perf_counter()
    audit, first_rows = publish_partitioned(
        db,
        conn,
        work=work,
        job=job,
        destination=destination,
        pseudonyms=pseudonyms,
        ownership=ownership,
        run_id=run_id,
        rows=rows,
        source_columns=list(columns),
        published_source=published_source,
        persons=found.table if found else None,
        progress=progress,
        ledger=ledger,
    )
    if found is not None:
        found.drop(db, conn)
    if job.subset is not None:
        db.drop_table(conn, published_source)
    return MondrianReport(
        output=str(destination.name),
        rows=rows,
        result=result,
        audit=audit,
        preview=first_rows,
        partitioning_seconds=partitioned - started,
        publishing_seconds=time.perf_counter() - partitioned,
        release=PublishedTable.of(db, destination.name),
        ledger=ledger.outcome if ledger else None,
    )


def _persons(
    db: Database,
    conn: Connection,
    job: Job,
    source: str,
    run_id: int,
    hierarchies: dict[str, Hierarchy],
    ledger: ReleaseLedger | None,
) -> Persons:
    """The persons Mondrian cuts, one row each (`counted_persons`): a person whose rows disagree on a QI with a
    hierarchy is cut as the leaf of their values' lowest common ancestor (`Persons.hierarchies`, the QI's hierarchy
    with those leaves); on a QI cut as a number, by the smallest of their values, and published with the range of
    all of them (`Persons.highs`), which a mean cannot say (refused); a person may hold several values of one
    sensitive column the criteria read (`Persons.held`), as in the lattice search, but not with a `ledger`, whose
    inference reads one value per person (refused)."""
    persons = counted_persons(
        db, conn, job, source, run_id, (), lambda qi: hierarchies.get(qi.column), several_values=True
    )
    assert job.output is not None
    try:
        if ledger is not None:
            refuse_held_values(persons)
        if persons.highs and job.output.settings["numeric"] == "mean":
            raise DataError(
                f"output.numeric: mean publishes one number per partition, and persons' rows disagree on "
                f"{', '.join(map(repr, persons.highs))}: publish ranges (numeric: range), keep one value per "
                "person, or give the column a hierarchy"
            )
    except Exception:
        persons.drop(db, conn)
        raise
    return persons
