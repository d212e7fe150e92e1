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
from .criteria import Criterion, FrequencySetView
from .frequency import count_violations_batch


@dataclass
class AuditReport:
    rows: int
    classes: int
    min_class_size: int
    holds: dict[str, bool]

    @property
    def ok(self) -> bool:
        return all(self.holds.values())


def audit_table(db: Database, conn: Connection, table_ref: str, qi_columns: list[str], sensitive: list[str],
                criteria: list[Criterion]) -> AuditReport:
    """Class figures of a table and, per criterion, whether it holds (grouping the table itself)."""
    group = ", ".join(db.q(c) for c in qi_columns)
    class_sizes = f"SELECT COUNT(*) AS n FROM {table_ref} GROUP BY {group}"
    rows, classes, smallest = conn.execute(text(
        f"SELECT COALESCE(SUM(n), 0), COUNT(*), COALESCE(MIN(n), 0) FROM ({class_sizes}) AS classes")).one()
    select = [f"{db.q(c)} AS g{i}" for i, c in enumerate(qi_columns)]
    select += [f"{db.q(c)} AS s{j}" for j, c in enumerate(sensitive)]
    grouping = [db.q(c) for c in qi_columns + sensitive]
    view = FrequencySetView("published_classes", [f"g{i}" for i in range(len(qi_columns))], "cnt",
                            {c: f"s{j}" for j, c in enumerate(sensitive)},
                            f"SELECT {', '.join(select)}, COUNT(*) AS cnt FROM {table_ref} GROUP BY {', '.join(grouping)}")
    [(_, per_criterion)] = count_violations_batch(conn, [view], [[c] for c in criteria])
    holds = {c.describe(): violating == 0 for c, (violating, _) in zip(criteria, per_criterion)}
    return AuditReport(int(rows), int(classes), int(smallest), holds)
