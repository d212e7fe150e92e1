"""Writing the anonymized table: one transaction, audited before it commits.

The generalized table is created under a temporary name, re-checked by the
independent audit, and only then renamed to the output name (replacing an
existing table only when asked). Any failure rolls everything back: the
output either appears whole or not at all, and the source is only read.
"""
from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.engine import Connection

from .audit import AuditReport, audit_table
from .backends import Database
from .config import Output
from .criteria import Criterion, FrequencySetView
from .dimensions import StarSchema
from .errors import AuditError, ConfigError, DataError
from .frequency import violating_classes_sql


def check_output_free(db: Database, conn: Connection, output: Output, replace: bool) -> None:
    """Before any search: the output can be written (and granted) as configured."""
    if output.grant_to and db.kind != "postgresql":
        raise ConfigError("output.grant_to needs PostgreSQL (DuckDB has no roles); remove it for a DuckDB file")
    if not replace and db.table_exists(conn, output.schema, output.table):
        raise DataError(f"output table {output.table!r} already exists; choose another output.table "
                        "or pass --replace to overwrite it")


@dataclass(frozen=True)
class Publication:
    """What to write: the chosen node, where, and how suppressed tuples leave the output."""

    node: tuple[int, ...]
    output: Output
    mode: str = "remove"  # suppression: remove the tuples, or mask every QI to its top
    max_suppressed: int = 0
    replace: bool = False


def materialize(db: Database, conn: Connection, star: StarSchema, plan: Publication, criteria: list[Criterion],
                run_id: int) -> AuditReport:
    """Create the generalized table for the plan's node and commit it only if the audit passes."""
    suppressing = plan.max_suppressed > 0 and any(level < d.height for d, level in zip(star.dimensions, plan.node))
    params: dict[str, object] = {}
    with_clause, flagged = _violating_classes(db, star, plan.node, criteria, params) if suppressing else ("", "")
    tmp = db.q(plan.output.schema, f"sqlanon_tmp_{run_id}")
    final = db.q(plan.output.schema, plan.output.table)
    if conn.in_transaction():
        conn.commit()
    with conn.begin():
        db.drop_table(conn, tmp)
        select = _select_list(db, star, plan.node, masking=suppressing and plan.mode == "mask")
        joins = star.joins("t") + flagged
        where = " WHERE b.n IS NULL" if suppressing and plan.mode == "remove" else ""
        create = f"CREATE TABLE {tmp} AS {with_clause}SELECT {', '.join(select)} FROM {joins}{where}"
        if params:  # the criteria's bound values
            conn.execute(text(create), params)
        else:
            conn.exec_driver_sql(create)
        qi_columns = [d.column for d in star.dimensions]
        masked_top = {d.column: d.hierarchy.top_labels for d in star.dimensions} \
            if suppressing and plan.mode == "mask" else None
        reference = star.source if suppressing and plan.mode == "remove" else None
        report = audit_table(db, conn, tmp, qi_columns, star.sensitive, criteria, masked_top, reference)
        _check_audit(report, star.rows, plan)
        check_output_free(db, conn, plan.output, plan.replace)
        db.drop_table(conn, final)
        conn.exec_driver_sql(f"ALTER TABLE {tmp} RENAME TO {db.q(plan.output.table)}")
        for role in plan.output.grant_to:  # in the same transaction: readers see the table once it exists
            conn.exec_driver_sql(f"GRANT SELECT ON {final} TO {db.q(role)}")
    return report


def _select_list(db: Database, star: StarSchema, node: tuple[int, ...], masking: bool) -> list[str]:
    """Every source column: QIs as their label at the node's level (the top label for masked tuples)."""
    by_column = {d.column: (d, level) for d, level in zip(star.dimensions, node)}
    select = []
    for column in star.source_columns:
        dim, level = by_column.get(column, (None, 0))
        if dim is None or (level == 0 and not masking):
            select.append(f"t.{db.q(column)}")
            continue
        value = f"d{dim.attr}.l{level}" if level > 0 else f"CAST(t.{db.q(column)} AS VARCHAR)"
        if masking:
            value = f"CASE WHEN b.n IS NULL THEN {value} ELSE d{dim.attr}.l{dim.height} END"
        select.append(f"{value} AS {db.q(column)}")
    return select


def _violating_classes(db: Database, star: StarSchema, node: tuple[int, ...], criteria: list[Criterion],
                       params: dict[str, object]) -> tuple[str, str]:
    """A WITH clause naming the node's violating classes `bad`, and the LEFT JOIN that flags their tuples."""
    codes = [f"d{d.attr}.c{level}" for d, level in zip(star.dimensions, node)]
    select = [f"{code} AS a{i}" for i, code in enumerate(codes)] + star.sensitive_select("t")
    group = codes + [f"t.{db.q(c)}" for c in star.sensitive]
    view = FrequencySetView("node_classes", [f"a{i}" for i in range(len(codes))], "cnt", star.sensitive_columns())
    bad = violating_classes_sql(view, criteria, "pub", params)
    with_clause = (f"WITH node_classes AS (SELECT {', '.join(select)}, COUNT(*) AS cnt FROM {star.joins('t')} "
                   f"GROUP BY {', '.join(group)}), bad AS ({bad}) ")
    on = " AND ".join(f"b.a{i} = {code}" for i, code in enumerate(codes))
    return with_clause, f" LEFT JOIN bad b ON {on}"


def _check_audit(report: AuditReport, source_rows: int, plan: Publication) -> None:
    """Every criterion holds on the released classes, and no more tuples than the limit are gone or masked."""
    if report.suppressed is None:  # removed (or none): the audit sees what is missing
        report.suppressed = source_rows - report.rows
    report.max_suppressed = plan.max_suppressed
    failed = [name for name, ok in report.holds.items() if not ok]  # criterion names
    rows_ok = report.rows == source_rows if plan.mode == "mask" else report.rows <= source_rows
    if failed or not report.suppression_ok or not rows_ok:
        problem = f"failing: {', '.join(failed)}" if failed else \
            f"{report.suppressed} tuples suppressed, the limit is {plan.max_suppressed}"
        raise AuditError(f"the anonymized table failed its audit ({report.rows} of {source_rows} rows, "
                         f"{problem}); nothing was written")
