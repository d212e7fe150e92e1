"""Search strategies over the generalization lattice.

A strategy receives a SearchContext (database connection, star schema,
criteria, run) and returns every node over the full QI set that satisfies the
criteria. Auto (the default) picks top-down, the border search or the filtered
search by the job's shape; Incognito is the paper's search; Exhaustive evaluates
every node with its own direct GROUP BY and serves as the oracle in tests.
"""

from __future__ import annotations

import dataclasses
import heapq
import time
from abc import ABC, abstractmethod
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Connection

from ..backends import Database
from ..criteria import Criterion, least_size_first
from ..engine.checker import WaveChecker
from ..engine.frequency import BATCH, count_violations_batch
from ..engine.labels import create_label_table, node_view
from ..engine.star import StarSchema
from ..model.lattice import (
    Levels,
    direct_generalizations,
    direct_specializations,
    full_lattice,
    nodes_by_height,
)
from ..model.progress import Progress
from ..store.records import RunRecord
from .lattice import LatticeStore, Node

if TYPE_CHECKING:
    import numpy as np

    from ..model.selection import Rank


@dataclass(kw_only=True)
class SearchStats:
    nodes_checked: int = 0
    rollups: int = 0  # roll-ups of the cube the checker grouped for its waves
    base_scans: int = 0
    seconds: float = 0.0
    statements: int = 0  # checking statements (wave strategies)
    # candidates left unchecked above a passing node that no check settled (SearchContext.minimal_only)
    unchecked_above_passing: int = 0
    # candidates left unchecked as ranked after a passing node by the selection (SearchContext.rank)
    unchecked_outranked: int = 0


@dataclass(kw_only=True)
class SearchContext:
    db: Database
    conn: Connection
    star: StarSchema
    criteria: list[Criterion]
    run: RunRecord
    schema: str
    use_cube: bool = True
    progress: Progress = field(default=lambda phase, done, total: None)
    max_suppressed: int = 0  # MaxSup: a node passes when its violating classes hold at most this many tuples
    assume_monotone: bool = False  # prune with suppression even where it is not sound (opt-in heuristic)
    resuming: bool = False  # continue an interrupted run from its last completed iteration (Incognito)
    # the run reads the minimal nodes alone (a publication whose selection chooses among them): where passing is
    # not closed under generalization, the nodes above a passing one are left unchecked (Filtered.walk)
    minimal_only: bool = False
    # where the publication's choice depends on the levels alone (a policy or metric such as the height, see
    # selection.levels_rank): each node's rank; with minimal_only, a candidate ranked after a passing node is left
    # unchecked (Filtered.walk), so the minimal nodes returned are those that rank before every other
    rank: Callable[[tuple[int, ...]], Rank] | None = None
    # per set of sensitive columns: the sum of c ln c over the level-0 cells (QI values and those columns), as a
    # search's cube found it; KL divergence needs it, and it would otherwise cost a scan of the table
    cells_terms: dict[frozenset[str], float] = field(default_factory=dict)
    metrics_follow: bool = True  # the run computes utility metrics after the search (see WaveChecker.cells_term)
    metrics_sensitive: list[str] = field(default_factory=list)  # the sensitive columns the metrics read (KL)
    # the search's cube of the table's rows, carrying the columns the metrics read, kept for them: grouping it
    # again costs less than joining the table with its dimensions once more (see steps.metrics_evaluator)
    search_cube: WaveChecker | None = None

    def keep_cube(self, checker: WaveChecker | None) -> None:
        """Keep `checker` as the search's cube for the metrics (closing one kept before), or close the one kept."""
        if self.search_cube is not None:
            self.search_cube.close()
        self.search_cube = checker

    def accepts(self, violating_tuples: int) -> bool:
        return violating_tuples <= self.max_suppressed

    @property
    def meta_conn(self) -> Connection:
        """The connection to sqlanon's own tables (lattice, registries), which goes with `conn`."""
        return self.db.metadata_connection(self.conn)

    @property
    def sound_monotone(self) -> bool:
        """Whether passing is closed under generalization (and QI supersets fail when a subset fails).

        True without suppression; with it, only for criteria whose violating
        tuples can only shrink when classes merge (k-anonymity, distinct l-diversity).
        Never for a criterion not monotone under generalization (delta-disclosure, Grassberger's entropy).
        """
        if not self.clean_nodes_settle:
            return False
        return self.max_suppressed == 0 or all(c.monotone_under_suppression for c in self.criteria)

    @property
    def clean_nodes_settle(self) -> bool:
        """Whether a node with no violating class settles its generalizations (none have one either): for criteria
        monotone under generalization, all but delta-disclosure and Grassberger's entropy."""
        return all(c.monotone_under_generalization for c in self.criteria)

    @property
    def monotone(self) -> bool:
        """Whether the search may prune on passing nodes (sound, or assumed by the user)."""
        return self.sound_monotone or self.assume_monotone

    @property
    def heuristic(self) -> bool:
        """True when pruning was assumed, not proven: the result may miss passing nodes."""
        return not self.sound_monotone and self.assume_monotone


