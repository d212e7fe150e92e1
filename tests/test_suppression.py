"""Tuple suppression, Samarati's search, utility metrics and the choice of the published node."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from sqlanon import RunOptions, anonymize, node_metrics, search
from sqlanon.cli import main
from sqlanon.config import job_from_dict
from sqlanon.criteria import criteria_from_config
from sqlanon.errors import ConfigError
from sqlanon.model.job import Output, Selection, Suppression
from sqlanon.model.lattice import minimal_nodes
from sqlanon.model.selection import METRICS, POLICIES
from sqlanon.session import lattice_run

from .conftest import (
    ADULT_QIS,
    CASES,
    QIS,
    adult_job,
    assert_best_ranked,
    minimal_only_search,
    passing,
    reclassified,
)

ADULT_ROWS = 30162
LIMITS = {"2%": 0.02, "300 tuples": 300}


def _adult(url: str, spec: dict, limit: float | int = 0, **changes) -> object:
    job = adult_job(url, QIS, load_csv=False)
    return reclassified(
        job, criteria=criteria_from_config(spec), sensitive=["occupation"], suppression=Suppression(limit), **changes
    )


def _max_suppressed(limit: float | int) -> int:
    return Suppression(limit).max_suppressed(ADULT_ROWS)


# --- the search is exact under suppression -------------------------------------------


@pytest.mark.parametrize("strategy", ["auto", "incognito", "filtered"])
@pytest.mark.parametrize("limit", list(LIMITS))
@pytest.mark.parametrize("case", list(CASES))
def test_searches_equal_exhaustive_with_suppression(
    adult_duck: str, adult_violations, case: str, limit: str, strategy: str
):
    """Every criterion (most are not monotone under suppression: auto then takes the filtered search)."""
    oracle = passing(adult_violations[case], _max_suppressed(LIMITS[limit]))
    result = search(_adult(adult_duck, CASES[case], LIMITS[limit], strategy=strategy))
    assert set(result.satisfying) == oracle
    assert not result.heuristic


@pytest.mark.parametrize("limit", list(LIMITS))
@pytest.mark.parametrize("case", list(CASES))
def test_a_publication_by_policy_finds_the_minimal_nodes_without_the_nodes_above_them(
    adult_duck: str, adult_violations, case: str, limit: str
):
    """Where passing is not closed under generalization, a publication choosing among the minimal nodes leaves
    the nodes above a passing one unchecked: the same minimal nodes as the oracle's, fewer nodes checked, and the
    result says its passing nodes are not all of them. A policy on the levels alone (the default, the lowest
    height) also leaves the nodes ranked after a passing one: the best minimal node is among those it finds."""
    oracle = passing(adult_violations[case], _max_suppressed(LIMITS[limit]))
    job = _adult(adult_duck, CASES[case], LIMITS[limit])
    full, found = search(job), minimal_only_search(job)
    assert found.minimal == full.minimal == minimal_nodes(oracle)
    assert set(found.satisfying) == set(found.minimal) or found.every_passing_node
    assert found.stats.nodes_checked + found.stats.unchecked_above_passing >= full.stats.nodes_checked
    assert found.every_passing_node == (found.stats.unchecked_above_passing == 0)
    assert found.every_minimal_node and found.stats.unchecked_outranked == 0
    if found.stats.unchecked_above_passing:
        assert found.stats.nodes_checked < full.stats.nodes_checked
    ranked = minimal_only_search(job, "min_absolute_distance")
    best = assert_best_ranked(ranked, full.minimal, "min_absolute_distance")
    assert ranked.stats.nodes_checked <= found.stats.nodes_checked
    # relative distance: a higher node may rank first (a level of age, height 4, before one of sex, height 1)
    assert_best_ranked(minimal_only_search(job, "min_relative_distance"), full.minimal, "min_relative_distance")
    # the node published is the one chosen among every passing node's minimal ones
    assert anonymize(dataclasses.replace(job, output=Output(table="by_policy")), replace=True).node == best


def test_the_nodes_above_passing_ones_go_unchecked_where_passing_is_not_monotone(adult_duck: str):
    """Entropy l-diversity with 2% suppression (not monotone under it): most candidates lie above a passing
    node, and are left unchecked by a publication; a metric that may improve above the minimal nodes (the
    suppressed tuples) reads every passing node, so nothing is left out then."""
    job = _adult(adult_duck, CASES["entropy l=3"], 0.02)
    found = minimal_only_search(job)
    assert found.stats.unchecked_above_passing > found.stats.nodes_checked / 2 and not found.every_passing_node
    by_metric = dataclasses.replace(job, select=Selection(policy=None, metric="suppressed"))
    with lattice_run(by_metric, RunOptions(), "anonymize") as run:
        assert not run.ctx.minimal_only


@pytest.mark.parametrize(
    "strategy, k, limit",
    [
        ("topdown", 5, 0),
        ("topdown", 10, 0),
        ("topdown", 5, 0.02),
        ("auto", 5, 0),
        ("auto", 5, 0.02),
        ("auto", 5, 0.1),
        ("bottomup", 5, 0.1),
        ("border", 5, 0),
        ("border", 10, 0.02),
        ("border", 5, 0.1),
    ],
)
def test_wave_strategies_equal_the_oracle_on_all_nine_adult_qis(
    adult_duck: str, all_qi_violations, strategy: str, k: int, limit
):
    """The searches over the full 12,960-node lattice (k-anonymity is monotone with suppression)."""
    job = dataclasses.replace(
        adult_job(adult_duck, ADULT_QIS, k=k, load_csv=False), strategy=strategy, suppression=Suppression(limit)
    )
    result = search(job)
    assert set(result.satisfying) == passing(all_qi_violations[k], _max_suppressed(limit))


def test_class_keys_split_over_several_columns_when_their_bits_do_not_fit(
    adult_duck: str, all_qi_violations, monkeypatch
):
    """With 8-bit keys the nine Adult QIs need several key columns; the answer is the same."""
    from sqlanon.engine import checker

    monkeypatch.setattr(checker, "KEY_BITS", 8)
    layout = checker.KeyLayout.for_bits([7, 1, 2, 8, 3])
    assert layout.key_of == (0, 0, 1, 2, 3) and layout.offset == (0, 7, 0, 0, 0)
    job = dataclasses.replace(adult_job(adult_duck, ADULT_QIS, k=5, load_csv=False), strategy="topdown")
    assert set(search(job).satisfying) == passing(all_qi_violations[5], 0)


@pytest.mark.parametrize(
    "case, limit, key_bits",
    [("k=5 and distinct l=4", "2%", 63), ("t equal 0.2", 0, 63), ("k=5 and distinct l=4", "2%", 8)],
)
def test_nodes_grouped_by_grouping_sets_give_the_same_answer(
    adult_duck: str, adult_violations, monkeypatch, case: str, limit, key_bits: int
):
    """The waves' GROUPING SETS form (PostgreSQL's), here on DuckDB: with sensitive values, suppression and class
    keys over several columns, the same answers as the oracle."""
    from sqlanon.backends import DuckDB
    from sqlanon.engine import checker

    monkeypatch.setattr(DuckDB, "grouping_sets", True)
    monkeypatch.setattr(checker, "KEY_BITS", key_bits)
    statements = []
    execute = DuckDB.execute
    monkeypatch.setattr(
        DuckDB, "execute", lambda self, conn, sql, *args: statements.append(sql) or execute(self, conn, sql, *args)
    )
    max_suppressed = _max_suppressed(LIMITS[limit]) if limit else 0
    result = search(_adult(adult_duck, CASES[case], LIMITS[limit] if limit else 0, strategy="topdown"))
    assert set(result.satisfying) == passing(adult_violations[case], max_suppressed)
    assert any("GROUPING SETS" in str(sql) for sql in statements)  # text, or a Core statement


@pytest.mark.parametrize("strategy, limit", [("topdown", 0.02), ("border", 0.02), ("topdown", 0), ("bottomup", 0)])
def test_a_large_cube_is_read_once_per_wave_with_the_same_answer(
    adult_duck: str, all_qi_violations, monkeypatch, strategy: str, limit: float
):
    """Above SMALL_CUBE rows the waves read the cube through planned roll-ups, not in clusters grouped to their
    meets, and the height walks check the next height's possible candidates with each height's."""
    from sqlanon.engine import checker

    monkeypatch.setattr(checker, "SMALL_CUBE", 0)
    checks = []
    violations = checker.WaveChecker.violations
    monkeypatch.setattr(
        checker.WaveChecker,
        "violations",
        lambda self, *args, **kwargs: checks.append(self.large) or violations(self, *args, **kwargs),
    )
    job = dataclasses.replace(
        adult_job(adult_duck, ADULT_QIS, k=5, load_csv=False), strategy=strategy, suppression=Suppression(limit)
    )
    result = search(job)
    assert set(result.satisfying) == passing(all_qi_violations[5], _max_suppressed(limit))
    if strategy != "border":  # two heights per check: fewer checks than a height per check
        monkeypatch.setattr(checker.WaveChecker, "large", False)
        search(job)
        assert checks.count(True) < checks.count(False)


@pytest.mark.parametrize(
    "strategy, case, limit",
    [("topdown", "k=5 and distinct l=4", "2%"), ("border", "entropy l=3", 0), ("topdown", "t equal 0.2", 0)],
)
def test_roll_ups_read_by_others_give_the_same_answer(
    adult_duck: str, adult_violations, monkeypatch, strategy: str, case: str, limit
):
    """With roll-ups made free, a large cube's waves nest them deeply (each read by those under it): the same
    answers as the oracle."""
    from sqlanon.engine import checker, rollups

    monkeypatch.setattr(checker, "SMALL_CUBE", 0)
    monkeypatch.setattr(rollups, "ROLLUP_ROWS", 0)
    monkeypatch.setattr(rollups, "GROUP_ROWS", 0)
    forests = []
    monkeypatch.setattr(checker, "plan", lambda *args: forests.append(rollups.plan(*args)) or forests[-1])
    max_suppressed = _max_suppressed(LIMITS[limit]) if limit else 0
    result = search(_adult(adult_duck, CASES[case], LIMITS[limit] if limit else 0, strategy=strategy))
    assert set(result.satisfying) == passing(adult_violations[case], max_suppressed)
    assert any(r.below and r.below[0].below for forest in forests for r in forest)  # two levels of roll-ups


@pytest.mark.parametrize("keyed_rows, grouped", [(0.0, False), (1.0, True)])
def test_a_large_table_keeps_its_rows_ungrouped_or_groups_them_with_the_same_answer(
    adult_duck: str, adult_violations, monkeypatch, keyed_rows: float, grouped: bool
):
    """A large table whose rows are mostly distinct keeps them, with their keys, as the cube (no KL term from
    it then); otherwise they are grouped into it: the same answers as the oracle either way."""
    from sqlanon.engine import checker

    monkeypatch.setattr(checker, "SMALL_CUBE", 0)
    monkeypatch.setattr(checker, "KEYED_ROWS", keyed_rows)
    cubes = []
    close = checker.WaveChecker.close
    monkeypatch.setattr(
        checker.WaveChecker,
        "close",
        lambda self: cubes.append((self.grouped, self.rows, self.cells_term())) or close(self),
    )
    result = search(_adult(adult_duck, CASES["k=5 and distinct l=4"], 0.02, strategy="topdown"))
    assert set(result.satisfying) == passing(adult_violations["k=5 and distinct l=4"], _max_suppressed(0.02))
    assert [(g, rows == ADULT_ROWS) for g, rows, _ in cubes] == [(grouped, not grouped)]
    columns = ", ".join(f'"{c}"' for c in [*QIS, "occupation"])
    cells = f"SELECT COUNT(*) AS c FROM adult GROUP BY {columns}"
    engine = sa.create_engine(adult_duck)
    with engine.connect() as conn:
        term = conn.exec_driver_sql(f"SELECT SUM(c * LN(c)) FROM ({cells}) g").scalar_one()
    engine.dispose()
    assert cubes[0][2] == pytest.approx(term)  # the level-0 cells' sum of c ln c, either way


@pytest.mark.parametrize("spec", [{"k_anonymity": {"k": 5}}, CASES["k=5 and distinct l=4"]])
def test_metrics_read_the_search_cube_of_the_table_rows_alike(adult_duck: str, monkeypatch, spec: dict):
    """A search's cube of the table's rows carries the job's sensitive columns that the criteria do not read,
    and the metrics that follow read it instead of storing a cube of their own: every minimal node's figures
    (KL over both sensitive columns, with the classes the criteria suppress) as from a cube of their own."""
    from sqlanon import RunOptions
    from sqlanon.engine import checker

    monkeypatch.setattr(checker, "SMALL_CUBE", 0)
    monkeypatch.setattr(checker, "KEYED_ROWS", 0.0)
    served = []
    serve = checker.WaveChecker.serve
    monkeypatch.setattr(
        checker.WaveChecker, "serve", lambda self, star: served.append(star.sensitive) or serve(self, star)
    )
    job = reclassified(_adult(adult_duck, spec, 0.02, strategy="topdown"), sensitive=["occupation", "salary-class"])
    found = search(job, RunOptions(metrics=True)).metrics
    assert served == [["occupation", "salary-class"]]
    monkeypatch.setattr(checker.WaveChecker, "carrying", lambda self: None)
    expected = search(job, RunOptions(metrics=True)).metrics
    assert len(served) == 1 and found.keys() == expected.keys() and len(found) > 1
    for node, figures in expected.items():
        assert found[node] == pytest.approx(figures), node


@pytest.mark.parametrize("strategy, limit", [("topdown", 0), ("topdown", "2%"), ("border", "300 tuples")])
@pytest.mark.parametrize("case", ["k=5 and distinct l=4", "t equal 0.2", "t hierarchical 0.15"])
def test_a_large_cube_checks_class_sizes_first_and_reads_the_distribution_once(
    adult_duck: str, adult_violations, monkeypatch, case: str, strategy: str, limit
):
    """On a large cube, k-anonymity beside criteria over sensitive values is checked first without them (the
    nodes it fails need no other check), and so is the least class size t-closeness allows where it is monotone
    (without suppression; with it, t-closeness alone is searched as Incognito does); t-closeness binds the table's
    counts of each value, read before the search (no distribution stored for it): the same answers, with and
    without suppression."""
    from sqlanon.engine import checker

    monkeypatch.setattr(checker, "SMALL_CUBE", 0)
    calls = []
    close = checker.WaveChecker.close
    monkeypatch.setattr(
        checker.WaveChecker,
        "close",
        lambda self: calls.append((self.reference, self._table_counts(self.criteria))) or close(self),
    )
    violations = checker.WaveChecker.violations
    monkeypatch.setattr(
        checker.WaveChecker,
        "violations",
        lambda self, nodes, criteria, sensitive=True: (
            calls.append((sensitive, None)) or violations(self, nodes, criteria, sensitive)
        ),
    )
    max_suppressed = _max_suppressed(LIMITS[limit]) if limit else 0
    result = search(_adult(adult_duck, CASES[case], LIMITS[limit] if limit else 0, strategy=strategy))
    assert set(result.satisfying) == passing(adult_violations[case], max_suppressed)
    *checks, (reference, table_counts) = calls
    assert any(not sensitive for sensitive, _ in checks) == (case.startswith("k=5") or not limit)
    assert (reference, bool(table_counts)) == (None, case.startswith("t "))


@pytest.mark.parametrize("limit", list(LIMITS))
@pytest.mark.parametrize("case", ["distinct l=3", "k=5 and distinct l=4", "entropy l=3"])
@pytest.mark.parametrize("strategy", ["topdown", "auto", "border"])
def test_wave_strategies_equal_exhaustive_with_suppression(
    adult_duck: str, adult_violations, case: str, limit: str, strategy: str
):
    """Monotone cases are searched over the full lattice; a non-monotone one falls back to Incognito's."""
    result = search(_adult(adult_duck, CASES[case], LIMITS[limit], strategy=strategy))
    assert set(result.satisfying) == passing(adult_violations[case], _max_suppressed(LIMITS[limit]))


