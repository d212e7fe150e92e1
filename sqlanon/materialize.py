"""Writing the anonymized table: one transaction, audited before it commits.

The generalized table is created under a temporary name, re-checked by the
independent audit, and only then renamed to the output name (replacing an
existing table only when asked). Any failure rolls everything back: the
output either appears whole or not at all, and the source is only read.
"""
from __future__ import annotations

from sqlalchemy.engine import Connection

from .audit import AuditReport, audit_table
from .backends import Database
from .config import Output
from .criteria import Criterion
from .dimensions import StarSchema
from .errors import AuditError, DataError


def choose_node(minimal: list[tuple[int, ...]]) -> tuple[int, ...]:
    """The node to publish: lowest height; among equals the smallest level vector in config
    order, so the QIs listed first stay the most precise."""
    if not minimal:
        raise DataError("no generalization satisfies the criteria; relax them (e.g. a smaller k)")
    return min(minimal, key=lambda node: (sum(node), node))


def check_output_free(db: Database, conn: Connection, output: Output, replace: bool) -> None:
    if not replace and db.table_exists(conn, output.schema, output.table):
        raise DataError(f"output table {output.table!r} already exists; choose another output.table "
                        "or pass --replace to overwrite it")


def materialize(db: Database, conn: Connection, star: StarSchema, node: tuple[int, ...], output: Output,
                criteria: list[Criterion], run_id: int, replace: bool) -> AuditReport:
    """Create the generalized table for `node` and commit it only if the audit passes."""
    by_column = {d.column: (d, level) for d, level in zip(star.dimensions, node)}
    select, joins = [], []
    for column in star.source_columns:
        dim, level = by_column.get(column, (None, 0))
        if dim is None or level == 0:
            select.append(f"t.{db.q(column)}")
        else:
            select.append(f"d{dim.attr}.l{level} AS {db.q(column)}")
            joins.append(f"JOIN {dim.table} d{dim.attr} ON {dim.key(db, 't')} = d{dim.attr}.v")
    tmp = db.q(output.schema, f"sqlanon_tmp_{run_id}")
    final = db.q(output.schema, output.table)
    if conn.in_transaction():
        conn.commit()
    with conn.begin():
        db.drop_table(conn, tmp)
        conn.exec_driver_sql(f"CREATE TABLE {tmp} AS SELECT {', '.join(select)} FROM {star.source} t {' '.join(joins)}")
        report = audit_table(db, conn, tmp, [d.column for d in star.dimensions], star.sensitive, criteria)
        if report.rows != star.rows or not report.ok:
            failed = [name for name, ok in report.holds.items() if not ok]  # criterion names
            raise AuditError(f"the anonymized table failed its audit ({report.rows} of {star.rows} rows, "
                             f"failing: {', '.join(failed) or 'row count'}); nothing was written")
        check_output_free(db, conn, output, replace)
        db.drop_table(conn, final)
        conn.exec_driver_sql(f"ALTER TABLE {tmp} RENAME TO {db.q(output.table)}")
    return report
