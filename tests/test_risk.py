"""Re-identification risk over the whole release (average risk, with its highest-risk and records-at-risk bounds;
sample uniqueness) and k-map estimated from the sample: the search against a reference written from ARX's
definitions in Python (each node's class sizes from pandas, the smallest classes suppressed one at a time until the
bounds hold), on Adult and on random tables, with and without suppression and beside per-class criteria; the
publication and its audit; the estimate of k-map against ARX's own figures; bad settings. Against ARX's tags on
Adult's lattice: test_arx."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sqlanon import anonymize, audit, job_from_dict, search
from sqlanon.criteria import criteria_from_config
from sqlanon.criteria.risk import derived_k
from sqlanon.errors import ConfigError
from sqlanon.model.job import Suppression

from .conftest import ADULT_DIR, QIS, adult_job, assert_best_ranked, minimal_only_search, reclassified

ADULT_CASES = {
    "average 0.02": {"average_risk": {"threshold": 0.02}},
    "average 0.05, highest 0.2, at risk 0.1": {
        "average_risk": {"threshold": 0.05, "highest_risk": 0.2, "records_at_risk": 0.1}
    },
    "uniqueness 0.005": {"sample_uniqueness": {"threshold": 0.005}},
    "k=3 and average 0.1": {"k_anonymity": {"k": 3}, "average_risk": {"threshold": 0.1}},
    "distinct l=2 and uniqueness 0.001": {
        "distinct_l_diversity": {"attribute": "occupation", "l": 2},
        "sample_uniqueness": {"threshold": 0.001},
    },
}


def least_suppressed(sizes: list[int], spec: dict, failing: list[int] = ()) -> int:
    """The fewest tuples ARX's risk models suppress on a node with classes of `sizes`, of which the per-class
    criteria fail `failing`: those, then the smallest of the others one at a time, until every bound holds over
    the classes left (none left: they hold)."""
    kept = sorted(sizes)
    suppressed, records = sum(failing), sum(kept)
    classes, uniques = len(kept), kept.count(1)
    average = spec.get("average_risk", {})
    smallest = _size_threshold(average["highest_risk"]) if average.get("highest_risk") else 0
    at_risk = sum(s for s in kept if s < smallest)
    for size in kept + [None]:
        holds = records == 0 or (
            (not average or 1 / (records / classes) <= average["threshold"])
            and (not smallest or at_risk / records <= average.get("records_at_risk", 0))
            and ("sample_uniqueness" not in spec or uniques / records <= spec["sample_uniqueness"]["threshold"])
        )
        if holds or size is None:
            return suppressed
        suppressed, records, classes = suppressed + size, records - size, classes - 1
        uniques -= size == 1
        at_risk -= size if size < smallest else 0
    raise AssertionError("unreachable")


def _size_threshold(risk: float) -> int:
    """ARX's size for a highest risk: 1 / risk, rounded up unless that is within 1% of the risk."""
    size = math.floor(1 / risk)
    return size if 1 / size - risk < 0.01 * risk else size + 1


@functools.cache
def _adult() -> pd.DataFrame:
    return pd.read_csv(ADULT_DIR / "adult.csv.gz", sep=";", dtype=str)


@functools.cache
def _paths(column: str) -> dict[str, list[str]]:
    lines = (ADULT_DIR / "hierarchies" / f"{column}.csv").read_text(encoding="utf-8").splitlines()
    return {line.split(";")[0]: line.split(";") for line in lines if line}


@functools.cache
def adult_classes(qis: tuple[str, ...], node: tuple[int, ...], sensitive: str = "occupation") -> pd.DataFrame:
    """Each class of Adult at `node` (its QIs' levels): its size n and distinct values of `sensitive`, in pandas."""
    rows = _adult()
    generalized = pd.DataFrame({q: rows[q].map({v: p[lv] for v, p in _paths(q).items()}) for q, lv in zip(qis, node)})
    grouped = generalized.assign(s=rows[sensitive]).groupby(list(qis))["s"]
    return pd.DataFrame({"n": grouped.size(), "distinct": grouped.nunique()})


def lattice(heights: list[int]) -> list[tuple[int, ...]]:
    return list(itertools.product(*(range(h + 1) for h in heights)))


