"""ARX's quality models as selection metrics: the arithmetic on a node's few sums (no connection; the sums come
from engine.node_releases, in SQL).

Each figure is ARX's own (its class in brackets), with ARX's generalization/suppression factor `gs` (0.5 by
default: both factors 1; below 0.5 suppression weighs less, above it generalization does) and, where the model
has one figure per QI, ARX's aggregate function over them:

- `loss` [MetricMDNMLoss]: per QI, each released tuple's value covers a share of the QI's domain (the hierarchy
  leaves under it / all leaves), times the generalization factor; a suppressed tuple covers its share plus the
  suppression factor times the rest; the sum over tuples is normalized from its least (every tuple one leaf) to
  its most (every tuple the whole domain). Default aggregate: the arithmetic mean (then, with the factor 0.5,
  the normalized certainty penalty `sqlanon analyze` reports as loss); ARX's own default is the geometric mean.
- `aecs` [MetricSDAECS]: rows / (released classes, times the suppression factor, plus the generalization factor
  when tuples are suppressed: the suppressed tuples count as one class). ARX swaps the two factors here on purpose.
- `non_uniform_entropy` [MetricMDNUEntropyPrecomputed, monotonic]: per QI, sum over the table's tuples of
  log2(rows holding the tuple's generalized value / rows holding its original value), times the generalization
  factor: computed on the whole table, whatever is suppressed. Default aggregate: sum.
- `non_uniform_entropy_nm` [MetricMDNUNMEntropyPrecomputed]: the same, plus per QI, times the suppression
  factor, the suppressed tuples' entropy over their generalized values (sum of c log2(S / c)).
- `normalized_entropy` [MetricMDNUNMNormalizedEntropy]: per QI, `non_uniform_entropy_nm` over its most (the table's
  entropy at the top of the hierarchy: every value generalized to one), so within [0, 1]. Default aggregate: sum.
- `precision_loss` [MetricMDPrecision, monotonic]: per QI, the node's level over the hierarchy's height, times the
  generalization factor, whatever is suppressed. Default aggregate: the arithmetic mean.
- `precision_loss_nm` [MetricMDNMPrecision]: per QI, over the rows, the released tuples' level / height times the
  generalization factor, and the suppressed tuples' 1 times the suppression factor.
- `classification` [MetricSDClassification]: how badly a classifier trained on the release predicts the `targets`
  (ARX's response variables: sensitive attributes, or QIs, a QI target predicted from the other QIs): per target
  and released class, its tuples outside the class's most frequent value where one value is most frequent (a
  penalty of the generalization factor each), or all of them where several tie (the suppression factor each); per
  suppressed tuple and target, `gs_factor` itself; the sum over the rows times the largest of the three penalties.
- `entropy_loss` [MetricSDNMEntropyBasedInformationLoss]: per released class, the information it loses: the log of
  the product over QIs of its value's share of the domain, over the log of the product of the domains' sizes,
  plus 1 (0: every value one leaf, 1: every value the whole domain), which is the sum over QIs of ln(leaves under
  the value) over the sum of ln(leaves); summed over the released tuples, times the generalization factor, plus
  the suppressed tuples times the suppression factor.
- `publisher_payout` [MetricSDNMPublisherPayout]: what the publisher forgoes of its best payout (the job's
  `cost_benefit`: each tuple's publisher_benefit): a released tuple's payout is the benefit times (1 - its class's
  information loss), less publisher_loss times the adversary's success probability (1 / the class's size for the
  prosecutor, 1 / its rows in the population for the journalist) where an attack pays (adversary_gain times that
  probability above adversary_cost); a suppressed tuple forgoes all of it. Summed as ARX does: the generalization
  factor times the benefit times each released tuple's loss, plus publisher_loss times each attacked class's
  tuples times the probability (the prosecutor's: 1 per class); the suppression factor times the benefit per
  suppressed tuple.

Each per-QI figure is rounded down to ten decimals, as ARX rounds it. The aggregates: `sum`, `max`,
`arithmetic_mean`, `geometric_mean` (the product of (v + 1) to the power 1/QIs, minus 1) and `rank` (the figures
largest first, compared element by element).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..errors import ConfigError
from .selection import ARX_AGGREGATES

AGGREGATES = ("sum", "max", "arithmetic_mean", "geometric_mean", "rank")
#: the models a node's levels and the table's marginal counts bound from below, without reading its classes: loss
#: and the non-monotonic (and normalized) entropy by their figure with nothing suppressed (a suppressed tuple's
#: share of the domain is at least what it would be released, g <= 1; the suppressed tuples' entropy is not
#: negative), per QI, so under every aggregate function; the monotonic entropy and precision likewise, where the
#: bound is the figure; the entropy-based loss, the payout and the non-monotonic precision likewise where
#: suppression costs at least generalization (below); AECS by at most as many classes as the product of the QIs'
#: values at their levels, or rows (`aecs_bound`). A selection reads the nodes best bound first, and stops where
#: a bound is worse than the best figure found
BOUNDED = (
    "loss",
    "non_uniform_entropy_nm",
    "non_uniform_entropy",
    "normalized_entropy",
    "precision_loss",
    "precision_loss_nm",
    "aecs",
    "entropy_loss",
    "publisher_payout",
)
#: the models whose bound holds where a suppressed tuple costs at least what it would released (a released tuple
#: costs at most the generalization factor, a suppressed one the suppression factor;
#: QualitySettings.suppression_costs_more)
BOUNDED_IF_SUPPRESSION_COSTS_MORE = ("entropy_loss", "publisher_payout", "precision_loss_nm")
ROUNDING = 1e10  # ARX rounds each figure down to ten decimals (Metric.round)


@dataclass(frozen=True)
class CostBenefit:
    """ARX's cost/benefit model of a publication (ARXCostBenefitConfiguration, its defaults): what the publisher
    gains per published record and loses per record re-identified, what an adversary gains per re-identification
    and what an attack costs them. The job's `cost_benefit:`, read by the profitability criterion and the publisher
    payout metric."""

    publisher_benefit: float = 1200.0
    publisher_loss: float = 300.0
    adversary_gain: float = 300.0
    adversary_cost: float = 4.0

    def __post_init__(self) -> None:
        for key, value in dataclasses.asdict(self).items():
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise ConfigError(f"cost_benefit.{key} must be a finite number >= 0, got {value!r}")

    @property
    def least_unattacked_size(self) -> int:
        """The least class size an adversary gains nothing by attacking (ARX's ProfitabilityProsecutorNoAttack: the
        success probability 1 / size must stay at or below adversary_cost / adversary_gain)."""
        gain, cost = self.adversary_gain, self.adversary_cost
        if gain == 0:
            return 1
        if cost == 0:
            return MAX_CLASS_SIZE
        threshold = gain / cost
        return int(threshold) + 1 if threshold == math.floor(threshold) else math.ceil(threshold)

    @property
    def largest_attacked_size(self) -> int:
        """The largest class size whose records an adversary attacks: gain times 1 / size above the cost, in ARX's
        floating point arithmetic (RiskModelCostBenefit.getExpectedAdversaryPayout), 0 where none."""
        size = min(self.least_unattacked_size, MAX_CLASS_SIZE - 1) + 1
        while size > 0 and not self.adversary_gain * (1.0 / size) - self.adversary_cost > 0:
            size -= 1
        return size


#: who attacks a release, in ARX's profitability models: the prosecutor knows the person is in the table, the
#: journalist only that they are in the population the table (a research subset) was drawn from
ATTACKERS = ("prosecutor", "journalist")
MAX_CLASS_SIZE = 2**31 - 1  # ARX's Integer.MAX_VALUE: no class is large enough


@dataclass(frozen=True)
class QualitySettings:
    """ARX's generalization/suppression factor and aggregate function (None: the metric's own default), the job's
    cost/benefit model and attacker (the publisher payout), and the classification's targets."""

    gs_factor: float = 0.5
    aggregate: str | None = None
    cost_benefit: CostBenefit = field(default_factory=CostBenefit)
    targets: tuple[str, ...] = ()  # the classification's target attributes (ARX's response variables)
    #: the publisher payout's adversary: the prosecutor (knows the person is in the table: success 1 / the class's
    #: size) or the journalist (1 / the class's rows in the population a research subset is drawn from)
    attacker: str = "prosecutor"

    def __post_init__(self) -> None:
        gs = self.gs_factor
        if isinstance(gs, bool) or not isinstance(gs, int | float) or not math.isfinite(gs) or not 0 <= gs <= 1:
            raise ConfigError(
                f"select.gs_factor must be a number from 0 (suppression costs nothing) to 1 (generalization costs "
                f"nothing), got {gs!r}; 0.5 weighs both alike"
            )
        if self.aggregate is not None and self.aggregate not in AGGREGATES:
            raise ConfigError(f"select.aggregate must be one of {', '.join(AGGREGATES)}, got {self.aggregate!r}")

    @property
    def generalization(self) -> float:
        return 1.0 if self.gs_factor <= 0.5 else 1.0 - 2.0 * (self.gs_factor - 0.5)

    @property
    def suppression(self) -> float:
        return 2.0 * self.gs_factor if self.gs_factor < 0.5 else 1.0

    @property
    def suppression_costs_more(self) -> bool:
        return self.suppression >= self.generalization


