"""The release ledger: every publication of a job that keeps one, and the check of each new one against the others.

A job with `ledger: {person: ID}` records each publication (anonymize, apply, publish; any method) in the store's
`release_ledger`, in the publication's own transaction: its tables, the column whose keyed pseudonym names each
person in them, what a later release is compared on (QIs, sensitive columns, bucket, node, criteria), and how many
persons and rows it held. The published tables themselves are the record of which persons got which groups and
values; a later publication reads them there, so one that was dropped or changed since stops the next release
(`sqlanon releases JOB --forget RUN` takes a withdrawn release out of the ledger).

A new release is written and audited as usual, and then, before it commits, checked by the job's principle
(`ledger.check`, one of PRINCIPLES), one sensitive column at a time; a refusal rolls the transaction back and
nothing is written:
- `inference` (the default): the maximum-entropy inference (sqlanon.engine.maxent) solves the release together with
  every earlier one. A disclosure no single release gives (a person's value inferred above
  `inference.max_probability`, or a value every release of the person allows pushed below
  `inference.min_probability`) refuses it, naming the persons and values at stake. A disclosure one release gives
  alone is that release's own, which its criteria accepted, and is not counted again. With `ledger.suppress`, a
  generalized or partitioned release is repaired instead, within that share of its persons (`Repair`): the persons
  at stake leave it, then the classes that no longer hold the criteria, until nothing is disclosed.
- `m-invariance` (Xiao and Tao): every group of the release m-unique, and every person of the previous release who
  is in this one in a group of the same values. Anatomy's `output.invariant` bucketizes so that it holds
  (engine.invariant, with counterfeits), reading the previous release through `ReleaseLedger.previous_groups`.

A person is the same person in two releases when their pseudonyms are equal, which needs the same key: each entry
keeps the pseudonym of a fixed probe value, and a release pseudonymizing with another key is refused.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Connection

from ..backends import Database
from ..engine import ledger as ledger_sql
from ..engine.anatomy import BUCKET
from ..engine.audit import AuditReport, PublishedClasses
from ..engine.invariant import PreviousGroups
from ..engine.maxent import InferenceReport, ReleaseTables, analyze_releases
from ..engine.persons import Persons
from ..errors import AuditError, ConfigError, DataError
from ..model.job import InferenceSettings, Job, Release, ReleaseSeries
from ..model.progress import Progress, silent
from ..store import Store
from ..store import ledger as store_ledger
from ..store.records import now
from .identifiers import Pseudonyms
from .ownership import TableName

ROUNDS = 8  # rounds of a repair (ledger.suppress) before a release that still discloses is refused
PROBE = "'sqlanon ledger key probe'"  # a fixed value whose pseudonym tells one key from another
SHOWN = 3  # disclosures an error names
LEDGER = "the release ledger (ledger: in the job)"  # what a database without transactions refuses


def refuse_held_values(persons: Persons) -> None:
    """Refuse a release whose persons hold several values of a sensitive column (DataError): the maximum-entropy
    inference gives each person one value per release."""
    if persons.held:
        raise DataError(
            f"persons of unit column {persons.unit!r} hold several values of "
            f"{', '.join(map(repr, persons.held))}: the release ledger's inference reads one value per person "
            "and is not defined for them yet; leave ledger out of this job, or keep one value per person"
        )


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

    @property
    def counterfeits(self) -> str | None:
        """An m-invariant bucketization's counterfeits table (bucket, counterfeit), beside its two tables."""
        return self.details.get("counterfeits")

    def state(self, db: Database, conn: Connection) -> str:
        """`present`, or what became of its table since it was published (`dropped`, `changed: ...`)."""
        for table in filter(None, (self.table.table, self.sensitive_table, self.counterfeits)):
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
            counterfeit_table=self.counterfeits,
            qi_columns=tuple(self.details["qi"]),
            distinct=bool(self.details.get("distinct")),
            hierarchy_labels=False,
        )

    def describe(self) -> dict[str, Any]:
        """The entry as `sqlanon releases` lists it."""
        tables = " + ".join([str(self.table), *filter(None, (self.sensitive_table, self.counterfeits))])
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
    if row is None or row[0] is None:  # a PostgreSQL routine returns its RETURNING value, NULL when none
        raise ConfigError(
            f"job {job_name!r} has no release of run {run_id} in its ledger; `sqlanon releases` lists them"
        )


