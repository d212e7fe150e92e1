"""Independent audit of a published table.

The audit never uses frequency sets, dimension tables or lattice state: it
groups the table itself by its (generalized) QI and sensitive columns, and
applies each criterion's per-class statistic to that. Materialization runs it
on the output before committing, so a bug upstream cannot publish a table
that breaks the criteria; `sqlanon audit` runs it on any table.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection

from .backends import Database
from .criteria import Criterion, FrequencySetView
from .frequency import count_violations_batch


@dataclass
class CriterionAudit:
    params: dict[str, Any]
    figure_name: str
    figure: float | None
    holds: bool
    violating_classes: int
    violating_tuples: int

    def to_dict(self) -> dict[str, Any]:
        return {**self.params, self.figure_name: self.figure, "holds": self.holds,
                "violating_classes": self.violating_classes, "violating_tuples": self.violating_tuples}


@dataclass
class AuditReport:
    rows: int
    classes: int
    min_class_size: int
    criteria: dict[str, CriterionAudit] = field(default_factory=dict)

    @property
    def holds(self) -> dict[str, bool]:
        return {name: c.holds for name, c in self.criteria.items()}

    @property
    def ok(self) -> bool:
        return all(self.holds.values())

    def to_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "classes": self.classes, "min_class_size": self.min_class_size,
                **{name: c.to_dict() for name, c in self.criteria.items()}}


def audit_table(db: Database, conn: Connection, table_ref: str, qi_columns: list[str], sensitive: list[str],
                criteria: list[Criterion]) -> AuditReport:
    """Class figures of a table and, per criterion, its worst class and whether it holds."""
    group = ", ".join(db.q(c) for c in qi_columns)
    class_sizes = f"SELECT COUNT(*) AS n FROM {table_ref} GROUP BY {group}"
    rows, classes, smallest = conn.execute(text(
        f"SELECT COALESCE(SUM(n), 0), COUNT(*), COALESCE(MIN(n), 0) FROM ({class_sizes}) AS classes")).one()
    select = [f"{db.q(c)} AS g{i}" for i, c in enumerate(qi_columns)]
    select += [f"{db.q(c)} AS s{j}" for j, c in enumerate(sensitive)]
    grouping = [db.q(c) for c in qi_columns + sensitive]
    view = FrequencySetView("published", [f"g{i}" for i in range(len(qi_columns))], "cnt",
                            {c: f"s{j}" for j, c in enumerate(sensitive)},
                            f"SELECT {', '.join(select)}, COUNT(*) AS cnt FROM {table_ref} GROUP BY {', '.join(grouping)}")
    [(_, violations)] = count_violations_batch(conn, [view], [[c] for c in criteria])
    report = AuditReport(int(rows), int(classes), int(smallest))
    for criterion, (bad_classes, bad_tuples) in zip(criteria, violations):
        figure = criterion.audit_figure(view)
        value = conn.execute(text(f"WITH {view.table} AS ({view.definition}) {figure.sql}"), figure.params).scalar()
        report.criteria[criterion.name] = CriterionAudit(
            criterion.params(), criterion.figure_name, None if value is None else float(value),
            bad_classes == 0, int(bad_classes), int(bad_tuples))
    return report
