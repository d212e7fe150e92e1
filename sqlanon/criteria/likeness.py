"""Bounds on how far a class moves the belief in each sensitive value, relative to the table: beta-likeness (Cao and
Karras, "Publishing microdata with a robust privacy guarantee", VLDB 2012; ARX's BasicBLikeness and
EnhancedBLikeness) and delta-disclosure privacy (Brickell and Shmatikov; ARX's DDisclosurePrivacy), with ARX's
semantics."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

from ..errors import ConfigError
from .base import EPSILON, Criterion, positive, spec_of
from .view import FrequencySetView, SqlFragment, share


class BetaLikeness(Criterion):
    """For every value s a class holds, with p its share of the table and q its share of the class, the relative
    gain (q - p) / p is at most beta (`basic`), or at most min(beta, -ln p) (`enhanced`: the paper's answer to
    frequent values, whose gain beta would let a class hold nothing else).

    As in ARX, the values the class lacks are not bounded (their gain is -1). Not monotone under suppression (nor
    is t-closeness): merging classes averages each value's share, so a merged class satisfies it where every
    part did, but a part that violated can pass once merged, and its tuples stop counting as suppressed."""

    name = "beta_likeness"
    reads_distribution = True
    reads_table_counts = True
    figure_name = "max_gain"
    figure_sql = "MAX(stat)"
    statistic_columns = ("stat", "excess")
    VARIANTS = ("basic", "enhanced")

    def __init__(self, *, attribute: str, beta: float, variant: str = "enhanced"):
        self.attribute = attribute
        self.beta = positive(self.name, "beta", beta)
        if variant not in self.VARIANTS:
            raise ConfigError(f"{self.name}: variant {variant!r} is unknown; choose one of {', '.join(self.VARIANTS)}")
        self.variant = variant

    @classmethod
    def from_config(cls, spec: Any) -> BetaLikeness:
        return cls(**spec_of(cls.name, spec, {"attribute", "beta"}, {"variant"}))

    def params(self) -> dict[str, Any]:
        return {"attribute": self.attribute, "beta": self.beta, "variant": self.variant}

    def guarantee(self) -> str:
        bound = "beta" if self.variant == "basic" else "the smaller of beta and -ln of its share in the table"
        return (
            f"in every group, each value of {self.attribute} is at most {self.beta} times more frequent (relative to "
            f"its share in the whole table; {self.variant} likeness: at most {bound}) than in the table: a person's "
            "group raises the confidence in any value by a bounded factor"
        )

    def sensitive_attributes(self) -> list[str]:
        return [self.attribute]

    def bound(self, share_of_table: float) -> float:
        """The largest relative gain a value of this share of the table may have in a class."""
        if self.variant == "basic":
            return self.beta
        return min(self.beta, -math.log(share_of_table))

    def least_class_size(self, table_counts: dict[str, dict[str | None, int]]) -> int:
        """A class's shares add up to 1, and each value s it holds has at most p_s (1 + bound(p_s)): a class of n
        tuples holds at most n values, so it passes only if the n largest p_s (1 + bound(p_s)) add up to 1 (the
        check's slack allowed)."""
        return _least_holding(table_counts.get(self.attribute), lambda p: p * (1 + self.bound(p) + 2 * EPSILON))

    def violation(self) -> SqlFragment:
        return SqlFragment("excess > :blike_eps", {"blike_eps": EPSILON})

    def class_statistic(self, fs: FrequencySetView) -> SqlFragment:
        """Per class: stat, the largest relative gain of a value it holds, and excess, the largest by which a
        value's gain exceeds its bound."""
        gain = f"({share('v.c', 'v.n')} - q.q) / q.q"
        bound = ":blike_beta" if self.variant == "basic" else "LEAST(:blike_beta, -LN(q.q))"
        statistic = fs.against_table(self.attribute, f"MAX({gain}) AS stat, MAX({gain} - {bound}) AS excess", "bl_")
        return SqlFragment(statistic.sql, {**statistic.params, "blike_beta": float(self.beta)})


class DeltaDisclosure(Criterion):
    """delta-disclosure privacy (Brickell and Shmatikov, KDD 2008), as ARX's DDisclosurePrivacy: for every value s a
    class holds, |log2(q / p)| < delta, q its share of the class and p of the table (ARX's base-2 logarithm; the
    values a class lacks are not bounded, as in ARX).

    Not monotone even without suppression: merging a class that lacks a value with one where it is just within
    the bound makes it rarer than the bound allows. So no search prunes on a passing node (SearchContext): the
    candidates left by its least class size are each checked."""

    name = "delta_disclosure"
    monotone_under_generalization = False
    reads_distribution = True
    reads_table_counts = True
    figure_name = "max_disclosure"
    figure_sql = "MAX(stat)"

    def __init__(self, *, attribute: str, delta: float):
        self.attribute = attribute
        self.delta = positive(self.name, "delta", delta)

    @classmethod
    def from_config(cls, spec: Any) -> DeltaDisclosure:
        return cls(**spec_of(cls.name, spec, {"attribute", "delta"}))

    def params(self) -> dict[str, Any]:
        return {"attribute": self.attribute, "delta": self.delta}

    def guarantee(self) -> str:
        return (
            f"in every group, each value of {self.attribute} it holds has a share within a factor 2^{self.delta} of "
            "its share in the whole table (either way): a person's group moves the belief in any value it holds by "
            "a bounded factor"
        )

    def sensitive_attributes(self) -> list[str]:
        return [self.attribute]

    def least_class_size(self, table_counts: dict[str, dict[str | None, int]]) -> int:
        """Each value a class holds has a share below 2^delta times its share p of the table, and the shares add up
        to 1: a class of n tuples (at most n values) passes only if the n largest p exceed 2^-delta."""
        return _least_holding(table_counts.get(self.attribute), lambda p: p * 2.0**self.delta)

    def violation(self) -> SqlFragment:
        # strict, as ARX's: a value at the bound violates (and so does one within the slack below it)
        return SqlFragment("stat > :ddisc_delta - :ddisc_eps", {"ddisc_delta": float(self.delta), "ddisc_eps": EPSILON})

    def class_statistic(self, fs: FrequencySetView) -> SqlFragment:
        """Per class: stat, the largest |log2(q / p)| of a value it holds."""
        return fs.against_table(self.attribute, f"MAX(ABS(LN({share('v.c', 'v.n')} / q.q))) / LN(2.0) AS stat", "dd_")


def _least_holding(counts: dict[str | None, int] | None, most: Callable[[float], float]) -> int:
    """The least n for which the n largest most(p), over the shares p of the table's values, add up to 1 (the
    check's slack allowed): a class's shares add up to 1, and it holds at most n values, each at most most(p) of
    the class; 1 where the counts were not read."""
    if not counts:
        return 1
    total = sum(counts.values())
    room = sorted((most(count / total) for count in counts.values()), reverse=True)
    return next((n for n, held in enumerate(itertools.accumulate(room), 1) if held >= 1 - 2 * EPSILON), len(counts))
