"""Population uniqueness estimated from a sample's class sizes: ARX's models (RiskModelPopulationUniqueness), the
arithmetic on a release's class-size histogram (no connection: the histogram comes from SQL, engine.histograms).

A release of `records` tuples in classes (the histogram: how many classes hold 1, 2, ... tuples) samples a
population of `population` people. How many of those people are unique in the population on the released QIs?

- `pitman` [ModelPitman]: Pitman's sampling formula, its two parameters (theta, alpha) fitted to the histogram by
  maximum likelihood (a 2-D Newton-Raphson from the moments' starting point; the closed form with digamma and
  trigamma, or the sums it stands for where that fails); uniques = Gamma(theta + 1) / Gamma(theta + alpha) *
  population ** alpha.
- `zayatz` [ModelZayatz]: the sample uniques times the conditional probability that a sample unique is a
  population unique (hypergeometric draws), over the sampling fraction.
- `snb` [ModelSNB]: Chen and McNulty's slide negative binomial, the number of non-empty population classes
  estimated first, its two parameters solved by Newton-Raphson from (1, 1).
- `dankar` [Dankar et al.'s decision rule, as ARX's criterion applies it]: at a sampling fraction up to 0.1,
  Pitman's; above, the smaller of Zayatz's and SNB's (Zayatz's where SNB fails).

The sampling fraction is the release's records over the population (ARX's; suppression lowers it). An estimate
that fails (no convergence, not finite, or 0 while the release has sample uniques) is reported as None: a
criterion on it does not hold, as in ARX. Newton-Raphson follows ARX's solver (de.linearbits.newtonraphson): the
given start, then ARX's 16 deterministic starts, `iterations_per_try` steps each, until both functions are within
`accuracy` of 0; the wall-clock limits ARX also sets are left out, so that a result never depends on the machine.

A search asks this of thousands of releases, a few times each: every function here takes a list of histograms
and solves them together (one array operation per Newton step for all of them: the numpy calls, not the
arithmetic, are what a single solve costs), and the binary search over how many classes to suppress runs for
every release in lockstep (`suppressed_classes`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass

import numpy as np

MODELS = ("dankar", "pitman", "zayatz", "snb")
ACCURACY = 1e-6  # ARXSolverConfiguration's default
# ARX's default is 1,000 steps a try, cut short by 100 ms a try; without a clock (a result must not depend on the
# machine) the 15 of ARX's own deterministic tests: a system that does not converge costs every other system
# solved beside it up to 17 tries of this many steps
ITERATIONS_PER_TRY = 15
#: ARX's deterministic starting points (ARXSolverConfiguration.getDefaultStartValues): 0, 0.33, 0.66, 0.99 squared
STARTS = [(a * 0.33, b * 0.33) for a in range(4) for b in range(4)]
DANKAR_PITMAN_UP_TO = 0.1  # the sampling fraction up to which the decision rule takes Pitman's model

Vector = tuple[float, float]


@dataclass(frozen=True)
class Histogram:
    """Classes by size: `sizes` ascending, `counts[i]` classes of `sizes[i]` tuples (none empty)."""

    sizes: np.ndarray
    counts: np.ndarray

    @staticmethod
    def of(pairs: dict[int, int] | list[tuple[int, int]]) -> Histogram:
        items = sorted((int(s), int(c)) for s, c in (pairs.items() if isinstance(pairs, dict) else pairs) if c > 0)
        return Histogram(np.array([s for s, _ in items], dtype=np.int64), np.array([c for _, c in items], np.int64))

    @property
    def classes(self) -> int:
        return int(self.counts.sum())

    @property
    def records(self) -> int:
        return int((self.sizes * self.counts).sum())

    def of_size(self, size: int) -> int:
        at = int(np.searchsorted(self.sizes, size))
        return int(self.counts[at]) if at < len(self.sizes) and self.sizes[at] == size else 0

    def without_smallest(self, taken: int) -> Histogram:
        """The histogram less its `taken` smallest classes."""
        before = np.cumsum(self.counts) - self.counts  # classes smaller than each size
        left = np.clip(self.counts - np.maximum(taken - before, 0), 0, None)
        kept = left > 0
        return Histogram(self.sizes[kept], left[kept])

    def smallest_records(self, taken: int) -> int:
        """The tuples of its `taken` smallest classes."""
        before = np.cumsum(self.counts) - self.counts
        return int((self.sizes * np.clip(taken - before, 0, self.counts)).sum())


@dataclass(frozen=True)
class Solver:
    """ARX's Newton-Raphson settings (ARXSolverConfiguration, deterministic)."""

    accuracy: float = ACCURACY
    iterations_per_try: int = ITERATIONS_PER_TRY