@pytest.mark.parametrize("limit", list(LIMITS))
def test_the_limits_change_the_answer(adult_violations, limit: str):
    """The cases above discriminate: suppression lets lower nodes pass for most criteria."""
    changed = [
        case
        for case, found in adult_violations.items()
        if passing(found, _max_suppressed(LIMITS[limit])) != passing(found, 0)
    ]
    assert len(changed) >= len(CASES) // 2, changed


@pytest.mark.parametrize("case", list(CASES))
def test_samarati_returns_the_lowest_passing_height(adult_duck: str, adult_violations, case: str):
    oracle = passing(adult_violations[case], _max_suppressed(0.02))
    lowest = min(sum(n) for n in oracle)
    result = search(_adult(adult_duck, CASES[case], 0.02, strategy="samarati"))
    assert set(result.satisfying) == {n for n in oracle if sum(n) == lowest}
    assert set(result.minimal) == set(result.satisfying)


def test_samarati_without_suppression_matches_incognito(adult_duck: str):
    job = _adult(adult_duck, CASES["k=5 and distinct l=4"], strategy="incognito")
    incognito = search(job)
    samarati = search(dataclasses.replace(job, strategy="samarati"))
    lowest = min(sum(n) for n in incognito.satisfying)
    assert samarati.satisfying == [n for n in incognito.satisfying if sum(n) == lowest]
    assert samarati.stats.nodes_checked < incognito.stats.nodes_checked * 2


