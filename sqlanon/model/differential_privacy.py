"""(epsilon, delta)-differential privacy by sampling and generalization (SafePub: Bild, Kuhn and Prasser, PoPETs
2018; ARX's EDDifferentialPrivacy): the arithmetic, with no connection.

Each row of the table is kept with probability beta; the sample is generalized to one node of the lattice; every
class of fewer than k rows is suppressed. Li, Qardaji and Su's theorem (as SafePub states it) gives (epsilon, delta)-
differential privacy when beta = 1 - e^-epsilon and k is large enough for delta: with
gamma = (e^epsilon - 1 + beta) / e^epsilon,

    delta(k) = max over n >= n_m of a_n,  n_m = ceil(k / gamma - 1),
    a_n = sum over j > n gamma of Binomial(n, beta)(j),  stopped where a_n's running max reaches
    c_n = exp(-n (gamma ln(gamma / beta) - (gamma - beta))), the Chernoff bound every later a_n stays below,

and k is ARX's: the loop `for (k = 1; delta(k - 1) >= delta; k++)`, one more than the least k whose delta(k)
is below delta (a larger k only adds protection); found here by bisection, delta(k) falling with k.
`parameters` computes both as ARX's ParameterCalculation does.

The node is either fixed beforehand (data-independent: ARX's generalization degree, each QI at
round(degree x its height)) or chosen by the exponential mechanism (data-dependent: `search_budget` of epsilon
spent on the search, the rest on the anonymization, as ARX splits it): from the top of the lattice, `steps` times,
the current node's predecessors join the candidates, the current node leaves them, and the next is drawn with
probability proportional to exp(epsilon_step / 2 x score), epsilon_step = search_budget / steps, where a node's
score (`Scores`) is a utility of sensitivity 1 (ARX's score functions); the published node is the best-scored
node the walk met.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from ..errors import ConfigError

#: ARX's generalization degrees (DataGeneralizationScheme.GeneralizationDegree): a QI's level is the degree times
#: its hierarchy's height, rounded half up
DEGREES = {"none": 0.0, "low": 0.2, "low_medium": 0.4, "medium": 0.5, "medium_high": 0.6, "high": 0.8, "complete": 1.0}
#: the largest epsilon taken: at 5, k is 2,045 for delta 1e-6 (3 s to compute), at 6 already 5,568 (40 s)
MAX_EPSILON = 5.0
#: the relative error a double's arithmetic may leave in n gamma and k / gamma
ROUNDING = 1e-12
#: a binomial tail's terms past the first are summed until one falls below this share of the sum
TAIL_PRECISION = 1e-18


@dataclass(frozen=True)
class Parameters:
    """What (epsilon, delta) imply: the sampling probability beta and the least class size k."""

    k: int
    beta: float


def parameters(epsilon: float, delta: float) -> Parameters:
    """ARX's k and beta for (epsilon, delta)-differential privacy by sampling (see the module)."""
    check_budget(epsilon, delta)
    beta = 1.0 - math.exp(-epsilon)
    power = math.exp(epsilon)
    gamma = (power - 1.0 + beta) / power
    chernoff = gamma * math.log(gamma / beta) - (gamma - beta)
    tails: dict[int, float] = {}

    def a(n: int) -> float:
        if n not in tails:
            tails[n] = _binomial_tail(n, _floor_below(n * gamma) + 1, beta)
        return tails[n]

    def delta_of(k: int) -> float:
        n = max(math.ceil(k / gamma - 1.0 - ROUNDING * k / gamma), 0)
        found, bound = -math.inf, math.inf
        while found < bound:
            found, bound = max(found, a(n)), math.exp(-n * chernoff)
            n += 1
        return found

    # the first k whose delta is below delta, by doubling then halving: delta(k) does not grow with k (checked for
    # k up to 400 at every epsilon of ARX's tests), so this is ARX's linear scan's k, in log k evaluations instead
    # of k (epsilon 4: 0.5 s instead of 8)
    high = 1
    while not delta_of(high) < delta:
        high *= 2
    low = high // 2  # delta(low) >= delta, or low = 0
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if delta_of(middle) < delta else (middle, high)
    return Parameters(k=high + 1, beta=beta)  # ARX's loop ends one above it


def _floor_below(x: float) -> int:
    """floor(x), one less where x is within rounding of an integer: the floor of the least value x may stand for,
    as ARX's interval arithmetic takes it (with epsilon ln 2, gamma is 3/4 and n gamma an integer every 4th n;
    the lower floor adds a term to the tail, which can only raise delta(k) and so k)."""
    floor = math.floor(x)
    return floor - 1 if x - floor <= ROUNDING * max(1.0, x) else floor