def unique_shares(
    model: str, histograms: Sequence[Histogram], population: int, solver: Solver = Solver()
) -> list[float | None]:
    """Per histogram: the estimated population uniques over the population (ARX's getFractionOfUniqueTuples), 0
    where the release has no sample unique, None where the model's estimate fails."""
    shares: list[float | None] = [0.0] * len(histograms)
    solved = [i for i, h in enumerate(histograms) if h.of_size(1) > 0]
    estimates = _uniques(model, [histograms[i] for i in solved], population, solver)
    for i, uniques in zip(solved, estimates):
        shares[i] = uniques / population if _valid(uniques) and not math.isinf(uniques) else None
    return shares


def holds(
    model: str, histograms: Sequence[Histogram], population: int, threshold: float, solver: Solver = Solver()
) -> list[bool]:
    """Per histogram, ARX's PopulationUniqueness.isFulfilled: an empty release, one without sample uniques, or one
    whose estimated share is positive and at most `threshold`."""
    shares = unique_shares(model, histograms, population, solver)
    return [holds_at(h, s, threshold) for h, s in zip(histograms, shares)]


def holds_at(histogram: Histogram, share: float | None, threshold: float) -> bool:
    """`holds` for a release whose share (`unique_shares`) is known already."""
    return histogram.classes == 0 or share == 0 or (share is not None and 0 < share <= threshold)


Search = Generator[Histogram, bool, "int | None"]


def suppressed_classes(
    fulfilled: Callable[[list[Histogram]], list[bool]],
    histograms: Sequence[Histogram],
    budgets: Sequence[int | None],
) -> list[int | None]:
    """Per histogram, how many of its smallest classes to suppress (`_binary_search`), every release's search run
    in lockstep: each round asks `fulfilled` once, of every release's next candidate."""
    searches = [_binary_search(h, budget) for h, budget in zip(histograms, budgets)]
    results: list[int | None] = [None] * len(searches)
    asked: dict[int, Histogram] = {}
    for i, search in enumerate(searches):
        asked[i] = next(search)
    while asked:
        answers = fulfilled(list(asked.values()))
        following: dict[int, Histogram] = {}
        for (i, _), answer in zip(asked.items(), answers):
            try:
                following[i] = searches[i].send(answer)
            except StopIteration as done:
                results[i] = done.value
        asked = following
    return results


def _binary_search(histogram: Histogram, budget: int | None) -> Search:
    """ARX's binary search (RiskBasedCriterion.enforce, HashGroupifyDistribution.suppressWhileNotFulfilledBinary)
    for one release, as a generator that yields each histogram to check and receives whether it holds: the
    number of smallest classes to suppress, or None where none is found: the search passed `budget` suppressed
    tuples where the classes left fail (ARX's early abort: more suppression only passes it further), or the
    classes it leaves still fail (ARX would publish them when within the limit; sqlanon does not, as the
    criterion does not hold there). On a bound that more suppression does not always help, the search is ARX's,
    not the least suppression that holds."""
    if (yield histogram):
        return 0
    entries = histogram.classes
    low, high = 0, entries - 1
    mid = _half(low + high)
    while low <= high:
        taken = mid + 1
        if (yield histogram.without_smallest(taken)):
            high = mid - 1
        elif budget is not None and histogram.smallest_records(taken) > budget:
            return None
        else:
            low = mid + 1
        mid = _half(low + high)  # Java's division: -1 / 2 is 0, so entry 0 stays suppressed
    taken = mid + 1
    holds = yield histogram.without_smallest(taken)
    if not holds and taken < entries:
        taken += 1  # ARX's last step, unchecked: checked here
        holds = yield histogram.without_smallest(taken)
    return taken if holds else None


