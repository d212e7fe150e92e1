"""l-diversity (Machanavajjhala et al.): distinct, entropy (with don't-care values), recursive (c, l), its
positive-disclosure variants, and multi-attribute l-diversity; one sensitive attribute each but the last."""

from __future__ import annotations

import math
from typing import Any, ClassVar

from ..errors import ConfigError
from .base import EPSILON, Criterion, in_list, number, positive, spec_of, values_of
from .view import FrequencySetView, SqlFragment, count_sum, share


class LDiversity(Criterion):
    """One sensitive attribute and an l; the instantiations differ in their statistic."""

    extra_keys: ClassVar[set[str]] = set()

    def __init__(self, attribute: str, l: int):
        self.attribute = attribute
        self.l = number(self.name, "l", l, minimum=1, whole=True)

    @classmethod
    def from_config(cls, spec: Any) -> LDiversity:
        spec = spec_of(cls.name, spec, {"attribute", "l"} | cls.required_keys(), cls.extra_keys)
        return cls(**spec)

    @classmethod
    def required_keys(cls) -> set[str]:
        return set()

    def params(self) -> dict[str, Any]:
        return {"attribute": self.attribute, "l": self.l}

    def sensitive_attributes(self) -> list[str]:
        return [self.attribute]

    def guarantee(self) -> str:
        """The variants differ in how they count "well represented" (domain.md); each says at least l values."""
        kind = {"distinct_l_diversity": "different", "entropy_l_diversity": "well-represented (entropy)"}
        return (
            f"every group holds at least {self.l} {kind.get(self.name, 'well-represented')} values of "
            f"{self.attribute} ({self.describe()}): knowing a person's group does not tell their {self.attribute}"
        )

    def holders_guard(self) -> int:
        return int(self.l) - 1

    def check_domain(self, attribute: str, distinct_values: int, numeric: bool) -> None:
        if attribute == self.attribute and self.l > distinct_values:
            raise ConfigError(
                f"{self.name}: l={self.l} is larger than the {distinct_values} distinct values of "
                f"{attribute!r}; no class can be {self.l}-diverse; choose l <= {distinct_values}"
            )

    def _per_class(
        self,
        fs: FrequencySetView,
        stat: str,
        params: dict[str, Any] | None = None,
        ranked: bool = False,
        also: str = "",
    ) -> SqlFragment:
        """`stat`, an aggregate over the class's values' counts v.c (and their ranks v.r when `ranked`), and the
        aggregates `also` (", expression AS name", ...)."""
        cls = ", ".join(f"v.{c}" for c in fs.class_columns)
        counts = fs.value_counts(self.attribute) if ranked else fs.counts(self.attribute)
        return SqlFragment(
            f"SELECT {cls}, {count_sum('v.c')} AS n, {stat} AS stat{also} FROM ({counts}) v GROUP BY {cls}",
            params or {},
        )


class DistinctLDiversity(LDiversity):
    """At least l distinct sensitive values in every class."""

    name = "distinct_l_diversity"
    monotone_under_suppression = True  # fewer than l values in a merged class: fewer in each part too
    figure_name = "distinct_l"

    def class_statistic(self, fs: FrequencySetView) -> SqlFragment:
        return self._per_class(fs, "COUNT(*)")

    def violation(self) -> SqlFragment:
        return SqlFragment("stat < :distinct_l", {"distinct_l": self.l})


