"""The release ledger: every publication of a job that keeps one, and the check of each new one against the others.

A job with `ledger: {person: ID}` records each publication (anonymize, apply, publish; any method) in the store's
`release_ledger`, in the publication's own transaction: its tables, the column whose keyed pseudonym names each
person in them, what a later release is compared on (QIs, sensitive columns, bucket, node, criteria), and how many
persons and rows it held. The published tables themselves are the record of which persons got which groups and
values; a later publication reads them there, so one that was dropped or changed since stops the next release
(`sqlanon releases JOB --forget RUN` takes a withdrawn release out of the ledger).

With `check` (the default), a new release is written and audited as usual, and then, before it commits, the
maximum-entropy inference (sqlanon.engine.maxent) solves it together with every earlier release of the same
persons, one sensitive column at a time. A disclosure no single release gives (a person's value inferred above
`inference.max_probability`, or a value a release allowed pushed below `inference.min_probability`) refuses the
release, naming the persons and values at stake; the transaction rolls back and nothing is written. A disclosure
one release gives alone is that release's own, which its criteria accepted, and is not counted again.

A person is the same person in two releases when their pseudonyms are equal, which needs the same key: each entry
keeps the pseudonym of a fixed probe value, and a release pseudonymizing with another key is refused.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..backends import Database
from ..engine.maxent import InferenceReport, ReleaseTables, analyze_releases
from ..errors import ConfigError, DataError
from ..model.job import InferenceSettings, Job, Release, ReleaseSeries
from ..model.progress import Progress, silent
from ..store import Store
from ..store import ledger as store_ledger
from ..store.records import now
from .identifiers import Pseudonyms
from .ownership import TableName

PROBE = "'sqlanon ledger key probe'"  # a fixed value whose pseudonym tells one key from another
SHOWN = 3  # disclosures an error names
LEDGER = "the release ledger (ledger: in the job)"  # what a database without transactions refuses


@dataclass(kw_only=True, frozen=True)
class LedgerEntry:
    """One release in the ledger: the publishing run, its tables and what a later release is compared on."""

    run_id: int
    method: str
    table: TableName
    sensitive_table: str | None  # a bucketized release's (bucket, value, count) table
    person: str
    details: dict[str, Any]  # qi, sensitive, bucket, distinct, node, criteria
    persons: int
    rows: int
    key_probe: str
    created_at: dt.datetime

    @classmethod
    def of(cls, row: Any) -> LedgerEntry:
        run_id, method, schema, table, sensitive_table, person, details, persons, rows, probe, created = row
        return cls(
            run_id=int(run_id),
            method=method,
            table=TableName(schema, table),
            sensitive_table=sensitive_table,
            person=person,
            details=json.loads(details),
            persons=int(persons),
            rows=int(rows),
            key_probe=probe,
            created_at=created,
        )

    @property
    def name(self) -> str:
        return f"run {self.run_id}"

    def state(self, db: Database, conn: Connection) -> str:
        """`present`, or what became of its table since it was published (`dropped`, `changed: ...`)."""
        for table in filter(None, (self.table.table, self.sensitive_table)):
            if not db.table_exists(conn, self.table.schema, table):
                return f"dropped ({TableName(self.table.schema, table)} no longer exists)"
        rows = db.count_rows(conn, db.q(self.table.schema, self.table.table))
        return "present" if rows == self.rows else f"changed ({rows} rows, {self.rows} when published)"

    def release(self) -> Release:
        """The entry as a release the inference reads."""
        return Release(
            name=self.name,
            table=self.table.table,
            schema=self.table.schema,
            sensitive_table=self.sensitive_table,
            qi_columns=tuple(self.details["qi"]),
            distinct=bool(self.details.get("distinct")),
            hierarchy_labels=False,
        )

    def describe(self) -> dict[str, Any]:
        """The entry as `sqlanon releases` lists it."""
        tables = str(self.table) + (f" + {self.sensitive_table}" if self.sensitive_table else "")
        node = self.details.get("node")
        return {
            "run": self.run_id,
            "published": self.created_at.isoformat(sep=" ", timespec="seconds"),
            "method": self.method,
            "tables": tables,
            "node": ",".join(map(str, node)) if node is not None else "",
            "criteria": self.details.get("criteria", ""),
            "persons": self.persons,
            "rows": self.rows,
        }


def entries(db: Database, conn: Connection, store_schema: str, job_name: str) -> list[LedgerEntry]:
    """The caller's releases of the job, oldest first."""
    rows = Store(db, store_schema).call(db.metadata_connection(conn), store_ledger.ENTRIES, job_name=job_name).all()
    return [LedgerEntry.of(row) for row in rows]