def _half(total: int) -> int:
    """Java's int division by 2 (towards zero)."""
    return int(total / 2)


def _uniques(model: str, histograms: list[Histogram], population: int, solver: Solver) -> list[float]:
    if not histograms:
        return []
    if model == "pitman":
        return pitman(histograms, population, solver)
    if model == "zayatz":
        return [zayatz(h, population) for h in histograms]
    if model == "snb":
        return snb(histograms, population, solver)
    if model == "dankar":
        return dankar(histograms, population, solver)
    raise ValueError(f"unknown population uniqueness model {model!r}")


def dankar(histograms: list[Histogram], population: int, solver: Solver) -> list[float]:
    """Dankar et al.'s rule as ARX's criterion applies it (no Zayatz fallback at small fractions)."""
    small = [i for i, h in enumerate(histograms) if h.records / population <= DANKAR_PITMAN_UP_TO]
    found = dict(zip(small, pitman([histograms[i] for i in small], population, solver)))
    large = [i for i in range(len(histograms)) if i not in found]
    for i, by_snb in zip(large, snb([histograms[i] for i in large], population, solver)):
        by_zayatz = zayatz(histograms[i], population)
        found[i] = (by_zayatz if by_zayatz < by_snb else by_snb) if _valid(by_snb) else by_zayatz
    return [found[i] for i in range(len(histograms))]


def _valid(value: float) -> bool:
    """ARX's test of an estimate (not NaN, not 0)."""
    return not math.isnan(value) and value != 0


def zayatz(histogram: Histogram, population: int) -> float:
    """ARX's ModelZayatz: sample uniques x P(a sample unique is a population unique) / sampling fraction. The
    probability is c1 P1(1) / sum over sizes k of c_k P1(k), P1(k) the hypergeometric chance that a sample of n
    from N people holds exactly one of a population class of k; P1(k) / P1(1) = k x the product over i < k of
    (1 - (n - 1) / (N - i)), one cumulative sum of logs for every size (ARX evaluates each P1 with Apache
    Commons' hypergeometric distribution)."""
    n, sizes, counts = histogram.records, histogram.sizes, histogram.counts.astype(float)
    steps = np.arange(1, int(sizes[-1]), dtype=float)  # i = 1 .. largest size - 1
    with np.errstate(all="ignore"):
        logs = np.log(np.maximum(1 - (n - 1) / (population - steps), 0.0))  # 0 once the sample cannot hold one
        ratio = sizes * np.exp(np.concatenate([[0.0], np.cumsum(logs)])[sizes - 1])
        uniques = histogram.of_size(1)
        uniqueness = uniques / float((counts * ratio).sum())
        return float(uniques * uniqueness / (n / population))