@dataclass(frozen=True)
class QualitySums:
    """A node's sums the quality models read: `rows` of the table, `suppressed` tuples, released `classes`, and
    per QI: its hierarchy's `leaves`, the released and the suppressed tuples' certainty penalties (sum of n times
    (leaves under the class's value - 1) / (leaves - 1)), the table's entropy term at the node's level (sum over
    the table's values of c log2(c / rows holding its generalized value), at most 0), and over the suppressed
    tuples grouped by their generalized value, the sum of c ln c."""

    rows: int
    suppressed: int
    classes: int
    leaves: Sequence[int]
    released_penalty: Sequence[float]
    suppressed_penalty: Sequence[float]
    entropy_term: Sequence[float]
    suppressed_c_ln_c: Sequence[float]
    #: per QI, the sum over the released tuples of ln(leaves under the value); over the released classes an
    #: adversary attacks (their size, or their rows in the population for the journalist, at most
    #: CostBenefit.largest_attacked_size), their tuples times the attack's success probability (1 / that size; the
    #: prosecutor's: 1 per class)
    released_ln_area: Sequence[float] = ()
    attacked: float = 0.0
    #: per QI, the node's level over the hierarchy's height (0 for a QI of one level), and the table's entropy term
    #: at the top of its hierarchy
    relative_levels: Sequence[float] = ()
    top_entropy_term: Sequence[float] = ()
    #: summed over the classification's targets and the released classes: the tuples outside a class's most
    #: frequent value where one value is the most frequent, and the tuples of classes where several tie
    mispredicted: int = 0
    undecided: int = 0
    #: per QI target of the classification: its scale at the node's level (`classification_scale`), and its
    #: tuples outside a group's most frequent value and of groups where several tie, the released classes grouped
    #: by the other QIs' values
    qi_targets: Sequence[tuple[float, int, int]] = ()