class EntropyLDiversity(LDiversity):
    """Entropy of every class's sensitive values at least log(l); with a don't-care set Y,
    the adjusted entropy (don't-care counts lowered where that raises the entropy).

    The entropy is Shannon's, H = log n - (sum c log c) / n, or (`estimator: grassberger`, as ARX's
    EntropyEstimator.GRASSBERGER) Grassberger's correction for small samples, G(n) - (sum c G(c)) / n, which
    then also asks for l distinct values, as ARX does. Grassberger's is not monotone under generalization: a
    class of distinct values merged with its twin loses G(2) - G(1) = 2 per value against G(2n) - G(n), about
    log 2 (ARX prunes as if it were)."""

    name = "entropy_l_diversity"
    figure_name = "entropy_l"
    figure_sql = "EXP(MIN(stat))"
    extra_keys: ClassVar[set[str]] = {"dont_care", "estimator"}
    ESTIMATORS = ("shannon", "grassberger")

    def __init__(self, attribute: str, l: int, dont_care: list[str] | None = None, estimator: str = "shannon"):
        super().__init__(attribute, l)
        self.dont_care = values_of(self.name, "dont_care", dont_care)
        if estimator not in self.ESTIMATORS:
            raise ConfigError(
                f"{self.name}: estimator {estimator!r} is unknown; choose one of {', '.join(self.ESTIMATORS)}"
            )
        if estimator == "grassberger" and self.dont_care:
            raise ConfigError(f"{self.name}: the grassberger estimator takes no dont_care set; drop one of them")
        self.estimator = estimator
        if estimator == "grassberger":
            self.monotone_under_generalization = False
            self.statistic_columns = ("stat", "m")

    def params(self) -> dict[str, Any]:
        return {
            **super().params(),
            **({"dont_care": self.dont_care} if self.dont_care else {}),
            **({"estimator": self.estimator} if self.estimator != "shannon" else {}),
        }

    def named_values(self) -> dict[str, list[str]]:
        return {self.attribute: self.dont_care}

    def class_statistic(self, fs: FrequencySetView) -> SqlFragment:
        if self.estimator == "grassberger":
            return self._grassberger(fs)
        if not self.dont_care:  # H = log n - (sum c log c) / n
            n = count_sum("v.c")
            return self._per_class(fs, f"LN({n}) - SUM(v.c * LN(v.c)) / {n}")
        return self._adjusted(fs)

    def violation(self) -> SqlFragment:
        params = {"entropy_l": float(self.l), "entropy_eps": EPSILON}
        if self.estimator == "grassberger":  # and l distinct values
            return SqlFragment("stat < LN(:entropy_l) - :entropy_eps OR m < :entropy_l", params)
        return SqlFragment("stat < LN(:entropy_l) - :entropy_eps", params)

    def _grassberger(self, fs: FrequencySetView) -> SqlFragment:
        """Per class: stat, G(n) - (sum c G(c)) / n, and m, its number of values."""
        n = count_sum("v.c")
        stat = f"{grassberger_g(n)} - SUM(v.c * {grassberger_g('v.c')}) / {n}"
        return self._per_class(fs, stat, also=", COUNT(*) AS m")

    def monotone_part(self) -> list[Criterion]:
        """An entropy of log l needs l distinct values (m values give at most log m); with don't-care values the
        adjusted entropy needs no such thing."""
        return [] if self.dont_care else [DistinctLDiversity(self.attribute, self.l)]

    def _adjusted(self, fs: FrequencySetView) -> SqlFragment:
        """Adjusted entropy: don't-care counts, smallest first, join the fixed set while their log is at most
        the log-entropic mean (sum c log c / sum c) of the fixed set and the counts joined before them; the rest
        are lowered to exp(mean).

        One ordered window, the fixed values first, then the don't-care counts ascending: the sums over the rows
        before a count are those of the joined ones up to the first count that does not join, and every later
        count fails as well (a failed count lifts the mean, but not up to its own log, which later logs are not
        below), so a count joins exactly when it passes against every row before it. Where rounding decides a
        tie, the count's log is the mean itself and joining or lowering it gives the same entropy.
        Internal column names must not look like class columns (a<i>, g<i>, s<j>).
        """
        cls = fs.classes
        in_y = in_list("s", self.dont_care, "entropy_y")
        before = f"PARTITION BY {cls} ORDER BY dc, c ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING"
        ordered = (
            f"SELECT {cls}, c, dc, SUM(c * LN(c)) OVER ({before}) AS a_prev, SUM(c) OVER ({before}) AS b_prev "
            f"FROM (SELECT {cls}, c, ({in_y.sql}) AS dc FROM ({fs.counts(self.attribute)}) vc) f"
        )
        lowered = "dc AND b_prev > 0 AND LN(c) > a_prev / b_prev"  # b_prev is NULL on a class's first row: joins
        totals = (
            f"SELECT {cls}, {count_sum('c')} AS n, SUM(CASE WHEN {lowered} THEN 0 ELSE c * LN(c) END) AS a, "
            f"SUM(CASE WHEN {lowered} THEN 0 ELSE c END) AS b, "
            f"SUM(CASE WHEN {lowered} THEN 1 ELSE 0 END) AS lowered FROM ({ordered}) o GROUP BY {cls}"
        )
        # lowered counts are exp(mean) each: Z = b + lowered * e^m, sum z log z = a + lowered * e^m * m
        z = "(b + lowered * EXP(a / b))"
        stat = f"LN({z}) - (a + lowered * EXP(a / b) * (a / b)) / {z}"
        return SqlFragment(f"SELECT {cls}, n, {stat} AS stat FROM ({totals}) tot", in_y.params)