def test_assumed_monotonicity_is_opt_in_and_reported(adult_duck: str):
    job = _adult(adult_duck, CASES["entropy l=3"], 0.02)
    exact = search(job)
    with pytest.warns(UserWarning, match="may miss"):
        fast = search(dataclasses.replace(job, assume_monotone=True))
    assert fast.heuristic and "may miss" in fast.to_dict()["warning"] and not exact.heuristic
    assert fast.stats.nodes_checked < exact.stats.nodes_checked
    k_only = search(_adult(adult_duck, {"k_anonymity": {"k": 5}}, 0.02, assume_monotone=True))
    assert not k_only.heuristic  # nothing was assumed: k-anonymity is monotone with suppression


# --- metrics by hand --------------------------------------------------------------


def _small(tmp_path: Path, limit: int = 2, select: dict | None = None, mode: str = "remove") -> object:
    """q: x, y -> A; z -> B; all -> *. Rows (q, s): x a, x a, x b, y a, z b, z c; k = 2."""
    (tmp_path / "data.csv").write_text("q,s\nx,a\nx,a\nx,b\ny,a\nz,b\nz,c\n")
    (tmp_path / "q.csv").write_text("x;A;*\ny;A;*\nz;B;*\n")
    config = {
        "source": {"url": "t.duckdb", "table": "t", "csv": "data.csv"},
        "quasi_identifiers": {"q": "q.csv"},
        "sensitive": ["s"],
        "criteria": {"k_anonymity": {"k": 2}},
        "output": {"table": "out"},
        "suppression": {"limit": limit, "mode": mode},
    }
    if select:
        config["select"] = select
    return job_from_dict(config, tmp_path)