def forget(db: Database, conn: Connection, store_schema: str, job_name: str, run_id: int) -> None:
    """Take the caller's release of run `run_id` out of the job's ledger."""
    row = (
        Store(db, store_schema)
        .call(db.metadata_connection(conn), store_ledger.FORGET, job_name=job_name, run=run_id)
        .first()
    )
    if row is None:
        raise ConfigError(
            f"job {job_name!r} has no release of run {run_id} in its ledger; `sqlanon releases` lists them"
        )


@dataclass(kw_only=True)
class LedgerCheck:
    """What the ledger did for a publication: the earlier releases it was checked against, and the solves."""

    earlier: list[int]  # their runs
    checked: list[str]  # the sensitive columns inferred
    persons: int
    seconds: float
    statements: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "earlier_releases": self.earlier,
            "checked": self.checked,
            "persons": self.persons,
            "seconds": round(self.seconds, 3),
            "statements": self.statements,
        }


@dataclass(kw_only=True)
class NewRelease:
    """A publication about to commit, as the ledger records it."""

    method: str
    table: TableName  # the generalized table, or the QI table of a bucketized pair
    sensitive_table: TableName | None = None
    bucket: str | None = None
    node: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.sensitive_table is not None and not self.sensitive_table.schema == self.table.schema:
            raise ConfigError(
                f"the ledger reads a bucketized release's two tables from one schema; {self.table} and "
                f"{self.sensitive_table} are in two: publish both to one schema"
            )


