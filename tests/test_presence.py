"""delta-presence and the research subset: a job anonymizes and publishes the rows of a subset of its table, and
delta-presence bounds each class's share of the subset among the population's rows (the whole table), as k-map
without a population size (and profitability's journalist) bounds each class's rows of the population: checked
against a pandas reference on random tables with every strategy, through publication and its audit, and with bad
settings."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sqlanon import analyze, anonymize, audit, job_from_dict, node_metrics, search
from sqlanon.criteria import KAnonymity, criteria_from_config
from sqlanon.engine import checker
from sqlanon.errors import ConfigError, DataError, HierarchyError
from sqlanon.model.quality import CostBenefit

from .test_cli import run as run_cli
from .test_risk import PATHS, assert_every_strategy, generalized

COLUMNS = ["p", "q", "f"]


def subset_job(folder: Path, rows: list[tuple[Any, ...]], spec: dict, limit: int, **extra: Any) -> Any:
    """A job over a random table of `rows` (QIs p and q with test_risk's hierarchies, subset flag f) in `folder`."""
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame.to_csv(folder / "data.csv", index=False)
    for qi in ("p", "q"):
        (folder / f"{qi}.csv").write_text("".join(";".join(path) + "\n" for path in PATHS[qi].values()))
    subset_rows = int(frame["f"].sum())
    config = {
        "source": {"url": "t.duckdb", "table": "t", "csv": "data.csv"},
        "quasi_identifiers": {"p": "p.csv", "q": "q.csv"},
        "criteria": spec,
        "subset": {"column": "f"},
        "suppression": {"limit": max(0, min(limit, subset_rows - 1))},
        **extra,
    }
    return job_from_dict(config, folder)


def reference(rows: list[tuple[Any, ...]], job: Any, spec: dict, limit: int) -> tuple[set, dict]:
    """The nodes that pass, and each one's suppressed tuples, in pandas: every class of the population (the whole
    table) holds n of the subset's rows among its pn; one without any (n = 0) below d_min fails the node, the
    others that break delta-presence or k-anonymity are suppressed (their n tuples) within the limit."""
    presence = spec.get("delta_presence", {"d_min": 0.0, "d_max": 1.0})
    k = spec.get("k_anonymity", {}).get("k", 1)
    k_map = spec.get("k_map", {}).get("k", 1)  # counted in the population: a class's rows of the whole table
    attacker = spec.get("profitability", {}).get("attacker")  # no attack pays where a class holds 3 (gain / cost)
    k, k_map = (max(k, 3), k_map) if attacker == "prosecutor" else (k, max(k_map, 3) if attacker else k_map)
    frame = pd.DataFrame(rows, columns=COLUMNS)
    passing, suppressed = set(), {}
    for node, grouped in generalized(frame, job):
        classes = grouped.groupby(["p", "q"])["f"].agg(["sum", "size"])
        share = classes["sum"] / classes["size"]
        if ((classes["sum"] == 0) & (share < presence["d_min"])).any():
            continue
        breaks = (share < presence["d_min"]) | (share > presence["d_max"]) | (classes["sum"] < k)
        breaks |= classes["size"] < k_map
        tuples = int(classes["sum"][breaks & (classes["sum"] > 0)].sum())
        if tuples <= limit:
            passing.add(node)
            suppressed[node] = tuples
    return passing, suppressed


CASES = [
    {"delta_presence": {"d_min": 0.0, "d_max": 0.6}},
    {"delta_presence": {"d_min": 0.3, "d_max": 0.8}},
    {"delta_presence": {"d_min": 0.2, "d_max": 1.0}},
    {"delta_presence": {"d_min": 0.25, "d_max": 0.75}, "k_anonymity": {"k": 2}},
    {"k_map": {"k": 3}},
    {"k_map": {"k": 4}, "delta_presence": {"d_min": 0.1, "d_max": 0.9}},
    # no attack pays (cost_benefit: PROFITABLE): 3 rows of the subset (the prosecutor), of the population (journalist)
    {"profitability": {"attacker": "journalist"}},
    {"profitability": {"attacker": "prosecutor"}, "delta_presence": {"d_min": 0.0, "d_max": 0.7}},
]
#: random tables of p, q and the subset's flag f, with at least one row in the subset
RANDOM_ROWS = st.lists(
    st.tuples(st.sampled_from(["v0", "v1", "v2", "v3"]), st.sampled_from(["w0", "w1", "w2"]), st.integers(0, 1)),
    min_size=4,
    max_size=40,
).filter(lambda rows: any(r[2] for r in rows))
#: the cost/benefit model of the profitability cases: an attack costs 2 and gains 5, so it pays below 2.5 records
PROFITABLE = {"adversary_gain": 5, "adversary_cost": 2}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=RANDOM_ROWS, spec=st.sampled_from(CASES), limit=st.integers(0, 5))
def test_every_strategy_equals_the_reference_on_random_tables(tmp_path_factory, rows, spec, limit):
    prosecutor = spec.get("profitability", {}).get("attacker") == "prosecutor"
    if max(spec.get("k_anonymity", {}).get("k", 1), 3 if prosecutor else 1) > sum(r[2] for r in rows):
        return  # a k above the subset's rows is a configuration error, tested elsewhere
    extra = {"cost_benefit": PROFITABLE} if "profitability" in spec else {}
    job = subset_job(tmp_path_factory.mktemp("presence"), rows, spec, limit, **extra)
    exhaustive = search(dataclasses.replace(job, strategy="exhaustive"))
    expected, _ = reference(rows, exhaustive, spec, exhaustive.max_suppressed)
    assert exhaustive.rows == sum(r[2] for r in rows)  # the subset's rows are the table the job anonymizes
    assert_every_strategy(job, exhaustive, expected)