#: the small table's non-uniform entropy at the top: every value generalized to one
TOP_ENTROPY = -(3 * math.log2(3 / 6) + math.log2(1 / 6) + 2 * math.log2(2 / 6))


def test_metrics_match_hand_computed_values(tmp_path: Path):
    found = node_metrics(_small(tmp_path), [(0,), (1,), (2,)])
    ln2, ln3 = math.log(2), math.log(3)
    # level 0: classes x (3), y (1, suppressed), z (2)
    assert found[(0,)] == pytest.approx(
        {
            "height": 0,
            "relative_distance": 0,
            "precision": 1,
            "suppressed": 1,
            "completeness": 5 / 6,
            "classes": 2,
            "avg_class_size": 2.5,
            "c_avg": 1.25,
            "discernibility": 9 + 4 + 6 * 1,
            "kl_divergence": ln3 / 6,
            # ARX's: y's tuple covers its share (1/3) plus the rest of the domain; AECS counts it as one class
            "loss": (5 / 3 + 1 - 2) / (6 - 2),
            "aecs": 6 / 3,
            "dm_star": 9 + 1 + 4,
            "non_uniform_entropy": 0,
            "non_uniform_entropy_nm": 0,  # one suppressed tuple: no entropy among them
            "normalized_entropy": 0,
            "precision_loss": 0,
            "precision_loss_nm": 1 / 6,  # y's tuple counts as generalized to the top
            "classification": None,  # no targets
            "entropy_loss": 1,  # released classes lose nothing (one leaf each), the suppressed tuple 1
            # ARX's defaults: an attack on a class of up to 74 tuples pays (300 / n > 4): x and z, 300 each
            "publisher_payout": 1200 * 1 + 300 * 2,
        }
    )  # y's tuple spread over the 3 values of the top
    # level 1: A = {x, y} (4 tuples over 2 values), B = {z} (2)
    assert found[(1,)] == pytest.approx(
        {
            "height": 1,
            "relative_distance": 0.5,
            "precision": 0.5,
            "suppressed": 0,
            "completeness": 1,
            "classes": 2,
            "avg_class_size": 3,
            "c_avg": 1.5,
            "discernibility": 16 + 4,
            "kl_divergence": ln2 - ln3 / 2,
            "loss": (4 * 2 / 3 + 2 / 3 - 2) / (6 - 2),
            "aecs": 3,
            "dm_star": 20,
            "non_uniform_entropy": -(3 * math.log2(3 / 4) + math.log2(1 / 4)),
            "non_uniform_entropy_nm": -(3 * math.log2(3 / 4) + math.log2(1 / 4)),
            "normalized_entropy": -(3 * math.log2(3 / 4) + math.log2(1 / 4)) / TOP_ENTROPY,
            "precision_loss": 0.5,
            "precision_loss_nm": 0.5,
            "classification": None,
            "entropy_loss": 4 * ln2 / ln3,  # A covers 2 of the 3 leaves: ln 2 / ln 3 for each of its 4 tuples
            "publisher_payout": 1200 * 4 * ln2 / ln3 + 300 * 2,
        }
    )
    assert found[(2,)] == pytest.approx(
        {
            "height": 2,
            "relative_distance": 1,
            "precision": 0,
            "suppressed": 0,
            "completeness": 1,
            "classes": 1,
            "avg_class_size": 6,
            "c_avg": 3,
            "discernibility": 36,
            "kl_divergence": ln3 / 2,
            "loss": 1,
            "aecs": 6,
            "dm_star": 36,
            "non_uniform_entropy": TOP_ENTROPY,
            "non_uniform_entropy_nm": TOP_ENTROPY,
            "normalized_entropy": 1,
            "precision_loss": 1,
            "precision_loss_nm": 1,
            "classification": None,
            "entropy_loss": 6,
            "publisher_payout": 1200 * 6 + 300,
        }
    )