@dataclass(frozen=True)
class _Stacked:
    """Several histograms side by side for the Pitman sums: per release u (classes) and n (records); its sizes
    other than 1 with their counts, every release's one after the other (`owner`: the release of each), and per
    release its classes of those sizes."""

    u: np.ndarray
    n: np.ndarray
    sizes: np.ndarray
    counts: np.ndarray
    owner: np.ndarray
    other_classes: np.ndarray

    @staticmethod
    def of(histograms: list[Histogram]) -> _Stacked:
        others = [h.sizes != 1 for h in histograms]
        sizes = np.concatenate([h.sizes[o] for h, o in zip(histograms, others)] or [np.zeros(0)]).astype(float)
        counts = np.concatenate([h.counts[o] for h, o in zip(histograms, others)] or [np.zeros(0)]).astype(float)
        owner = np.repeat(np.arange(len(histograms)), [int(o.sum()) for o in others])
        u = np.array([h.classes for h in histograms], dtype=float)
        n = np.array([h.records for h in histograms], dtype=float)
        return _Stacked(u, n, sizes, counts, owner, np.bincount(owner, counts, len(histograms)))

    def size_arguments(self, rows: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For the releases `rows` (alpha `a`): each of their sizes k other than 1 less its release's alpha, the
        release (as its place in `rows`) and the count of classes of that size."""
        place, wanted = np.zeros(len(self.u), int), np.zeros(len(self.u), bool)
        place[rows], wanted[rows] = np.arange(len(rows)), True
        pick = wanted[self.owner]
        owner = place[self.owner[pick]]
        return self.sizes[pick] - a[owner], owner, self.counts[pick]


def pitman(histograms: list[Histogram], population: int, solver: Solver) -> list[float]:
    """ARX's ModelPitman: (theta, alpha) by maximum likelihood, started from the moments' estimate."""
    stacked = _Stacked.of(histograms)
    c1 = np.array([h.of_size(1) for h in histograms], dtype=float)
    c2 = np.array([h.of_size(2) or 1 for h in histograms], dtype=float)  # no pairs: one, as ARX overestimates
    u, n = stacked.u, stacked.n
    with np.errstate(all="ignore"):
        c = c1 * (c1 - 1) / c2
        t = (n * u * c - c1 * (n - 1) * (2 * u + c)) / (2 * c1 * u + c1 * c - n * c)
        a = (t * (c1 - n) + (n - 1) * c1) / (n * u)
    starts = np.stack([t, a], axis=1)
    nonnegative = lambda points: points[:, 0] >= 0  # noqa: E731  (theta >= 0)
    found = newton(_pitman_closed(stacked), starts, solver, nonnegative)
    for i, histogram in enumerate(histograms):
        # as ARX: where the closed form finds no root, or one the sums (evaluated as sums: the closed form's
        # digammas cancel) miss by more than the accuracy, the sums are solved from the same start (on Adult's
        # nine QIs with 4%, 577 of 74,391 roots: up to 31% apart in the estimate). Checked one histogram at a
        # time: the sums run over its classes and records (tens of thousands of terms), which numpy adds fastest
        # in one array each (all histograms' at once, gathered and binned, took twice as long)
        if not np.isnan(found[i]).any():
            with np.errstate(all="ignore"):
                values, _ = _pitman_sums(histogram, jacobian=False)(found[i : i + 1], found[i : i + 1])
            if np.isfinite(values).all() and (np.abs(values) <= solver.accuracy).all():
                continue
        found[i] = newton(_pitman_sums(histogram), starts[i : i + 1], solver, nonnegative)[0]
    return [_pitman_uniques((float(t), float(a)), population) for t, a in found]


def _pitman_uniques(found: Vector, population: float) -> float:
    t, a = found
    if math.isnan(t) or math.isnan(a) or a == 0:
        return math.nan
    candidates = []
    with contextlib.suppress(OverflowError, ValueError):
        if t + a > 0:  # ARX's log-gamma is NaN at and below 0
            candidates.append(math.exp(math.lgamma(t + 1) - math.lgamma(t + a)) * population**a)
    with contextlib.suppress(OverflowError, ValueError, ZeroDivisionError):  # ARX catches and leaves NaN
        candidates.append(math.gamma(t + 1) / math.gamma(t + a) * population**a)
    valid = [v for v in candidates if math.isfinite(v) and 0 <= v <= population]
    return max(valid) if valid else math.nan


Evaluation = tuple[np.ndarray, np.ndarray]  # per point: the two functions (k x 2), the Jacobian row by row (k x 4)


def _pitman_closed(stacked: _Stacked) -> Callable[[np.ndarray, np.ndarray], Evaluation]:
    """The likelihood's gradient and Hessian in closed form (digamma, trigamma): ARX's master function, for the
    releases `rows` of `stacked` at `points`."""

    def evaluate(points: np.ndarray, rows: np.ndarray) -> Evaluation:
        t, a = points[:, 0], points[:, 1]
        u, n = stacked.u[rows], stacked.n[rows]
        v0 = u - 1
        scalars = np.stack([v0 + t / a + 1, t / a + 1, n + t, t + 1, 1 - a, (a + t + a * v0) / a], axis=1)
        at, owner, counts = stacked.size_arguments(rows, a)
        every, every1 = polygammas(np.concatenate([scalars.ravel(), at]))  # one call: its fixed cost is most of it
        psi, psi1 = every[: scalars.size].reshape(scalars.shape), every1[: scalars.size].reshape(scalars.shape)
        at_sizes = np.bincount(owner, counts * every[scalars.size :], len(rows))  # sum of c_k psi(k - a)
        at_sizes1 = np.bincount(owner, counts * every1[scalars.size :], len(rows))
        others = stacked.other_classes[rows]
        v1, v4, dn, dt1, v6 = psi[:, 0], psi[:, 1], psi[:, 2], psi[:, 3], psi[:, 4]
        v3, tn, tt1, v7, v2 = psi1[:, 1], psi1[:, 2], psi1[:, 3], psi1[:, 4], psi1[:, 5]
        v5 = a * a
        d1 = (v3 - v2) / v5
        d5 = (a * v1 + t * v2 - a * v4 - t * v3) / (v5 * a)
        d3 = (v5 * v0 - t * t * v2 + t * t * v3 - 2 * a * t * v1 + 2 * a * t * v4) / (v5 * v5)
        o1 = (v1 - v4) / a
        o3 = (-t * v1 + a * v0 + t * v4) / v5
        o2 = dn - dt1
        d2 = tt1 - tn
        d4 = others * v7 - at_sizes1
        o4 = at_sizes - others * v6
        return np.stack([o1 - o2, o3 - o4], axis=1), np.stack([d2 - d1, -d5, -d5, -d3 - d4], axis=1)

    return evaluate


def _pitman_sums(histogram: Histogram, jacobian: bool = True) -> Callable[[np.ndarray, np.ndarray], Evaluation]:
    """The same as finite sums (ARX's iterative master function), for one release: the check of the closed form's
    root (the functions alone: `jacobian` False leaves the derivatives NaN), and the equations solved where it
    fails (its digammas and trigammas of large arguments cancel past the accuracy asked, where the sums do not)."""
    others = histogram.sizes != 1
    index, counts = histogram.sizes[others] - 2, histogram.counts[others].astype(float)  # sizes from 2 on
    classes = np.arange(1, histogram.classes, dtype=float)
    records = np.arange(1, histogram.records, dtype=float)
    steps = np.arange(1, int(histogram.sizes[-1]), dtype=float)  # j = 1 .. largest size - 1

    def evaluate(points: np.ndarray, _: np.ndarray) -> Evaluation:
        t, a = float(points[0, 0]), float(points[0, 1])
        by_class, inverse, by_record = 1 / (t + classes * a), 1 / (steps - a), 1 / (t + records)
        o1, o3, o2 = by_class.sum(), (classes * by_class).sum(), by_record.sum()
        o4 = (counts * np.cumsum(inverse)[index]).sum()  # per size k: the sum over j < k of 1 / (j - a)
        values = np.array([[o1 - o2, o3 - o4]])
        if not jacobian:
            return values, np.full((1, 4), np.nan)
        d1, d5, d3 = (by_class**2).sum(), (classes * by_class**2).sum(), (classes**2 * by_class**2).sum()
        d4, d2 = (counts * np.cumsum(inverse**2)[index]).sum(), (by_record**2).sum()
        return values, np.array([[d2 - d1, -d5, -d5, -d3 - d4]])

    return evaluate


def snb(histograms: list[Histogram], population: int, solver: Solver) -> list[float]:
    """ARX's ModelSNB: the non-empty population classes K, then (a, b) with K b^a uniques."""
    c1 = np.array([h.of_size(1) for h in histograms], dtype=float)
    c2 = np.array([h.of_size(2) for h in histograms], dtype=float)
    f = np.array([h.records / population for h in histograms])
    k = np.array([_snb_classes(h, float(fi)) for h, fi in zip(histograms, f)])

    def evaluate(points: np.ndarray, rows: np.ndarray) -> Evaluation:
        return _snb_functions(k[rows], f[rows], c1[rows], c2[rows], points), _snb_derivatives(k[rows], f[rows], points)

    found = newton(evaluate, np.ones((len(histograms), 2)), solver)
    with np.errstate(all="ignore"):
        return [float(x) for x in k * found[:, 1] ** found[:, 0]]


def _snb_classes(histogram: Histogram, f: float) -> float:
    """SNB's estimate of the non-empty classes of the population (ARX's estimateNonEmptyEquivalenceClasses)."""
    sizes, counts = histogram.sizes.astype(float), histogram.counts.astype(float)
    with np.errstate(all="ignore"):
        kept = (1 - f) ** sizes * counts
        var1 = (sizes * f * f * (1 - f * f) ** (sizes - 1) * counts).sum()
        var2 = (kept * (1 + f) ** sizes - 1).sum()  # ARX subtracts 1 per size: kept as ARX has it
        var3 = kept.sum()
        var4 = (sizes * f * (1 - f) ** (sizes - 1) * counts).sum()
        return float(histogram.classes + histogram.of_size(1) * (var1 / var2) * (var3 / var4) ** 2)


def _snb_functions(k: np.ndarray, f: np.ndarray, c1: np.ndarray, c2: np.ndarray, points: np.ndarray) -> np.ndarray:
    a, b = points[:, 0], points[:, 1]
    dividend = (1 - f) * (1 - b)
    first = k * f * (b / (1 - dividend)) ** a * ((a * dividend) / (1 - dividend) + 1) - c1
    second = k * a * b**a * (f * f) * (1 - b) / 2 * (1 - dividend) ** (a + 2) * (2 - (1 - a) * dividend) - c2
    return np.stack([first, second], axis=1)


def _snb_derivatives(k: np.ndarray, f: np.ndarray, points: np.ndarray) -> np.ndarray:
    """ARX's ModelSNB.getDerivatives, term for term."""
    a, b = points[:, 0], points[:, 1]
    v0 = (b - 1) * (f - 1)
    v1, v2 = v0 - 1, 1 - v0
    v3 = a * v0 / v1 - 1
    v4 = (-b / v1) ** a
    v6 = f**2
    v7 = b**a
    v9 = a * v7 * v6 * k
    v10 = 2 * v2 ** (a + 2)
    v11 = v1**2
    v13, v14, v15, v16 = f * k, f - 1, a - 1, b - 1
    v17 = v15 * v0
    v18 = v6 * k
    v19 = v17 + 2
    v20 = v18 * v19
    x1 = -v13 * np.log(-b / v1) * v3 * v4 - (v13 * v4 * v0) / v1
    x2 = a * v13 * (1 / v1 - (b * v14) / v11) * v3 * (-b / v1) ** v15 - v13 * v4 * (
        (a * v14) / v1 - (a * v16 * v14**2) / v11
    )
    y1 = (
        (v9 * np.log(v2) * v19 * v16) / v10
        - (v9 * v16**2 * v14) / v10
        - (v7 * v20 * v16) / v10
        - (a * v7 * v18 * np.log(b) * v19 * v16) / v10
    )
    y2 = (
        -(v9 * v19) / v10
        - (a**2 * b**v15 * v20 * v16) / v10
        - (a * v7 * v18 * v17) / v10
        - (a * v7 * v20 * (a + 2) * v0) / (2 * v2 ** (a + 3))
    )
    return np.stack([x1, x2, y1, y2], axis=1)


def newton(
    evaluate: Callable[[np.ndarray, np.ndarray], Evaluation],
    starts: np.ndarray,
    solver: Solver,
    constraint: Callable[[np.ndarray], np.ndarray] | None = None,
) -> np.ndarray:
    """ARX's 2-D Newton-Raphson (NewtonRaphson2D with prepared start values) for several systems at once: per
    row of `starts`, a root of `evaluate`'s functions (given the points and the rows they belong to) from that
    start, then from each of STARTS; (NaN, NaN) where none converges. Each system follows ARX's steps exactly:
    the last prepared start gets one step, and no try starts once the total passes (starts + 1) x
    iterations_per_try steps."""
    systems = len(starts)
    point, found = np.array(starts, dtype=float), np.full((systems, 2), np.nan)
    prepared = np.array(STARTS, dtype=float)
    used, steps, total = np.zeros(systems, int), np.zeros(systems, int), np.zeros(systems, int)
    active = np.ones(systems, bool)
    limit = (len(STARTS) + 1) * solver.iterations_per_try
    with np.errstate(all="ignore"):
        while active.any():
            rows = np.flatnonzero(active)
            total[rows] += 1
            values, jacobian = evaluate(point[rows], rows)
            converged = (np.abs(values[:, 0]) <= solver.accuracy) & (np.abs(values[:, 1]) <= solver.accuracy)
            found[rows[converged]] = point[rows[converged]]
            active[rows[converged]] = False
            rows, values, jacobian = rows[~converged], values[~converged], jacobian[~converged]
            point[rows] = _step(point[rows], values, jacobian)
            last = used[rows] == len(STARTS)  # ARX's solver: the last start gets one step
            active[rows[last]] = False
            rows = rows[~last]
            broken = np.isnan(point[rows]).any(axis=1) | (steps[rows] >= solver.iterations_per_try)
            if constraint is not None:
                broken |= ~constraint(point[rows])
            steps[rows[~broken]] += 1
            again = rows[broken]
            out = total[again] > limit
            active[again[out]] = False
            again = again[~out]
            point[again] = prepared[used[again]]
            used[again] += 1
            steps[again] = 0
    return found


def _step(points: np.ndarray, values: np.ndarray, jacobian: np.ndarray) -> np.ndarray:
    """One Newton step per row: point - J^-1 value (IEEE arithmetic: a singular J gives NaN, not an error)."""
    j11, j12, j21, j22 = jacobian.T
    scale = 1.0 / (j11 * j22 - j12 * j21)
    dx = (j22 * values[:, 0] - j12 * values[:, 1]) * scale
    dy = (-j21 * values[:, 0] + j11 * values[:, 1]) * scale
    return np.stack([points[:, 0] - dx, points[:, 1] - dy], axis=1)


SHIFT = np.arange(12.0)  # psi(x) = psi(x + 12) - sum of 1 / (x + k) for k < 12: the series is exact from 12 on


def polygammas(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """digamma psi(x) and trigamma psi'(x), elementwise: below 12 shifted by 12 (the recurrence), then de Moivre's
    expansions; at and below 1e-6 (digamma) and 1e-4 (trigamma), down to 0, the Taylor terms ARX uses; below 0,
    the reflection formulas; NaN where x is not finite. (ARX's Gamma.digamma and trigamma take the Taylor terms
    for every x below those bounds, negative too, where they are wrong, and its trigamma leaves the series out
    between 8 and 12.)"""
    x = np.asarray(x, dtype=float)
    with np.errstate(all="ignore"):
        bad = ~np.isfinite(x)
        negative = x <= 0
        base = np.where(bad, 20.0, np.where(negative, 1 - x, x))
        tiny = base <= 1e-6
        safe = np.where(tiny, 20.0, base)
        small = safe < 12
        near = safe[small]  # most class sizes are past 12: only these take the recurrence
        inverse = 1 / (near[:, None] + SHIFT)
        far = np.where(small, safe + 12, safe)
        r = 1 / far
        r2 = r * r
        psi = np.log(far) - 0.5 * r - r2 * (1 / 12 - r2 * (1 / 120 - r2 * (1 / 252 - r2 * (1 / 240 - r2 / 132))))
        series = 1 + r2 * (1 / 6 + r2 * (-1 / 30 + r2 * (1 / 42 + r2 * (-1 / 30 + r2 * 5 / 66))))
        psi1 = 0.5 * r2 + series * r
        psi[small] -= inverse.sum(axis=1)
        psi1[small] += (inverse * inverse).sum(axis=1)
        psi = np.where(tiny, -0.5772156649015329 - 1 / base + math.pi**2 / 6 * base, psi)
        psi1 = np.where(base <= 1e-4, 1 / (base * base) + math.pi**2 / 6 - 2 * 1.2020569031595942 * base, psi1)
        # psi(x) = psi(1 - x) - pi cot(pi x), psi'(x) = -psi'(1 - x) + pi^2 / sin^2(pi x)
        psi = np.where(negative, psi - math.pi / np.tan(math.pi * x), psi)
        psi1 = np.where(negative, -psi1 + (math.pi / np.sin(math.pi * x)) ** 2, psi1)
        return np.where(bad, np.nan, psi), np.where(bad, np.nan, psi1)
