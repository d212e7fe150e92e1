"""Independent audit of a published table.

The audit never uses frequency sets, dimension tables or lattice state: it
groups the table itself by its (generalized) QI columns. Materialization runs
it on the output before committing, so a bug anywhere upstream cannot publish
a table that breaks the criteria.
"""
from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.engine import Connection

from .backends import Database
from .criteria import Criterion


@dataclass
class AuditReport:
    rows: int
    classes: int
    min_class_size: int
    holds: dict[str, bool]

    @property
    def ok(self) -> bool:
        return all(self.holds.values())


def audit_table(db: Database, conn: Connection, table_ref: str, qi_columns: list[str],
                criteria: list[Criterion]) -> AuditReport:
    group = ", ".join(db.q(c) for c in qi_columns)
    class_sizes = f"SELECT COUNT(*) AS n FROM {table_ref} GROUP BY {group}"
    rows, classes, smallest = conn.execute(text(
        f"SELECT COALESCE(SUM(n), 0), COUNT(*), COALESCE(MIN(n), 0) FROM ({class_sizes}) AS classes")).one()
    holds = {}
    for criterion in criteria:
        check = criterion.audit_check(class_sizes)
        holds[criterion.describe()] = bool(conn.execute(text(check.sql), check.params).scalar_one())
    return AuditReport(int(rows), int(classes), int(smallest), holds)