@pytest.mark.parametrize(
    "select, expected",
    [
        ({"policy": "min_absolute_distance"}, (0,)),
        ({"policy": "min_suppression"}, (0,)),  # policies choose among minimal nodes: (0) is the only one
        ({"metric": "discernibility"}, (0,)),  # 19 < 20 < 36
        ({"metric": "kl_divergence"}, (1,)),  # not monotone with suppression: the best node is not minimal
        ({"metric": "classes"}, (0,)),  # 2 classes at levels 0 and 1: the tie goes to the lower node
        ({"metric": "aecs"}, (0,)),  # 2 < 3 < 6
        ({"metric": "dm_star"}, (0,)),  # minimal: 14
    ],
)
def test_selection_rules_on_the_small_table(tmp_path: Path, select: dict, expected: tuple):
    result = anonymize(_small(tmp_path, select=select))
    assert result.node == expected
    assert result.search.minimal == [(0,)]


def test_selection_rule_names_are_the_issue_s(tmp_path: Path):
    assert set(POLICIES) == {"min_absolute_distance", "min_relative_distance", "max_distribution", "min_suppression"}
    assert {
        "height",
        "precision",
        "completeness",
        "classes",
        "avg_class_size",
        "c_avg",
        "discernibility",
        "kl_divergence",
    } <= set(METRICS)