def reference_passing(qis: tuple[str, ...], nodes: list[tuple[int, ...]], spec: dict, limit: int) -> set:
    """The nodes whose least suppression, by `least_suppressed`, is at most `limit` tuples."""
    k = spec.get("k_anonymity", {}).get("k", 1)
    l = spec.get("distinct_l_diversity", {}).get("l", 1)
    found = set()
    for node in nodes:
        classes = adult_classes(qis, node)
        failing = (classes["n"] < k) | (classes["distinct"] < l)
        if least_suppressed(list(classes["n"][~failing]), spec, list(classes["n"][failing])) <= limit:
            found.add(node)
    return found


@pytest.mark.parametrize("limit", [0, 0.02])
@pytest.mark.parametrize("case", list(ADULT_CASES))
def test_the_search_equals_the_reference_on_adult(adult_duck: str, case: str, limit: float):
    job = reclassified(
        adult_job(adult_duck, QIS, load_csv=False),
        criteria=criteria_from_config(ADULT_CASES[case]),
        sensitive=["occupation"],
        suppression=Suppression(limit),
    )
    result = search(job)
    nodes = lattice(result.heights)
    expected = reference_passing(tuple(result.qi), nodes, ADULT_CASES[case], result.max_suppressed)
    assert set(result.satisfying) == expected
    assert 0 < len(expected) < len(nodes)  # the case discriminates


RANDOM_CASES = [
    {"average_risk": {"threshold": 0.4}},
    {"average_risk": {"threshold": 0.5, "highest_risk": 0.34, "records_at_risk": 0.2}},
    {"sample_uniqueness": {"threshold": 0.1}},
    {"k_anonymity": {"k": 2}, "average_risk": {"threshold": 0.3}},
    {"distinct_l_diversity": {"attribute": "s", "l": 2}, "sample_uniqueness": {"threshold": 0.05}},
    {"average_risk": {"threshold": 0.45}, "sample_uniqueness": {"threshold": 0.2}},
]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(["v0", "v1", "v2", "v3"]), st.sampled_from(["w0", "w1", "w2"]), st.sampled_from("ab")
        ),
        min_size=4,
        max_size=40,
    ),
    spec=st.sampled_from(RANDOM_CASES),
    limit=st.integers(0, 6),
)
def test_every_strategy_equals_the_reference_on_random_tables(tmp_path_factory, rows, spec, limit):
    """Every strategy, with and without suppression, against the reference evaluated on every node in pandas."""
    if "distinct_l_diversity" in spec and len({r[2] for r in rows}) < 2:
        return  # an impossible l is a configuration error, tested elsewhere
    roles = {} if "distinct_l_diversity" in spec else {"insensitive": ["s"]}
    job = random_job(tmp_path_factory.mktemp("risk"), ["p", "q", "s"], rows, spec, limit, roles)
    exhaustive = search(dataclasses.replace(job, strategy="exhaustive"))
    expected = set()
    for node, grouped in generalized(pd.DataFrame(rows, columns=["p", "q", "s"]), exhaustive):
        classes = grouped.groupby(["p", "q"])["s"].agg(["size", "nunique"])
        k = spec.get("k_anonymity", {}).get("k", 1)
        l = spec.get("distinct_l_diversity", {}).get("l", 1)
        failing = (classes["size"] < k) | (classes["nunique"] < l)
        fewest = least_suppressed(list(classes["size"][~failing]), spec, list(classes["size"][failing]))
        if fewest <= exhaustive.max_suppressed:
            expected.add(node)
    assert_every_strategy(job, exhaustive, expected)
    for strategy in ("auto", "filtered"):  # as a publication searches: the minimal nodes, or the best one alone
        assert minimal_only_search(dataclasses.replace(job, strategy=strategy)).minimal == exhaustive.minimal
        for policy in ("min_absolute_distance", "min_relative_distance"):
            ranked = minimal_only_search(dataclasses.replace(job, strategy=strategy), policy)
            assert_best_ranked(ranked, exhaustive.minimal, policy)


