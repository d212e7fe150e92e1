"""Population uniqueness (ARX's PopulationUniqueness: Pitman's, Zayatz's and SNB's models, Dankar's rule): the models
against ARX's own figures on Adult (TestRiskMetrics), ARX's binary search over the classes to suppress against a
transcription of ARX's loop, the search against the exhaustive oracle and a reference in pandas on random tables
with and without suppression, the publication and its audit, bad settings. ARX's own test cases on Adult
(TestAnonymizationRiskBased) run in test_quality; PostgreSQL and Spark against DuckDB in test_backends_shared."""

from __future__ import annotations

import dataclasses
import functools

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sqlanon import analyze, analyze_table, anonymize, audit, search
from sqlanon.criteria import criteria_from_config
from sqlanon.errors import ConfigError
from sqlanon.model import uniqueness
from sqlanon.model.job import Suppression
from sqlanon.model.uniqueness import Histogram, Solver

from .conftest import ADULT_DIR, ADULT_QIS, adult_job, reclassified
from .test_risk import adult_classes, assert_every_strategy, generalized, random_job


@functools.cache
def _adult_histogram() -> Histogram:
    """Adult's classes on its nine QIs, none generalized, by size (pandas: a test's reference)."""
    rows = pd.read_csv(ADULT_DIR / "adult.csv.gz", sep=";", dtype=str)
    return Histogram.of(rows.groupby(ADULT_QIS).size().value_counts().to_dict())


@pytest.mark.parametrize(
    "fraction, expected",
    # TestRiskMetrics.testDecisionRule2: Dankar's rule on Adult sampled at 10% (Pitman's), 20% (Zayatz's),
    # 1% (Pitman's) and 100% (the sample uniques); ARX compares four digits, these agree to nine
    [(0.1, 0.27684993883653597), (0.2, 0.3577099234829125), (0.01, 0.1446083531167384), (1.0, 0.5142895033485844)],
)
def test_dankar_s_rule_gives_arx_s_figures_on_adult(fraction: float, expected: float):
    histogram = _adult_histogram()
    assert (histogram.records, histogram.of_size(1)) == (30162, 15512)
    [share] = uniqueness.unique_shares("dankar", [histogram], round(30162 / fraction), Solver(iterations_per_try=1000))
    assert share == pytest.approx(expected, rel=1e-9)


def test_each_model_on_adult_at_ten_percent():
    """Zayatz's figure is ARX's (TestRiskMetrics: where Pitman's fails, the rule falls back on it); SNB does not
    converge there, as ARX's test expects ('Unexpected convergence of SNB')."""
    shares = uniqueness.unique_shares("zayatz", [_adult_histogram()], 301620)
    assert shares == [pytest.approx(0.3207402393466189, rel=1e-9)]
    assert uniqueness.unique_shares("snb", [_adult_histogram()], 301620) == [None]
    unique_free = Histogram.of({2: 10, 5: 3})
    assert uniqueness.unique_shares("pitman", [unique_free], 1000) == [0.0]


def _arx_binary_search(sizes: list[int], fulfilled: set[int], budget: int) -> int | None:
    """ARX's HashGroupifyDistribution.suppressWhileNotFulfilledBinary and RiskBasedCriterion.enforce, transcribed
    with its mutable entries: whether the criterion holds is read off `fulfilled`, the numbers of classes left that
    pass. The classes it suppresses, or None where it aborts, or ends on a release that fails."""
    entries = sorted(sizes)
    outlier = [False] * len(entries)

    def state() -> str:
        kept = sum(not o for o in outlier)
        if kept in fulfilled:
            return "FULFILLED"
        suppressed = sum(s for s, o in zip(entries, outlier) if o)
        return "ABORT" if suppressed > budget else "NOT_FULFILLED"

    if state() == "FULFILLED":
        return 0
    low, high = 0, len(entries) - 1
    mid = int((low + high) / 2)
    for i in range(low, mid + 1):
        outlier[i] = True
    found = "ABORT"
    while low <= high:
        found = state()
        if found == "ABORT":
            break
        if found == "FULFILLED":
            high = mid - 1
            mid = int((low + high) / 2)
            i = mid + 1
            while i < len(entries) and outlier[i]:
                outlier[i] = False
                i += 1
        else:
            low = mid + 1
            mid = int((low + high) / 2)
            for i in range(low, mid + 1):
                outlier[i] = True
    if found != "ABORT":
        found = state()
        if found == "NOT_FULFILLED" and mid + 1 < len(entries) and not outlier[mid + 1]:
            outlier[mid + 1] = True
            found = state()
    return sum(outlier) if found == "FULFILLED" else None