def test_kl_from_the_search_s_cube_equals_kl_from_a_scan_of_the_table(adult_duck: str):
    """The cube of a search whose criteria read every sensitive column gives KL its level-0 term; a metrics run
    without a search scans the table for it. Both must agree."""
    job = _adult(adult_duck, CASES["k=5 and distinct l=4"], 0.02, select=Selection(None, "kl_divergence"))
    result = anonymize(dataclasses.replace(job, output=Output(table="out_kl_cube")), replace=True)
    scanned = node_metrics(job, [result.node])[result.node]
    assert result.search.metrics[result.node]["kl_divergence"] == pytest.approx(scanned["kl_divergence"], rel=1e-9)


# --- the chosen node is optimal -------------------------------------------------------


@pytest.mark.parametrize("limit", [0, 0.02])
@pytest.mark.parametrize(
    "rule",
    [{"metric": m} for m in ("discernibility", "kl_divergence", "c_avg", "precision")]
    + [{"policy": p} for p in ("max_distribution", "min_suppression")],
)
def test_chosen_node_is_optimal_against_the_exhaustive_strategy(
    adult_duck: str, adult_violations, tmp_path, rule: dict, limit: float
):
    case = "k=5 and distinct l=4"
    job = _adult(adult_duck, CASES[case], limit, select=Selection(rule.get("policy"), rule.get("metric")))
    name = rule.get("metric") or POLICIES[rule["policy"]]
    job = dataclasses.replace(job, output=Output(table=f"out_{name}_{int(limit * 100)}"))
    result = anonymize(job, replace=True)
    oracle = passing(adult_violations[case], _max_suppressed(limit))
    pool = oracle if "metric" in rule else set(result.search.minimal)
    everything = _all_metrics(adult_duck, job, oracle)
    values = [everything[n][name] for n in pool]
    best = min(values) if METRICS[name].better == "min" else max(values)
    assert everything[result.node][name] == pytest.approx(best)
    assert result.node in oracle