#: the random tables' hierarchies: p's values in two groups, then *; q's straight to *
PATHS = {
    "p": {f"v{i}": [f"v{i}", "AB"[i // 2], "*"] for i in range(4)},
    "q": {f"w{i}": [f"w{i}", "*"] for i in range(3)},
}


def random_job(
    folder: Path, columns: list[str], rows: list[tuple[str, ...]], spec: dict, limit: int, roles: dict[str, Any]
) -> Any:
    """A job over a random table of `rows` (QIs p and q, with PATHS' hierarchies) in `folder`, with `spec`, `roles`
    for its other columns, and a limit of `limit` tuples (at most all but one)."""
    (folder / "data.csv").write_text(",".join(columns) + "\n" + "\n".join(",".join(r) for r in rows))
    for qi in ("p", "q"):
        (folder / f"{qi}.csv").write_text("".join(";".join(path) + "\n" for path in PATHS[qi].values()))
    return job_from_dict(
        {
            "source": {"url": "t.duckdb", "table": "t", "csv": "data.csv", "csv_options": {"all_varchar": True}},
            "quasi_identifiers": {"p": "p.csv", "q": "q.csv"},
            "criteria": spec,
            **roles,
            "suppression": {"limit": min(limit, len(rows) - 1)},
        },
        folder,
    )


def generalized(frame: pd.DataFrame, result: Any) -> Iterator[tuple[tuple[int, ...], pd.DataFrame]]:
    """Each node of the random tables' lattice, with the table's p and q at its levels (pandas)."""
    for node in lattice(result.heights):
        levels = dict(zip(result.qi, node))
        yield node, frame.assign(**{q: frame[q].map(lambda v, q=q: PATHS[q][v][levels[q]]) for q in ("p", "q")})


def assert_every_strategy(job: Any, exhaustive: Any, expected: set[tuple[int, ...]]) -> None:
    """The exhaustive oracle and every strategy find the `expected` nodes (Samarati: the lowest of them)."""
    assert set(exhaustive.satisfying) == expected
    for strategy in ("auto", "incognito", "topdown", "bottomup", "border", "filtered", "samarati"):
        found = search(dataclasses.replace(job, strategy=strategy))
        if strategy == "samarati":
            lowest = min((sum(n) for n in expected), default=None)
            assert set(found.satisfying) == {n for n in expected if sum(n) == lowest}
        else:
            assert (set(found.satisfying), found.minimal) == (expected, exhaustive.minimal), strategy


def _published_job(adult_duck: str, tmp_path: Path, spec: dict, limit: float, table: str):
    job = adult_job(adult_duck, QIS, load_csv=False, output={"table": table})
    return reclassified(job, criteria=criteria_from_config(spec), suppression=Suppression(limit))


def test_a_publication_suppresses_the_smallest_classes_and_its_audit_holds(adult_duck: str, tmp_path: Path):
    spec = {"average_risk": {"threshold": 0.02}, "sample_uniqueness": {"threshold": 0.0}}
    job = _published_job(adult_duck, tmp_path, spec, 0.02, "adult_risk")
    report = anonymize(job, replace=True)
    classes = adult_classes(tuple(report.search.qi), report.node)
    assert report.suppressed == least_suppressed(list(classes["n"]), spec) > 0
    again = audit(job, "adult_risk")
    assert again.ok and again.suppressed == report.suppressed
    figures = again.criteria
    assert figures["sample_uniqueness"].figure == 0 and figures["average_risk"].figure <= 0.02
    kept = sorted(classes["n"])[len(classes) - again.classes :]  # the largest classes stay
    assert figures["average_risk"].figure == pytest.approx(len(kept) / sum(kept))


def test_the_audit_of_the_source_finds_the_smallest_classes_violating(adult_duck: str):
    spec = {"average_risk": {"threshold": 0.02}}
    job = reclassified(adult_job(adult_duck, ["age", "education"], load_csv=False), criteria=criteria_from_config(spec))
    report = audit(job, "adult").criteria["average_risk"]
    sizes = sorted(adult_classes(("age", "education"), (0, 0))["n"])
    assert report.figure == pytest.approx(len(sizes) / sum(sizes))
    assert not report.holds and report.violating_tuples == least_suppressed(sizes, spec)


@pytest.mark.parametrize(
    "k, estimator, expected",
    [(3, "zero_truncated_poisson", 2), (1000, "zero_truncated_poisson", 3), (1000, "poisson", 3), (3, "poisson", 2)],
)
def test_k_map_estimates_arx_s_k(k: int, estimator: str, expected: int):
    """ARX's k' for Adult (30,162 records) sampled from the USA's population (Region.USA: 317,238,626), at 1%."""
    derived, error = derived_k(k, 30162 / 317238626 * k, 0.01, estimator)
    assert derived == expected and 0 <= error <= 0.01


def test_k_map_by_hand():
    def poisson(i: int) -> float:
        return math.exp(-2) * 2**i / math.factorial(i)

    # Poisson with mean 2: P(0..4) adds up to 0.947 < 0.95 <= 0.983 with P(5); ARX's k' is then 7
    derived, error = derived_k(100, 2.0, 0.05, "poisson")
    assert derived == 7 and error == pytest.approx(1 - sum(poisson(i) for i in range(6)))
    # zero-truncated: P(1..4) / (1 - P(0)) = 0.939 < 0.95 <= 0.981 with P(5)
    derived, error = derived_k(100, 2.0, 0.05, "zero_truncated_poisson")
    assert derived == 6 and error == pytest.approx(1 - sum(poisson(i) for i in range(1, 6)) / (1 - poisson(0)))
    capped = criteria_from_config({"k_map": {"k": 5, "sampling_fraction": 0.4, "significance": 0.05}})[0]
    capped.fit_table(1000)  # k' would be 7: k itself, certain
    assert capped.k == 5 and capped.type_1_error == 0


def test_k_map_publishes_its_derived_k(adult_duck: str, tmp_path: Path):
    spec = {"k_map": {"k": 1000, "sampling_fraction": 0.001, "estimator": "zero_truncated_poisson"}}
    job = _published_job(adult_duck, tmp_path, spec, 0, "adult_kmap")
    report = anonymize(job, replace=True)
    expected = derived_k(1000, 1.0, 0.01, "zero_truncated_poisson")[0]
    assert expected == 5 and report.audit.min_class_size >= expected  # mean 1: far below k
    k_alone = reclassified(job, criteria=criteria_from_config({"k_anonymity": {"k": expected}}))
    assert search(job).satisfying == search(k_alone).satisfying
    assert audit(job, "adult_kmap").criteria["k_map"].holds


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ({"average_risk": {"threshold": 0}}, "threshold must be > 0"),
        ({"average_risk": {"threshold": 1.5}}, "threshold must be between 0.0 and 1.0"),
        ({"average_risk": {"threshold": float("nan")}}, "must be a finite number"),
        ({"average_risk": {"threshold": 0.1, "records_at_risk": 0.1}}, "give highest_risk"),
        ({"sample_uniqueness": {"threshold": -0.1}}, "between 0.0 and 1.0"),
        ({"sample_uniqueness": {"limit": 0.1}}, "unknown key 'limit'"),
        ({"k_map": {"k": 5, "significance": 0.05}}, "significance and estimator apply to an estimate"),
        ({"k_map": {"k": 5, "population_size": 10, "sampling_fraction": 0.1}}, "(one of them)"),
        ({"k_map": {"k": 5, "sampling_fraction": 1.5}}, "sampling_fraction must be between"),
        ({"k_map": {"k": 5, "population_size": 1e9}}, "population_size must be a whole number"),
        ({"k_map": {"k": 5, "population_size": 100, "estimator": "normal"}}, "estimator 'normal' is unknown"),
        ({"k_map": {"k": 0, "population_size": 100}}, "k_map: k must be >= 1"),
        ({"k_map": {"k": 5, "sampling_fraction": 0}}, "sampling_fraction must be > 0"),
    ],
)
def test_bad_settings(spec: dict, fragment: str):
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        criteria_from_config(spec)


def test_settings_that_no_table_can_meet_are_refused_before_anything_is_written(adult_duck: str, tmp_path: Path):
    for spec, fragment in [
        ({"average_risk": {"threshold": 1e-6}}, "below 1/30162"),
        ({"k_map": {"k": 5, "population_size": 1000}}, "smaller than the table"),
    ]:
        job = _published_job(adult_duck, tmp_path, spec, 0, "adult_never")
        with pytest.raises(ConfigError, match=fragment):
            anonymize(job)


def test_mondrian_refuses_a_bound_on_the_whole_release(adult_duck: str):
    criteria = {"k_anonymity": {"k": 5}, "average_risk": {"threshold": 0.1}}
    output = {"table": "adult_m", "method": "mondrian"}
    with pytest.raises(ConfigError, match="average_risk bounds the whole release"):
        adult_job(adult_duck, QIS, load_csv=False, output=output, criteria=criteria)


def test_guarantees_read_plainly():
    average, unique, kmap = criteria_from_config(
        {
            "average_risk": {"threshold": 0.05, "highest_risk": 0.1, "records_at_risk": 0.02},
            "sample_uniqueness": 0.01,
            "k_map": {"k": 10, "population_size": 1_000_000},
        }
    )
    assert "in groups of fewer than 10 records" in average.guarantee()
    assert "at most a share 0.01 of the records are unique" in unique.guarantee()
    kmap.fit_table(30162)  # mean 0.30: P(0..2) = 0.996
    assert kmap.k == 4 and "at least 10 people" in kmap.guarantee()
