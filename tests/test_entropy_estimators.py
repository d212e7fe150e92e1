"""Entropy l-diversity with Grassberger's estimator (ARX's EntropyEstimator.GRASSBERGER): G against its definition
and ARX's constants, each class's figures against a reference in Python, a table where it fails above a passing
node, and its settings; the searches against the exhaustive oracle are in test_criteria (its random-table case),
against ARX's tags in test_arx."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sqlanon.criteria import criteria_from_config
from sqlanon.criteria.l_diversity import grassberger_g
from sqlanon.errors import ConfigError

from .test_criteria import assert_fails_between_passing_nodes, audited, bound_max

#: ARX's own G_1, G_2, G_4 and G_100 (EntropyLDiversity.G_PRECOMPUTED)
ARX_G = {1: -1.2703628454614782, 2: 0.7296371545385218, 4: 1.3963038212051886, 100: 4.605186851488337}


def _g(n: int) -> float:
    """G(n) from its definition: G(2k + 1) = G(2k) = -gamma - log 2 + sum over j <= k of 2 / (2j - 1)."""
    return -0.5772156649015329 - math.log(2) + sum(2 / (2 * j - 1) for j in range(1, n // 2 + 1))


def grassberger_entropy(counts: list[int]) -> float:
    """G(n) - (sum of c G(c)) / n over a class's counts of each value."""
    n = sum(counts)
    return _g(n) - sum(c * _g(c) for c in counts) / n


def _entropy(values: list[str]) -> float:
    return grassberger_entropy([values.count(s) for s in set(values)])


def _holds(values: list[str], l: int) -> bool:
    return len(set(values)) >= l and _entropy(values) >= math.log(l) - 1e-9


def test_g_equals_its_definition_and_arx_constants():
    """The SQL's G, exact constants up to 100 and the digamma expansion above, within 1e-9 of the sum that defines
    it for every count up to 400, and equal to ARX's own constants."""
    counts = list(range(1, 401))
    with sa.create_engine("duckdb:///:memory:").connect() as conn:
        found = conn.execute(
            sa.text(f"SELECT n, {grassberger_g('n')} FROM (SELECT UNNEST(CAST(:counts AS BIGINT[])) AS n) c"),
            {"counts": counts},
        ).all()
    assert {n: pytest.approx(_g(n), abs=1e-9) for n in counts} == dict(found)
    for n, value in ARX_G.items():
        assert dict(found)[n] == pytest.approx(value, abs=1e-12)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    classes=st.lists(st.lists(st.sampled_from("abcdef"), min_size=1, max_size=9), min_size=1, max_size=3),
    l=st.integers(1, 4),
)
def test_grassberger_figures_equal_a_python_reference(tmp_path_factory, classes: list[list[str]], l: int):
    """The audit's smallest entropy (entropy_l, its exp) and verdict (l distinct values too), and a search wave's,
    equal the definition's."""
    tmp = tmp_path_factory.mktemp("grassberger")
    spec = {"entropy_l_diversity": {"attribute": "s", "l": l, "estimator": "grassberger"}}
    if l > len({s for values in classes for s in values}):
        return  # an impossible l is a configuration error, tested elsewhere
    figure, lowest = audited(tmp, classes, spec), min(_entropy(values) for values in classes)
    assert figure["entropy_l"] == pytest.approx(math.exp(lowest), rel=1e-9)
    assert figure["holds"] == all(_holds(values, l) for values in classes)
    highest = max(_entropy(values) for values in classes)
    for sizes_by_join, coded in ((True, False), (False, True)):  # the helper reads MAX(stat): the highest entropy
        assert bound_max(spec, tmp, classes, sizes_by_join, coded) == pytest.approx(highest, abs=1e-9)


def test_grassberger_entropy_may_fail_above_a_passing_node(tmp_path: Path):
    """Classes x, y and z each hold a and b once: G(2) - G(1) = 2 >= log 2 each; x and y merged (G1, level 1) hold
    each twice: G(4) - G(2) = 0.667 < log 2; all six (the top) G(6) - G(3) = 1.07. Every strategy finds level 0 and
    the top, with and without suppression (ARX prunes as if the estimator were monotone)."""
    classes = {"x": ["a", "b"], "y": ["a", "b"], "z": ["a", "b"]}
    assert all(_holds(values, 2) for values in classes.values())
    assert not _holds(["a", "a", "b", "b"], 2) and _holds(["a", "b"] * 3, 2)
    spec = {"entropy_l_diversity": {"attribute": "s", "l": 2, "estimator": "grassberger"}}
    assert_fails_between_passing_nodes(tmp_path, classes, spec)


@pytest.mark.parametrize(
    "params, message",
    [
        ({"estimator": "miller"}, "estimator 'miller' is unknown"),
        ({"estimator": "grassberger", "dont_care": ["a"]}, "takes no dont_care set"),
    ],
)
def test_bad_estimator_settings_are_refused(params: dict, message: str):
    with pytest.raises(ConfigError, match=message):
        criteria_from_config({"entropy_l_diversity": {"attribute": "s", "l": 2, **params}})
