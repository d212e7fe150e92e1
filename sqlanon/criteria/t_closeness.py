"""t-closeness (Li, Li and Venkatasubramanian): the distance of each class's sensitive distribution to the
table's, by one of four measures (equal and hierarchical EMD, variational, KL; ordered EMD for numbers)."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..model.hierarchies import Hierarchy, read_hierarchy_file
from .base import EPSILON, Criterion, number, spec_of, values_of
from .view import FrequencySetView, SqlFragment, share, unnested


class TCloseness(Criterion):
    """Distance between each class's sensitive distribution and the whole table's at most t."""

    name = "t_closeness"
    file_keys = ("hierarchy",)
    reads_distribution = True
    figure_name = "max_t"
    figure_sql = "MAX(stat)"
    DISTANCES = ("equal", "ordered", "hierarchical", "kl")

    def __init__(
        self,
        *,
        attribute: str,
        t: float,
        distance: str = "equal",
        hierarchy: Path | str | None = None,
        order: list[str] | None = None,
    ):
        """`hierarchy`: the hierarchical distance's tree, or the order of a categorical attribute's values for the
        ordered distance (its leaves, in the file's order); `order`: that order as a list."""
        self.attribute = attribute
        self.t = number(self.name, "t", t, minimum=0, maximum=1)
        if distance not in self.DISTANCES:
            raise ConfigError(
                f"{self.name}: distance {distance!r} is unknown; choose one of {', '.join(self.DISTANCES)}"
            )
        ordered_by = distance == "ordered" and (hierarchy is not None or order is not None)
        if (hierarchy is None) == (distance == "hierarchical") and not ordered_by:
            raise ConfigError(
                f"{self.name}: hierarchy: FILE goes with distance: hierarchical (or ordered, for the order of its "
                "leaves), and only with them"
            )
        if order is not None and (distance != "ordered" or hierarchy is not None):
            raise ConfigError(f"{self.name}: order: [values] goes with distance: ordered, without a hierarchy")
        self.distance = distance
        self.hierarchy_path = Path(hierarchy) if hierarchy is not None else None
        self.hierarchy = read_hierarchy_file(attribute, self.hierarchy_path) if self.hierarchy_path else None
        self.order = self._order(order)
        self.reads_table_counts = distance != "ordered"

    def _order(self, order: list[str] | None) -> list[str] | None:
        """The values of a categorical attribute in the order the ordered distance reads them, if given."""
        if self.distance != "ordered":
            return None
        if order is None:
            return [path[0] for path in self.hierarchy.paths] if self.hierarchy is not None else None
        values = values_of(self.name, "order", order)
        if len(set(values)) < len(values) or not values:
            raise ConfigError(f"{self.name}: order must list each value once")
        return values

    @classmethod
    def from_config(cls, spec: Any) -> TCloseness:
        return cls(**spec_of(cls.name, spec, {"attribute", "t"}, {"distance", "hierarchy", "order"}))

    def params(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"hierarchy": str(self.hierarchy_path)} if self.hierarchy_path else {}
        if self.order is not None and self.hierarchy_path is None:
            extra["order"] = self.order
        return {"attribute": self.attribute, "t": self.t, "distance": self.distance, **extra}

    def covered_values(self) -> dict[str, Hierarchy]:
        if self.hierarchy is not None:
            return {self.attribute: self.hierarchy}
        if self.order is not None:  # every value must have its place in the order
            paths = tuple((value, "*") for value in self.order)
            return {self.attribute: Hierarchy(column=self.attribute, paths=paths, origin=f"{self.name} order")}
        return {}

    def guarantee(self) -> str:
        return (
            f"in every group the distribution of {self.attribute} is within {self.t} ({self.distance} distance) of "
            "the whole table's: a person's group tells little more about it than the table does"
        )

    def sensitive_attributes(self) -> list[str]:
        return [self.attribute]

    def reads_values(self) -> set[str]:
        return {self.attribute} if self.distance == "ordered" else set()

    def check_domain(self, attribute: str, distinct_values: int, numeric: bool) -> None:
        if attribute != self.attribute or self.distance != "ordered":
            return
        if not numeric and self.order is None:
            raise ConfigError(
                f"{self.name}: the ordered distance needs the order of {attribute!r}'s values, which are not "
                "numbers: give order: [values, ...] or hierarchy: FILE (its leaves' order), or use distance: equal"
            )
        if numeric and self.order is not None:
            raise ConfigError(
                f"{self.name}: {attribute!r} is numeric, and the ordered distance orders numbers by value; drop order "
                "(or hierarchy)"
            )

    def least_class_size(self, table_counts: dict[str, dict[str | None, int]]) -> int:
        """A class of n tuples holds at most n values, so the values it lacks carry at least 1 - top(n) of the
        table's distribution, top(n) being the n largest shares: the equal distance (half the L1 distance, where an
        absent value adds its share) is at least that; the hierarchical one at least that over the height H (every
        unit of mass moved between two values costs at least 1/H); KL divergence at least -ln top(n) (the log sum
        inequality over the values present). The least n whose bound stays within t (and the margin the check
        allows); the ordered distance is not bounded here."""
        counts = table_counts.get(self.attribute)
        if counts is None or self.distance == "ordered":
            return 1
        total = sum(counts.values())
        height = self.hierarchy.height if self.hierarchy is not None else 1
        for n, top in enumerate(itertools.accumulate(sorted((c / total for c in counts.values()), reverse=True)), 1):
            bound = -math.log(min(top, 1.0)) if self.distance == "kl" else (1 - top) / height
            if bound <= self.t + 2 * EPSILON:  # a float's last bits never make a class that holds fail here
                return n
        return len(counts)

    def violation(self) -> SqlFragment:
        return SqlFragment("stat > :tclose_t + :tclose_eps", {"tclose_t": float(self.t), "tclose_eps": EPSILON})

    def class_statistic(self, fs: FrequencySetView) -> SqlFragment:
        if self.distance == "ordered":
            params: dict[str, Any] = {}
            place = "s"
            if self.order is not None:  # each value's place in the order, compared as text
                params = {f"tord_{i}": value for i, value in enumerate(self.order)}
                whens = " ".join(f"WHEN :tord_{i} THEN {i}" for i in range(len(params)))
                place = f"CASE CAST(s AS VARCHAR) {whens} END"
            return SqlFragment(
                self._ordered(fs, fs.value_counts(self.attribute), fs.distribution(self.attribute), place), params
            )
        if self.distance == "hierarchical":
            return self._hierarchical(fs, fs.sized_counts(self.attribute), (fs.table_counts or {}).get(self.attribute))
        if self.distance == "kl":
            p = share("v.c", "v.n")
            distance = f"SUM(({p}) * LN(({p}) / q.q))"
        else:  # equal ground distance: half the L1 distance; values absent from the class contribute q
            distance = f"0.5 * (SUM(ABS({share('v.c', 'v.n')} - q.q)) + 1 - SUM(q.q))"
        return fs.against_table(self.attribute, f"{distance} AS stat", "tq_")

    def _hierarchical(self, fs: FrequencySetView, counts: str, known: dict[str | None, int] | None) -> SqlFragment:
        """The sum over internal nodes N of (level(N)/H) min(pos(N), |neg(N)|), where pos/neg add up the
        positive/negative extra(child) = P(child) - Q(child), the class's and the table's shares of its leaves.

        Computed from the nodes the class reaches alone: min(pos, |neg|) = (sum over children |extra| -
        |extra(N)|) / 2, and a node below the top is a child once and (unless a leaf) a parent once, so the
        distance is the sum over nodes of w(level) |extra|, w = 1/(2H) below the top level, -1/2 at the top. A
        node the class does not reach has |extra| = Q, and Q adds up to 1 per level: the sum over the nodes
        reached of w (|P - Q| - Q) is the distance. A single root, reached by every class, adds its 1/2 without
        being grouped (a third fewer rows to group for a hierarchy of three levels: on PostgreSQL, Adult's 8-QI
        search with 2% suppression 14.5-15.6 -> 13.0-13.6 s in three alternated runs).
        Hierarchy nodes are numbered (hn; not `node`, a wave's class column): `leaves` maps each leaf to the nodes
        above it (itself included, a single root left out), each with its w and Q (from the table's counts, bound as
        lists, where the caller read them; else from the distribution, in SQL), so that a class's counts meet them
        in one join (a second join for the weights took the same time on DuckDB and PostgreSQL).
        """
        value = "CAST(v.s AS VARCHAR)"
        if known is None:
            leaves, params = self._hierarchy_nodes(fs.distribution(self.attribute))
        else:
            leaves, params, value = self._hierarchy_lists(fs, known)
        cls = fs.class_columns
        cls_v, cls_r = ", ".join(f"v.{c}" for c in cls), ", ".join(f"r.{c}" for c in cls)
        reached = (
            f"SELECT {cls_v}, t.hn, MAX(t.w) AS w, MAX(t.q) AS q, MAX(v.n) AS n, SUM(v.c) AS c FROM "
            f"({counts}) v JOIN ({leaves}) t ON t.leaf = {value} GROUP BY {cls_v}, t.hn"
        )
        root = 0.5 if len(self._tree.top_labels) == 1 else 0.0
        distance = f"SUM(r.w * (ABS({share('r.c', 'r.n')} - r.q) - r.q))"
        return SqlFragment(
            f"SELECT {cls_r}, MAX(r.n) AS n, GREATEST({root!r} + {distance}, 0.0) AS stat FROM "
            f"({reached}) r GROUP BY {cls_r}",
            params,
        )

    @property
    def _tree(self) -> Hierarchy:
        """The hierarchy of the hierarchical distance (the only distance that has one)."""
        assert self.hierarchy is not None, "distance: hierarchical comes with its hierarchy"
        return self.hierarchy

    def _numbered_paths(self) -> list[tuple[str, int, int]]:
        """(leaf, hn, level) of every node above every leaf (the leaf's own included, a single root left out), each
        node (a level and a label) numbered from 1."""
        numbers: dict[tuple[int, str], int] = {}
        levels = self._tree.height + (len(self._tree.top_labels) > 1)
        return [
            (path[0], numbers.setdefault((level, path[level]), len(numbers) + 1), level)
            for path in self._tree.paths
            for level in range(levels)
        ]

    def _weight(self, level: int) -> float:
        return -0.5 if level == self._tree.height else 0.5 / self._tree.height

    def _hierarchy_nodes(self, table: str) -> tuple[str, dict[str, Any]]:
        """`_hierarchical`'s leaves (leaf, hn, w, q) as a SELECT, q from `table` (the distribution), and its
        parameters (the leaves' names)."""
        paths = self._numbered_paths()
        names = {leaf: f"thv{i}" for i, leaf in enumerate(dict.fromkeys(leaf for leaf, _, _ in paths))}
        rows = ", ".join(f"(:{names[leaf]}, {node}, {self._weight(level)!r})" for leaf, node, level in paths)
        values = f"(VALUES {rows}) AS t(leaf, hn, w)"
        shares = (
            f"SELECT t.hn, SUM(d.q) AS q FROM {values} LEFT JOIN ({table}) d ON CAST(d.s AS VARCHAR) = t.leaf "
            "GROUP BY t.hn"
        )
        return (
            f"SELECT t.leaf, t.hn, t.w, x.q FROM {values} JOIN ({shares}) x ON x.hn = t.hn",
            {n: leaf for leaf, n in names.items()},
        )

    def _hierarchy_lists(self, fs: FrequencySetView, counts: dict[str | None, int]) -> tuple[str, dict[str, Any], str]:
        """`_hierarchy_nodes`, computed here from the table's `counts` of each value, bound as lists, and the
        expression of a class's value that equals its leaf (FrequencySetView.value_keys). A DuckDB wave over
        Adult's cube (occupation) took 12.8 ms with a VALUES list and a window adding up the shares, 9.0 ms with
        lists (12.1 ms with a VALUES list of the same numbers)."""
        paths, total = self._numbered_paths(), sum(counts.values()) or 1
        shares: dict[int, float] = {}  # not `share`: the module's SQL helper
        for leaf, node, _ in paths:
            shares[node] = shares.get(node, 0.0) + counts.get(leaf, 0) / total
        sql_type, leaves, value = fs.value_keys(self.attribute, [leaf for leaf, _, _ in paths])
        select, params = unnested(
            {
                "leaf": (sql_type, leaves),
                "hn": ("INTEGER", [node for _, node, _ in paths]),
                "w": ("DOUBLE PRECISION", [self._weight(level) for _, _, level in paths]),
                "q": ("DOUBLE PRECISION", [shares[node] for _, node, _ in paths]),
            },
            "thl_",
        )
        return select, params, value

    @staticmethod
    def _ordered(fs: FrequencySetView, counts: str, table: str, place: str = "s") -> str:
        """(1/(m-1)) sum_i |sum_{j<=i} (p_j - q_j)| over the table's m values in ascending order.

        One running sum per class over the table's values (q, from the classes crossed with the values) and the
        class's own counts (p), each own count ahead of its value's row, which reads the sum. No join matches
        the counts with the values: a join on IS NOT DISTINCT FROM (values may be NULL) is a nested loop of
        every class with every other on PostgreSQL. Values in the order of `place`, an expression of a value s
        (s itself for numbers; for a categorical attribute, its place in the order the job gives)."""
        cls = fs.classes
        every = (
            f"SELECT {cls}, n, d.s, d.q, 0 AS c, 1 AS at_value FROM (SELECT DISTINCT {cls}, n FROM ({counts}) c) g "
            f"CROSS JOIN ({table}) d"
        )
        own = f"SELECT {cls}, n, s, 0 AS q, c, 0 AS at_value FROM ({counts}) v"
        cumulative = (
            f"SELECT {cls}, n, at_value, SUM({share('c', 'n')} - q) OVER (PARTITION BY {cls} ORDER BY {place}, "
            f"at_value ROWS UNBOUNDED PRECEDING) AS cum FROM ({every} UNION ALL {own}) x"
        )
        return (
            f"SELECT {cls}, MAX(n) AS n, SUM(CASE WHEN at_value = 1 THEN ABS(cum) ELSE 0 END) / "
            f"GREATEST((SELECT COUNT(*) - 1 FROM ({table}) m), 1) AS stat FROM ({cumulative}) w GROUP BY {cls}"
        )