def test_a_publication_writes_the_subset_s_rows_and_its_audit_holds(tmp_path: Path):
    rows = [(f"v{i % 4}", f"w{i % 3}", int(i % 5 < 2)) for i in range(60)] + [("v0", "w0", 1)] * 3
    spec = {"delta_presence": {"d_min": 0.2, "d_max": 0.6}}
    job = subset_job(tmp_path, rows, spec, 4, output={"table": "published"}, insensitive=[])
    report = anonymize(job)
    passing, suppressed = reference(rows, report.search, spec, report.search.max_suppressed)
    assert report.node in passing and report.suppressed == suppressed[report.node]
    presence = report.audit.criteria["delta_presence"]
    assert presence.holds and 0.2 <= presence.figure <= 0.6
    with duckdb.connect(str(tmp_path / "t.duckdb")) as con:
        published = con.sql("SELECT * FROM published").df()
    assert list(published.columns) == ["p", "q"]  # the flag is not published
    assert len(published) == sum(r[2] for r in rows) - report.suppressed
    # `analyze` reads the population as the search does: its release of the node suppresses the same rows
    [release] = analyze(job, node=report.node).tables
    assert (release.rows, release.suppressed) == (len(published), report.suppressed)


def test_a_subset_given_as_a_table_of_keys(tmp_path: Path):
    rows = [(f"v{i % 4}", f"w{i % 3}", i) for i in range(24)]
    pd.DataFrame(rows, columns=["p", "q", "id"]).to_csv(tmp_path / "data.csv", index=False)
    for qi in ("p", "q"):
        (tmp_path / f"{qi}.csv").write_text("".join(";".join(path) + "\n" for path in PATHS[qi].values()))
    with duckdb.connect(str(tmp_path / "t.duckdb")) as con:
        con.execute("CREATE TABLE study AS SELECT range * 3 AS id FROM range(8)")
    job = job_from_dict(
        {
            "source": {"url": "t.duckdb", "table": "t", "csv": "data.csv"},
            "quasi_identifiers": {"p": "p.csv", "q": "q.csv"},
            "identifying": ["id"],
            "criteria": {"delta_presence": {"d_min": 0.0, "d_max": 0.5}},
            "subset": {"table": "study", "key": "id"},
        },
        tmp_path,
    )
    found = search(dataclasses.replace(job, strategy="exhaustive"))
    flagged = [(p, q, int(i % 3 == 0)) for p, q, i in rows]
    assert found.rows == 8
    assert set(found.satisfying) == reference(flagged, found, {"delta_presence": {"d_min": 0, "d_max": 0.5}}, 0)[0]


