"""beta-likeness (basic and enhanced) and delta-disclosure privacy: each class's figures against a reference written
from the definition in Python, the least class size each implies, their settings, and a search where passing is not
closed under generalization; the searches with them against the exhaustive oracle are in test_suppression and
test_criteria (their cases there), against ARX's tags in test_arx."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sqlanon import search
from sqlanon.criteria import criteria_from_config
from sqlanon.errors import ConfigError

from .test_criteria import (
    assert_fails_between_passing_nodes,
    assert_smaller_classes_violate,
    audited,
    bound_max,
    one_table,
)

VALUES = ["a", "b", "c", "d", "e", "f"]


def _gains(cls: list[str], table: dict[str, float]) -> dict[str, float]:
    """Each value the class holds: its relative gain (q - p) / p over its share p of the table."""
    return {s: (cls.count(s) / len(cls) - table[s]) / table[s] for s in set(cls)}


def _bound(variant: str, beta: float, p: float) -> float:
    return beta if variant == "basic" else min(beta, -math.log(p))


def _holds(cls: list[str], table: dict[str, float], variant: str, beta: float) -> bool:
    return all(gain <= _bound(variant, beta, table[s]) + 1e-9 for s, gain in _gains(cls, table).items())


def _shares(classes: list[list[str]]) -> dict[str, float]:
    """Each value's share of the table the classes make."""
    everything = [s for values in classes for s in values]
    return {s: everything.count(s) / len(everything) for s in set(everything)}