#: every strategy by name, filled as the classes are defined
STRATEGIES: dict[str, type[SearchStrategy]] = {}


class SearchStrategy(ABC):
    """A search: its `name` is what `search.strategy` says in a job file; a subclass with a name registers itself
    in STRATEGIES (a helper base class leaves `name` empty)."""

    name: str = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("name"):
            STRATEGIES[cls.name] = cls

    @abstractmethod
    def search(self, ctx: SearchContext, stats: SearchStats) -> list[tuple[int, ...]]:
        """All satisfying nodes over the full QI set, as level vectors in config order."""


class Incognito(SearchStrategy):
    """LeFevre et al.: QI subsets of growing size, each lattice searched breadth-first with marking.

    The lattice of each iteration (nodes, edges, pruning) lives in the lattice
    tables; the nodes of a wave (equal height, across every family of the
    iteration) are checked together by the wave checker, a node over a subset
    of the QIs being the cube grouped on those QIs alone.

    When passing is not closed under generalization (criteria that are not
    monotone under suppression), neither subset pruning nor marking on a pass
    is sound: the full lattice is searched as one iteration, every node is
    checked, and only nodes with no violating class at all mark their
    generalizations, which then have none either (all criteria but
    delta-disclosure and Grassberger's entropy are monotone without
    suppression; with one of those, no node marks any).
    """

    name = "incognito"

    def search(self, ctx: SearchContext, stats: SearchStats) -> list[tuple[int, ...]]:
        heights = ctx.star.heights
        store = LatticeStore(ctx.db.metadata, ctx.schema, ctx.run.run_id)
        first = 1 if ctx.monotone else len(heights)
        done = store.prepare_resume(ctx.meta_conn) if ctx.resuming else 0
        ctx.conn.commit()
        with _probing(ctx, stats, progress_by_height=False) as probe:  # Incognito records progress by iteration
            for iteration in range(max(first, done + 1), len(heights) + 1):
                if iteration == 1:
                    store.create_first_iteration(ctx.meta_conn, heights)
                elif iteration == first:
                    store.create_full_iteration(ctx.meta_conn, heights)
                else:
                    store.generate_next(ctx.meta_conn, iteration - 1)
                nodes, edges = store.load_iteration(ctx.meta_conn, iteration)
                statuses = self._search_iteration(ctx, probe, nodes, edges, iteration)
                store.save_statuses(ctx.meta_conn, statuses)
                ctx.run.progress(ctx.conn, iteration, stats.nodes_checked)
                ctx.conn.commit()
        survivors = store.survivors(ctx.meta_conn, len(heights))
        return sorted(tuple(level for _, level in pairs) for pairs in survivors)

    def _search_iteration(
        self, ctx: SearchContext, probe: Probe, nodes: list[Node], edges: list[tuple[int, int]], iteration: int
    ) -> dict[int, str]:
        """Breadth-first by height from the roots of every family (QI subset) of the iteration.

        All families advance together in waves of equal height: a node's fate
        depends only on lower nodes, so a wave is checked in a few statements.
        """
        graph = _IterationGraph(nodes, edges)
        statuses: dict[int, str] = {}
        marked: set[int] = set()
        queue = [(n.height, n.node_id) for n in graph.roots]
        heapq.heapify(queue)
        width = len(ctx.star.dimensions)
        while queue:
            wave = _pop_wave(queue, statuses)
            to_check = [node_id for node_id in wave if node_id not in marked]
            for node_id in wave:
                if node_id in marked:  # what holds for it holds for its generalizations
                    statuses[node_id] = "marked"
                    marked.update(graph.up[node_id])
            vectors = [graph.by_id[node_id].vector(width) for node_id in to_check]
            for node_id, (classes, tuples) in zip(to_check, probe.violations(vectors)):
                statuses[node_id] = "pass" if ctx.accepts(tuples) else "fail"
                if (statuses[node_id] == "pass") if ctx.monotone else (classes == 0 and ctx.clean_nodes_settle):
                    marked.update(graph.up[node_id])
                    continue
                for succ in graph.up[node_id]:
                    heapq.heappush(queue, (graph.by_id[succ].height, succ))
            ctx.run.progress(ctx.conn, iteration, probe.stats.nodes_checked)  # visible from SQL while it runs
            ctx.conn.commit()
            ctx.progress(f"iteration {iteration}/{width}", len(statuses), len(nodes))
        # nodes never reached lie above a marked node: they pass by monotonicity
        return {n.node_id: statuses.get(n.node_id, "implied") for n in nodes}