@dataclass(kw_only=True)
class LedgerCheck:
    """What the ledger did for a publication: the earlier releases it was checked against, and the solves."""

    earlier: list[int]  # their runs
    checked: list[str]  # the sensitive columns checked
    principle: str | None  # ledger.check
    persons: int
    seconds: float
    statements: int
    suppressed: int = 0  # persons a repair removed (ledger.suppress)
    audit: AuditReport | None = None  # the repaired release's audit, where persons were removed

    def to_dict(self) -> dict[str, Any]:
        return {
            "earlier_releases": self.earlier,
            "checked": self.checked,
            "principle": self.principle,
            "persons": self.persons,
            "suppressed": self.suppressed,
            "seconds": round(self.seconds, 3),
            "statements": self.statements,
        }


@dataclass(frozen=True)
class Repairable:
    """A release of one table that the inference check may repair by removing persons (ledger.suppress): the
    written table (`ref`, in the publication's transaction) and how its audit reads it (`classes`)."""

    ref: str
    classes: PublishedClasses


@dataclass(kw_only=True)
class NewRelease:
    """A publication about to commit, as the ledger records it."""

    method: str
    table: TableName  # the generalized table, or the QI table of a bucketized pair
    sensitive_table: TableName | None = None
    bucket: str | None = None
    node: tuple[int, ...] | None = None
    counterfeits: TableName | None = None  # an m-invariant bucketization's (bucket, counterfeit)

    def __post_init__(self) -> None:
        for other in filter(None, (self.sensitive_table, self.counterfeits)):
            if other.schema != self.table.schema:
                raise ConfigError(
                    f"the ledger reads a bucketized release's tables from one schema; {self.table} and {other} are "
                    "in two: publish them to one schema"
                )