@settings(max_examples=300, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 6), min_size=1, max_size=30),
    fulfilled=st.sets(st.integers(0, 30)),
    budget=st.integers(0, 60),
)
def test_the_binary_search_is_arx_s(sizes: list[int], fulfilled: set[int], budget: int):
    """On any bound, monotone or not: the classes suppressed are ARX's, and none where ARX aborts or ends failing."""
    histogram = Histogram.of(pd.Series(sizes).value_counts().to_dict())
    [found] = uniqueness.suppressed_classes(
        lambda histograms: [h.classes in fulfilled for h in histograms], [histogram], [budget]
    )
    assert found == _arx_binary_search(sizes, fulfilled, budget)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(
        st.tuples(st.sampled_from(["v0", "v1", "v2", "v3"]), st.sampled_from(["w0", "w1", "w2"])),
        min_size=4,
        max_size=40,
    ),
    model=st.sampled_from(["zayatz", "pitman", "dankar"]),
    threshold=st.sampled_from([0.01, 0.05, 0.2]),
    limit=st.integers(0, 6),
    with_k=st.booleans(),
)
def test_every_strategy_equals_the_oracle_and_the_reference(tmp_path_factory, rows, model, threshold, limit, with_k):
    """Every strategy, with and without suppression and beside k-anonymity, against the exhaustive oracle (one
    GROUP BY per node over labels) and a reference in pandas (each node's classes, the model on their sizes)."""
    spec = {"population_uniqueness": {"threshold": threshold, "model": model, "sampling_fraction": 0.2}}
    if with_k:
        spec["k_anonymity"] = {"k": 2}
    job = random_job(tmp_path_factory.mktemp("uniqueness"), ["p", "q"], rows, spec, limit, {})
    exhaustive = search(dataclasses.replace(job, strategy="exhaustive"))
    criterion = criteria_from_config({"population_uniqueness": spec["population_uniqueness"]})[0]
    criterion.fit_table(len(rows))
    expected = set()
    for node, grouped in generalized(pd.DataFrame(rows, columns=["p", "q"]), exhaustive):
        sizes = grouped.groupby(["p", "q"]).size()
        small = sizes[sizes < 2] if with_k else sizes.iloc[:0]
        kept = Histogram.of(sizes[sizes >= 2].value_counts().to_dict() if with_k else sizes.value_counts().to_dict())
        [taken] = criterion.classes_to_suppress([kept], [exhaustive.max_suppressed - int(small.sum())])
        if taken is not None and int(small.sum()) + kept.smallest_records(taken) <= exhaustive.max_suppressed:
            expected.add(node)
    assert_every_strategy(job, exhaustive, expected)


QIS = ["sex", "age", "race", "marital-status"]
ZAYATZ = {"population_uniqueness": {"threshold": 0.0005, "model": "zayatz", "sampling_fraction": 0.1}}


