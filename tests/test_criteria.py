"""The l-diversity family and t-closeness: Incognito against the oracle, and hand-computed cases."""

from __future__ import annotations

import dataclasses
import itertools
import math
import uuid
import warnings
from pathlib import Path
from unittest import mock

import pandas as pd
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sqlanon import RunOptions, anonymize, audit, search
from sqlanon.config import job_from_dict
from sqlanon.criteria import criteria_from_config
from sqlanon.criteria.view import SqlFragment
from sqlanon.engine import checker
from sqlanon.engine import star as dimensions
from sqlanon.errors import ConfigError, HierarchyError
from sqlanon.model.job import Suppression
from sqlanon.testing import evaluate_every_node

from .conftest import CASES, QIS, adult_job, assert_best_ranked, minimal_only_search, passing, reclassified


@pytest.fixture(scope="module")
def adult_oracle(adult_violations) -> dict[str, set]:
    return {name: passing(found, 0) for name, found in adult_violations.items()}


def test_a_fragment_renames_its_own_parameters_only():
    """Criteria sharing a statement get their parameters suffixed: a name that starts another is left whole."""
    params: dict[str, object] = {"z_w": 0}
    sql = SqlFragment("a = :x AND b = :x1 AND c = :y AND d = :x", {"x": 1, "x1": 2}).bound("w", params)
    assert sql == "a = :x_w AND b = :x1_w AND c = :y AND d = :x_w"
    assert params == {"z_w": 0, "x_w": 1, "x1_w": 2}


def test_multi_attribute_l_diversity_against_the_oracle(adult_duck: str):
    spec = {"multi_attribute_l_diversity": {"attributes": ["race", "salary-class"], "l": 2}}
    qis = ["sex", "age", "marital-status", "education"]
    job = reclassified(
        adult_job(adult_duck, qis, load_csv=False),
        criteria=criteria_from_config(spec),
        sensitive=["race", "salary-class"],
    )
    [oracle] = evaluate_every_node(job, [job.criteria])
    assert set(search(job).satisfying) == set(oracle)
    assert 0 < len(oracle) < 2 * 5 * 3 * 4


@pytest.mark.parametrize("case", list(CASES))
def test_incognito_equals_exhaustive_on_adult(adult_duck: str, adult_oracle, case: str):
    job = adult_job(adult_duck, QIS, load_csv=False)
    job = reclassified(job, criteria=criteria_from_config(CASES[case]), sensitive=["occupation"])
    result = search(job)
    assert set(result.satisfying) == adult_oracle[case]
    assert 0 < len(adult_oracle[case]) < 240  # the case actually discriminates


def test_ordered_t_closeness_on_a_numeric_attribute(adult_duck: str):
    """Age is numeric: with the other QIs, ordered EMD against the oracle."""
    qis = ["sex", "race", "marital-status", "education"]
    spec = {"t_closeness": {"attribute": "age", "t": 0.05, "distance": "ordered"}}
    job = reclassified(
        adult_job(adult_duck, qis, load_csv=False), criteria=criteria_from_config(spec), sensitive=["age"]
    )
    [oracle] = evaluate_every_node(job, [job.criteria])
    assert set(search(job).satisfying) == set(oracle)
    assert 0 < len(oracle) < 2 * 2 * 3 * 4


# --- hand-computed classes -----------------------------------------------------


def one_table(
    tmp_path: Path, classes: dict[str, list[str]], criteria: dict, numeric: bool = False, tree: str | None = None
):
    """A table whose QI `q` has one value per class (hierarchy q -> *, or the file text `tree`), sensitive `s` (a
    new database each time: sqlanon reuses a table loaded from a file only while the file is the same)."""
    rows = [(q, s) for q, values in classes.items() for s in values]
    (tmp_path / "data.csv").write_text("q,s\n" + "\n".join(f"{q},{s}" for q, s in rows) + "\n")
    (tmp_path / "q.csv").write_text(tree or "\n".join(f"{q};*" for q in classes) + "\n")
    options = {} if numeric else {"all_varchar": True}
    database = f"t_{uuid.uuid4().hex[:8]}.duckdb"
    return job_from_dict(
        {
            "source": {"url": database, "table": "t", "csv": "data.csv", "csv_options": options},
            "quasi_identifiers": {"q": "q.csv"},
            "criteria": criteria,
        },
        tmp_path,
    )


def audited(tmp_path: Path, classes: list[list[str]], criteria: dict) -> dict:
    """The audit's figures of the first of `criteria` over a table of `classes` (one_table's, classes x0, x1...)."""
    job = one_table(tmp_path, {f"x{i}": values for i, values in enumerate(classes)}, criteria)
    search(dataclasses.replace(job, criteria=criteria_from_config({"k_anonymity": {"k": 1}})))  # loads the table
    report = audit(dataclasses.replace(job, source=dataclasses.replace(job.source, csv=None)), "t")
    return report.criteria[next(iter(criteria))].to_dict()


def assert_fails_between_passing_nodes(tmp_path: Path, classes: dict[str, list[str]], criteria: dict) -> None:
    """Classes x, y and z under x, y -> G1 and z -> G2 (-> *): every strategy, with and without a suppressed tuple,
    finds levels 0 and 2 passing and level 1 failing (a criterion not monotone under generalization)."""
    job = one_table(tmp_path, classes, criteria, tree="x;G1;*\ny;G1;*\nz;G2;*")
    for strategy in ("auto", "incognito", "topdown", "bottomup", "border", "filtered", "exhaustive"):
        assert search(dataclasses.replace(job, strategy=strategy)).satisfying == [(0,), (2,)], strategy
        limited = dataclasses.replace(job, strategy=strategy, suppression=Suppression(1))
        assert search(limited).satisfying == [(0,), (2,)], strategy


def _level_zero_passes(tmp_path, classes, criteria, numeric=False) -> bool:
    return (0,) in search(one_table(tmp_path, classes, criteria, numeric)).satisfying


@pytest.fixture(params=["values read", "values counted in SQL"])
def sensitive_domain(request, monkeypatch) -> None:
    """Both ways a sensitive column is checked before the search: its values read with their counts, and (a
    domain of more than DOMAIN_VALUES values) counted in SQL, its table shares then grouped by the criteria."""
    if request.param == "values counted in SQL":
        monkeypatch.setattr(dimensions, "DOMAIN_VALUES", 1)