def _round(value: float) -> float:
    return math.floor(value * ROUNDING) / ROUNDING


def aggregate(values: Sequence[float], function: str) -> float | list[float]:
    """The per-QI figures combined as ARX's aggregate function does (weights 1)."""
    if function == "sum":
        return math.fsum(values)
    if function == "max":
        return max(values, default=0.0)
    if function == "arithmetic_mean":
        return math.fsum(values) / len(values) if values else 0.0
    if function == "geometric_mean":
        return math.prod((v + 1.0) ** (1.0 / len(values)) for v in values) - 1.0 if values else 0.0
    assert function == "rank", function
    return sorted(values, reverse=True)


def loss(sums: QualitySums, settings: QualitySettings) -> list[float]:
    """ARX's loss per QI."""
    g, s, n = settings.generalization, settings.suppression, sums.rows
    released, suppressed = n - sums.suppressed, sums.suppressed
    figures = []
    for leaves, kept_penalty, out_penalty in zip(sums.leaves, sums.released_penalty, sums.suppressed_penalty):
        # a tuple's share of the domain, summed: (leaves - 1) / leaves of its penalty, plus 1 / leaves of it
        kept_share = ((leaves - 1) * kept_penalty + released) / leaves
        out_share = ((leaves - 1) * out_penalty + suppressed) / leaves
        total = g * kept_share + out_share + s * (suppressed - out_share)
        least, most = g * n / leaves, n
        figures.append(_round(max((total - least) / (most - least), 0.0)) if most > least else 0.0)
    return figures


def aecs(sums: QualitySums, settings: QualitySettings) -> float:
    """ARX's average equivalence class size (the factors swapped, as ARX swaps them)."""
    groups = sums.classes * settings.suppression
    if sums.suppressed:
        groups += settings.generalization
    return sums.rows / groups if groups else math.inf


def aecs_bound(rows: int, most_classes: int, settings: QualitySettings) -> float:
    """A lower bound of ARX's AECS for a node of at most `most_classes` classes (suppressed tuples or not)."""
    groups = min(rows, most_classes) * settings.suppression + settings.generalization
    return rows / groups if groups else math.inf


def non_uniform_entropy(sums: QualitySums, settings: QualitySettings, *, monotonic: bool) -> list[float]:
    """ARX's non-uniform entropy per QI; not `monotonic`: the suppressed tuples' entropy added."""
    figures = []
    out = sums.suppressed
    for term, c_ln_c in zip(sums.entropy_term, sums.suppressed_c_ln_c):
        value = settings.generalization * term
        if not monotonic and out:
            value += settings.suppression * (c_ln_c - out * math.log(out)) / math.log(2)
        figures.append(_round(-value) if value else 0.0)
    return figures