class RecursiveLDiversity(LDiversity):
    """Recursive (c,l)-diversity: r1 < c (r_l + ... + r_m), counts sorted descending.

    With a don't-care set Y it is positive-disclosure recursive (c,l)-diversity:
    the bound applies to the most frequent value outside Y (domain.md, section 2).
    The statistic is r / (its tail): the criterion holds for every c above it.
    """

    name = "recursive_l_diversity"
    figure_name = "smallest_c"
    figure_sql = "CASE WHEN COUNT(*) > COUNT(stat) THEN NULL ELSE MAX(stat) END"
    extra_keys: ClassVar[set[str]] = {"dont_care"}

    def __init__(self, *, attribute: str, c: float, l: int, dont_care: list[str] | None = None):
        super().__init__(attribute, l)
        self.c = positive(self.name, "c", c)
        self.dont_care = values_of(self.name, "dont_care", dont_care)

    @classmethod
    def required_keys(cls) -> set[str]:
        return {"c"}

    def params(self) -> dict[str, Any]:
        return {
            "attribute": self.attribute,
            "c": self.c,
            "l": self.l,
            **({"dont_care": self.dont_care} if self.dont_care else {}),
        }

    def named_values(self) -> dict[str, list[str]]:
        return {self.attribute: self.dont_care}

    def class_statistic(self, fs: FrequencySetView) -> SqlFragment:
        if not self.dont_care:
            if self.l == 1:  # holds by definition
                return self._per_class(fs, "0.0")
            ratio = share("MAX(v.c)", "NULLIF(SUM(CASE WHEN v.r >= :rec_l THEN v.c ELSE 0 END), 0)")
            return self._per_class(fs, ratio, {"rec_l": self.l}, ranked=True)
        return _positive_disclosure_ratio(fs, self.attribute, self.dont_care, self.l, "rec")

    def violation(self) -> SqlFragment:
        return SqlFragment("(stat IS NULL OR stat >= :rec_c)", {"rec_c": float(self.c)})

    def monotone_part(self) -> list[Criterion]:
        """r1 < c (r_l + ... + r_m) needs an l-th value (positive disclosure, with don't-care values, does not)."""
        return [] if self.dont_care else [DistinctLDiversity(self.attribute, self.l)]


def _positive_disclosure_ratio(
    fs: FrequencySetView, attribute: str, dont_care: list[str], l: int, prefix: str, extra: str = ""
) -> SqlFragment:
    """r_y over its tail, s_y the most frequent value outside Y at rank y (ties rank values outside Y first):
    y <= l-1: tail = r_l + ... + r_m;  y > l-1: tail = r_{l-1} + ... + r_m - r_y.  0 when no value is outside Y.
    `extra`: more aggregates over the class's values (s, c), selected after stat."""
    cls = fs.classes
    in_y = in_list("s", dont_care, f"{prefix}_y")
    ranked = (
        f"SELECT {cls}, s, c, dc, ROW_NUMBER() OVER (PARTITION BY {cls} ORDER BY c DESC, dc, s) AS r "
        f"FROM (SELECT vc.*, ({in_y.sql}) AS dc FROM ({fs.counts(attribute)}) vc) f"
    )
    y = "MIN(CASE WHEN NOT dc THEN r END)"
    r_y = "MAX(CASE WHEN NOT dc THEN c END)"  # rank y is the first outside Y: the largest count outside Y
    tail_low = f"SUM(CASE WHEN r >= :{prefix}_l THEN c ELSE 0 END)"
    tail_high = f"SUM(CASE WHEN r >= :{prefix}_l - 1 THEN c ELSE 0 END) - {r_y}"  # y > l-1: r_y is in that sum
    stat = (
        f"CASE WHEN {y} IS NULL THEN 0.0 "
        f"WHEN {y} <= :{prefix}_l - 1 THEN {share(r_y, f'NULLIF({tail_low}, 0)')} "
        f"ELSE {share(r_y, f'NULLIF({tail_high}, 0)')} END"
    )
    return SqlFragment(
        f"SELECT {cls}, {count_sum('c')} AS n, {stat} AS stat{extra} FROM ({ranked}) rk GROUP BY {cls}",
        {**in_y.params, f"{prefix}_l": l},
    )