def test_entropy_of_three_equal_values_is_exactly_three_diverse(tmp_path: Path):
    classes = {"x": ["a", "b", "c"], "y": ["a", "b", "c"]}
    assert _level_zero_passes(tmp_path, classes, {"entropy_l_diversity": {"attribute": "s", "l": 3}})


@pytest.mark.parametrize("l, expected", [(2, True), (3, False)])
def test_entropy_of_a_skewed_class(tmp_path: Path, l: int, expected: bool):
    # [a, a, b, c]: H = 1.5 ln 2 = 1.04, exp(H) = 2.83
    classes = {"x": ["a", "a", "b", "c"], "y": ["a", "b", "c", "d"]}
    assert math.exp(1.5 * math.log(2)) == pytest.approx(2.83, abs=0.01)
    assert _level_zero_passes(tmp_path, classes, {"entropy_l_diversity": {"attribute": "s", "l": l}}) is expected


@pytest.mark.parametrize("c, expected", [(1, False), (1.01, True)])
def test_recursive_at_the_c_boundary(tmp_path: Path, c: float, expected: bool):
    # [a, a, b, c] with l = 2: r1 = 2, r2 + r3 = 2; holds iff 2 < 2c
    classes = {"x": ["a", "a", "b", "c"], "y": ["a", "b", "c", "d"]}
    spec = {"recursive_l_diversity": {"attribute": "s", "c": c, "l": 2}}
    assert _level_zero_passes(tmp_path, classes, spec) is expected


def test_a_class_with_one_value(tmp_path: Path):
    classes = {"x": ["a", "a"], "y": ["a", "b"]}
    assert not _level_zero_passes(tmp_path, classes, {"distinct_l_diversity": {"attribute": "s", "l": 2}})
    for spec in (
        {"distinct_l_diversity": {"attribute": "s", "l": 1}},
        {"entropy_l_diversity": {"attribute": "s", "l": 1}},
        {"recursive_l_diversity": {"attribute": "s", "c": 1, "l": 1}},
    ):
        assert _level_zero_passes(tmp_path, classes, spec), spec  # l = 1 always holds


def test_t_zero_needs_the_table_distribution_in_every_class(tmp_path: Path, sensitive_domain):
    same = {"x": ["a", "b"], "y": ["b", "a"]}
    assert _level_zero_passes(tmp_path, same, {"t_closeness": {"attribute": "s", "t": 0}})
    skewed = {"x": ["a", "a"], "y": ["b", "b"]}
    spec = {"t_closeness": {"attribute": "s", "t": 0.49}}
    assert not _level_zero_passes(tmp_path, skewed, spec)  # distance 0.5 in each class
    assert _level_zero_passes(tmp_path, skewed, {"t_closeness": {"attribute": "s", "t": 0.5}})


def test_ordered_distance_by_hand(tmp_path: Path):
    # values 1,2,3; table q = (1/3, 1/3, 1/3); class x = (1, 0, 0): cumulative 2/3, 1/3, 0 -> (1/2)(1) = 0.5
    classes = {"x": ["1"], "y": ["2"], "z": ["3"]}
    spec = {"t_closeness": {"attribute": "s", "t": 0.5, "distance": "ordered"}}
    assert _level_zero_passes(tmp_path, classes, spec, numeric=True)
    spec["t_closeness"]["t"] = 0.49
    assert not _level_zero_passes(tmp_path, classes, spec, numeric=True)


@pytest.mark.parametrize(
    "spec, numeric, coded",
    [
        ({"t_closeness": {"attribute": "s", "t": 0.5}}, False, True),
        ({"t_closeness": {"attribute": "s", "t": 0.5, "distance": "hierarchical", "hierarchy": "s.csv"}}, False, True),
        ({"entropy_l_diversity": {"attribute": "s", "l": 2}}, False, True),
        ({"entropy_l_diversity": {"attribute": "s", "l": 2, "dont_care": ["a"]}}, False, False),  # names a value
        ({"t_closeness": {"attribute": "s", "t": 0.5}}, True, True),  # integers: one text per value
        ({"t_closeness": {"attribute": "s", "t": 0.5, "distance": "ordered"}}, True, False),  # orders the values
        ({"t_closeness": {"attribute": "s", "t": 0.5}}, "DOUBLE", False),  # -0.0 and 0.0: one value, two texts
    ],
)
def test_the_cube_carries_sensitive_codes_where_no_criterion_reads_values(
    tmp_path: Path, monkeypatch, spec: dict, numeric, coded: bool
):
    """The search's cube holds each sensitive value as an integer code (faster to group and join than text)
    unless a criterion names or orders the values, or values and texts do not correspond one to one, on a
    table too large for the QIs' lookups as well; either way the search finds what the exhaustive strategy
    finds."""
    from sqlanon.engine import star
    from sqlanon.engine.checker import WaveChecker

    seen, create = [], WaveChecker.__init__

    def spy(self, *args, **kwargs) -> None:
        create(self, *args, **kwargs)
        seen.append(set(self.codes))

    monkeypatch.setattr(WaveChecker, "__init__", spy)
    (tmp_path / "s.csv").write_text("1;A;*\n2;A;*\n3;B;*\na;A;*\nb;B;*\n")
    values = ["1", "1", "2", "3"] if numeric else ["a", "a", "b", "a"]
    job = one_table(tmp_path, {"x": values, "y": values[::-1], "z": values[1:]}, spec, bool(numeric))
    if numeric == "DOUBLE":
        job = dataclasses.replace(job, source=dataclasses.replace(job.source, csv_options={"types": {"s": "DOUBLE"}}))
    found = search(job)
    monkeypatch.setattr(star, "LOOKUP_ROWS", 0)
    assert search(job).satisfying == found.satisfying
    assert seen == [{"s"} if coded else set()] * 2
    assert found.satisfying == search(dataclasses.replace(job, strategy="exhaustive")).satisfying


