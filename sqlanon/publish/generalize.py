"""Writing the anonymized table: one transaction, audited before it commits.

The generalized table is created under its final name inside one
transaction (replacing an earlier output of sqlanon's only when asked),
re-checked by the independent audit, and committed only then: any failure
rolls everything back, so the output appears whole or not at all, and no
other name is ever created or dropped. The source is only read.

Only declared columns are published: quasi-identifiers generalized,
sensitive and insensitive columns as they are, direct identifiers removed or
replaced by a keyed pseudonym (HMAC-SHA256 computed in SQL, see
sqlanon.publish.identifiers). A column without a role stops the publication.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from sqlalchemy.engine import Connection

from ..backends import Database
from ..criteria import Criterion
from ..engine import generalize as generalize_sql
from ..engine.audit import AuditReport, PublishedClasses, check_published_columns, check_published_values
from ..engine.star import StarSchema
from ..errors import AuditError, ConfigError, DataError
from ..model.job import Identifier, Output
from ..model.progress import Phases, Progress, silent
from .identifiers import Pseudonyms
from .ledger import NewRelease, ReleaseLedger, Repairable, refuse_held_values
from .methods import PublicationMethod
from .ownership import Ownership, TableName
from .staging import Destination, staged_table


def check_output(
    db: Database, conn: Connection, ownership: Ownership, output: Output, source: TableName, replace: bool
) -> TableName:
    """Before any search: the output can be written (and granted) as configured; returns its resolved name."""
    if output.grant_to and not db.roles:
        raise ConfigError("output.grant_to needs PostgreSQL (DuckDB has no roles); remove it for a DuckDB file")
    for role in output.grant_to:
        if not db.role_exists(conn, role):
            raise DataError(
                f"output.grant_to: role {role!r} does not exist; create it (CREATE ROLE ...) or remove it from the list"
            )
    target = ownership.resolve(conn, output.schema, output.table, "output table")
    ownership.check_target(conn, target, replace, "output table", source)
    return target


class Generalization(PublicationMethod):
    """Full-domain generalization (the default): the search's chosen node, every QI at its level, with
    suppression as the job says; needs a hierarchy (or a generator) and criteria, which the job's own checks
    require."""

    name = "generalize"
    counts_persons = True


@dataclass(kw_only=True, frozen=True)
class Publication:
    """What to write: the chosen node, where, how suppressed tuples leave, and what becomes of identifiers."""

    node: tuple[int, ...]
    output: Output
    target: TableName
    source: TableName
    mode: str = "remove"  # suppression: remove the tuples, or mask every QI to its top
    max_suppressed: int = 0
    replace: bool = False
    identifying: tuple[Identifier, ...] = ()
    published_as_is: tuple[str, ...] = ()  # sensitive and insensitive columns
    unit: str | None = None  # the identifier naming each row's person, published as a pseudonym (job.unit_column)
    pseudonyms: Pseudonyms = field(default_factory=Pseudonyms, repr=False)


def publish_generalization(
    db: Database,
    conn: Connection,
    star: StarSchema,
    plan: Publication,
    criteria: list[Criterion],
    run_id: int,
    ownership: Ownership,
    progress: Progress = silent,
    ledger: ReleaseLedger | None = None,
    beside: Callable[[], None] | None = None,
) -> AuditReport:
    """Create the generalized table for the plan's node and commit it only if the audit passes (and, with a
    `ledger`, only if the release and the job's earlier ones together disclose nothing); `beside` writes the
    method's companion table in the same transaction, after the table's audit."""
    if ledger is not None and star.persons is not None:
        refuse_held_values(star.persons)
    phases = Phases(progress, "publish", 5 + (ledger is not None))
    phases.step("starting")  # the last point where a cancel stops the run before anything is written
    suppressing = plan.max_suppressed > 0 and any(level < d.height for d, level in zip(star.dimensions, plan.node))
    params: dict[str, object] = {}
    violating = generalize_sql.violating_classes(db, conn, star, plan.node, criteria, params) if suppressing else None
    if conn.in_transaction():
        conn.commit()
    destination = Destination(name=plan.target, source=plan.source, replace=plan.replace, grant_to=plan.output.grant_to)
    # hash joins: the rows are the table joined with its dimensions, less the violating classes (an anti-join on
    # every QI's class); on a table never analyzed PostgreSQL guessed one row for both and nested loops over them
    # (a 20k-row survey shape, 7 QIs: 198 s instead of under a second)
    with (
        conn.begin(),
        plan.pseudonyms.loaded(db, conn),
        db.hash_joins(conn),
        _with_persons_pseudonyms(db, conn, star, plan, run_id) as star,
    ):
        phases.step("writing the table")
        select, published = _select_list(db, star, plan, suppressing and plan.mode == "mask")
        rows = generalize_sql.generalized_rows(star, plan.node, select, violating, plan.mode == "remove")
        with staged_table(
            db, conn, destination=destination, select=rows, params=params, ownership=ownership, run_id=run_id
        ) as staged:
            written = staged.ref
            phases.step("checking its columns and values")
            check_published_columns(db, conn, written, str(plan.target), published)
            qis = {db.name_key(d.column) for d in star.dimensions}
            check_published_values(
                db,
                conn,
                written,
                str(plan.target),
                star.published_rows,
                _as_published(db, star, plan, [c for c in published if db.name_key(c) not in qis]),
                every_row=not suppressing or plan.mode == "mask",
            )
            qi_columns = [d.column for d in star.dimensions]
            masked_top = (
                {d.column: list(d.shape.top_labels) for d in star.dimensions}
                if suppressing and plan.mode == "mask"
                else None
            )
            # the values of every person, released or not: the source's rows where the persons' table holds sets
            holders = bool(star.held)  # of a column the criteria read
            whole = star.persons.source if star.persons and holders else star.source
            reference = whole if suppressing and plan.mode == "remove" else None
            phases.step("auditing")
            classes = PublishedClasses(
                qi_columns=qi_columns,
                sensitive=star.sensitive,
                criteria=criteria,
                masked_top=masked_top,
                reference=reference,
                unit=plan.unit,
                holders=holders,
                population=generalize_sql.published_population(db, conn, star, plan.node)
                if star.population is not None and any(c.reads_population for c in criteria)
                else None,
            )
            report = classes.audit(db, conn, written)
            _check_audit(report, star.rows, plan)
            if ledger is not None:  # before the rows are counted: a repair (ledger.suppress) removes some
                phases.step("checking the earlier releases")
                release = NewRelease(method=Generalization.name, table=plan.target, node=plan.node)
                admitted = ledger.admit(conn, release, plan.pseudonyms, repairable=Repairable(written, classes))
                report = admitted.audit or report
            # the audit counted persons where a unit names them; the ledger of outputs records rows
            staged.audited(report.rows if plan.unit is None else db.count_rows(conn, written))
        if beside is not None:
            beside()
        phases.step("committing")  # the last report: after the commit, a cancel (inserver) must not be raised
    return report


def _select_list(db: Database, star: StarSchema, plan: Publication, masking: bool) -> tuple[list[str], list[str]]:
    """The published columns in source order, and their names: QIs as their label at the node's level
    (the top label for masked tuples), identifiers removed or pseudonymized, the rest as they are."""
    dims = {db.name_key(d.column): (d, level) for d, level in zip(star.dimensions, plan.node)}
    as_is = {db.name_key(c) for c in plan.published_as_is} | set(dims)
    select, published = [], []
    for column in star.source_columns:
        key = db.name_key(column)
        if key not in as_is and not any(db.same_name(i.column, column) for i in plan.identifying):
            # check_columns refuses this before any search; never publish a column without a role
            raise AuditError(f"column {column!r} of the source has no role in the job; nothing was written")
        value = _published_value(db, star, plan, column)
        if value is None:
            continue
        if key in dims:
            value = generalize_sql.generalized_value(db, column, *dims[key], masking)
        select.append(f"{value} AS {db.q(column)}")
        published.append(column)
    return select, published


@contextmanager
def _with_persons_pseudonyms(
    db: Database, conn: Connection, star: StarSchema, plan: Publication, run_id: int
) -> Iterator[StarSchema]:
    """Within: the star schema whose published rows carry each person's pseudonym, computed once per person, and
    their common ancestors where their rows disagree (see Persons.pseudonymized_rows), where a unit names them;
    else `star` itself."""
    persons, unit = star.persons, plan.unit
    if persons is None:
        yield star
        return
    assert unit is not None, "a star schema counts persons for a plan by persons (steps.publish_node_of_run)"
    pseudonym = plan.pseudonyms.sql_of(db, plan.identifying, unit)
    with persons.pseudonymized_rows(db, conn, star.source_columns, pseudonym, f"pseudonyms_{run_id}") as rows:
        yield dataclasses.replace(star, persons=dataclasses.replace(persons, rows=rows))


def _published_value(db: Database, star: StarSchema, plan: Publication, column: str) -> str | None:
    """How a column of the published rows (alias t) is written, before any generalization: None for a dropped
    identifier, a pseudonym for a pseudonymized one (the unit's already is, see `_with_persons_pseudonyms`), else
    the value itself."""
    value = f"t.{db.q(column)}"
    if star.persons is not None and plan.unit is not None and db.same_name(column, plan.unit):
        return value
    return plan.pseudonyms.select(db, plan.identifying, column, value)


def _as_published(db: Database, star: StarSchema, plan: Publication, columns: list[str]) -> list[tuple[str, str]]:
    """Each of the published `columns` with its value computed from the published rows (`_published_value`): what
    `audit.check_published_values` compares."""
    values = [(column, _published_value(db, star, plan, column)) for column in columns]
    return [(column, value) for column, value in values if value is not None]


def unchanged_columns(
    db: Database, pseudonyms: Pseudonyms, identifying: tuple[Identifier, ...] | list[Identifier], published: list[str]
) -> list[tuple[str, str]]:
    """Published columns that are the source's as they are or as pseudonyms, each with its value computed from the
    source (alias t): what `audit.check_published_values` compares."""
    found = []
    for column in published:
        value = pseudonyms.select(db, identifying, column, f"t.{db.q(column)}")
        if value is not None:
            found.append((column, value))
    return found


def _check_audit(report: AuditReport, source_rows: int, plan: Publication) -> None:
    """Every criterion holds on the released classes, and no more tuples than the limit are gone or masked."""
    if report.suppressed is None:  # removed (or none): the audit sees what is missing
        report.suppressed = source_rows - report.rows
    report.max_suppressed = plan.max_suppressed
    released = report.rows - (report.suppressed if plan.mode == "mask" else 0)
    if released <= 0:
        raise AuditError(
            f"the chosen node suppresses every one of the {source_rows} rows, so the output would "
            "release nothing; lower suppression.limit or relax the criteria; nothing was written"
        )
    failed = [name for name, ok in report.holds.items() if not ok]  # criterion names
    rows_ok = report.rows == source_rows if plan.mode == "mask" else report.rows <= source_rows
    if failed or not report.suppression_ok or not rows_ok or report.split_persons:
        problem = (
            f"failing: {', '.join(failed)}"
            if failed
            else f"{report.split_persons} person(s) in more than one class"
            if report.split_persons
            else f"{report.suppressed} tuples suppressed, the limit is {plan.max_suppressed}"
        )
        raise AuditError(
            f"the anonymized table failed its audit ({report.rows} of {source_rows} rows, "
            f"{problem}); nothing was written"
        )