class NpdRecursiveLDiversity(LDiversity):
    """npd-recursive (c1,c2,l): pd-recursive (c1,l) with Y, and every value of W in at least c2 percent
    of each class."""

    name = "npd_recursive_l_diversity"
    statistic_columns = ("stat", "w_share")
    figure_name = "smallest_c1"
    figure_sql = RecursiveLDiversity.figure_sql
    extra_keys: ClassVar[set[str]] = {"dont_care"}

    def __init__(
        self, *, attribute: str, c1: float, c2: float, l: int, w: list[str], dont_care: list[str] | None = None
    ):
        super().__init__(attribute, l)
        self.c1 = positive(self.name, "c1", c1)
        self.c2 = number(self.name, "c2", c2, minimum=0, maximum=100)
        self.w = values_of(self.name, "w", w)
        self.dont_care = values_of(self.name, "dont_care", dont_care)

    @classmethod
    def required_keys(cls) -> set[str]:
        return {"c1", "c2", "w"}

    def params(self) -> dict[str, Any]:
        return {
            "attribute": self.attribute,
            "c1": self.c1,
            "c2": self.c2,
            "l": self.l,
            "w": self.w,
            **({"dont_care": self.dont_care} if self.dont_care else {}),
        }

    def named_values(self) -> dict[str, list[str]]:
        return {self.attribute: self.dont_care + self.w}

    def class_statistic(self, fs: FrequencySetView) -> SqlFragment:
        """stat: the pd ratio; w_share: the smallest share (percent) of a W value in the class (0 when one is
        missing)."""
        in_w = in_list("s", self.w, "npd_w")
        shares = (
            f", 100.0 * MIN(CASE WHEN {in_w.sql} THEN c END) / SUM(c) AS w_share, "
            f"COUNT(CASE WHEN {in_w.sql} THEN 1 END) AS present"
        )
        pd = _positive_disclosure_ratio(fs, self.attribute, self.dont_care, self.l, "npd", shares)
        sql = (
            f"SELECT {fs.classes}, n, stat, CASE WHEN present < :npd_wcount THEN 0.0 ELSE w_share END AS w_share "
            f"FROM ({pd.sql}) p"
        )
        return SqlFragment(sql, {**pd.params, **in_w.params, "npd_wcount": len(self.w)})

    def violation(self) -> SqlFragment:
        return SqlFragment(
            "(stat IS NULL OR stat >= :npd_c1 OR w_share < :npd_c2)",
            {"npd_c1": float(self.c1), "npd_c2": float(self.c2)},
        )


INSTANTIATIONS: dict[str, type[LDiversity]] = {
    "distinct": DistinctLDiversity,
    "entropy": EntropyLDiversity,
    "recursive": RecursiveLDiversity,
    "npd": NpdRecursiveLDiversity,
}