# --- bad input --------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ({"recursive_l_diversity": {"attribute": "s", "c": 0, "l": 2}}, "c must be > 0"),
        ({"recursive_l_diversity": {"attribute": "s", "c": -1, "l": 2}}, "c must be > 0"),
        ({"t_closeness": {"attribute": "s", "t": 1.5}}, "t must be between 0 and 1"),
        ({"t_closeness": {"attribute": "s", "t": -0.1}}, "t must be between 0 and 1"),
        ({"t_closeness": {"attribute": "s", "t": 0.1, "distance": "cosine"}}, "distance 'cosine' is unknown"),
        ({"distinct_l_diversity": {"attribute": "s", "l": 0}}, "l must be >= 1"),
        ({"distinct_l_diversity": {"attribute": "s"}}, "missing key 'l'"),
        (
            {"multi_attribute_l_diversity": {"attributes": ["a", "b"], "l": 2, "instantiation": "recursive"}},
            "missing key 'c'",
        ),
        ({"multi_attribute_l_diversity": {"attributes": ["a"], "l": 2}}, "two or more"),
        (
            {"multi_attribute_l_diversity": {"attributes": ["a", "b"], "l": 2, "instantiation": "max"}},
            "instantiation 'max' is unknown",
        ),
    ],
)
def test_bad_criteria(spec, fragment):
    with pytest.raises(ConfigError, match=fragment):
        criteria_from_config(spec)


def test_l_larger_than_the_sensitive_domain(tmp_path: Path, sensitive_domain):
    job = one_table(tmp_path, {"x": ["a", "b"], "y": ["a", "b"]}, {"distinct_l_diversity": {"attribute": "s", "l": 3}})
    with pytest.raises(ConfigError, match="l=3 is larger than the 2 distinct values"):
        search(job)


def test_ordered_distance_needs_numbers_or_an_order(tmp_path: Path):
    job = one_table(
        tmp_path, {"x": ["a"], "y": ["b"]}, {"t_closeness": {"attribute": "s", "t": 0.5, "distance": "ordered"}}
    )
    with pytest.raises(ConfigError, match="needs the order of 's''s values, which are not numbers: give order"):
        search(job)
    ordered = {"t_closeness": {"attribute": "s", "t": 0.5, "distance": "ordered", "order": ["b"]}}
    with pytest.raises(HierarchyError, match=r"1 value\(s\) missing from its hierarchy \(t_closeness order\): 'a'"):
        search(one_table(tmp_path, {"x": ["a"], "y": ["b"]}, ordered))


def _ordered_distance(values: list[str], everything: list[str], order: list[str]) -> float:
    """The ordered EMD from its definition: (1/(m-1)) sum over the table's m values, in `order`, of the running sum
    of the class's share less the table's."""
    present = [v for v in order if v in everything]
    running, total = 0.0, 0.0
    for value in present:
        running += values.count(value) / len(values) - everything.count(value) / len(everything)
        total += abs(running)
    return total / max(len(present) - 1, 1)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    classes=st.lists(st.lists(st.sampled_from("abcde"), min_size=1, max_size=6), min_size=1, max_size=3),
    order=st.permutations("abcde"),
    by_hierarchy=st.booleans(),
)
def test_ordered_distance_on_a_categorical_attribute_equals_a_python_reference(
    tmp_path_factory, classes: list[list[str]], order: list[str], by_hierarchy: bool
):
    """The audit's largest ordered distance of any class, the values in the order the job lists (or its hierarchy's
    leaves in the file's order), equals the definition's; against the values' own text order it may differ."""
    tmp = tmp_path_factory.mktemp("ordered")
    (tmp / "s.csv").write_text("".join(f"{v};*\n" for v in order))
    source = {"hierarchy": "s.csv"} if by_hierarchy else {"order": list(order)}
    spec = {"t_closeness": {"attribute": "s", "t": 0.99, "distance": "ordered", **source}}
    everything = [s for values in classes for s in values]
    expected = max(_ordered_distance(values, everything, list(order)) for values in classes)
    assert audited(tmp, classes, spec)["max_t"] == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize(
    "params, message",
    [
        ({"order": ["a", "a"]}, "order must list each value once"),
        ({"order": []}, "order must list each value once"),
        ({"order": ["a"], "distance": "equal"}, "order: \\[values\\] goes with distance: ordered"),
        ({"order": ["a"], "hierarchy": "s.csv"}, "order: \\[values\\] goes with distance: ordered, without"),
        ({"order": "a"}, "order"),
    ],
)
def test_bad_orders_are_refused(tmp_path: Path, params: dict, message: str):
    (tmp_path / "s.csv").write_text("a;*\nb;*\n")
    spec = {"attribute": "s", "t": 0.3, "distance": "ordered", **params}
    with pytest.raises(ConfigError, match=message):
        criteria_from_config({"t_closeness": spec}, tmp_path)


def test_an_order_on_a_numeric_attribute_is_refused(tmp_path: Path):
    spec = {"t_closeness": {"attribute": "s", "t": 0.5, "distance": "ordered", "order": ["1", "2"]}}
    with pytest.raises(ConfigError, match="is numeric, and the ordered distance orders numbers by value"):
        search(one_table(tmp_path, {"x": ["1"], "y": ["2"]}, spec, numeric=True))


def test_sensitive_attribute_that_is_a_quasi_identifier(tmp_path: Path):
    with pytest.raises(ConfigError, match="listed under both quasi_identifiers and sensitive"):
        job_from_dict(
            {
                "source": {"url": "t.duckdb", "table": "t"},
                "quasi_identifiers": {"q": "q.csv"},
                "criteria": {"distinct_l_diversity": {"attribute": "q", "l": 2}},
            },
            tmp_path,
        )


# --- an independent check of a published table, in pandas (k, distinct l, equal-distance t) ----------------


def test_published_table_holds_its_criteria_by_an_independent_count(adult_duck: str):
    spec = {
        "k_anonymity": {"k": 5},
        "distinct_l_diversity": {"attribute": "occupation", "l": 3},
        "t_closeness": {"attribute": "occupation", "t": 0.3},
    }
    job = reclassified(
        adult_job(adult_duck, QIS, load_csv=False, output={"table": "independent_check"}),
        criteria=criteria_from_config(spec),
        sensitive=["occupation"],
    )
    result = anonymize(job, replace=True)
    engine = sa.create_engine(adult_duck)
    with engine.connect() as conn:
        # the published table is small (30k rows): pulling it is fine for a check outside the database
        frame = pd.read_sql_query(
            sa.text('SELECT sex, age, race, "marital-status", education, occupation FROM independent_check'), conn
        )
    engine.dispose()
    classes = frame.groupby(QIS)["occupation"]
    assert classes.size().min() >= 5
    assert classes.nunique().min() >= 3
    overall = frame["occupation"].value_counts(normalize=True)
    within = frame.groupby(QIS)["occupation"].value_counts(normalize=True).unstack(fill_value=0.0)
    # equal ground distance: the earth mover's distance is half the L1 distance between the distributions
    distance = (within.sub(overall.reindex(within.columns, fill_value=0.0), axis=1).abs().sum(axis=1) / 2).max()
    assert distance <= 0.3 + 1e-9
    assert result.audit.ok