_METRICS_CACHE: dict = {}


def _all_metrics(url: str, job, nodes: set) -> dict:
    """Metrics of every passing node, computed once per (limit)."""
    key = (url, job.suppression.limit)
    if key not in _METRICS_CACHE:
        _METRICS_CACHE[key] = node_metrics(dataclasses.replace(job, output=None), sorted(nodes))
    return _METRICS_CACHE[key]


# --- publishing with suppression ---------------------------------------------------------


def _rows(url: str, table: str) -> list[tuple]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(f'SELECT * FROM "{table}"').all()
    engine.dispose()
    return rows


def test_remove_mode_drops_the_violating_tuples(tmp_path: Path):
    result = anonymize(_small(tmp_path))
    url = f"duckdb:///{tmp_path / 't.duckdb'}"
    rows = _rows(url, "out")
    assert result.node == (0,) and result.suppressed == 1 and len(rows) == 5
    assert ("y", "a") not in rows and len(_rows(url, "t")) == 6  # the source is untouched
    assert result.audit.suppressed == 1 and result.audit.ok


def test_mask_mode_keeps_the_tuples_with_every_qi_at_the_top(tmp_path: Path):
    job = _small(tmp_path, mode="mask")
    result = anonymize(job)
    url = f"duckdb:///{tmp_path / 't.duckdb'}"
    rows = sorted(_rows(url, "out"))
    assert len(rows) == 6 and ("*", "a") in rows and ("y", "a") not in rows
    assert result.audit.suppressed == 1 and result.audit.ok


def test_audit_command_counts_masked_tuples_against_the_limit(tmp_path: Path):
    import yaml

    config = {
        "source": {"url": "t.duckdb", "table": "t", "csv": "data.csv"},
        "quasi_identifiers": {"q": "q.csv"},
        "insensitive": ["s"],
        "criteria": {"k_anonymity": {"k": 2}},
        "output": {"table": "out"},
        "suppression": {"limit": 2, "mode": "mask"},
    }
    _small(tmp_path)  # writes the data and hierarchy files
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(config))
    runner = CliRunner()
    assert runner.invoke(main, ["anonymize", str(tmp_path / "job.yaml")]).exit_code == 0
    result = runner.invoke(main, ["audit", str(tmp_path / "job.yaml"), "--table", "out", "--json"])
    report = json.loads(result.output)
    assert result.exit_code == 0 and report["suppressed"] == 1 and report["max_suppressed"] == 2
    config["suppression"]["limit"] = 0  # the same table against a stricter limit fails
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(config))
    result = runner.invoke(main, ["audit", str(tmp_path / "job.yaml"), "--table", "out"])
    assert result.exit_code == 1 and "ABOVE" in result.output