def _pop_wave(queue: list[tuple[int, int]], statuses: dict[int, str]) -> list[int]:
    """Every queued, not yet dequeued node of the lowest queued height."""
    height, wave = queue[0][0], []
    while queue and queue[0][0] == height:
        _, node_id = heapq.heappop(queue)
        if node_id not in statuses and node_id not in wave:
            wave.append(node_id)
    return wave


class _IterationGraph:
    """One iteration's candidate graph: nodes by id, edges both ways, roots."""

    def __init__(self, nodes: list[Node], edges: list[tuple[int, int]]):
        self.by_id = {n.node_id: n for n in nodes}
        self.up: dict[int, list[int]] = defaultdict(list)
        self.down: dict[int, list[int]] = defaultdict(list)
        for a, b in edges:
            self.up[a].append(b)
            self.down[b].append(a)
        self.roots = [n for n in nodes if not self.down[n.node_id]]


class Exhaustive(SearchStrategy):
    """Every node of the full lattice, each by its own GROUP BY over labels; no pruning, no roll-up.

    Deliberately independent of lattice tables, integer codes and roll-ups, so
    it can check Incognito in tests. The source is joined with the dimension
    tables once (every level's label side by side); each node then groups that.
    """

    name = "exhaustive"

    def search(self, ctx: SearchContext, stats: SearchStats) -> list[tuple[int, ...]]:
        [violating] = self.evaluate(ctx, [ctx.criteria], stats)
        return [node for node, tuples in violating.items() if ctx.accepts(tuples)]

    def evaluate(
        self, ctx: SearchContext, criteria_sets: list[list[Criterion]], stats: SearchStats | None = None
    ) -> list[dict[tuple[int, ...], int]]:
        """Per criteria set, every node's violating tuples (so one pass answers any suppression limit);
        one GROUP BY per node serves all sets."""
        stats = stats or SearchStats()
        nodes = full_lattice(ctx.star.heights)
        violating: list[dict[tuple[int, ...], int]] = [{} for _ in criteria_sets]
        labels = create_label_table(ctx.db, ctx.conn, ctx.star, f"exhaustive_{ctx.run.run_id}")
        population = None
        if ctx.star.population is not None and any(c.reads_population for s in criteria_sets for c in s):
            name = f"exhaustive_population_{ctx.run.run_id}"
            population = create_label_table(ctx.db, ctx.conn, ctx.star, name, population=True)
        ctx.conn.commit()
        stats.base_scans += 1
        try:
            batch = max(1, BATCH // len(criteria_sets))  # statements of about BATCH node-and-criteria checks
            for start in range(0, len(nodes), batch):
                chunk = nodes[start : start + batch]
                views = [node_view(ctx.star, labels, j, node, population) for j, node in enumerate(chunk)]
                for node, (_, per_set) in zip(chunk, count_violations_batch(ctx.conn, views, criteria_sets)):
                    for found, (_, tuples) in zip(violating, per_set):
                        found[node] = tuples
                stats.nodes_checked += len(chunk)
                ctx.run.progress(ctx.conn, 0, stats.nodes_checked)
                ctx.conn.commit()
                ctx.progress("every node", stats.nodes_checked, len(nodes))
        finally:
            for table in (labels, population):
                if table is not None:
                    ctx.db.drop_table(ctx.conn, table)
            ctx.conn.commit()
        return violating


class Samarati(SearchStrategy):
    """Samarati's binary search on the height: the passing nodes of the lowest height that has one.

    Each probed height is evaluated whole (every node rolled up from the
    zero-generalization cube, in batched statements). Binary search needs
    "some node of height h passes" to hold for every height above a passing
    one, true when passing is monotone; otherwise heights are probed upward
    from 0 one by one, which stays exact.
    """

    name = "samarati"

    def search(self, ctx: SearchContext, stats: SearchStats) -> list[tuple[int, ...]]:
        by_height = nodes_by_height(ctx.star.heights)
        top = max(by_height)
        probed: dict[int, list[tuple[int, ...]]] = {}
        with _probing(ctx, stats) as probe:

            def passing(height: int) -> list[tuple[int, ...]]:
                if height not in probed:
                    probed[height] = probe.passing(by_height[height], height)
                    ctx.progress(f"height {height}/{top}", len(probed), top + 1)
                return probed[height]

            if not ctx.monotone:
                return next((found for h in range(top + 1) if (found := passing(h))), [])
            if not passing(top):
                return []
            low, high = 0, top  # invariant: some node of height `high` passes
            while low < high:
                middle = (low + high) // 2
                if passing(middle):
                    high = middle
                else:
                    low = middle + 1
            return passing(high)


#: a height with fewer nodes to check than this takes the next height's candidates along (Adult 8 QIs: hierarchical
#: t-closeness 0.052 -> 0.048 s, don't-care entropy 0.074 -> 0.066 s; at every height, or with 48: slower)
FEW_NODES = 16


class TopDown(SearchStrategy):
    """Breadth-first from the top of the full lattice down, for passing sets closed under generalization.

    A node can pass only if every direct generalization passes, so each height
    checks just those nodes (a wave of statements over the cube); the
    others fail without a check, as everything below a failure does. The
    checks are the passing nodes plus the highest failing ones: few when few
    nodes pass (the usual case without suppression). Without monotonicity
    nothing below a failure can be skipped; the search is then Incognito's
    exact one.
    """

    name = "topdown"
    downward = True

    def search(self, ctx: SearchContext, stats: SearchStats) -> list[tuple[int, ...]]:
        if not ctx.monotone:
            return Incognito().search(ctx, stats)
        with _probing(ctx, stats) as probe:
            sizes = probe.sizes_first()
            if not sizes:
                return probe.record(self.walk(ctx, probe))
            # the class sizes' search first, over sets without the sensitive values; the nodes it passes (closed
            # under generalization) are then checked with every criterion, the lowest first, each pass settling
            # its generalizations (hospital 1M, k=5 and entropy l=2: 14 nodes checked with the sensitive values
            # instead of the 94 that pass k, which top-down checked one by one)
            first = Probe(dataclasses.replace(ctx, criteria=sizes), stats, probe.waves)
            candidates = self.walk(first.ctx, first)
            probe.checked.update((node, False) for node, ok in first.checked.items() if not ok)
            return probe.record(Filtered.walk(ctx, probe, candidates))

    def walk(self, ctx: SearchContext, probe: Probe) -> list[tuple[int, ...]]:
        """The search itself, height by height, with `probe` answering each height's candidates."""
        heights = ctx.star.heights
        # the lattice itself is never listed (Adult's 9 QIs: 12,960 nodes, 10 ms of Python): a height's candidates
        # come from the one before it, starting from the top (or the bottom) alone
        order = sorted(range(sum(heights) + 1), reverse=self.downward)
        onward: Callable[[Levels], list[Levels]]
        behind: Callable[[Levels], list[Levels]]
        if self.downward:
            onward, behind = direct_specializations, lambda n: direct_generalizations(n, heights)
        else:
            onward, behind = lambda n: direct_generalizations(n, heights), direct_specializations

        def next_candidates(settled_here: Iterable[tuple[int, ...]]) -> list[tuple[int, ...]]:
            """The next height's nodes all of whose neighbours behind are in `settled_here`, which holds every
            settled node of this height (counted from the settled side: the lattice is far larger)."""
            reached = Counter(m for n in settled_here for m in onward(n))
            return sorted(m for m, count in reached.items() if count == len(behind(m)))

        settled: set[tuple[int, ...]] = set()  # passing (top-down) or failing (bottom-up) nodes
        known = probe.checked  # checked nodes: passing or not
        candidates = [tuple(heights) if self.downward else (0,) * len(heights)]  # nothing behind it
        for step, height in enumerate(order):
            todo = [n for n in candidates if n not in known]
            if todo:
                # on a large cube every statement is a pass over it, and a few nodes' statement costs its planning
                # more than its rows: the next height's candidates are then checked with this one's, as if every
                # candidate settled (a superset of what will be asked next)
                few = len(todo) < FEW_NODES
                ahead = next_candidates(candidates) if (probe.waves.large or few) and step + 1 < len(order) else []
                probe.passing(todo + ahead, height)
            settled_here = [n for n in candidates if known[n] == self.downward]
            settled.update(settled_here)
            candidates = next_candidates(settled_here)
            ctx.progress(f"heights, {'top down' if self.downward else 'bottom up'}", step + 1, len(order))
        if self.downward:
            return sorted(settled)
        return [n for n in full_lattice(heights) if n not in settled]  # sorted, as product lists them


class BottomUp(TopDown):
    """Breadth-first from the bottom of the full lattice up, for passing sets closed under generalization.

    A node can fail only if every direct specialization fails, so each height
    checks just those; the others pass without a check, as everything above a
    pass does. The checks are the failing nodes plus the lowest passing ones:
    few when most nodes pass (tuple suppression).
    """

    name = "bottomup"
    downward = False


class Border(TopDown):
    """Binary search on chains of the full lattice (as ARX's Flash does), for passing sets closed under
    generalization: checks close to the border between passing and failing nodes, from both sides.

    A chain starts at the lowest node whose status is unknown and climbs through unknown nodes to the top,
    raising the attributes in turn. Checking its middle node halves it: a pass settles every generalization
    of that node (the chain's upper half among them), a failure every specialization. Each wave checks the
    middle node of up to WAVE chains at once, in one statement per wave of the checker; chains that are
    settled are replaced by new ones. The statuses live in an array with one axis per attribute, so settling
    a node's generalizations is one slice.

    On Adult's 9 QIs, k=5, it needs 2,394 checks in 23 statements at 2% suppression (top-down: 3,776 in 28)
    and 3,103 in 28 at 10% (bottom-up: 6,026 in 41); without suppression top-down's 141 checks are fewer,
    since few nodes pass and top-down checks only those. Waves of 128 chains checked fewer nodes than 256
    (2,528) or 512 (2,854) for the same time per statement.
    """

    name = "border"
    WAVE = 128
    UNKNOWN, PASSING, FAILING = 0, 1, 2

    def walk(self, ctx: SearchContext, probe: Probe) -> list[tuple[int, ...]]:
        import numpy as np  # the statuses of every node, settled by slices

        heights = ctx.star.heights
        status = np.zeros([h + 1 for h in heights], dtype=np.int8)
        starts = sorted(full_lattice(heights), key=sum)  # stable: the same chains on every run
        chains: list[list[tuple[int, ...]]] = []
        wave = self.next_start = 0
        while True:
            chains = [c for c in ([n for n in chain if status[n] == self.UNKNOWN] for chain in chains) if c]
            self._start_chains(chains, starts, status, heights)
            if not chains:
                break
            middles = sorted({chain[len(chain) // 2] for chain in chains})
            wave += 1
            passing = set(probe.passing(middles, wave))
            for node in middles:  # slices: everything above a pass passes, everything below a failure fails
                if node in passing:
                    status[tuple(slice(level, None) for level in node)] = self.PASSING
                else:
                    status[tuple(slice(0, level + 1) for level in node)] = self.FAILING
            ctx.progress("border, binary search on chains", int((status != self.UNKNOWN).sum()), status.size)
        return sorted(tuple(int(level) for level in node) for node in np.argwhere(status == self.PASSING))

    def _start_chains(
        self, chains: list[list[tuple[int, ...]]], starts: list[tuple[int, ...]], status: np.ndarray, heights: list[int]
    ) -> None:
        """New chains from the lowest unknown nodes on no chain, until there are WAVE chains. `starts` (nodes by
        height) is read from `self.next_start` on: a node passed over is settled or on a chain until settled."""
        on_chain = {node for chain in chains for node in chain}
        while len(chains) < self.WAVE and self.next_start < len(starts):
            start = starts[self.next_start]
            if status[start] != self.UNKNOWN or start in on_chain:
                self.next_start += 1
                continue
            chain = self._climb(start, status, heights, on_chain)
            on_chain.update(chain)
            chains.append(chain)

    def _climb(
        self, start: tuple[int, ...], status: np.ndarray, heights: list[int], taken: set[Levels]
    ) -> list[tuple[int, ...]]:
        """The chain from `start` up through unknown nodes on no other chain. Of the attributes that can be
        raised, the one the node's height points at (in turn), so that chains spread over the lattice: always
        raising the first attribute first needed 20% more checks on Adult."""
        chain, node = [start], start
        while True:
            ups = [
                up
                for attr in range(len(heights))
                if node[attr] < heights[attr]
                for up in [node[:attr] + (node[attr] + 1,) + node[attr + 1 :]]
                if status[up] == self.UNKNOWN and up not in taken
            ]
            if not ups:
                return chain
            node = ups[sum(node) % len(ups)]
            chain.append(node)


class Filtered(SearchStrategy):
    """For criteria that are not monotone under suppression, exact: the criteria that are (k-anonymity, distinct
    l-diversity; without them, what the others imply: entropy and recursive l-diversity need l distinct values)
    first, by binary search on chains, then every node they pass checked with all the criteria.

    A node passes when the tuples in classes that violate any criterion fit within the limit; those violating
    the monotone criteria alone are fewer, so a node that fails them fails, and the nodes that pass them (a set
    closed under generalization) are the only candidates. They are checked bottom up, a height per wave; a node
    with no violating class at all settles its generalizations (without suppression every criterion but
    delta-disclosure and Grassberger's entropy is monotone: SearchContext.clean_nodes_settle). Without a monotone
    criterion among the job's or implied by them, this is Incognito's exact search.

    Where the run reads the minimal nodes alone (SearchContext.minimal_only: a publication choosing among them),
    a candidate above a passing node is not minimal whatever its own classes hold: it is left unchecked, and the
    nodes returned are the minimal ones.
    """

    name = "filtered"

    def search(self, ctx: SearchContext, stats: SearchStats) -> list[tuple[int, ...]]:
        if ctx.monotone:
            return Auto().search(ctx, stats)
        # the job's own monotone criteria, else those its criteria imply: adding distinct l-diversity to k-anonymity
        # leaves fewer candidates but makes the first stage read the sensitive values (Adult, 8 QIs, k=5 and entropy
        # l=3, 2%: 2,519 checks in 1.33-1.46 s against 2,657 in 0.99-1.24 s)
        monotone = [c for c in ctx.criteria if c.monotone_under_suppression] or [
            m for c in ctx.criteria for m in c.monotone_part()
        ]
        # and k-anonymity at the least class size they allow, where it is larger than theirs
        sizes = least_size_first(ctx.criteria, ctx.star.size_bound_counts)
        monotone = [c for c in monotone if c.size_violation() is None] + sizes
        if not monotone:
            return Incognito().search(ctx, stats)
        with _probing(ctx, stats) as probe:
            first = Probe(dataclasses.replace(ctx, criteria=monotone), stats, probe.waves)
            candidates = Border().walk(first.ctx, first)
            probe.checked.update((node, False) for node, ok in first.checked.items() if not ok)
            return probe.record(self.walk(ctx, probe, candidates))

    @staticmethod
    def walk(ctx: SearchContext, probe: Probe, candidates: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        """The passing nodes among `candidates` (closed under generalization). The lowest ones first, in one wave
        (no candidate lies below them, so nothing but their own check settles them); a node with no violating
        class settles its generalizations (where SearchContext.clean_nodes_settle), and so does every
        passing node where passing is closed under generalization: then the nodes left are checked in one more
        wave (on the large cube where a monotone search comes here, every statement is a pass over many rows:
        hospital 1M, k=5 and t equal 0.3, 2 statements with the values instead of 4 a height at a time). Else
        the rest bottom up, a height at a time. Ranked by the selection (SearchContext.rank), a height at a time
        from the lowest, the first wave left out: the heights above the best passing node are read no further
        (Adult 8 QIs, k=5 and entropy l=3 with 2%: 384 -> 74 checks after the monotone criteria's)."""
        heights = ctx.star.heights
        pool = set(candidates)
        settled: set[tuple[int, ...]] = set()  # passing as generalizations of a node that settles them
        checked: dict[tuple[int, ...], bool] = {}

        def check(nodes: list[tuple[int, ...]]) -> None:
            for node, (classes, tuples) in zip(nodes, probe.violations(nodes) if nodes else []):
                checked[node] = probe.checked[node] = ctx.accepts(tuples)
                if (classes == 0 and ctx.clean_nodes_settle) or (ctx.monotone and checked[node]):
                    settled.update(direct_generalizations(node, heights))

        def climb(nodes: list[tuple[int, ...]]) -> None:
            settled.update(up for node in nodes if node in settled for up in direct_generalizations(node, heights))

        # a node ranked after a passing one by the selection is not published, nor is any node above it (each
        # ranks after it: see selection.levels_rank)
        rank = ctx.rank if ctx.minimal_only and not ctx.monotone else None
        if rank is None:  # else the lowest ones of the heights above the best passing node would go unread
            check([node for node in candidates if not any(m in pool for m in direct_specializations(node))])
        by_height: dict[int, list[tuple[int, ...]]] = defaultdict(list)
        for node in candidates:
            by_height[sum(node)].append(node)
        order = sorted(by_height)
        if ctx.monotone:
            for height in order:
                climb(by_height[height])
            check([node for node in candidates if node not in settled and node not in checked])
            ctx.progress("criteria on the nodes k-anonymity passes", 1, 1)
            return sorted(node for node in candidates if node in settled or checked[node])
        passing: list[tuple[int, ...]] = []
        covered: set[tuple[int, ...]] = set()  # above a passing node: not minimal, whatever they hold

        def above_passing(node: tuple[int, ...]) -> bool:
            return any(
                b in covered or b in settled or checked.get(b, False) for b in direct_specializations(node) if b in pool
            )

        for step, height in enumerate(order):
            here = by_height[height]
            if ctx.minimal_only:  # their own check would not change the minimal nodes
                covered.update(node for node in here if above_passing(node))
            due = [node for node in here if node not in settled and node not in checked]
            outranked: set[tuple[int, ...]] = set()
            if rank is not None and passing:
                best = min(map(rank, passing))
                outranked = {node for node in due if node not in covered and rank(node) > best}
            check([node for node in due if node not in covered and node not in outranked])
            probe.stats.unchecked_above_passing += sum(node in covered for node in due)
            probe.stats.unchecked_outranked += len(outranked)
            climb(here)
            passing += [n for n in here if n not in covered and n not in outranked and (n in settled or checked[n])]
            ctx.progress("criteria on the nodes k-anonymity passes, bottom up", step + 1, len(by_height))
        return sorted(passing)


class Auto(SearchStrategy):
    """The strategy that checks fewer nodes for the job's shape.

    Without suppression few nodes pass (every class must be large enough), and
    top-down checks only the passing nodes and the highest failing ones. With
    it, most nodes may pass: binary search on chains checks close to the
    border from both sides. Criteria that are not monotone under suppression
    get the filtered search (the monotone criteria first, then the nodes they pass).
    """

    name = "auto"

    def search(self, ctx: SearchContext, stats: SearchStats) -> list[tuple[int, ...]]:
        if not ctx.monotone:
            return Filtered().search(ctx, stats)
        return (TopDown() if ctx.max_suppressed == 0 else Border()).search(ctx, stats)


class Probe:
    """A strategy's one handle on the wave checker (`waves`): `passing(nodes, height)` for the strategies that walk
    the full lattice by height, `violations(nodes)` for those that judge the figures themselves (Incognito,
    filtered). Every checked node's outcome is kept for `record`; with `progress_by_height`, progress (height,
    nodes checked) is recorded at most every PROGRESS_SECONDS and at the end (Incognito records its own, by
    iteration, which a resume starts from).
    """

    #: progress is for watching a long search (from SQL, or DuckDB's side file): written after every call, it
    #: was an UPDATE, a file and a commit per wave, about a tenth of a 0.1 s search
    PROGRESS_SECONDS = 0.5

    def __init__(self, ctx: SearchContext, stats: SearchStats, waves: WaveChecker, *, progress_by_height: bool = True):
        self.ctx, self.stats, self.waves = ctx, stats, waves
        self.progress_by_height = progress_by_height
        self.checked: dict[tuple[int, ...], bool] = {}
        self.height = 0  # the last height asked
        self.written = time.monotonic()

    def passing(self, nodes: list[tuple[int, ...]], height: int) -> list[tuple[int, ...]]:
        """The passing ones of `nodes` (of lattice height `height`), sorted; a wave per statement."""
        self.height = height
        if not nodes:  # a height with nothing to check
            return []
        for node, (_, tuples) in zip(nodes, self.violations(nodes)):
            self.checked[node] = self.ctx.accepts(tuples)
        if time.monotonic() - self.written >= self.PROGRESS_SECONDS:
            self.write_progress()
        return sorted(node for node in nodes if self.checked[node])

    def sizes_first(self) -> list[Criterion]:
        """What a search should settle first where the criteria read the sensitive values over a large cube (sets
        of a node's classes times their values, far larger than its classes'): k-anonymity at the least class size
        they allow (`least_size_first`). Nothing where no criterion reads the sensitive values, or on a small cube,
        where the extra statements cost more than they save."""
        criteria = self.ctx.criteria
        if not self.waves.large or not any(c.sensitive_attributes() for c in criteria):
            return []
        return least_size_first(criteria, self.ctx.star.size_bound_counts)

    def write_progress(self, commit: bool = True) -> None:
        if not self.progress_by_height:
            return
        self.ctx.run.progress(self.ctx.conn, self.height, self.stats.nodes_checked)
        if commit:
            self.ctx.conn.commit()
        self.written = time.monotonic()

    def violations(self, nodes: list[tuple[int, ...]]) -> list[tuple[int, int]]:
        """(violating classes, tuples in them) of each node (-1: an attribute the node leaves out)."""
        self.stats.nodes_checked += len(nodes)
        criteria = self.ctx.criteria  # frequency sets without the sensitive columns when no criterion reads them
        return self.waves.violations(nodes, criteria, sensitive=any(c.sensitive_attributes() for c in criteria))

    def record(self, passing: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        """Write the passing nodes (`pass` when checked, `implied` when settled by another's check) and the
        checked failing ones to the lattice tables, as the full iteration of the run; returns `passing`."""
        ctx = self.ctx
        LatticeStore(ctx.db.metadata, ctx.schema, ctx.run.run_id).record_full_lattice(
            ctx.meta_conn,
            len(ctx.star.heights),
            {
                **{n: "fail" for n, ok in self.checked.items() if not ok},
                **{n: "pass" if n in self.checked else "implied" for n in passing},
            },
            ctx.resuming,
        )
        return passing  # committed with the search's last figures (see _probing)


@contextmanager
def _probing(ctx: SearchContext, stats: SearchStats, progress_by_height: bool = True) -> Iterator[Probe]:
    """A Probe over a cube built for the search, dropped at the end, or kept for the metrics that follow where it
    holds the table's rows (SearchContext.search_cube)."""
    carry = [c for c in ctx.metrics_sensitive if c not in ctx.star.sensitive] if ctx.metrics_follow else []
    checker = WaveChecker(
        db=ctx.db,
        conn=ctx.conn,
        star=ctx.star,
        run=ctx.run,
        from_table=not ctx.use_cube,
        criteria=ctx.criteria,
        carry=carry,
    )
    kept = False
    try:
        probe = Probe(ctx, stats, checker, progress_by_height=progress_by_height)
        yield probe
        probe.write_progress(commit=False)  # the final figures, however few were written on the way
        if ctx.metrics_follow and checker.grouped:  # a cube of the table's rows would be grouped for it
            ctx.cells_terms[frozenset(ctx.star.sensitive)] = checker.cells_term()
        kept = ctx.metrics_follow and checker.carrying() is not None
    finally:  # one commit: the lattice, the figures and the registry
        if kept:
            ctx.keep_cube(checker)
        else:
            checker.close()
        ctx.conn.commit()
        stats.statements += checker.statements
        stats.base_scans += checker.scans
        stats.rollups += checker.rollups