@pytest.mark.parametrize(
    ("change", "error", "fragment"),
    [
        ({"subset": None}, ConfigError, "declare them as a research subset"),
        ({"criteria": {"delta_presence": {"d_min": 0.6, "d_max": 0.5}}}, ConfigError, "is above d_max"),
        ({"criteria": {"delta_presence": {"d_min": -0.1, "d_max": 0.5}}}, ConfigError, "between 0.0 and 1.0"),
        ({"criteria": {"delta_presence": {"d_max": 0.5}}}, ConfigError, "missing key 'd_min'"),
        ({"subset": {"column": "f", "key": "id"}}, ConfigError, "subset takes either"),
        ({"subset": {"column": "p"}}, ConfigError, "is listed under quasi_identifiers"),
        ({"subset": {"column": "g"}}, DataError, "subset.column 'g' is not in table"),
        ({"subset": {"table": "nowhere", "key": "p"}, "others": "drop"}, DataError, "nowhere"),
        ({"output": {"table": "o", "method": "mondrian"}}, ConfigError, "Mondrian's partitions of the subset"),
        ({"criteria": {"k_map": {"k": 5, "significance": 0.05}}}, ConfigError, "significance and estimator apply"),
        ({"criteria": {"k_map": {"k": 5}}, "subset": None}, ConfigError, "give population_size or sampling_fraction"),
    ],
)
def test_bad_settings(tmp_path: Path, change: dict, error: type, fragment: str):
    rows = [("v0", "w0", 1), ("v1", "w1", 0), ("v2", "w2", 1)]
    spec = {"delta_presence": {"d_min": 0.0, "d_max": 0.9}}
    job = subset_job(tmp_path, rows, spec, 0)
    config = {
        "source": {"url": "t.duckdb", "table": "t", "csv": "data.csv"},
        "quasi_identifiers": {"p": "p.csv", "q": "q.csv"},
        "criteria": spec,
        "subset": {"column": "f"},
    }
    assert job.subset is not None
    config.update(change)
    with pytest.raises(error, match=fragment):
        search(job_from_dict({k: v for k, v in config.items() if v is not None}, tmp_path))