def test_t_closeness_output_with_removed_tuples_passes_its_audit(tmp_path: Path):
    """Table distribution a 1/2, b 1/3, c 1/6. At level 0, y (a) and z (b, c) are 0.5 away, x (a a b) 1/6:
    with t = 0.2 and a limit of 3, level 0 passes by removing y and z; the audit compares x with the
    source's distribution, as the search did."""
    job = dataclasses.replace(
        _small(tmp_path, limit=3), criteria=criteria_from_config({"t_closeness": {"attribute": "s", "t": 0.2}})
    )
    result = anonymize(job)
    assert result.node == (0,) and result.suppressed == 3
    assert result.audit.ok and result.audit.rows == 3
    assert result.audit.criteria["t_closeness"].figure == pytest.approx(1 / 6)


def test_search_json_reports_metrics_of_every_minimal_node(tmp_path: Path):
    import yaml

    _small(tmp_path)
    config = {
        "source": {"url": "t.duckdb", "table": "t", "csv": "data.csv"},
        "quasi_identifiers": {"q": "q.csv"},
        "sensitive": ["s"],
        "criteria": {"k_anonymity": {"k": 2}},
        "suppression": {"limit": 1},
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(config))
    result = CliRunner().invoke(main, ["search", str(tmp_path / "job.yaml"), "--metrics", "--json"])
    data = json.loads(result.output)
    assert set(data["metrics"]) == {"0"} and data["metrics"]["0"]["suppressed"] == 1
    assert data["max_suppressed"] == 1 and data["heuristic"] is False
    text = CliRunner().invoke(main, ["search", str(tmp_path / "job.yaml"), "--metrics"]).output
    assert "utility metrics" in text and "KL" in text


# --- bad input ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("suppression", {"limit": -1}, "must be >= 0"),
        ("suppression", {"limit": 1.5}, "fraction above 1"),
        ("suppression", {"limit": "2%"}, "a count"),
        ("suppression", {"limit": 10, "mode": "drop"}, "suppression.mode 'drop' is unknown"),
        ("suppression", {"mode": "mask"}, "missing the required key 'limit'"),
        ("select", {"policy": "smallest"}, "select.policy 'smallest' is unknown"),
        ("select", {"metric": "utility"}, "select.metric 'utility' is unknown"),
        ("select", {"policy": "min_suppression", "metric": "height"}, "exactly one"),
        ("select", {"order": "height"}, "unknown key 'order'"),
        ("search", {"assume_monotone": "yes"}, "true or false"),
    ],
)
def test_bad_limits_and_selection_rules(tmp_path: Path, key: str, value: dict, message: str):
    with pytest.raises(ConfigError, match=message):
        job_from_dict(
            {
                "source": {"url": "t.duckdb", "table": "t"},
                "quasi_identifiers": {"q": "q.csv"},
                "criteria": {"k_anonymity": {"k": 2}},
                key: value,
            },
            tmp_path,
        )


def test_limit_above_the_table_size(tmp_path: Path):
    for limit in (6, 7):
        with pytest.raises(ConfigError, match=f"limit {limit} lets all 6 rows of the table be suppressed"):
            search(_small(tmp_path, limit=limit))


def test_cli_reports_bad_limits_in_one_line(tmp_path: Path):
    import yaml

    _small(tmp_path)
    (tmp_path / "job.yaml").write_text(
        yaml.safe_dump(
            {
                "source": {"url": "t.duckdb", "table": "t", "csv": "data.csv"},
                "quasi_identifiers": {"q": "q.csv"},
                "sensitive": ["s"],
                "criteria": {"k_anonymity": {"k": 2}},
                "suppression": {"limit": 100},
            }
        )
    )
    result = CliRunner().invoke(main, ["search", str(tmp_path / "job.yaml")])
    assert result.exit_code == 2 and "which would publish nothing" in result.output and "Traceback" not in result.output