class ReleaseLedger:
    """The ledger of one job, for one publishing run (see the module)."""

    def __init__(self, db: Database, store_schema: str, job: Job, run_id: int):
        assert job.ledger is not None
        db.require_transactions(LEDGER)
        self.db, self.store_schema, self.job, self.run_id = db, store_schema, job, run_id
        self.settings = job.ledger
        self.outcome: LedgerCheck | None = None  # once admitted

    def admit(
        self, conn: Connection, release: NewRelease, pseudonyms: Pseudonyms, progress: Progress = silent
    ) -> LedgerCheck:
        """In the publication's transaction, after its audit: refuse `release` if the earlier releases (checked to
        be as they were published, with the same key) and it together disclose, else record it."""
        started = time.perf_counter()
        db, person = self.db, self.settings.person
        probe = self._key_probe(conn, pseudonyms)
        earlier = entries(db, conn, self.store_schema, self.job.name)
        for entry in earlier:
            self._check_entry(conn, entry, probe)
        persons, rows = self._counts(conn, release)
        statements, checked = 0, []
        if self.settings.check and earlier:
            for sensitive in self.job.sensitive:
                compared = [e for e in earlier if sensitive in e.details["sensitive"]]
                if compared:
                    report = self._infer(conn, compared, release, sensitive, progress)
                    statements += report.statements
                    checked.append(sensitive)
                    if report.combined_count:
                        raise DataError(_disclosure(report, sensitive, compared, self.job.inference))
        details = {
            "qi": self.job.qi_names,
            "sensitive": self.job.sensitive,
            "bucket": release.bucket,
            "distinct": self.job.unit_column is not None,
            "node": list(release.node) if release.node is not None else None,
            "criteria": ", ".join(c.describe() for c in self.job.criteria),
        }
        Store(db, self.store_schema).call(
            db.metadata_connection(conn),
            store_ledger.RECORD,
            run=self.run_id,
            job_name=self.job.name,
            method=release.method,
            schema_name=release.table.schema,
            table_name=release.table.table,
            sensitive_table=release.sensitive_table.table if release.sensitive_table else None,
            person_column=person,
            details=json.dumps(details),
            persons=persons,
            row_count=rows,
            key_probe=probe,
            created_at=now(),
        )
        self.outcome = LedgerCheck(
            earlier=[e.run_id for e in earlier],
            checked=checked,
            persons=persons,
            seconds=time.perf_counter() - started,
            statements=statements,
        )
        return self.outcome

    def _key_probe(self, conn: Connection, pseudonyms: Pseudonyms) -> str:
        """The pseudonym of PROBE under the person column's key (within `pseudonyms.loaded`)."""
        value = pseudonyms.select(self.db, self.job.identifying, self.settings.person, PROBE)
        assert value is not None, "config._ledger: the person column is pseudonymized"
        return str(self.db.execute(conn, sa.select(sa.literal_column(value))).scalar_one())

    def _check_entry(self, conn: Connection, entry: LedgerEntry, probe: str) -> None:
        """An earlier release is read from its tables: they must be as published, persons named as now."""
        where = f"ledger of job {self.job.name!r}: the release of run {entry.run_id} ({entry.table})"
        state = entry.state(self.db, conn)
        if state != "present":
            raise DataError(
                f"{where} was {state}; restore it, or, if it was withdrawn before anyone read it, take it out with "
                f"`sqlanon releases JOB --forget {entry.run_id}`; nothing was written"
            )
        if not self.db.same_name(entry.person, self.settings.person):
            raise DataError(
                f"{where} names persons by {entry.person!r}, this job by {self.settings.person!r}; set "
                f"ledger.person to {entry.person!r}; nothing was written"
            )
        if entry.key_probe != probe:
            raise DataError(
                f"{where} pseudonymized {entry.person!r} with another key, so its persons cannot be matched with "
                "this release's; publish with the key of the earlier releases; nothing was written"
            )

    def _counts(self, conn: Connection, release: NewRelease) -> tuple[int, int]:
        """The release's persons and rows."""
        table = sa.table(release.table.table, sa.column(self.settings.person), schema=release.table.schema)
        persons, rows = self.db.execute(
            conn, sa.select(sa.func.count(table.c[self.settings.person].distinct()), sa.func.count())
        ).one()
        return int(persons), int(rows)

    def _infer(
        self, conn: Connection, earlier: list[LedgerEntry], release: NewRelease, sensitive: str, progress: Progress
    ) -> InferenceReport:
        """The inference over the earlier releases that published `sensitive`, and this one."""
        new = Release(
            name="this release",
            table=release.table.table,
            schema=release.table.schema,
            sensitive_table=release.sensitive_table.table if release.sensitive_table else None,
            distinct=self.job.unit_column is not None,
            hierarchy_labels=False,
        )
        series = ReleaseSeries(
            pseudonym=self.settings.person,
            releases=tuple(e.release() for e in earlier) + (new,),
            bucket=release.bucket or "bucket",
        )
        tables = ReleaseTables(
            db=self.db,
            conn=conn,
            series=series,
            sensitive=sensitive,
            hierarchies={},
            qi_columns=self.job.qi_names,
            prefix=f"ledger_{self.run_id}",
        )
        return analyze_releases(tables, settings=self.job.inference, progress=progress)


def _disclosure(
    report: InferenceReport, sensitive: str, earlier: list[LedgerEntry], settings: InferenceSettings
) -> str:
    """The refusal: how many values the releases together disclose, and the first few."""
    shown = "; ".join(
        f"{d['pseudonym'][:16]}… is {d['value']!r} with probability {d['probability']:.2f} "
        f"(at most {d['alone']:.2f} from any one release; {d['releases']})"
        for d in report.combined[:SHOWN]
    )
    runs = ", ".join(str(e.run_id) for e in earlier)
    return (
        f"this release and the earlier one(s) of the job (run {runs}) together disclose {report.combined_count} "
        f"{sensitive} value(s) of their persons (above inference.max_probability {settings.max_probability}, or "
        f"below min_probability {settings.min_probability}), which no one release gives: {shown}. Nothing was "
        "written: publish a more general node, the same node as before, or stronger criteria; `sqlanon inference` "
        "shows every disclosure"
    )