def test_a_publication_suppresses_the_smallest_classes_and_its_audit_estimates_them(adult_duck: str):
    """With 2% suppression: the node published suppresses the classes ARX's search takes (the smallest first), the
    audit's figure is the model's over the published classes, and the source's audit finds it failing."""
    job = reclassified(
        adult_job(adult_duck, QIS, load_csv=False, output={"table": "adult_uniqueness"}),
        criteria=criteria_from_config(ZAYATZ),
        suppression=Suppression(0.02),
    )
    report = anonymize(job, replace=True)
    criterion = job.criteria[0]
    sizes = adult_classes(tuple(report.search.qi), report.node)["n"]
    histogram = Histogram.of(sizes.value_counts().to_dict())
    [taken] = criterion.classes_to_suppress([histogram], [report.search.max_suppressed])
    assert taken is not None and report.suppressed == histogram.smallest_records(taken) > 0
    published = audit(job, "adult_uniqueness").criteria["population_uniqueness"]
    [share] = criterion.unique_shares([histogram.without_smallest(taken)])
    assert published.holds and published.figure == pytest.approx(share, rel=1e-12) and share <= 0.0005
    source = audit(job, "adult").criteria["population_uniqueness"]
    assert not source.holds and source.violating_tuples == _adult_at(QIS).of_size(1)


def test_analyze_reports_the_estimate_of_a_node_and_of_a_published_table(adult_duck: str):
    """`sqlanon analyze` reports the job's model over each release's classes (the suppressed left out), as the audit
    does over the published table."""
    job = reclassified(
        adult_job(adult_duck, QIS, load_csv=False, output={"table": "adult_unique_analyzed"}),
        criteria=criteria_from_config(ZAYATZ),
        suppression=Suppression(0.02),
    )
    report = anonymize(job, replace=True)
    [node] = analyze(job, node=report.node).tables
    published = audit(job, "adult_unique_analyzed").criteria["population_uniqueness"].figure
    assert node.population_unique_share == pytest.approx(published, rel=1e-12)
    [raw] = analyze(job, node=tuple(0 for _ in QIS)).tables  # the smallest classes suppressed, as ARX's search says
    [taken] = job.criteria[0].classes_to_suppress([_adult_at(QIS)], [report.search.max_suppressed])
    [expected] = job.criteria[0].unique_shares([_adult_at(QIS).without_smallest(taken)])
    assert taken and raw.population_unique_share == pytest.approx(expected, rel=1e-12)
    [table] = analyze_table(job, "adult_unique_analyzed").tables
    assert table.population_unique_share == pytest.approx(published, rel=1e-12)


def _adult_at(qis: list[str]) -> Histogram:
    sizes = adult_classes(tuple(qis), tuple(0 for _ in qis))["n"]
    return Histogram.of(sizes.value_counts().to_dict())


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ({"threshold": 0.1}, "give the population the table samples"),
        ({"threshold": 0.1, "population_size": 10**6, "sampling_fraction": 0.1}, "one of them"),
        ({"threshold": -0.1, "population_size": 10**6}, "threshold must be between 0.0 and 1.0"),
        ({"threshold": 0.1, "population_size": 10**6, "model": "poisson"}, "model 'poisson' is unknown"),
        ({"threshold": 0.1, "sampling_fraction": 0}, "sampling_fraction must be > 0"),
        ({"threshold": 0.1, "population_size": 10**6, "iterations_per_try": 0}, "iterations_per_try must be"),
        ({"threshold": float("nan"), "population_size": 10**6}, "must be a finite number"),
    ],
)
def test_bad_settings_are_refused(spec: dict, fragment: str):
    with pytest.raises(ConfigError, match=fragment):
        criteria_from_config({"population_uniqueness": spec})


def test_a_population_smaller_than_the_table_and_a_second_bound_are_refused(adult_duck: str):
    small = {"population_uniqueness": {"threshold": 0.1, "population_size": 1000}}
    job = reclassified(adult_job(adult_duck, QIS, load_csv=False), criteria=criteria_from_config(small))
    with pytest.raises(ConfigError, match="population_size=1000 is smaller than the table"):
        search(job)
    both = {**ZAYATZ, "sample_uniqueness": {"threshold": 0.01}}
    with pytest.raises(ConfigError, match="population_uniqueness cannot be combined with sample_uniqueness"):
        criteria_from_config(both)
