"""Utility metrics of lattice nodes, and choosing the node to publish.

Every data-dependent figure is computed in SQL from the nodes' frequency sets, many nodes per statement: the
table is grouped once into a packed cube (engine.checker), and nodes go in batches through
engine.node_releases, which stores a batch's frequency sets and the classes the criteria make us suppress,
and sums per node how many classes stay, the squared class sizes and the two sums KL divergence needs.
Python only does arithmetic on those few numbers and on the levels.

KL divergence under the uniformity assumption: a released tuple's mass is
spread evenly over the original QI values its generalized values cover (the
hierarchy leaves below them, "area"), with its sensitive values kept; a
suppressed tuple counts as generalized to the top of every hierarchy. For
original cells x with counts c_x, released cells (class g, sensitive s) with
counts C_gs and suppressed tuples S_s per sensitive value, over n rows:

    n * KL = sum_x c_x ln c_x - sum_gs C_gs (ln C_gs - ln area(g)) - sum_s S_s (ln S_s - ln area(top))
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Any

from sqlalchemy.engine import Connection

from ..criteria import Criterion, KAnonymity
from ..model.lattice import Levels
from ..model.quality import (
    BOUNDED,
    BOUNDED_IF_SUPPRESSION_COSTS_MORE,
    QualitySettings,
    QualitySums,
    aecs_bound,
    classification_scale,
)
from ..model.quality import figures as quality_figures
from ..model.selection import level_metrics
from ..store.records import RunRecord
from .checker import WaveChecker
from .node_releases import ClassSums, MarginalTerms, NodeReleases, qi_target_positions
from .star import StarSchema

METRICS_CUBE = 3  # the metrics' cube among the run's (engine.checker's `part`)


class MetricsEvaluator:
    """Computes the metrics of any nodes of one run from their frequency sets over `star` (which carries every
    sensitive attribute KL divergence reads)."""

    def __init__(
        self,
        *,
        conn: Connection,
        star: StarSchema,
        criteria: list[Criterion],
        run: RunRecord,
        cube: bool = True,
        cells_term: float | None = None,
        checker: WaveChecker | None = None,
        quality: QualitySettings | None = None,
        marginal_terms: MarginalTerms | None = None,
    ):
        """`cube`: store the table's keyed rows (or grouped at level 0) once and read every node from it (worth it
        for one node too: its sets, the cells' term and the marginal terms read it; without, each of those
        statements scans the table joined with its dimensions). `cells_term`: the level-0 cells' sum of c
        ln c, and `marginal_terms` the table's sums per QI and level, when known (read from a cube of the table
        the run already has). `checker`: a cube of `star` already stored (a search's, see WaveChecker.carrying),
        which the evaluator reads instead, and drops. `quality`: the factor and aggregate function of ARX's quality
        models (default: ARX's)."""
        self.conn, self.star, self.criteria, self.run = conn, star, criteria, run
        self.quality = quality or QualitySettings()
        self._marginal_terms = marginal_terms
        self.db, self.heights, self.rows = star.db, star.heights, star.rows
        self.use_cube = cube
        self._releases: NodeReleases | None = None
        if checker is not None:
            self._releases = NodeReleases(checker, criteria, suppress=bool(criteria))
        ks = [c.k for c in criteria if isinstance(c, KAnonymity)]
        self.k = max(ks) if ks else None
        self._cells_term = cells_term
        self.ln_top = sum(math.log(d.leaves) for d in star.dimensions)

    def close(self) -> None:
        """Drop the cube and the lookups (after an error, the caller's rollback takes them)."""
        if self._releases is not None:
            self._releases.close()
            self._releases.checker.close()
            self._releases = None

    def _batches(self) -> NodeReleases:
        if self._releases is None:
            checker = WaveChecker(
                db=self.db,
                conn=self.conn,
                star=self.star,
                run=self.run,
                from_table=not self.use_cube,
                criteria=self.criteria,
                part=METRICS_CUBE,
            )
            self._releases = NodeReleases(checker, self.criteria, suppress=bool(self.criteria))
        return self._releases

    def evaluate(
        self, nodes: list[Levels], progress: Callable[[int, int], None] = lambda done, total: None
    ) -> dict[Levels, dict[str, Any]]:
        """Every metric of each of `nodes` (see `figures`)."""
        return {node: self.figures(node, sums) for node, sums in self.class_sums(nodes, progress).items()}

    def class_sums(
        self,
        nodes: list[Levels],
        progress: Callable[[int, int], None] = lambda done, total: None,
        value_squares: bool = False,
        target_tops: Sequence[int] = (),
    ) -> dict[Levels, ClassSums]:
        """Each of `nodes`' sums over its classes (engine.node_releases.ClassSums), the nodes in batches; with
        `value_squares`, their per-QI sums of squared value counts too, with `target_tops` (QI numbers) those
        targets' sums of most frequent counts (a statement more per batch each)."""
        found: dict[Levels, ClassSums] = {}
        if not nodes:
            return found
        releases = self._batches()
        with self.db.hash_joins(self.conn):
            for number, batch_nodes in enumerate(releases.batches(nodes)):
                # the classification's targets and the value squares read the batch's stored classes again
                read_once = not self.quality.targets and not value_squares and not target_tops
                with releases.batch(batch_nodes, f"m{self.run.run_id}_{number}", read_once=read_once) as batch:
                    squares = releases.value_squares(batch) if value_squares else {}
                    tops = releases.target_tops(batch, target_tops) if target_tops else {}
                    for j, sums in releases.class_sums(batch, self.quality).items():
                        found[batch_nodes[j]] = dataclasses.replace(
                            sums, value_squares=squares.get(j, ()), target_tops=tops.get(j, ())
                        )
                progress(len(found), len(nodes))
        return found

    def _cells(self) -> float:
        """The sum over original cells (level-0 QIs, sensitive values) of c ln c, from the cube unless the
        search's cube gave it."""
        if self._cells_term is None:
            self._cells_term = self._batches().checker.cells_term()
        return self._cells_term

    def _terms(self) -> MarginalTerms:
        """Per QI and level, the table's sums over its values there (read once, from the cube)."""
        if self._marginal_terms is None:
            self._marginal_terms = self._batches().marginal_terms()
        return self._marginal_terms

    def batch_size(self) -> int:
        """The nodes a batch of `evaluate` reads in one go."""
        return self._batches().batch_size()

    def bounds(self, metric: str, nodes: list[Levels]) -> dict[Levels, Any] | None:
        """Per node, a lower bound of `metric` from the levels and the table's marginal terms alone (no class of the
        node read): ARX's models that suppression only adds to, their figure with nothing suppressed
        (model.quality.BOUNDED), or AECS's with the most classes the node's levels allow; None for the other
        metrics."""
        if metric not in BOUNDED:
            return None
        if metric in BOUNDED_IF_SUPPRESSION_COSTS_MORE and not self.quality.suppression_costs_more:
            return None
        dims, terms = self.star.dimensions, self._terms()
        found: dict[Levels, Any] = {}
        if metric == "aecs":
            for node in nodes:
                most = math.prod(terms.values[(d.attr, level)] for d, level in zip(dims, node))
                found[node] = aecs_bound(self.rows, most, self.quality)
            return found
        for node in nodes:
            penalties = tuple(terms.penalty[(d.attr, level)] for d, level in zip(dims, node))
            ln_areas = tuple(terms.ln_area[(d.attr, level)] for d, level in zip(dims, node))
            unsuppressed = self.quality_sums(node, ClassSums(released_penalties=penalties, released_ln_area=ln_areas))
            found[node] = quality_figures(unsuppressed, self.quality)[metric]
        return found

    def _entropy_terms(self, node: Levels) -> list[float]:
        """Per QI, the entropy term at the node's level: sum over values of c log2(c / b), b the rows of the value's
        generalization, so sum c ln c at level 0 minus the same at the node's level (the b of a value adds up its
        leaves' c), over ln 2."""
        terms, dims = self._terms().c_ln_c, self.star.dimensions
        return [(terms[(d.attr, 0)] - terms[(d.attr, level)]) / math.log(2) for d, level in zip(dims, node)]

    @cached_property
    def _top_entropy_terms(self) -> list[float]:
        """Per QI, the entropy term at the top of its hierarchy: the same for every node (normalized entropy)."""
        return self._entropy_terms(tuple(d.height for d in self.star.dimensions))

    def quality_sums(self, node: Levels, sums: ClassSums) -> QualitySums:
        """What ARX's quality models read of the node (model.quality)."""
        dims = self.star.dimensions
        return QualitySums(
            rows=self.rows,
            suppressed=sums.suppressed,
            classes=sums.classes,
            leaves=[d.leaves for d in dims],
            released_penalty=sums.released_penalties or [0.0] * len(dims),
            suppressed_penalty=sums.suppressed_penalties or [0.0] * len(dims),
            entropy_term=self._entropy_terms(node),
            suppressed_c_ln_c=sums.suppressed_c_ln_c or [0.0] * len(dims),
            released_ln_area=sums.released_ln_area or [0.0] * len(dims),
            attacked=sums.attacked,
            relative_levels=[level / d.height if d.height else 0.0 for d, level in zip(dims, node)],
            top_entropy_term=self._top_entropy_terms,
            mispredicted=sums.mispredicted,
            undecided=sums.undecided,
            qi_targets=[
                (classification_scale(dims[i].shape.level_sizes, node[i]), wrong, tied)
                for i, (wrong, tied) in zip(qi_target_positions(dims, self.quality.targets), sums.target_predictions)
            ],
        )

    def figures(self, node: Levels, sums: ClassSums) -> dict[str, Any]:
        """The node's metrics from its class sums (over frequency sets carrying every sensitive attribute of the
        star, the classes that violate the criteria suppressed), computed here or by another batch of the run."""
        n, classes, suppressed = self.rows, sums.classes, sums.suppressed
        released = n - suppressed
        average = released / classes if classes else None
        kl = (self._cells() - sums.kl_released - sums.kl_suppressed + suppressed * self.ln_top) / n
        return {
            **level_metrics(node, self.heights),
            "suppressed": suppressed,
            "completeness": released / n,
            "classes": classes,
            "avg_class_size": average,
            "c_avg": average / self.k if average is not None and self.k else None,
            "discernibility": round(sums.squares) + n * suppressed,
            "kl_divergence": max(kl, 0.0),  # clamp rounding noise around an exact 0
            "dm_star": round(sums.all_squares),
            **quality_figures(self.quality_sums(node, sums), self.quality),
        }