def normalized_entropy(entropy_nm: list[float], sums: QualitySums, settings: QualitySettings) -> list[float]:
    """ARX's normalized non-uniform entropy per QI: the non-monotonic entropy (`entropy_nm`, per QI) over its most,
    each rounded first as ARX rounds them (0 for a QI of one value)."""
    figures = []
    for value, top in zip(entropy_nm, sums.top_entropy_term):
        most = _round(-settings.generalization * top) if top else 0.0
        figures.append(value / most if most > 0 else 0.0)
    return figures


def precision_loss(sums: QualitySums, settings: QualitySettings, *, monotonic: bool) -> list[float]:
    """ARX's precision per QI; not `monotonic`: the suppressed tuples count as generalized to the top, times the
    suppression factor, and each QI's figure is a mean over the rows."""
    g, s = settings.generalization, settings.suppression
    if monotonic:
        return [g * level for level in sums.relative_levels]
    released = sums.rows - sums.suppressed
    return [(released * level * g + sums.suppressed * s) / sums.rows for level in sums.relative_levels]


def classification(sums: QualitySums, settings: QualitySettings) -> float | None:
    """ARX's classification metric (its penalties: `gs_factor` per suppressed tuple and target, the generalization
    factor per tuple outside its class's unique most frequent value, the suppression factor per tuple of a class
    without one), over the rows times the largest penalty; None without targets. A QI target's classes are the
    released classes grouped by the other QIs' values, its penalties moved towards the largest by its scale (every
    released tuple at the largest where the target is generalized to one value)."""
    if not settings.targets:
        return None
    g, s, gs = settings.generalization, settings.suppression, settings.gs_factor
    most = max(g, s, gs)
    penalty = g * sums.mispredicted + s * sums.undecided + gs * sums.suppressed * len(settings.targets)
    for scale, wrong, tied in sums.qi_targets:
        if scale == 1.0:
            penalty += most * (sums.rows - sums.suppressed)
        else:
            penalty += wrong * (g * (1 - scale) + most * scale) + tied * (s * (1 - scale) + most * scale)
    return penalty / (most * sums.rows) if most * sums.rows else 0.0


def classification_scale(level_sizes: Sequence[int], level: int) -> float:
    """ARX's scale of a QI target's penalties at `level` of its hierarchy (distinct values per level): 0 where the
    values are as distinct as the leaves, 1 where they are one, 0 for a hierarchy of one leaf."""
    leaves = level_sizes[0]
    return 0.0 if leaves == 1 else 1.0 - (level_sizes[level] - 1) / (leaves - 1)


def entropy_loss(sums: QualitySums, settings: QualitySettings) -> float:
    """ARX's entropy-based information loss: each released tuple's class's loss (the sum of ln(area) over the sum of
    ln(leaves), 0 where every domain is one value) times the generalization factor, plus the suppression factor per
    suppressed tuple."""
    most = math.fsum(math.log(leaves) for leaves in sums.leaves)
    released = math.fsum(sums.released_ln_area) / most if most > 0 else 0.0
    return settings.generalization * released + settings.suppression * sums.suppressed


def publisher_payout(loss: float, sums: QualitySums, settings: QualitySettings) -> float:
    """ARX's publisher payout metric, of either attacker: the payout the release forgoes (see the module's
    docstring), from the node's entropy-based `loss`."""
    model = settings.cost_benefit
    attacked = settings.generalization * model.publisher_loss * sums.attacked
    return model.publisher_benefit * loss + attacked


def figures(sums: QualitySums, settings: QualitySettings) -> dict[str, float | list[float] | None]:
    """Every quality model's figure for one node (the per-QI ones combined by the settings' aggregate function, or
    by each model's own: selection.ARX_AGGREGATES)."""

    def combined(name: str, values: list[float]) -> float | list[float]:
        return aggregate(values, settings.aggregate or ARX_AGGREGATES[name])

    entropy_nm, based_on_entropy = non_uniform_entropy(sums, settings, monotonic=False), entropy_loss(sums, settings)
    return {
        "loss": combined("loss", loss(sums, settings)),
        "aecs": aecs(sums, settings),
        "non_uniform_entropy": combined("non_uniform_entropy", non_uniform_entropy(sums, settings, monotonic=True)),
        "non_uniform_entropy_nm": combined("non_uniform_entropy_nm", entropy_nm),
        "normalized_entropy": combined("normalized_entropy", normalized_entropy(entropy_nm, sums, settings)),
        "precision_loss": combined("precision_loss", precision_loss(sums, settings, monotonic=True)),
        "precision_loss_nm": combined("precision_loss_nm", precision_loss(sums, settings, monotonic=False)),
        "classification": classification(sums, settings),
        "entropy_loss": based_on_entropy,
        "publisher_payout": publisher_payout(based_on_entropy, sums, settings),
    }