def check_budget(epsilon: object, delta: object) -> tuple[float, float]:
    """epsilon and delta as numbers; ConfigError unless epsilon > 0 and 0 < delta < 1, finite numbers."""
    if not isinstance(epsilon, int | float) or not _number(epsilon) or epsilon <= 0:
        raise ConfigError(f"output.epsilon must be a finite number above 0, got {epsilon!r}; e.g. epsilon: 1.0")
    if epsilon > MAX_EPSILON:
        raise ConfigError(
            f"output.epsilon {epsilon:g} is above {MAX_EPSILON:g}: a guarantee of e^epsilon over {math.exp(5):.0f} "
            f"protects little, and the classes it needs grow past thousands of rows; use at most {MAX_EPSILON:g}"
        )
    if not isinstance(delta, int | float) or not _number(delta) or not 0 < delta < 1:
        raise ConfigError(f"output.delta must be a number between 0 and 1 (exclusive), got {delta!r}; e.g. 1e-6")
    return float(epsilon), float(delta)


def _number(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def _binomial_tail(n: int, first: int, p: float) -> float:
    """P(X >= first) for X ~ Binomial(n, p), first above the mean: the terms from `first` on, each from the last by
    the ratio (n - j) / (j + 1) p / (1 - p), until they no longer count."""
    if first > n:
        return 0.0
    log_term = (
        math.lgamma(n + 1) - math.lgamma(first + 1) - math.lgamma(n - first + 1)
        + first * math.log(p) + (n - first) * math.log1p(-p)
    )  # fmt: skip
    term, total, odds = math.exp(log_term), 0.0, p / (1.0 - p)
    for j in range(first, n + 1):
        total += term
        if term < TAIL_PRECISION * total:
            break
        term *= (n - j) / (j + 1) * odds
    return total


def degree_levels(degree: str, heights: Sequence[int]) -> tuple[int, ...]:
    """Each QI's level at ARX's generalization `degree` (DEGREES): round(factor x height), half up."""
    factor = DEGREES[degree]
    return tuple(min(height, math.floor(factor * height + 0.5)) for height in heights)


def selection_probabilities(scores: Sequence[float], epsilon: float) -> list[float]:
    """The exponential mechanism's probability of each candidate: exp(epsilon / 2 x score), normalized (computed
    from the largest exponent down, as ARX does, so that no exponential overflows)."""
    exponents = [0.5 * epsilon * score for score in scores]
    shift = max(exponents)
    weights = [math.exp(e - shift) for e in exponents]
    total = math.fsum(weights)
    return [w / total for w in weights]


def draw(probabilities: Sequence[float], fraction: float) -> int:
    """The candidate a uniform `fraction` in [0, 1) picks from `probabilities` (inverse of their running sum)."""
    running = 0.0
    for index, probability in enumerate(probabilities):
        running += probability
        if fraction < running:
            return index
    return len(probabilities) - 1  # rounding left the running sum a hair below 1


@dataclass(frozen=True)
class Table:
    """What every score reads of the table: its rows (`rows`, sampled or not), the sample's (`sampled`), the k
    classes are held to, and per QI its hierarchy's height and leaves, and whether its top is one value."""

    rows: int
    sampled: int
    k: int
    heights: tuple[int, ...]
    leaves: tuple[int, ...]
    single_top: tuple[bool, ...] = ()  # per QI: its hierarchy's top is one value (ARX's root)
    targets: tuple[int, ...] = ()  # the classification's target QIs (their positions)


@dataclass(frozen=True)
class Release:
    """A node's release of the sample (classes below k suppressed): the sample's tuples suppressed, the released
    classes, the sum of their sizes squared, and per QI the released tuples' certainty penalty (the sum of each
    one's (leaves under its value - 1) / (leaves - 1)), and where the score reads them, per QI the squared sizes
    of the released tuples' groups by its value."""

    node: tuple[int, ...]
    suppressed: int
    classes: int
    squares: float
    penalties: tuple[float, ...]
    value_squares: tuple[float, ...] = ()  # per QI, over the released tuples grouped by its value: sizes squared
    #: per target QI, over the released classes grouped by the other QIs, the most frequent value's count, summed
    target_tops: tuple[float, ...] = ()

    def out(self, table: Table) -> int:
        """The table's tuples the release leaves out: the sample's suppressed ones and every unsampled one."""
        return self.suppressed + table.rows - table.sampled


def _per_k(table: Table) -> float:
    """The sensitivity of the scores that grow with the suppressed tuples, by record: k - 1 (1 for k = 1)."""
    return float(table.k - 1) if table.k > 1 else 1.0


def loss_score(release: Release, table: Table) -> float:
    """ARX's score of loss (MetricMDNMLoss.getScore): minus the released tuples' shares of each QI's domain (leaves
    under the value / leaves) and 1 per QI for every tuple left out, over the QIs and k - 1."""
    released = table.sampled - release.suppressed
    shares = math.fsum(
        ((leaves - 1) * penalty + released) / leaves for leaves, penalty in zip(table.leaves, release.penalties)
    )
    d = len(table.heights)
    return -(shares + d * release.out(table)) / d / _per_k(table)


def precision_score(release: Release, table: Table) -> float:
    """ARX's score of precision (MetricMDNMPrecision.getScore): minus, per QI, the released tuples times the
    node's level over the height, plus every tuple left out, over the QIs and k - 1."""
    released, out = table.sampled - release.suppressed, release.out(table)
    total = math.fsum(
        released * (level / height if height else 0.0) + out for level, height in zip(release.node, table.heights)
    )
    return -total / len(table.heights) / _per_k(table)


def _class_sensitivity(table: Table) -> float:
    """The sensitivity of the scores summing squared class sizes: 5 for k = 1, else k^2 / (k - 1) + 1."""
    k = table.k
    return 5.0 if k == 1 else k * k / (k - 1) + 1.0


def discernibility_score(release: Release, table: Table) -> float:
    """ARX's score of discernibility (MetricSDNMDiscernability.getScore): minus the released classes' sizes
    squared and the table's rows per tuple left out, over the rows times the sensitivity."""
    penalty = table.rows * release.out(table) + release.squares
    return -penalty / (table.rows * _class_sensitivity(table))


def entropy_score(release: Release, table: Table) -> float:
    """ARX's score of non-uniform entropy (MetricMDNUEntropyPrecomputed.getScore): per QI, the released tuples'
    values' counts squared, except where the value is the hierarchy's single top (then, as for every tuple left
    out, the table's rows per tuple), over the rows, the QIs and the sensitivity. (ARX compares the values'
    codes with the top's, so a label equal to the top's below it counts as the top too; sqlanon counts the top
    level alone.)"""
    released, out = table.sampled - release.suppressed, release.out(table)
    total = 0.0
    for level, height, single, squares in zip(release.node, table.heights, table.single_top, release.value_squares):
        total += (table.rows * released if single and level == height else squares) + table.rows * out
    return -total / (table.rows * len(table.heights)) / _class_sensitivity(table)


def classification_score(release: Release, table: Table) -> float:
    """ARX's score of classification with QI targets (MetricSDClassification.getScore): per target, over the
    released classes grouped by the other QIs, the count of the target's most frequent value, summed, times 1 less
    the target's level over its height; over k times the targets."""
    total = 0.0
    for target, tops in zip(table.targets, release.target_tops, strict=True):
        height = table.heights[target]
        total += tops * (1.0 - release.node[target] / height if height else 1.0)
    return total / (table.k * len(table.targets))


def aecs_score(release: Release, table: Table) -> float:
    """ARX's score of the average class size (MetricSDAECS.getScore): the released classes, and one more where a
    tuple is left out (sensitivity 1)."""
    return float(release.classes + (1 if release.out(table) else 0))


#: the utility a search maximizes, by name (`output.search.score`): each a function of sensitivity 1
SCORES = {
    "loss": loss_score,
    "precision": precision_score,
    "entropy": entropy_score,
    "discernibility": discernibility_score,
    "aecs": aecs_score,
    "classification": classification_score,
}


@dataclass
class Walk:
    """The exponential mechanism's walk down the lattice: the nodes it stood on (the top first), each node's
    score it computed, and the best-scored node it stood on (the published one; between equal scores, the
    lower)."""

    pivots: list[tuple[int, ...]]
    scores: dict[tuple[int, ...], float]

    @property
    def best(self) -> tuple[int, ...]:
        return max(self.pivots, key=lambda node: (self.scores[node], -sum(node)))


def walk(
    top: tuple[int, ...],
    score: Callable[[list[tuple[int, ...]]], dict[tuple[int, ...], float]],
    *,
    steps: int,
    epsilon: float,
    fractions: Iterator[float],
) -> Walk:
    """ARX's data-dependent search (DataDependentEDDPAlgorithm): from `top`, `steps` times, the pivot's
    predecessors (one QI a level lower) join the candidates and the pivot leaves them; the next pivot is drawn
    from them by the exponential mechanism of `epsilon` (the search's budget over the steps), with the uniform
    `fractions`. `score` gives the scores of the nodes it is handed (a batch per step, each node once). Stops
    early where no candidate is left."""
    scores = score([top])
    candidates: dict[tuple[int, ...], float] = {top: scores[top]}
    pivot, pivots = top, [top]
    for _ in range(steps):
        below = [p for p in predecessors(pivot) if p not in candidates]  # a former pivot may come back, as in ARX
        unscored = [p for p in below if p not in scores]
        if unscored:
            scores |= score(unscored)
        candidates |= {p: scores[p] for p in below}
        del candidates[pivot]
        if not candidates:
            break
        nodes = list(candidates)
        chosen = draw(selection_probabilities([candidates[n] for n in nodes], epsilon), next(fractions))
        pivot = nodes[chosen]
        pivots.append(pivot)
    return Walk(pivots=pivots, scores=scores)


def predecessors(node: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The nodes one QI a level below `node`."""
    return [node[:i] + (level - 1,) + node[i + 1 :] for i, level in enumerate(node) if level > 0]


def keyed_fractions(key: bytes, purpose: str) -> Iterator[float]:
    """Uniform fractions in [0, 1), drawn from `key` for `purpose`: the first 52 bits of HMAC-SHA256(key,
    purpose and a counter). The same key gives the same fractions; without it they cannot be told from random."""
    for counter in itertools.count():
        digest = hmac.new(key, f"{purpose}#{counter}".encode(), hashlib.sha256).digest()
        yield (int.from_bytes(digest[:8], "big") >> 12) / 2**52