class ReleaseLedger:
    """The ledger of one job, for one publishing run (see the module)."""

    def __init__(self, db: Database, store_schema: str, job: Job, run_id: int):
        assert job.ledger is not None
        db.require_transactions(LEDGER)
        self.db, self.store_schema, self.job, self.run_id = db, store_schema, job, run_id
        self.settings = job.ledger
        self.outcome: LedgerCheck | None = None  # once admitted
        self._found: list[LedgerEntry] | None = None  # the job's earlier releases, read once per run
        self._checked = False  # and found as they were published

    @classmethod
    def of(cls, db: Database, store_schema: str, job: Job, run_id: int) -> ReleaseLedger | None:
        """The ledger of a publishing run of `job`, where the job keeps one."""
        return cls(db, store_schema, job, run_id) if job.ledger else None

    def admit(
        self,
        conn: Connection,
        release: NewRelease,
        pseudonyms: Pseudonyms,
        progress: Progress = silent,
        repairable: Repairable | None = None,
    ) -> LedgerCheck:
        """In the publication's transaction, after its audit: refuse `release` if the earlier releases (checked to
        be as they were published, with the same key) and it together disclose, else record it. With ledger.suppress
        and a `repairable` release, the persons at stake are removed from it instead (see `Repair`)."""
        started = time.perf_counter()
        db, person = self.db, self.settings.person
        probe = self._key_probe(conn, pseudonyms)
        self._refuse_overwritten(self._entries(conn), release)
        earlier = self.earlier(conn)
        for entry in earlier:
            self._check_key(entry, probe)
        repair = Repair.of(self, release, repairable)
        statements, checked = self._check(conn, earlier, release, progress, repair)
        persons, rows = self.persons_and_rows(conn, release)
        details = {
            "qi": self.job.qi_names,
            "sensitive": self.job.sensitive,
            "bucket": release.bucket,
            "distinct": self.job.unit_column is not None,
            "node": list(release.node) if release.node is not None else None,
            "criteria": ", ".join(c.describe() for c in self.job.criteria),
            "counterfeits": release.counterfeits.table if release.counterfeits else None,
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
            principle=self.settings.check,
            persons=persons,
            seconds=time.perf_counter() - started,
            statements=statements,
            suppressed=repair.removed if repair else 0,
            audit=repair.audit if repair else None,
        )
        return self.outcome

    def _check(
        self,
        conn: Connection,
        earlier: list[LedgerEntry],
        release: NewRelease,
        progress: Progress,
        repair: Repair | None,
    ) -> tuple[int, list[str]]:
        """Check the release by the job's principle, for each sensitive column (against the earlier releases that
        published it); the statements run and the columns checked. Where a `repair` removed persons for one
        column, every column is checked again (the removal changes what the others infer)."""
        statements, checked = 0, list[str]()
        if self.settings.check is None:
            return statements, checked
        principle = PRINCIPLES[self.settings.check]
        while True:
            removed = repair.removed if repair else 0
            for sensitive in self.job.sensitive:
                compared = [e for e in earlier if sensitive in e.details["sensitive"]]
                if compared or principle is _m_invariance:  # each group m-unique: a first release's too
                    candidate = Candidate(
                        ledger=self,
                        conn=conn,
                        earlier=compared,
                        release=release,
                        sensitive=sensitive,
                        progress=progress,
                        repair=repair,
                    )
                    statements += principle(candidate)
                    checked.append(sensitive)
            if repair is None or repair.removed == removed:
                break
        if repair is not None and repair.removed:
            repair.audit = repair.audited(conn)
        return statements, list(dict.fromkeys(checked))

    def _refuse_overwritten(self, found: list[LedgerEntry], release: NewRelease) -> None:
        """A release written over an earlier one's table (--replace) would take that release out of the record
        while whoever read it keeps it: refused, unless the earlier one is forgotten first."""
        written = [t for t in (release.table, release.sensitive_table, release.counterfeits) if t is not None]
        for entry in found:
            held = [
                TableName(entry.table.schema, t)
                for t in (entry.table.table, entry.sensitive_table, entry.counterfeits)
                if t
            ]
            clash = next((t for t in written for h in held if t.same_as(h, self.db)), None)
            if clash is not None:
                raise DataError(
                    f"table {clash} holds the release of run {entry.run_id} in the ledger of job {self.job.name!r}, "
                    "which this one would replace; publish to another table, or, if that release was withdrawn "
                    f"before anyone read it, `sqlanon releases JOB --forget {entry.run_id}` first; nothing was written"
                )

    def _key_probe(self, conn: Connection, pseudonyms: Pseudonyms) -> str:
        """The pseudonym of PROBE under the person column's key (within `pseudonyms.loaded`)."""
        value = pseudonyms.select(self.db, self.job.identifying, self.settings.person, PROBE)
        assert value is not None, "config._ledger: the person column is pseudonymized"
        return ledger_sql.value_of(self.db, conn, value)

    def _where(self, entry: LedgerEntry) -> str:
        return f"ledger of job {self.job.name!r}: the release of run {entry.run_id} ({entry.table})"

    def _check_entry(self, conn: Connection, entry: LedgerEntry) -> None:
        """An earlier release is read from its tables: they must be as published, persons named as now."""
        where = self._where(entry)
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

    def _check_key(self, entry: LedgerEntry, probe: str) -> None:
        """An earlier release's persons are this one's only under the same pseudonym key."""
        if entry.key_probe != probe:
            raise DataError(
                f"{self._where(entry)} pseudonymized {entry.person!r} with another key, so its persons cannot be "
                "matched with this release's; publish with the key of the earlier releases; nothing was written"
            )

    def persons_and_rows(self, conn: Connection, release: NewRelease) -> tuple[int, int]:
        """The release's persons and rows."""
        return ledger_sql.persons_and_rows(
            self.db, conn, release.table.schema, release.table.table, self.settings.person
        )

    def previous_groups(self, conn: Connection, sensitive: str) -> tuple[PreviousGroups, ReleaseTables] | None:
        """The job's latest release that published `sensitive`, as m-invariant bucketization reads it (checked to be
        as it was published, with the same key), and its tables (to drop); None before the first."""
        earlier = [e for e in self.earlier(conn) if sensitive in e.details["sensitive"]]
        if not earlier:
            return None
        entry = earlier[-1]
        tables = self.release_tables(conn, [entry], None, sensitive)
        holding = entry.sensitive_table or entry.table.table  # the table holding the sensitive values
        groups = PreviousGroups(
            members=tables.members,
            counts=tables.counts,
            persons=tables.persons,
            vals=tables.vals,
            typed=ledger_sql.published_values(entry.table.schema, holding, sensitive),
        )
        return groups, tables

    def earlier(self, conn: Connection) -> list[LedgerEntry]:
        """The job's earlier releases, each checked (once per run) to be as it was published, persons named as
        now."""
        found = self._entries(conn)
        if not self._checked:
            for entry in found:
                self._check_entry(conn, entry)
            self._checked = True
        return found

    def _entries(self, conn: Connection) -> list[LedgerEntry]:
        if self._found is None:
            self._found = entries(self.db, conn, self.store_schema, self.job.name)
        return self._found

    def release_tables(
        self, conn: Connection, earlier: list[LedgerEntry], release: NewRelease | None, sensitive: str
    ) -> ReleaseTables:
        """The earlier releases and this one (when given) as the inference reads them (this one last)."""
        if release is None:
            new: tuple[Release, ...] = ()
        else:
            new = (self._new_release(release),)
        series = ReleaseSeries(
            pseudonym=self.settings.person,
            releases=tuple(e.release() for e in earlier) + new,
            bucket=(release.bucket if release else None) or BUCKET,
        )
        return ReleaseTables(
            db=self.db,
            conn=conn,
            series=series,
            sensitive=sensitive,
            hierarchies={},
            qi_columns=self.job.qi_names,
            prefix=f"ledger_{self.run_id}",
        )

    def _new_release(self, release: NewRelease) -> Release:
        return Release(
            name="this release",
            table=release.table.table,
            schema=release.table.schema,
            sensitive_table=release.sensitive_table.table if release.sensitive_table else None,
            counterfeit_table=release.counterfeits.table if release.counterfeits else None,
            distinct=self.job.unit_column is not None,
            hierarchy_labels=False,
        )


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """A release as a principle checks it: the ledger, the publication's connection, the earlier releases that
    published the sensitive column, the release, the column, and where progress goes."""

    ledger: ReleaseLedger
    conn: Connection
    earlier: list[LedgerEntry]
    release: NewRelease
    sensitive: str
    progress: Progress
    repair: Repair | None = None