def _spec(variant: str, beta: float) -> dict:
    return {"beta_likeness": {"attribute": "s", "beta": beta, "variant": variant}}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    classes=st.lists(st.lists(st.sampled_from(VALUES), min_size=1, max_size=8), min_size=1, max_size=3),
    variant=st.sampled_from(["basic", "enhanced"]),
    beta=st.sampled_from([0.1, 0.5, 1.0, 2.0, 4.0]),
)
def test_beta_likeness_figures_equal_a_python_reference(
    tmp_path_factory, classes: list[list[str]], variant: str, beta: float
):
    """The audit's largest gain (max_gain) and its verdict equal the definition's, computed in Python per class; so
    do a search wave's, the table's shares bound as lists (the class sizes joined or windowed, the values as they
    are or coded)."""
    tmp = tmp_path_factory.mktemp("likeness")
    spec = _spec(variant, beta)
    figure, table = audited(tmp, classes, spec), _shares(classes)
    expected = max(max(_gains(values, table).values()) for values in classes)
    assert figure["max_gain"] == pytest.approx(expected, abs=1e-9)
    assert figure["holds"] == all(_holds(values, table, variant, beta) for values in classes)
    excess = max(
        gain - _bound(variant, beta, table[s]) for values in classes for s, gain in _gains(values, table).items()
    )
    for sizes_by_join, coded in itertools.product((True, False), (False, True)):
        assert bound_max(spec, tmp, classes, sizes_by_join, coded) == pytest.approx(expected, abs=1e-9)
        assert bound_max(spec, tmp, classes, sizes_by_join, coded, "excess") == pytest.approx(excess, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(
    table=st.lists(st.integers(0, 40), min_size=6, max_size=6).filter(any),
    variant=st.sampled_from(["basic", "enhanced"]),
    beta=st.floats(0.01, 6.0),
)
def test_every_class_below_the_least_size_violates_beta_likeness(table: list[int], variant: str, beta: float):
    """Every class smaller than the least size beta-likeness allows (what a search settles first, as k-anonymity)
    violates it by the definition: every class of each smaller size the table's values allow is tried."""
    criterion = criteria_from_config(_spec(variant, beta))[0]
    assert_smaller_classes_violate(
        criterion, dict(zip(VALUES, table)), lambda values, shares: not _holds(values, shares, variant, beta)
    )


def test_enhanced_likeness_bounds_frequent_values_by_minus_ln_of_their_share():
    """A value holding 60% of the table may gain at most -ln 0.6 = 0.51 under enhanced likeness, beta under basic:
    with beta = 1, a class of two such tuples and one other (a gain of 0.11) passes both, one of its tuples alone
    (a gain of 0.67) passes basic only; a rare value's bound is beta in both."""
    table = {"a": 0.6, "b": 0.4}
    assert _holds(["a", "a", "b"], table, "enhanced", 1.0) and _holds(["a", "a", "b"], table, "basic", 1.0)
    assert _holds(["a"], table, "basic", 1.0) and not _holds(["a"], table, "enhanced", 1.0)
    basic, enhanced = (criteria_from_config(_spec(v, 1.0))[0] for v in ("basic", "enhanced"))
    assert basic.bound(0.6) == 1.0 and enhanced.bound(0.6) == pytest.approx(-math.log(0.6))
    assert enhanced.bound(0.01) == 1.0


def test_beta_likeness_holds_at_level_zero_only_where_every_class_does(tmp_path: Path):
    """The search's view of the same figures: a table of two classes passes at level 0 when both are within beta,
    and fails when one is not (no suppression)."""
    close = {"x": ["a", "b"], "y": ["a", "b"]}
    far = {"x": ["a", "a", "a", "b"], "y": ["b", "b", "b", "b"]}  # b: 5/8 of the table, y's gain 0.6
    spec = _spec("basic", 0.5)
    for name, classes, passes in (("close", close, True), ("far", far, False)):
        (tmp_path / name).mkdir()
        assert ((0,) in search(one_table(tmp_path / name, classes, spec)).satisfying) == passes


def _disclosures(cls: list[str], table: dict[str, float]) -> dict[str, float]:
    """Each value the class holds: |log2(q / p)|."""
    return {s: abs(math.log2(cls.count(s) / len(cls) / table[s])) for s in set(cls)}


def _discloses(cls: list[str], table: dict[str, float], delta: float) -> bool:
    return any(value >= delta - 1e-9 for value in _disclosures(cls, table).values())


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    classes=st.lists(st.lists(st.sampled_from(VALUES), min_size=1, max_size=8), min_size=1, max_size=3),
    delta=st.sampled_from([0.5, 1.0, 1.5, 2.0, 3.0]),
)
def test_delta_disclosure_figures_equal_a_python_reference(tmp_path_factory, classes: list[list[str]], delta: float):
    """The audit's largest |log2(q / p)| (max_disclosure) and its verdict, and a search wave's, equal the
    definition's."""
    tmp = tmp_path_factory.mktemp("disclosure")
    spec = {"delta_disclosure": {"attribute": "s", "delta": delta}}
    figure, table = audited(tmp, classes, spec), _shares(classes)
    expected = max(max(_disclosures(values, table).values()) for values in classes)
    assert figure["max_disclosure"] == pytest.approx(expected, abs=1e-9)
    assert figure["holds"] == (not any(_discloses(values, table, delta) for values in classes))
    for sizes_by_join, coded in itertools.product((True, False), (False, True)):
        assert bound_max(spec, tmp, classes, sizes_by_join, coded) == pytest.approx(expected, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(table=st.lists(st.integers(0, 40), min_size=6, max_size=6).filter(any), delta=st.floats(0.05, 4.0))
def test_every_class_below_the_least_size_violates_delta_disclosure(table: list[int], delta: float):
    criterion = criteria_from_config({"delta_disclosure": {"attribute": "s", "delta": delta}})[0]
    assert_smaller_classes_violate(
        criterion, dict(zip(VALUES, table)), lambda values, shares: _discloses(values, shares, delta)
    )


def test_delta_disclosure_may_fail_above_a_passing_node(tmp_path: Path):
    """Not monotone under generalization: a, b and c are 4, 4 and 2 of the table's 10 tuples; classes x (a b),
    y (a a a c) and z (b b b c) each hold their values within a factor 2 of the table (delta = 1), but x and y
    merged (G1, level 1) hold b at 1/6 of the class, 0.42 of its share. Level 0 passes, level 1 does not, the
    top (the table itself) passes: the search prunes on no passing node, with or without suppression."""
    classes = {"x": ["a", "b"], "y": ["a", "a", "a", "c"], "z": ["b", "b", "b", "c"]}
    table = {"a": 0.4, "b": 0.4, "c": 0.2}
    assert not any(_discloses(values, table, 1.0) for values in classes.values())
    assert _discloses(classes["x"] + classes["y"], table, 1.0)
    # with one suppressed tuple as well: G1's b (1 of 6) still falls short, and x's or y's class is 2 tuples or more
    assert_fails_between_passing_nodes(tmp_path, classes, {"delta_disclosure": {"attribute": "s", "delta": 1.0}})


@pytest.mark.parametrize(
    "params, message",
    [
        ({"attribute": "s", "beta": 0}, "beta must be > 0"),
        ({"attribute": "s", "beta": -1.0}, "beta must be > 0"),
        ({"attribute": "s", "beta": float("nan")}, "finite"),
        ({"attribute": "s", "beta": "1"}, "must be a number"),
        ({"attribute": "s", "beta": 1, "variant": "strong"}, "variant 'strong' is unknown"),
        ({"attribute": "s"}, "missing key 'beta'"),
        ({"attribute": "s", "beta": 1, "delta": 2}, "unknown key 'delta'"),
    ],
)
def test_bad_beta_likeness_settings_are_refused(params: dict, message: str):
    with pytest.raises(ConfigError, match=message):
        criteria_from_config({"beta_likeness": params})


@pytest.mark.parametrize(
    "params, message",
    [
        ({"attribute": "s", "delta": 0}, "delta must be > 0"),
        ({"attribute": "s", "delta": float("inf")}, "finite"),
        ({"attribute": "s"}, "missing key 'delta'"),
    ],
)
def test_bad_delta_disclosure_settings_are_refused(params: dict, message: str):
    with pytest.raises(ConfigError, match=message):
        criteria_from_config({"delta_disclosure": params})