@pytest.mark.parametrize(
    ("values", "fragment"),
    [
        (["a", "b", "a"], "must be a BOOLEAN or an integer column of 0 and 1"),
        ([1, 2, 0], "holds 1 value(s) other than 0 and 1"),
        ([0, 0, 0], "the research subset (the rows where f is true) of table 't' is empty"),
    ],
)
def test_bad_flags(tmp_path: Path, values: list[Any], fragment: str):
    rows = [("v0", "w0", values[0]), ("v1", "w1", values[1]), ("v2", "w2", values[2])]
    pd.DataFrame(rows, columns=COLUMNS).to_csv(tmp_path / "data.csv", index=False)
    job = subset_job(tmp_path, [("v0", "w0", 1)], {"delta_presence": {"d_min": 0.0, "d_max": 0.9}}, 0)
    pd.DataFrame(rows, columns=COLUMNS).to_csv(tmp_path / "data.csv", index=False)
    with pytest.raises(DataError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        search(job)


def test_the_hierarchies_must_cover_the_population(tmp_path: Path):
    rows = [("v0", "w0", 1), ("v1", "w1", 0), ("v2", "w2", 1)]
    job = subset_job(tmp_path, rows, {"delta_presence": {"d_min": 0.0, "d_max": 0.9}}, 0)
    (tmp_path / "p.csv").write_text("v0;A;*\nv2;B;*\n")  # v1, outside the subset, is missing
    with pytest.raises(HierarchyError, match="1 of the 3 rows of the population"):
        search(job)
    job = dataclasses.replace(job, criteria=[KAnonymity(1)])  # the plain research subset does not read the population
    assert search(dataclasses.replace(job, strategy="exhaustive")).rows == 2


def test_the_audit_of_a_published_subset_counts_its_suppressed_rows_among_the_subset(tmp_path: Path):
    """`sqlanon audit` of a subset's publication (k-anonymity, a row suppressed): the rows missing from the output
    are counted among the subset's rows, not the table's; delta-presence reads the population at the node the
    table's values are of."""
    rows = [("v0", "w0", 1)] * 6 + [("v1", "w1", 1)] * 6 + [("v2", "w2", 1)] + [("v3", "w0", 0)] * 20
    job = subset_job(tmp_path, rows, {"k_anonymity": {"k": 3}}, 4, output={"table": "published"})
    report = anonymize(job)
    again = audit(job, "published")
    assert report.node == (0, 0) and again.ok and again.rows == 12
    assert again.suppressed == report.suppressed == 1 and again.population_node is None
    presence = dataclasses.replace(job, criteria=criteria_from_config({"delta_presence": {"d_min": 0, "d_max": 1}}))
    audited = audit(presence, "published")
    assert audited.population_node == (0, 0) and audited.suppressed == 1
    assert audited.criteria["delta_presence"].figure == 1.0  # every class of the subset's rows alone


#: a table whose publications generalize p or q (or both) for every case of CASES
AUDITED_ROWS = [(f"v{i % 4}", f"w{(i * 7) % 3}", int(i % 5 < 2 or i % 11 == 0)) for i in range(90)]


@pytest.mark.parametrize(("spec", "mode"), [(spec, ("remove", "mask")[i % 2]) for i, spec in enumerate(CASES)])
def test_the_audit_of_a_published_table_reads_the_population_at_its_node(tmp_path: Path, spec: dict, mode: str):
    """`audit` of the table a publication wrote, with criteria that compare with the population: the node is found
    from the table's values (masked rows left out), and every figure is the publication's own audit's."""
    extra = {"cost_benefit": PROFITABLE} if "profitability" in spec else {}
    job = subset_job(tmp_path, AUDITED_ROWS, spec, 3, output={"table": "published"}, **extra)
    job = dataclasses.replace(job, suppression=dataclasses.replace(job.suppression, mode=mode))
    report = anonymize(job)
    audited = audit(job, "published")
    assert audited.population_node == report.node
    assert audited.to_dict() == {**report.audit.to_dict(), "population_node": list(report.node)}
    assert audit(job, "published", node=report.node).to_dict() == audited.to_dict()


def test_an_audit_against_the_population_refuses_a_node_the_table_is_not_at(tmp_path: Path):
    """A node given that the table's values are not of, a table at no level of the hierarchies, levels that label
    the published values alike and otherwise, a DataFrame: one line each."""
    spec = {"delta_presence": {"d_min": 0.0, "d_max": 0.9}}
    rows = [("v0", "w0", 1), ("v0", "w0", 0), ("v1", "w1", 1), ("v1", "w1", 0)] * 2 + [("v2", "w2", 0)] * 4
    job = subset_job(tmp_path, rows, spec, 0, output={"table": "published"})
    assert anonymize(job).node == (0, 0)
    with pytest.raises(DataError, match=r"values of 'p' are not labels of level 1 of its hierarchy \(they are of le"):
        audit(job, "published", node=(1, 0))
    with duckdb.connect(str(tmp_path / "t.duckdb")) as con:
        con.sql("CREATE TABLE mixed AS SELECT * FROM published UNION ALL SELECT 'A', 'w0'")
    with pytest.raises(DataError, match="'p' of the table holds values of no one level of its hierarchy"):
        audit(job, "mixed")
    # level 1 labels v0 and v1 as level 0 does, but groups v2 and v3 into one label
    (tmp_path / "p.csv").write_text("v0;v0;*\nv1;v1;*\nv2;A;*\nv3;A;*\n")
    with pytest.raises(ConfigError, match="'p' are labels of levels 0 and 1 of its hierarchy, which group"):
        audit(job, "published")
    assert audit(job, "published", node=(1, 0)).criteria["delta_presence"].figure == pytest.approx(0.5)
    config = {  # the same job as a file, for the command line's --node
        "source": {"url": str(tmp_path / "t.duckdb"), "table": "t"},
        "quasi_identifiers": {"p": "p.csv", "q": "q.csv"},
        "criteria": spec,
        "subset": {"column": "f"},
    }
    (tmp_path / "job.yaml").write_text(json.dumps(config))
    audited = run_cli("audit", str(tmp_path / "job.yaml"), "--table", "published", "--node", "1,0", "--json")
    assert audited.exit_code == 0 and json.loads(audited.output)["population_node"] == [1, 0]
    with pytest.raises(ConfigError, match="not a DataFrame"):
        audit(job, pd.DataFrame({"p": ["v0"], "q": ["w0"]}))


@pytest.mark.parametrize("spec", [c for c in CASES[1:] if "profitability" not in c])  # profitability: k-map's path
def test_a_large_cube_reads_the_population_through_planned_roll_ups(tmp_path: Path, monkeypatch, spec: dict):
    """Where the cubes count as large (here from 10 rows), a wave reads the population's cube through roll-ups
    planned for its nodes, not clusters, and a wave cut into statements (here one per roll-up) reads the
    population's sets of each statement's nodes: every strategy still finds the reference's nodes."""
    monkeypatch.setattr(checker, "SMALL_CUBE", 10)
    monkeypatch.setattr(checker, "ROWS_PER_STATEMENT", 1)
    rows = [(f"v{i % 4}", f"w{(i * 7) % 3}", int(i % 5 < 2 or i % 11 == 0)) for i in range(90)]
    job = subset_job(tmp_path, rows, spec, 3)
    exhaustive = search(dataclasses.replace(job, strategy="exhaustive"))
    expected, _ = reference(rows, exhaustive, spec, exhaustive.max_suppressed)
    assert 0 < len(expected) < 12
    assert_every_strategy(job, exhaustive, expected)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=RANDOM_ROWS, limit=st.integers(0, 5))
