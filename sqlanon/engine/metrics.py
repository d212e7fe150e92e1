"""Utility metrics of lattice nodes, and choosing the node to publish.

Every data-dependent figure is computed in SQL from the node's frequency set
(grouped from the level-0 frequency set when several nodes are asked for), several nodes per statement:
which classes the criteria make us suppress, how many classes stay, the sum of
squared class sizes, and the two sums KL divergence needs. Python only does
arithmetic on those few numbers and on the levels.

KL divergence under the uniformity assumption: a released tuple's mass is
spread evenly over the original QI values its generalized values cover (the
hierarchy leaves below them, "area"), with its sensitive values kept; a
suppressed tuple counts as generalized to the top of every hierarchy. For
original cells x with counts c_x, released cells (class g, sensitive s) with
counts C_gs and suppressed tuples S_s per sensitive value, over n rows:

    n * KL = sum_x c_x ln c_x - sum_gs C_gs (ln C_gs - ln area(g)) - sum_s S_s (ln S_s - ln area(top))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection

from ..criteria import Criterion, KAnonymity
from ..criteria.view import FrequencySetView
from ..model.lattice import Levels
from ..model.selection import level_metrics
from .frequency import BATCH, COUNT, cube_set, node_frequency_set, node_set_view, violating_classes_sql
from .star import StarSchema


def sum_c_ln_c(count: str) -> str:
    """SQL: the sum of c ln c over a column of counts (0 for no rows), the entropy term KL divergence needs."""
    return f"COALESCE(SUM({count} * LN(CAST({count} AS DOUBLE PRECISION))), 0)"


SPARSE_BATCH = 8  # nodes per statement where CTEs are not materialized (see evaluate)


class MetricsEvaluator:
    """Computes the metrics of any nodes of one run from their frequency sets over `star` (which carries every
    sensitive attribute KL divergence reads)."""

    def __init__(
        self,
        *,
        conn: Connection,
        star: StarSchema,
        criteria: list[Criterion],
        cube: bool = True,
        cells_term: float | None = None,
    ):
        """`cube`: store the level-0 frequency set once and group every node from it (worth it for several nodes;
        for one, a scan of the table grouped at its levels is one statement less). `cells_term`: the level-0 cells'
        sum of c ln c, when known (a search's cube computes it)."""
        self.conn, self.star, self.criteria = conn, star, criteria
        self.db, self.heights, self.rows = star.db, star.heights, star.rows
        self.use_cube = cube
        self._cube: str | None = None
        ks = [c.k for c in criteria if isinstance(c, KAnonymity)]
        self.k = max(ks) if ks else None
        self._cells_term = cells_term
        self._ln_top: float | None = None

    def close(self) -> None:
        if self._cube is not None:
            self.db.drop_table(self.conn, self._cube)
            self._cube = None

    def _frequency_set(self, node: Levels) -> str:
        """The node's frequency set (a SELECT), from the stored level-0 set where the evaluator keeps one."""
        if self.use_cube and self._cube is None:
            self._cube = self.db.create_scratch(self.conn, "metrics_cube", cube_set(self.star))
        return node_frequency_set(self.star, node, self._cube)

    def evaluate(
        self, nodes: list[Levels], progress: Callable[[int, int], None] = lambda done, total: None
    ) -> dict[Levels, dict[str, Any]]:
        found: dict[Levels, dict[str, Any]] = {}
        # without materialized CTEs every node is stored first, and one statement reads a few nodes' sets: Spark
        # plans a UNION ALL of many subqueries slowly (57 nodes in one statement: 344 s on Adult)
        batch = BATCH if self.db.materialized_ctes else SPARSE_BATCH
        for start in range(0, len(nodes), batch):
            chunk = nodes[start : start + batch]
            for node, sums in zip(chunk, self._sums(chunk)):
                found[node] = self._figures(node, *sums)
            progress(len(found), len(nodes))
        return found

    # --- SQL ------------------------------------------------------------------
    def _sums(self, nodes: list[Levels]) -> list[tuple[Any, ...]]:
        """Per node: classes released, suppressed tuples, sum n^2 released, and the two KL sums."""
        ctes, selects, stored = list[str](), list[str](), list[str]()
        params: dict[str, Any] = {}
        for j, node in enumerate(nodes):
            view = self._view(j)
            on = " AND ".join(f"cs.{c} = b.{c}" for c in view.class_columns)
            flags = (
                f"SELECT cs.*, CASE WHEN b.n IS NULL THEN 0 ELSE 1 END AS bad "
                f"FROM ({view.class_sizes()}) cs LEFT JOIN "
                f"({violating_classes_sql(view, self.criteria, f'm{j}', params)}) b ON {on}"
            )
            # each (class, sensitive value) row with its class's flag, joined once: the KL sums below read it alone,
            # where a join of the set with the flags beside the areas' joins was planned as nested loops on
            # PostgreSQL (its estimates of CTE rows are guesses: 50 s for 64 nodes of a 20k-row table)
            on = " AND ".join(f"v.{c} = f.{c}" for c in view.class_columns)
            marked = f"SELECT v.*, f.bad FROM {view.table} v JOIN flags_{j} f ON {on}"
            sets = [(view.table, self._frequency_set(node)), (f"flags_{j}", flags)]
            if self.db.materialized_ctes:
                ctes += [f"{name} AS MATERIALIZED ({select})" for name, select in sets + [(f"marked_{j}", marked)]]
                selects.append(self._node_select(node, j, f"marked_{j}"))
            else:  # each set is read several times below: stored once (under its name) rather than computed each
                # time; the marked rows, read twice, stay a join of the two rather than a third stored table
                stored += [self.db.create_scratch(self.conn, name, select, params) for name, select in sets]
                selects.append(self._node_select(node, j, f"({marked})"))
        with_clause = f"WITH {', '.join(ctes)} " if ctes else ""
        rows = self.conn.execute(text(with_clause + " UNION ALL ".join(selects)), params).all()
        for ref in stored:
            self.db.drop_table(self.conn, ref)
        by_index = {int(r[0]): r[1:] for r in rows}
        return [by_index[j] for j in range(len(nodes))]

    def _view(self, j: int) -> FrequencySetView:
        return node_set_view(self.star, f"metric_fs_{j}")

    def _node_select(self, node: Levels, j: int, marked: str) -> str:
        """The node's sums, from its flags (flags_<j>) and its (class, value) rows with their flags (`marked`: a
        table's name or a subquery)."""
        flags = f"flags_{j}"
        areas, ln_area = [], []
        for attr, level in enumerate(node):
            if level > 0:  # level 0 covers one original value: ln(area) = 0
                dim = self.star.dimensions[attr]
                areas.append(
                    f"JOIN (SELECT c{level} AS code, LN(CAST(COUNT(*) AS DOUBLE PRECISION)) AS la "
                    f"FROM {dim.table} GROUP BY c{level}) ar{attr} ON v.a{attr} = ar{attr}.code"
                )
                ln_area.append(f"ar{attr}.la")
        sensitive = [f"v.{s}" for s in self.star.sensitive_columns().values()]
        group = f"GROUP BY {', '.join(sensitive)}" if sensitive else ""
        area = " + ".join(ln_area) or "0"
        released = (
            f"SELECT COALESCE(SUM(v.cnt * (LN(CAST(v.cnt AS DOUBLE PRECISION)) - ({area}))), 0) "
            f"FROM {marked} v {' '.join(areas)} WHERE v.bad = 0"
        )
        suppressed = (
            f"SELECT {sum_c_ln_c('x.c')} FROM (SELECT SUM(v.cnt) AS c FROM {marked} v WHERE v.bad = 1 {group}) x"
        )
        return (
            f"SELECT {j} AS j, (SELECT COUNT(*) FROM {flags} WHERE bad = 0) AS classes, "
            f"(SELECT COALESCE(SUM(n), 0) FROM {flags} WHERE bad = 1) AS suppressed, "
            f"(SELECT COALESCE(SUM(CAST(n AS DOUBLE PRECISION) * n), 0) FROM {flags} WHERE bad = 0) AS squares, "
            f"({released}) AS kl_released, ({suppressed}) AS kl_suppressed"
        )

    def _cells(self) -> float:
        """sum over original cells (level 0 QIs, sensitive values) of c ln c (a scan of the table, unless the
        search's cube gave it), and ln(area of the top)."""
        if self._cells_term is None:
            zero = self._frequency_set(tuple([0] * len(self.heights)))
            cells = self._cube or f"({zero}) z"  # a stored cube's rows are the level-0 cells already
            self._cells_term = float(self.conn.execute(text(f"SELECT {sum_c_ln_c(COUNT)} FROM {cells}")).scalar_one())
        if self._ln_top is None:
            self._ln_top = sum(
                float(
                    self.conn.execute(
                        text(f"SELECT LN(CAST(COUNT(*) AS DOUBLE PRECISION)) FROM {d.table}")
                    ).scalar_one()
                )
                for d in self.star.dimensions
            )
        return self._cells_term

    # --- arithmetic -----------------------------------------------------------
    def _figures(
        self, node: Levels, classes: Any, suppressed: Any, squares: Any, kl_released: Any, kl_suppressed: Any
    ) -> dict[str, Any]:
        n, classes, suppressed = self.rows, int(classes), int(suppressed)
        released = n - suppressed
        average = released / classes if classes else None
        kl = (self._cells() - float(kl_released) - float(kl_suppressed) + suppressed * self._ln_top) / n
        return {
            **level_metrics(node, self.heights),
            "suppressed": suppressed,
            "completeness": released / n,
            "classes": classes,
            "avg_class_size": average,
            "c_avg": average / self.k if average is not None and self.k else None,
            "discernibility": round(float(squares)) + n * suppressed,
            "kl_divergence": max(kl, 0.0),  # clamp rounding noise around an exact 0
        }