# --- random tables ----------------------------------------------------------------

RANDOM_CASES = [
    {"distinct_l_diversity": {"attribute": "occupation", "l": 2}},
    {"entropy_l_diversity": {"attribute": "occupation", "l": 2}},
    {"entropy_l_diversity": {"attribute": "occupation", "l": 2, "dont_care": ["a", "b"]}},
    {"recursive_l_diversity": {"attribute": "occupation", "c": 2, "l": 2}},
    {"recursive_l_diversity": {"attribute": "occupation", "c": 1.5, "l": 2, "dont_care": ["a"]}},
    {
        "npd_recursive_l_diversity": {
            "attribute": "occupation",
            "c1": 2,
            "c2": 10,
            "l": 2,
            "w": ["b"],
            "dont_care": ["a"],
        }
    },
    {"multi_attribute_l_diversity": {"attributes": ["occupation", "extra"], "l": 2}},
    {
        "multi_attribute_l_diversity": {
            "attributes": ["occupation", "extra"],
            "l": 2,
            "instantiation": "recursive",
            "c": 3,
            "dont_care": ["a"],
        }
    },
    {"multi_attribute_l_diversity": {"attributes": ["occupation", "extra"], "l": 2, "instantiation": "entropy"}},
    {
        "multi_attribute_l_diversity": {
            "attributes": ["occupation", "extra"],
            "l": 2,
            "instantiation": "npd",
            "c1": 3,
            "c2": 5,
            "w": ["x"],
        }
    },
    {"t_closeness": {"attribute": "occupation", "t": 0.3}},
    {"t_closeness": {"attribute": "occupation", "t": 0.5, "distance": "kl"}},
    {"t_closeness": {"attribute": "occupation", "t": 0.25, "distance": "hierarchical", "hierarchy": "occ.csv"}},
    {"t_closeness": {"attribute": "cost", "t": 0.2, "distance": "ordered"}},
    {"k_anonymity": {"k": 2}, "distinct_l_diversity": {"attribute": "occupation", "l": 2}},
    {"k_anonymity": {"k": 3}},
    # a monotone criterion beside one that is not: with suppression, the filtered search's two stages
    {"k_anonymity": {"k": 2}, "entropy_l_diversity": {"attribute": "occupation", "l": 2, "dont_care": ["a"]}},
    {"k_anonymity": {"k": 2}, "t_closeness": {"attribute": "occupation", "t": 0.3}},
    # the least class size t-closeness allows settled first (least_size_first), above k and without it
    {"k_anonymity": {"k": 2}, "t_closeness": {"attribute": "occupation", "t": 0.2, "distance": "kl"}},
    {
        "k_anonymity": {"k": 2},
        "t_closeness": {"attribute": "occupation", "t": 0.1, "distance": "hierarchical", "hierarchy": "occ.csv"},
    },
    {"k_anonymity": {"k": 2}, "entropy_l_diversity": {"attribute": "occupation", "l": 2}},
    # beta-likeness: its least class size settled first, as t-closeness's
    {"beta_likeness": {"attribute": "occupation", "beta": 1.0, "variant": "basic"}},
    {"k_anonymity": {"k": 2}, "beta_likeness": {"attribute": "occupation", "beta": 1.5}},
    # delta-disclosure: not monotone even without suppression
    {"delta_disclosure": {"attribute": "occupation", "delta": 1.0}},
    {"entropy_l_diversity": {"attribute": "occupation", "l": 2, "estimator": "grassberger"}},
    # the ordered distance over categories, in the order listed
    {"t_closeness": {"attribute": "occupation", "t": 0.3, "distance": "ordered", "order": ["d", "b", "a", "c"]}},
]


def _named(spec: dict) -> set[str]:
    """The sensitive attributes a criteria spec names."""
    return {a for params in spec.values() for a in params.get("attributes", [params.get("attribute")])}