class MultiAttributeLDiversity(Criterion):
    """Definition 4.5: for each sensitive attribute S_i, l-diversity of S_i with the QIs and all other
    sensitive attributes as the class, in any instantiation (its options pass through). The statistic
    counts (sub-class, attribute) pairs that violate."""

    # Not monotone under suppression, even with the distinct instantiation: a QI class violates when
    # one of its (QI + other sensitive values) subclasses does, and after a merge that subclass may lie
    # in only some of the merged classes, so the violating tuples can grow upward.
    name = "multi_attribute_l_diversity"
    figure_name = "violating_subclasses"
    figure_sql = "MAX(stat)"

    def __init__(self, attributes: list[str], instantiation: str = "distinct", **options: Any):
        if not isinstance(attributes, list) or len(attributes) < 2 or not all(isinstance(a, str) for a in attributes):
            raise ConfigError(f"{self.name}: attributes must list two or more sensitive columns")
        if instantiation not in INSTANTIATIONS:
            raise ConfigError(
                f"{self.name}: instantiation {instantiation!r} is unknown; choose one of {', '.join(INSTANTIATIONS)}"
            )
        self.attributes, self.instantiation, self.options = attributes, instantiation, options
        self.inner = [INSTANTIATIONS[instantiation](attribute=a, **options) for a in attributes]

    @classmethod
    def from_config(cls, spec: Any) -> MultiAttributeLDiversity:
        if not isinstance(spec, dict):
            raise ConfigError(f"{cls.name} takes a mapping with attributes, l and instantiation options")
        instantiation = spec.get("instantiation", "distinct")
        kind = INSTANTIATIONS.get(instantiation)
        if kind is None:
            raise ConfigError(
                f"{cls.name}: instantiation {instantiation!r} is unknown; choose one of {', '.join(INSTANTIATIONS)}"
            )
        return cls(
            **spec_of(cls.name, spec, {"attributes", "l"} | kind.required_keys(), {"instantiation"} | kind.extra_keys)
        )

    def params(self) -> dict[str, Any]:
        return {"attributes": self.attributes, "instantiation": self.instantiation, **self.options}

    def named_values(self) -> dict[str, list[str]]:
        return {a: v for inner in self.inner for a, v in inner.named_values().items()}

    def sensitive_attributes(self) -> list[str]:
        return list(self.attributes)

    def check_domain(self, attribute: str, distinct_values: int, numeric: bool) -> None:
        for inner in self.inner:
            inner.check_domain(attribute, distinct_values, numeric)

    def class_statistic(self, fs: FrequencySetView) -> SqlFragment:
        parts, params = list[str](), dict[str, Any]()
        for i, inner in enumerate(self.inner):
            others = [fs.sensitive_columns[a] for a in self.attributes if a != inner.attribute]
            sub = inner.violating_classes(fs.with_classes(others, inner.attribute))
            sql = sub.bound(f"m{i}", params)  # the inner criteria share parameter names
            parts.append(f"SELECT {fs.classes}, NULL AS n, 1 AS bad FROM ({sql}) AS sub{i}")
        # stat: the class's subclasses that violate, counted by grouping the classes with them (a grouping matches
        # NULLs as equal and hashes; a join on IS NOT DISTINCT FROM is a nested loop on PostgreSQL)
        sizes = f"SELECT {fs.classes}, n, 0 AS bad FROM ({fs.class_sizes()}) s"
        sql = (
            f"SELECT {fs.classes}, MAX(n) AS n, SUM(bad) AS stat FROM ({sizes} UNION ALL "
            f"{' UNION ALL '.join(parts)}) c GROUP BY {fs.classes}"
        )
        return SqlFragment(sql, params)

    def violation(self) -> SqlFragment:
        return SqlFragment("stat > 0", {})


#: Euler's constant
EULER_GAMMA = 0.5772156649015329
#: below this count G is read from its exact values (as ARX does), above it from the digamma function's expansion
GRASSBERGER_EXACT = 100


def grassberger_g(count: str) -> str:
    """SQL: Grassberger's G(x) of a count (an integer expression, at least 1), as ARX computes it: G(2k + 1) =
    G(2k) = -gamma - log 2 + sum over j <= k of 2 / (2j - 1), exact up to 100 (constants), and for larger counts
    log(2k) + m (1/24 - m (7/960 - m 31/8064)), m = 1 / k^2."""
    even = f"(({count}) - ({count}) % 2)"
    exact, total = [], -EULER_GAMMA - math.log(2)
    for k in range(GRASSBERGER_EXACT // 2 + 1):
        total += 2 / (2 * k - 1) if k else 0.0
        exact.append(f"WHEN {2 * k} THEN {total!r}")
    m = f"(4.0 / (CAST({even} AS DOUBLE PRECISION) * {even}))"
    expansion = f"LN({even}) + {m} * ({1 / 24!r} - {m} * ({7 / 960!r} - {m} * {31 / 8064!r}))"
    return f"(CASE WHEN {count} <= {GRASSBERGER_EXACT} THEN CASE {even} {' '.join(exact)} END ELSE {expansion} END)"