def _inference(candidate: Candidate) -> int:
    """Refuse a release that discloses with the earlier ones (see the module), or with a repair, remove the persons
    at stake from it until it does not; its statements."""
    ledger, earlier, sensitive, repair = candidate.ledger, candidate.earlier, candidate.sensitive, candidate.repair
    statements = 0
    while True:
        tables = ledger.release_tables(candidate.conn, earlier, candidate.release, sensitive)
        # every release together is what decides; naming the pair behind each disclosure would solve n(n-1)/2 more
        report = analyze_releases(
            tables,
            settings=ledger.job.inference,
            progress=candidate.progress,
            name_pairs=False,
            at_stake=repair.at_stake if repair else None,
        )
        statements += report.statements
        if not report.combined_count:
            if repair is not None:
                ledger.db.drop_table(candidate.conn, ledger.db.scratch_ref(repair.at_stake))
            return statements
        if repair is None:
            raise DataError(_disclosure(report, sensitive, earlier, ledger.job.inference))
        unrepaired = repair.remove_at_stake(candidate.conn)
        if unrepaired:
            raise DataError(_disclosure(report, sensitive, earlier, ledger.job.inference, unrepaired))


@dataclass(kw_only=True)
class Repair:
    """The repair of a disclosing release by suppression (ledger.suppress): each round removes from the release's
    table every person a combined disclosure is about, then every class that no longer holds the job's criteria
    (all of its persons' rows), and the inference runs again; refused (DataError, nothing written) where the
    disclosures are of no person of this release, where more than the allowed share of its persons would go, or
    after ROUNDS rounds."""

    ledger: ReleaseLedger
    release: NewRelease
    table: Repairable
    persons: int = 0  # the release's persons before any repair (counted by the first round: most releases need none)
    removed: int = 0
    rounds: int = 0
    audit: AuditReport | None = None

    @classmethod
    def of(cls, ledger: ReleaseLedger, release: NewRelease, repairable: Repairable | None) -> Repair | None:
        if not ledger.settings.suppress or ledger.settings.check != "inference":
            return None
        assert repairable is not None, "config: a method whose releases are not repairable refuses ledger.suppress"
        return cls(ledger=ledger, release=release, table=repairable)

    @property
    def at_stake(self) -> str:
        """The scratch table of the pseudonyms at stake, which each inference writes."""
        return f"at_stake_{self.ledger.run_id}"

    @property
    def allowed(self) -> int:
        return math.floor(self.ledger.settings.suppress * self.persons)

    def remove_at_stake(self, conn: Connection) -> str:
        """One round (see the class); why the repair cannot go on, or nothing."""
        db, ledger = self.ledger.db, self.ledger
        if self.rounds == ROUNDS:
            return f"after {ROUNDS} rounds of removing the persons at stake it still discloses"
        if not self.rounds:
            self.persons = self._persons(conn)
        held = self.persons - self.removed  # what the previous round left
        ledger_sql.remove_persons(db, conn, self.table.ref, ledger.settings.person, db.scratch_ref(self.at_stake))
        db.drop_table(conn, db.scratch_ref(self.at_stake))
        if self._persons(conn) == held:
            return (
                "they are of persons this release does not hold, whom its other persons' values give away: removing "
                "its persons at stake (ledger.suppress) cannot repair it"
            )
        self.table.classes.remove_violating(db, conn, self.table.ref, f"violating_{ledger.run_id}")
        self.removed, self.rounds = self.persons - self._persons(conn), self.rounds + 1
        if self.removed > self.allowed:
            return (
                f"repairing it would remove {self.removed} of its {self.persons} persons (at least), more than "
                f"ledger.suppress {ledger.settings.suppress} allows ({self.allowed})"
            )
        return ""

    def audited(self, conn: Connection) -> AuditReport:
        """The repaired table's audit, which must pass (it removed whole classes where one broke)."""
        report = self.table.classes.audit(self.ledger.db, conn, self.table.ref)
        if not report.ok:
            raise AuditError("the release repaired by suppression failed its audit; nothing was written")
        return report

    def _persons(self, conn: Connection) -> int:
        return self.ledger.persons_and_rows(conn, self.release)[0]