def test_the_journalist_s_payout_counts_each_class_in_the_population(tmp_path_factory, rows, limit):
    """ARX's publisher payout with the journalist as adversary (success 1 / the class's rows in the population)
    against a pandas reference of every passing node, ARX's way: per class, the entropy-based loss from the
    values' shares of the domains, and the payout less publisher_loss / its population where an attack pays."""
    select = {"metric": "publisher_payout", "attacker": "journalist"}
    job = subset_job(
        tmp_path_factory.mktemp("payout"), rows, {"k_map": {"k": 2}}, limit, cost_benefit=PROFITABLE, select=select
    )
    result = search(job)
    found = node_metrics(job, result.satisfying)
    leaves = {"p": 4, "q": 3}
    model = CostBenefit(**PROFITABLE)
    for node, grouped in generalized(pd.DataFrame(rows, columns=COLUMNS), result):
        if node not in found:
            continue
        classes = grouped.groupby(["p", "q"])["f"].agg(["sum", "size"])
        subset_classes = classes[classes["sum"] > 0]
        kept = subset_classes[subset_classes["size"] >= 2]  # k-map: 2 rows of the population
        expected = float(subset_classes["sum"][subset_classes["size"] < 2].sum()) * model.publisher_benefit
        for (p, q), (n, population) in kept.iterrows():
            shares = [
                sum(path[level] == value for path in PATHS[qi].values()) / leaves[qi]
                for qi, value, level in (("p", p, node[0]), ("q", q, node[1]))
            ]
            loss = math.log10(math.prod(shares)) / math.log10(math.prod(leaves.values())) + 1
            success = 1 / population
            attacked = model.adversary_gain * success - model.adversary_cost > 0
            payout = model.publisher_benefit * (1 - loss) - (model.publisher_loss * success if attacked else 0)
            expected += n * (model.publisher_benefit - payout)
        assert found[node]["publisher_payout"] == pytest.approx(expected, rel=1e-9), node