@settings(max_examples=28, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(["v0", "v1", "v2", "v3"]),
            st.sampled_from(["w0", "w1", "w2"]),
            st.sampled_from(["a", "b", "c", "d"]),
            st.sampled_from(["x", "y"]),
            st.integers(1, 4),
        ),
        min_size=4,
        max_size=40,
    ),
    spec=st.sampled_from(RANDOM_CASES),
    limit=st.integers(0, 5),
)
def test_criteria_on_random_tables(tmp_path_factory, rows, spec, limit):
    """Incognito, top-down, bottom-up, border, filtered, auto and Samarati against the exhaustive strategy, with
    and without suppression."""
    tmp = tmp_path_factory.mktemp("crit")
    (tmp / "data.csv").write_text("p,q,occupation,extra,cost\n" + "\n".join(",".join(map(str, r)) for r in rows))
    (tmp / "p.csv").write_text("v0;A;*\nv1;A;*\nv2;B;*\nv3;B;*\n")
    (tmp / "q.csv").write_text("w0;*\nw1;*\nw2;*\n")
    (tmp / "occ.csv").write_text("a;G1;*\nb;G1;*\nc;G2;*\nd;G2;*\n")
    distinct = {"occupation": len({r[2] for r in rows}), "extra": len({r[3] for r in rows})}
    if any(
        params.get("l", 1)
        > min(distinct[a] for a in params.get("attributes", [params.get("attribute")]) if a in distinct)
        for params in spec.values()
        if "l" in params
    ):
        return  # an impossible l is a configuration error, tested elsewhere
    job = job_from_dict(
        {
            "source": {
                "url": "t.duckdb",
                "table": "t",
                "csv": "data.csv",
                "csv_options": {"types": {"p": "VARCHAR", "q": "VARCHAR"}},
            },
            "quasi_identifiers": {"p": "p.csv", "q": "q.csv"},
            "criteria": spec,
            "insensitive": [c for c in ("occupation", "extra", "cost") if c not in _named(spec)],
            "suppression": {"limit": min(limit, len(rows) - 1)},
        },
        tmp,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # don't-care values absent from a small random table
        exhaustive = search(dataclasses.replace(job, strategy="exhaustive"))
        samarati = search(dataclasses.replace(job, strategy="samarati"))
        for strategy in ("auto", "incognito", "topdown", "bottomup", "border", "filtered"):
            found = search(dataclasses.replace(job, strategy=strategy))
            assert (found.satisfying, found.minimal) == (sorted(exhaustive.satisfying), exhaustive.minimal), strategy
        with mock.patch.object(checker, "SMALL_CUBE", 0):  # as on a large table: planned waves, class sizes first
            for strategy in ("auto", "border"):
                found = search(dataclasses.replace(job, strategy=strategy))
                assert (found.satisfying, found.minimal) == (sorted(exhaustive.satisfying), exhaustive.minimal)
        # as a publication by policy searches: the nodes above a passing one unchecked, the same minimal nodes; by a
        # policy on the levels alone, also the nodes ranked after a passing one, the best minimal node found
        for strategy in ("auto", "filtered"):
            assert minimal_only_search(dataclasses.replace(job, strategy=strategy)).minimal == exhaustive.minimal
            for policy in ("min_absolute_distance", "min_relative_distance"):
                ranked = minimal_only_search(dataclasses.replace(job, strategy=strategy), policy)
                assert_best_ranked(ranked, exhaustive.minimal, policy)
    lowest = min((sum(n) for n in exhaustive.satisfying), default=None)
    assert samarati.satisfying == sorted(n for n in exhaustive.satisfying if sum(n) == lowest)


@pytest.mark.parametrize("backend", ["duckdb", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_multi_attribute_audit_counts_subclasses_whose_class_value_is_null(request, tmp_path: Path, backend: str):
    """A published class whose QI value is NULL (a hierarchy may map NULL) violates multi-attribute diversity when
    one of its subclasses does, as any other class does."""
    from sqlanon import audit
    from sqlanon.backends import open_database

    if backend == "duckdb":
        url, schema = f"duckdb:///{tmp_path / 'm.duckdb'}", None
    else:
        url, schema = request.getfixturevalue("pg_server"), request.getfixturevalue("pg_schema")
    rows = [
        (None, "flu", "a"),
        (None, "flu", "b"),
        (None, "cold", "a"),
        (None, "cold", "a"),  # cold: one value of y
        ("z1", "flu", "a"),
        ("z1", "flu", "b"),
        ("z1", "cold", "a"),
        ("z1", "cold", "b"),
    ]
    db = open_database(url)
    with db.begin() as conn:
        db.create_table_from_rows(
            conn, db.q(schema, "released"), [("zip", "VARCHAR(10)"), ("x", "VARCHAR(10)"), ("y", "VARCHAR(10)")], rows
        )
    db.dispose()
    (tmp_path / "h.csv").write_text(";*\nz1;*\n")
    source = {"url": url, "table": "released", **({"schema": schema} if schema else {})}
    job = job_from_dict(
        {
            "source": source,
            "quasi_identifiers": {"zip": "h.csv"},
            "criteria": {"multi_attribute_l_diversity": {"attributes": ["x", "y"], "l": 2}},
        },
        tmp_path,
    )
    report = audit(job, "released", schema, RunOptions(metadata_schema=f"{schema}_meta" if schema else "sqlanon"))
    found = report.criteria["multi_attribute_l_diversity"]
    assert not report.ok and (found.violating_classes, found.violating_tuples) == (1, 4)


def test_figure_3_of_the_l_diversity_paper(tmp_path: Path):
    """Three blocks of four: Heart Disease, Viral Infection, Cancer, Cancer (and permutations).
    3-diverse, and by entropy 'actually 2.8-diverse'."""
    from sqlanon import audit

    blocks = {
        ("1305*", "<40"): ["Heart Disease", "Viral Infection", "Cancer", "Cancer"],
        ("1485*", ">40"): ["Cancer", "Heart Disease", "Viral Infection", "Viral Infection"],
        ("1306*", "<40"): ["Heart Disease", "Viral Infection", "Cancer", "Cancer"],
    }
    lines = [f"{z},{a},*,{c}" for (z, a), conditions in blocks.items() for c in conditions]
    (tmp_path / "fig3.csv").write_text("zip,age,nationality,condition\n" + "\n".join(lines) + "\n")
    (tmp_path / "h.csv").write_text("x;*\n")
    spec = {
        "distinct_l_diversity": {"attribute": "condition", "l": 3},
        "entropy_l_diversity": {"attribute": "condition", "l": 2},
        "recursive_l_diversity": {"attribute": "condition", "c": 3, "l": 3},
    }
    job = job_from_dict(
        {
            "source": {"url": "f.duckdb", "table": "fig3", "csv": "fig3.csv"},
            "quasi_identifiers": dict.fromkeys(("zip", "age", "nationality"), "h.csv"),
            "criteria": spec,
        },
        tmp_path,
    )
    from sqlanon.backends import open_database

    db = open_database(job.source.url)
    with db.begin() as conn:
        db.load_csv(conn, job.source.csv, {}, db.q("fig3"))
    db.dispose()
    report = audit(job, "fig3")
    assert report.criteria["distinct_l_diversity"].figure == 3 and report.ok
    assert report.criteria["entropy_l_diversity"].figure == pytest.approx(2.83, abs=0.01)
    assert report.criteria["recursive_l_diversity"].figure == pytest.approx(2.0)  # r1 = 2 over r3 = 1


# --- don't-care sets, by hand and by brute force ------------------------------------------


def _audit_one_class(tmp_path: Path, values: list[str], spec: dict) -> dict:
    from sqlanon import audit

    job = one_table(tmp_path, {"x": values}, spec)
    search(dataclasses.replace(job, criteria=criteria_from_config({"k_anonymity": {"k": 1}})))  # loads the table
    source = dataclasses.replace(job.source, csv=None)
    report = audit(dataclasses.replace(job, source=source), "t")
    return report.criteria[next(iter(spec))].to_dict()


def _adjusted_entropy_brute_force(fixed: list[int], dont_care: list[int], steps: int = 400) -> float:
    """sup of H(z) over 0 <= z_i <= x_i for don't-care counts, on a grid (independent of the SQL)."""
    best = -1.0
    grids = [[x * i / steps for i in range(1, steps + 1)] for x in dont_care]
    for lowered in itertools.product(*grids):
        z = fixed + list(lowered)
        total = sum(z)
        best = max(best, math.log(total) - sum(v * math.log(v) for v in z) / total)
    return best


def test_adjusted_entropy_matches_its_definition(tmp_path: Path):
    # class: a x4 (counts), y1 x1 and y2 x8 don't-care
    values = ["a"] * 4 + ["y1"] + ["y2"] * 8
    spec = {"entropy_l_diversity": {"attribute": "s", "l": 2, "dont_care": ["y1", "y2"]}}
    figure = _audit_one_class(tmp_path, values, spec)["entropy_l"]
    assert math.log(figure) == pytest.approx(_adjusted_entropy_brute_force([4], [1, 8]), abs=1e-4)
    assert figure == pytest.approx(2.649, abs=1e-3)  # by hand: y1 joins, y2 is lowered to exp(mean) = 3.03


def test_adjusted_entropy_when_every_value_is_dont_care(tmp_path: Path):
    values = ["y1"] * 2 + ["y2"] * 5
    spec = {"entropy_l_diversity": {"attribute": "s", "l": 2, "dont_care": ["y1", "y2"]}}
    assert _audit_one_class(tmp_path, values, spec)["entropy_l"] == pytest.approx(2.0)  # both lowered to 2


def test_positive_disclosure_ratio_by_hand(tmp_path: Path):
    # a:5 (don't-care), b:3, c:1, d:1, l = 2: y = 2 > l-1, so r_y / (r_1 + ... + r_4 - r_y) = 3 / 7
    values = ["a"] * 5 + ["b"] * 3 + ["c", "d"]
    spec = {"recursive_l_diversity": {"attribute": "s", "c": 0.5, "l": 2, "dont_care": ["a"]}}
    result = _audit_one_class(tmp_path, values, spec)
    assert result["smallest_c"] == pytest.approx(3 / 7) and result["holds"]
    plain = {"recursive_l_diversity": {"attribute": "s", "c": 0.5, "l": 2}}
    assert _audit_one_class(tmp_path, values, plain)["smallest_c"] == pytest.approx(5 / 5)


def test_positive_disclosure_with_every_value_dont_care_holds(tmp_path: Path):
    spec = {"recursive_l_diversity": {"attribute": "s", "c": 1, "l": 2, "dont_care": ["a", "b"]}}
    assert _audit_one_class(tmp_path, ["a", "a", "b"], spec)["holds"]


@pytest.mark.parametrize("c2, expected", [(10, True), (11, False)])
def test_npd_share_of_w(tmp_path: Path, c2: float, expected: bool):
    values = ["a"] * 5 + ["b"] * 4 + ["c"]  # c is 10 percent of the class
    spec = {"npd_recursive_l_diversity": {"attribute": "s", "c1": 5, "c2": c2, "l": 2, "w": ["c"]}}
    assert _audit_one_class(tmp_path, values, spec)["holds"] is expected


def test_dont_care_values_that_do_not_occur_warn(tmp_path: Path, sensitive_domain):
    job = one_table(
        tmp_path,
        {"x": ["a", "b"], "y": ["a", "b"]},
        {"entropy_l_diversity": {"attribute": "s", "l": 2, "dont_care": ["zzz"]}},
    )
    with pytest.warns(UserWarning, match="'zzz'.*do not occur"):
        search(job)


def test_audit_command_json(tmp_path: Path, adult_duck: str):
    import json

    import yaml
    from click.testing import CliRunner

    from sqlanon.cli import main

    from .conftest import ADULT_DIR

    config = {
        "source": {"url": adult_duck, "table": "adult"},
        "quasi_identifiers": {q: str(ADULT_DIR / "hierarchies" / f"{q}.csv") for q in QIS},
        "criteria": {**CASES["k=5 and distinct l=4"], **CASES["t equal 0.2"]},
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(config))
    result = CliRunner().invoke(main, ["audit", str(tmp_path / "job.yaml"), "--table", "adult", "--json"])
    assert result.exit_code == 1, result.output  # the raw source is not anonymous
    data = json.loads(result.stdout)
    assert set(data) >= {"k_anonymity", "distinct_l_diversity", "t_closeness", "rows", "classes"}
    assert data["k_anonymity"]["holds"] is False and data["k_anonymity"]["min_class_size"] == data["min_class_size"]
    assert data["t_closeness"]["max_t"] > 0.2 and data["distinct_l_diversity"]["violating_classes"] > 0


def test_hierarchical_distance_by_hand(tmp_path: Path, sensitive_domain):
    """Leaves a, b under A and c, d under B (top *), H = 2. Table: a, b, c, d once each; class x = {a, b},
    y = {c, d}. For x: extra(a) = extra(b) = 1/4, extra(c) = extra(d) = -1/4; at A and B the children have
    one sign each (cost 0); at *: extra(A) = 1/2, extra(B) = -1/2, cost = (2/2) * 1/2 = 0.5."""
    (tmp_path / "s.csv").write_text("a;A;*\nb;A;*\nc;B;*\nd;B;*\n")
    spec = {"t_closeness": {"attribute": "s", "t": 0.5, "distance": "hierarchical", "hierarchy": "s.csv"}}
    classes = {"x": ["a", "b"], "y": ["c", "d"]}
    assert _level_zero_passes(tmp_path, classes, spec)
    spec["t_closeness"]["t"] = 0.49
    assert not _level_zero_passes(tmp_path, classes, spec)
    # x = {a, c}, y = {b, d}: within A and B the mass only moves one level: (1/2) * 1/4 per group = 0.25
    spec["t_closeness"]["t"] = 0.25
    assert _level_zero_passes(tmp_path, {"x": ["a", "c"], "y": ["b", "d"]}, spec)


@pytest.mark.parametrize("backend", ["duckdb", pytest.param("postgresql", marks=pytest.mark.postgres)])
@pytest.mark.parametrize("distance", ["equal", "kl"])
def test_t_closeness_with_null_sensitive_values_equals_the_oracle(
    request, tmp_path: Path, distance: str, backend: str, sensitive_domain
):
    """NULL is a sensitive value like any other: the searches (the table's shares bound as lists, NULL among
    them) find the nodes the exhaustive strategy (the shares in SQL) finds, at every t."""
    rows = ["p,s"] + [f"v{i % 4},{'' if i % 3 == 0 else 'ab'[i % 2]}" for i in range(24)]
    (tmp_path / "data.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "p.csv").write_text("v0;A;*\nv1;A;*\nv2;B;*\nv3;B;*\n")
    source = {"url": "t.duckdb", "table": "t", "csv": "data.csv", "csv_options": {"all_varchar": True}}
    options = RunOptions()
    if backend == "postgresql":
        schema = request.getfixturevalue("pg_schema")
        source.update(url=request.getfixturevalue("pg_server"), schema=schema)
        options = RunOptions(metadata_schema=f"{schema}_meta")
    found = {}
    for t in (0.01, 0.05, 0.1, 0.2, 0.4, 0.9):
        job = job_from_dict(
            {
                "source": source,
                "quasi_identifiers": {"p": "p.csv"},
                "criteria": {"t_closeness": {"attribute": "s", "t": t, "distance": distance}},
            },
            tmp_path,
        )
        found[t] = search(dataclasses.replace(job, strategy="exhaustive"), options).satisfying
        for strategy in ("auto", "incognito"):
            assert search(dataclasses.replace(job, strategy=strategy), options).satisfying == found[t], (t, strategy)
    assert len({tuple(nodes) for nodes in found.values()}) > 1  # some t tells the nodes apart


def test_sensitive_hierarchy_must_cover_the_values(tmp_path: Path, sensitive_domain):
    (tmp_path / "s.csv").write_text("a;*\n")
    spec = {"t_closeness": {"attribute": "s", "t": 0.5, "distance": "hierarchical", "hierarchy": "s.csv"}}
    with pytest.raises(Exception, match="1 value.s. missing from its hierarchy"):
        search(one_table(tmp_path, {"x": ["a"], "y": ["b"]}, spec))


def test_hierarchical_distance_needs_two_levels(tmp_path: Path):
    """The distance weighs nodes by 1/(2H): a sensitive hierarchy of one level is refused when read."""
    (tmp_path / "s.csv").write_text("a\nb\n")
    spec = {"attribute": "s", "t": 0.5, "distance": "hierarchical", "hierarchy": "s.csv"}
    with pytest.raises(HierarchyError, match="line 1 has one field"):
        criteria_from_config({"t_closeness": spec}, tmp_path)


def test_adjusted_entropy_when_a_class_column_is_attribute_zero(tmp_path_factory):
    """Regression (found by hypothesis): internal names of the adjusted-entropy SQL once collided with
    Incognito's class column a0, so classes of attribute 0 skipped the lowering step."""
    rows = [("v0", "w0", "a", "x", 1)] * 10 + [
        ("v0", "w0", "b", "x", 1),
        ("v1", "w0", "a", "x", 1),
        ("v1", "w0", "a", "x", 1),
        ("v1", "w0", "b", "x", 1),
    ]
    spec = {"entropy_l_diversity": {"attribute": "occupation", "l": 2, "dont_care": ["a", "b"]}}
    test_criteria_on_random_tables.hypothesis.inner_test(tmp_path_factory, rows, spec, 0)


# --- t-closeness against a reference in Python --------------------------------------------

SENSITIVE_TREE = {
    "a": ("G1", "H1"),
    "b": ("G1", "H1"),
    "c": ("G2", "H1"),
    "d": ("G3", "H2"),
    "e": ("G3", "H2"),
    "f": ("G3", "H2"),
}  # leaf -> its labels at levels 1 and 2; level 3 is *


def _distances(p: dict[str, float], q: dict[str, float], height: int = 3) -> dict[str, float]:
    """Equal, KL and hierarchical distance of class distribution p from table distribution q, written from the
    definitions, not from the SQL: the hierarchical one as the t-closeness paper's sum over
    internal nodes of (height / H) * min(positive extra, negative extra) of their children, bottom up
    (height 2: the tree without its root, two top labels)."""
    leaves = sorted(q)
    extra = {leaf: p.get(leaf, 0.0) - q[leaf] for leaf in leaves}
    hierarchical = 0.0
    for level in range(1, height + 1):
        parent = (lambda leaf: SENSITIVE_TREE[leaf][level - 1]) if level < 3 else (lambda leaf: "*")
        child = (lambda leaf: leaf) if level == 1 else (lambda leaf: SENSITIVE_TREE[leaf][level - 2])
        children: dict[str, dict[str, float]] = {}
        for leaf in leaves:
            node = children.setdefault(parent(leaf), {})
            node[child(leaf)] = node.get(child(leaf), 0.0) + extra[leaf]
        for values in children.values():
            positive = sum(e for e in values.values() if e > 0)
            negative = -sum(e for e in values.values() if e < 0)
            hierarchical += level / height * min(positive, negative)
    return {
        "equal": 0.5 * sum(abs(e) for e in extra.values()),
        "kl": sum(v * math.log(v / q[s]) for s, v in p.items() if v > 0),
        "hierarchical": hierarchical,
    }


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    classes=st.lists(st.lists(st.sampled_from(sorted(SENSITIVE_TREE)), min_size=1, max_size=8), min_size=1, max_size=3),
    distance=st.sampled_from(["equal", "kl", "hierarchical"]),
    rooted=st.booleans(),
)
def test_t_closeness_figures_equal_a_python_reference(
    tmp_path_factory, classes: list[list[str]], distance: str, rooted: bool
):
    """The audit's largest distance of any class (max_t) equals the one computed in Python for each class."""
    tmp = tmp_path_factory.mktemp("tclose")
    root = ";*" if rooted else ""
    (tmp / "s.csv").write_text("".join(f"{leaf};{g};{h}{root}\n" for leaf, (g, h) in SENSITIVE_TREE.items()))
    spec = {
        "t_closeness": {
            "attribute": "s",
            "t": 0.99,
            "distance": distance,
            **({"hierarchy": "s.csv"} if distance == "hierarchical" else {}),
        }
    }
    found = audited(tmp, classes, spec)["max_t"]
    everything = [s for values in classes for s in values]
    q = {s: everything.count(s) / len(everything) for s in set(everything)}
    expected = max(
        _distances({s: values.count(s) / len(values) for s in set(values)}, q, 3 if rooted else 2)[distance]
        for values in classes
    )
    assert found == pytest.approx(expected, abs=1e-9)
    for sizes_by_join, coded in itertools.product((True, False), (False, True)):
        assert bound_max(spec, tmp, classes, sizes_by_join, coded) == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize(
    "distance, t, least",
    [("equal", 0.3, 5), ("equal", 0.34, 4), ("kl", 0.5, 4), ("hierarchical", 0.1, 5), ("ordered", 0.0, 1)],
)
def test_least_class_size_of_t_closeness_by_hand(tmp_path: Path, distance: str, t: float, least: int):
    """Six values, equally frequent: a class of n lacks at least 6 - n of them, 1 - n/6 of the table (equal
    distance), -ln(n/6) (KL), (1 - n/6)/3 for a hierarchy of height 3; the ordered distance is not bounded."""
    criterion = _t_closeness_on_the_tree(tmp_path, t, distance)
    assert criterion.least_class_size({"s": dict.fromkeys(SENSITIVE_TREE, 10)}) == least


@settings(max_examples=60, deadline=None)
@given(
    table=st.lists(st.integers(0, 40), min_size=6, max_size=6).filter(any),
    t=st.floats(0.0, 1.0),
    distance=st.sampled_from(["equal", "kl", "hierarchical"]),
)
def test_every_class_below_the_least_size_violates_t_closeness(
    tmp_path_factory, table: list[int], t: float, distance: str
):
    """Every class smaller than the least size t-closeness allows (what a search settles first, over sets without
    the sensitive values) is farther than t from the table, by the distances written from their definitions: all
    the values' counts a class of each smaller size can hold are tried."""
    criterion = _t_closeness_on_the_tree(tmp_path_factory.mktemp("least"), t, distance)

    def violates(values: list[str], q: dict[str, float]) -> bool:
        return _distances({s: values.count(s) / len(values) for s in set(values)}, q)[distance] > t + 1e-9

    assert_smaller_classes_violate(criterion, dict(zip(SENSITIVE_TREE, table)), violates)


def assert_smaller_classes_violate(criterion, counts: dict[str, int], violates) -> None:
    """Every class smaller than `criterion`'s least class size over a table of these `counts` of each value of `s`
    violates it by `violates(the class's values, the table's shares)`, a reference from the definition: every class
    of each smaller size is tried."""
    counts = {value: n for value, n in counts.items() if n}
    least = criterion.least_class_size({"s": counts})
    assert 1 <= least <= len(counts)
    shares = {value: n / sum(counts.values()) for value, n in counts.items()}
    for size in range(1, least):
        for values in itertools.combinations_with_replacement(sorted(shares), size):
            assert violates(list(values), shares), (values, least)


def _t_closeness_on_the_tree(folder: Path, t: float, distance: str):
    """t-closeness on `s`, with SENSITIVE_TREE under a root (height 3) as its hierarchy where the distance needs
    one."""
    (folder / "s.csv").write_text("".join(f"{leaf};{g};{h};*\n" for leaf, (g, h) in SENSITIVE_TREE.items()))
    hierarchy = {"hierarchy": "s.csv"} if distance == "hierarchical" else {}
    return criteria_from_config({"t_closeness": {"attribute": "s", "t": t, "distance": distance, **hierarchy}}, folder)[
        0
    ]


def bound_max(
    spec: dict, folder: Path, classes: list[list[str]], sizes_by_join: bool, coded: bool, column: str = "stat"
) -> float:
    """The largest `column` of the criterion's statistic over the classes (t-closeness: the largest distance of any
    class) as a search's waves compute it: the table's counts of each value read
    beforehand and bound as lists (the hierarchy's nodes' shares, for the hierarchical distance), the class sizes
    joined on the integer class keys (DuckDB's waves) or added up in a window (PostgreSQL's), the values as they are
    or `coded` (integers from 1 in the order the table's counts list them, as a small table's cube holds them)."""
    from collections import Counter

    from sqlanon.criteria.view import FrequencySetView

    criterion = criteria_from_config(spec, folder)[0]
    counts = Counter(s for values in classes for s in values)
    codes = {value: i + 1 for i, value in enumerate(counts)} if coded else None
    rows = [
        {"cls": i, "s0": codes[s] if coded else s, "cnt": n}
        for i, values in enumerate(classes)
        for s, n in Counter(values).items()
    ]
    view = FrequencySetView(
        table="fs",
        class_columns=["cls"],
        count_column="cnt",
        sensitive_columns={"s": "s0"},
        grouped=True,
        table_counts={"s": dict(counts)},
        sizes_by_join=sizes_by_join,
        codes={"s": codes} if coded else None,
    )
    fragment = criterion.class_statistic(view)
    with sa.create_engine("duckdb:///:memory:").connect() as conn:
        conn.exec_driver_sql(f"CREATE TABLE fs (cls INTEGER, s0 {'BIGINT' if coded else 'VARCHAR'}, cnt BIGINT)")
        conn.execute(sa.text("INSERT INTO fs VALUES (:cls, :s0, :cnt)"), rows)
        return conn.execute(sa.text(f"SELECT MAX({column}) FROM ({fragment.sql}) x"), fragment.params).scalar_one()


# --- don't-care sets against references in Python ---------------------------------------


def _pd_ratio(counts: dict[str, int], dont_care: set[str], l: int) -> float | None:
    """r_y over its tail as domain.md defines pd-recursive diversity (ties rank values outside Y first); None
    when the tail is empty, 0 when every value is don't-care."""
    ranked = sorted(counts.items(), key=lambda vc: (-vc[1], vc[0] in dont_care))
    r = [count for _, count in ranked]
    outside = [rank for rank, (value, _) in enumerate(ranked, start=1) if value not in dont_care]
    if not outside:
        return 0.0
    y = outside[0]
    tail = sum(r[l - 1 :]) if y <= l - 1 else sum(r[l - 2 : y - 1]) + sum(r[y:])
    return r[y - 1] / tail if tail else None


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    counts=st.lists(st.integers(1, 9), min_size=1, max_size=5),
    dont_care=st.sets(st.sampled_from("ab")),
    l=st.integers(2, 3),
)
@example(counts=[3, 9, 2], dont_care={"a", "b"}, l=2)  # largest first, 9 is lowered and then 3 would join
def test_dont_care_figures_equal_python_references(tmp_path_factory, counts: list[int], dont_care: set[str], l: int):
    """One class: the adjusted entropy (against the sup of its definition, on a grid) and the pd-recursive ratio
    (against domain.md's definition) of the audit."""
    values = {"abcde"[i]: count for i, count in enumerate(counts)}
    rows = [value for value, count in values.items() for _ in range(count)]
    tmp = tmp_path_factory.mktemp("dont_care")
    spec = {"recursive_l_diversity": {"attribute": "s", "c": 1, "l": l, "dont_care": sorted(dont_care)}}
    expected = _pd_ratio(values, dont_care, l)
    found = _audit_one_class(tmp, rows, spec)["smallest_c"]
    assert found == (None if expected is None else pytest.approx(expected))
    spec = {"entropy_l_diversity": {"attribute": "s", "l": 1, "dont_care": sorted(dont_care)}}
    fixed = [count for value, count in values.items() if value not in dont_care]
    entropy = _adjusted_entropy_brute_force(fixed, [values[v] for v in sorted(dont_care) if v in values], 200)
    assert math.log(_audit_one_class(tmp, rows, spec)["entropy_l"]) == pytest.approx(entropy, abs=1e-3)