def _m_invariance(candidate: Candidate) -> int:
    """Refuse a release that is not m-invariant with the previous one (Xiao and Tao, SIGMOD 2007): every group of
    it m-unique (at least m persons, no value twice), and every person of both releases with the same signature
    (the set of values of their group) in each. Checked pair by pair, each release against the one before it, the
    whole sequence is m-invariant: a person who leaves and returns starts a new lifespan, as in the paper."""
    ledger, conn, sensitive = candidate.ledger, candidate.conn, candidate.sensitive
    m = ledger.settings.m
    assert m is not None
    previous = candidate.earlier[-1:]
    tables = ledger.release_tables(conn, previous, candidate.release, sensitive)
    not_unique = ledger_sql.not_m_unique(ledger.db, conn, tables, len(previous) + 1, m)
    changed = ledger_sql.changed_signatures(ledger.db, conn, tables) if previous else None
    tables.drop_all()
    if not_unique or changed:
        raise DataError(_not_invariant(m, not_unique, changed, previous, sensitive))
    return tables.statements + 2


def _not_invariant(
    m: int, not_unique: int, changed: ledger_sql.ChangedSignatures | None, previous: list[LedgerEntry], sensitive: str
) -> str:
    problems = []
    if not_unique:
        problems.append(f"{not_unique} group(s) hold fewer than {m} persons or a {sensitive} value twice")
    if changed:
        problems.append(
            f"{changed.persons} person(s) of the previous release (run {previous[0].run_id}) would change signature "
            f"(the {sensitive} values of their group), e.g. {changed.pseudonym[:16]}…: "
            f"{{{', '.join(changed.before)}}}, now {{{', '.join(changed.now)}}}"
        )
    return (
        f"this release is not {m}-invariant (ledger.check m-invariance): {'; '.join(problems)}. Nothing was written: "
        f"publish by anatomy with l: {m} and invariant: true (it bucketizes after the previous release, with "
        "counterfeits where a value left), or check by inference instead"
    )


#: how a release is checked against the earlier ones (ledger.check): each raises DataError to refuse the candidate,
#: and returns the statements it ran
PRINCIPLES: dict[str, Callable[[Candidate], int]] = {"inference": _inference, "m-invariance": _m_invariance}


def _disclosure(
    report: InferenceReport,
    sensitive: str,
    earlier: list[LedgerEntry],
    settings: InferenceSettings,
    unrepaired: str = "",
) -> str:
    """The refusal: how many values the releases together disclose, the first few, and (`unrepaired`) why a repair
    could not remove them."""
    shown = "; ".join(
        f"{d['pseudonym'][:16]}… is {d['value']!r} with probability {d['probability']:.2f} "
        f"(at most {d['alone']:.2f} from any one release; {d['releases']})"
        for d in report.combined[:SHOWN]
    )
    runs = ", ".join(str(e.run_id) for e in earlier)
    repair = f" ({unrepaired})" if unrepaired else ""
    return (
        f"this release and the earlier one(s) of the job (run {runs}) together disclose {report.combined_count} "
        f"{sensitive} value(s) of their persons (above inference.max_probability {settings.max_probability}, or "
        f"below min_probability {settings.min_probability}), which no one release gives: {shown}{repair}. Nothing "
        "was written: publish a more general node, the same node as before, or stronger criteria (or, for a table "
        "that changes, anatomy with invariant: true and ledger.check m-invariance)"
    )
