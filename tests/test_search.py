"""Incognito against the exhaustive oracle, on Adult and on random small tables."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sqlanon import RunOptions, search
from sqlanon.api import apply
from sqlanon.config import job_from_dict
from sqlanon.criteria import KAnonymity
from sqlanon.model.lattice import minimal_nodes
from sqlanon.testing import evaluate_every_node

from .conftest import ADULT_QIS, KS, adult_config, adult_job, with_rest_insensitive

SUBSETS = [
    ["sex", "age", "race"],
    ["age", "education", "marital-status", "workclass"],
    ["race", "native-country", "occupation", "salary-class", "sex"],
]


@pytest.mark.parametrize("qis", SUBSETS, ids=lambda q: "+".join(q))
def test_incognito_equals_exhaustive_on_adult_subsets(adult_duck: str, qis: list[str]):
    job = adult_job(adult_duck, qis, load_csv=False)
    oracle = evaluate_every_node(job, [[KAnonymity(k)] for k in KS])
    for k, expected in zip(KS, oracle):
        result = search(dataclasses.replace(job, criteria=[KAnonymity(k)]))
        assert set(result.satisfying) == set(expected), f"k={k}"
        assert result.minimal == minimal_nodes(expected)


def test_top_and_bottom_coded_and_grouped_hierarchies_search_and_publish_as_generated(adult_duck: str):
    """The generators' hierarchies (age top and bottom coded, marital status in named groups) give the oracle's
    nodes, and the published labels are the generated ones."""
    groups = [
        {
            "married": ["Married-civ-spouse", "Married-AF-spouse", "Married-spouse-absent"],
            "was married": ["Divorced", "Separated", "Widowed"],
        },
        {"ever married": ["married", "was married", "never"]},
    ]
    config = adult_config(adult_duck, ["sex", "race"], k=10, load_csv=False)
    config["quasi_identifiers"] |= {
        "age": {"generate": "intervals", "widths": [5, 10], "bottom": 20, "top": 70},
        "marital-status": {"generate": "groups", "groups": groups, "other": "never"},
    }
    job = job_from_dict(with_rest_insensitive(config))
    [expected] = evaluate_every_node(job, [job.criteria])
    result = search(job)
    assert set(result.satisfying) == set(expected) and result.minimal == minimal_nodes(expected)
    assert (1, 1, 1, 1) in result.minimal  # sex, race, age in 5-year bands, marital status in its groups
    published = apply(job, "adult", node=(1, 1, 1, 1), output="coded", replace=True).frame()
    assert {"<20", "[20,25)", "[65,70)", ">=70"} <= set(published["age"]) and "[70,75)" not in set(published["age"])
    assert set(published["marital-status"]) == {"married", "was married", "never"}


@pytest.mark.parametrize("k", KS)
def test_incognito_equals_exhaustive_on_all_nine_adult_qis(adult_duck: str, all_qi_oracle, k: int):
    result = search(adult_job(adult_duck, ADULT_QIS, k=k, load_csv=False, search={"strategy": "incognito"}))
    assert set(result.satisfying) == all_qi_oracle[k]
    assert result.minimal == minimal_nodes(all_qi_oracle[k])
    assert result.stats.base_scans == 1  # the cube


def test_table_base_gives_the_same_result_with_one_scan_per_family(adult_duck: str):
    """The same nodes and metrics (KL divergence's cells term from the cube, or from the table) either way."""
    qis, options = SUBSETS[1], RunOptions(metrics=True)
    cube = search(adult_job(adult_duck, qis, k=5, load_csv=False, search={"strategy": "incognito"}), options)
    table = search(
        adult_job(adult_duck, qis, k=5, load_csv=False, search={"strategy": "incognito", "base": "table"}), options
    )
    assert cube.satisfying == table.satisfying
    assert table.stats.base_scans > 1 and cube.stats.base_scans == 1
    assert cube.metrics.keys() == table.metrics.keys() and cube.metrics
    for node, figures in cube.metrics.items():
        assert table.metrics[node] == pytest.approx(figures), node


def test_lattice_tables_hold_the_run(adult_duck: str):
    result = search(
        adult_job(adult_duck, ["sex", "race", "education"], k=10, load_csv=False, search={"strategy": "incognito"})
    )
    engine = sa.create_engine(adult_duck)
    with engine.connect() as conn:
        statuses = dict(
            conn.execute(
                sa.text(
                    "SELECT status, COUNT(*) FROM sqlanon.lattice_nodes WHERE run_id = :r AND iteration = 3 "
                    "GROUP BY status"
                ),
                {"r": result.run_id},
            ).all()
        )
        run = conn.execute(
            sa.text("SELECT status, iteration FROM sqlanon.runs WHERE run_id = :r"), {"r": result.run_id}
        ).one()
        edges = conn.execute(
            sa.text("SELECT COUNT(*) FROM sqlanon.lattice_edges WHERE run_id = :r"), {"r": result.run_id}
        ).scalar_one()
        registered = conn.execute(
            sa.text(
                "SELECT COUNT(*), SUM(CASE WHEN dropped THEN 1 ELSE 0 END) "
                "FROM sqlanon.frequency_sets WHERE run_id = :r"
            ),
            {"r": result.run_id},
        ).one()
    engine.dispose()
    assert run == ("finished", 3)
    assert sum(n for s, n in statuses.items() if s != "fail") == len(result.satisfying)
    assert edges > 0
    assert registered[0] == registered[1] > 0  # every stored frequency set (the cube) registered and cleaned up


# --- random small tables ------------------------------------------------------


@st.composite
def random_tables(draw):
    """A small table with 2-3 QIs, each with a random hierarchy of height 1-3, and a k."""
    n_qis = draw(st.integers(2, 3))
    hierarchies, columns = [], []
    for _q in range(n_qis):
        height = draw(st.integers(1, 3))
        widths = sorted(draw(st.lists(st.integers(1, 5), min_size=height, max_size=height)), reverse=True)
        widths[-1] = 1  # a single top value
        values = [f"v{i}" for i in range(draw(st.integers(widths[0], 6)))]
        paths = []
        for value_index, value in enumerate(values):
            path, label = [value], value_index
            for level, width in enumerate(widths[1:] + [1], start=1):
                label = label % max(width, 1) if level < height else 0
                path.append(f"L{level}_{label}" if level < height else "*")
            paths.append(path)
        hierarchies.append(paths)
        columns.append(values)
    rows = draw(st.lists(st.tuples(*(st.sampled_from(c) for c in columns)), min_size=1, max_size=40))
    k = draw(st.integers(1, 6))
    return hierarchies, rows, min(k, len(rows))


def _write_random_job(tmp: Path, hierarchies, rows, k, all_varchar: bool = True):
    names = [f"q{i}" for i in range(len(hierarchies))]
    for name, paths in zip(names, hierarchies):
        (tmp / f"{name}.csv").write_text("\n".join(";".join(p) for p in paths) + "\n")
    (tmp / "data.csv").write_text(",".join(names) + "\n" + "\n".join(",".join(r) for r in rows) + "\n")
    return job_from_dict(
        {
            "source": {"url": "t.duckdb", "table": "t", "csv": "data.csv", "csv_options": {"all_varchar": all_varchar}},
            "quasi_identifiers": {n: {"hierarchy": f"{n}.csv"} for n in names},
            "criteria": {"k_anonymity": {"k": k}},
        },
        tmp,
    )


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=random_tables())
def test_incognito_equals_exhaustive_on_random_tables(tmp_path_factory, case):
    hierarchies, rows, k = case
    tmp = tmp_path_factory.mktemp("random")
    job = _write_random_job(tmp, hierarchies, rows, k)
    incognito = search(job)
    exhaustive = search(dataclasses.replace(job, strategy="exhaustive"))
    assert incognito.satisfying == exhaustive.satisfying
    assert incognito.minimal == exhaustive.minimal


def test_waves_hold_more_nodes_where_the_grouped_cube_is_small(monkeypatch):
    """On a small cube, a wave's size follows the rows of the cube grouped to its meet, not the rows of the whole
    cube (a large one's roll-ups are planned: test_rollups.py)."""
    from types import SimpleNamespace

    from sqlanon.engine import checker

    monkeypatch.setattr(checker, "SMALL_CUBE", 10_000_000)
    dims = [SimpleNamespace(attr=0, height=2), SimpleNamespace(attr=1, height=1)]
    wave = object.__new__(checker.WaveChecker)
    wave.star, wave.rows, wave.tops = SimpleNamespace(dimensions=dims), 2_000_000, [3, 2]
    wave.level_sizes = [[1_000_000, 100, 1], [2, 1]]  # level sizes of each attribute, bottom to top
    wave.sensitive_values = 10_000  # the sensitive values a class may hold, where the sets carry them
    general = [(2, 1), (2, 0), (1, 1), (1, 0)]  # meet (1, 0): at most 100 x 2 rows
    assert wave._waves(list(range(4)), general, False) == [[0, 1, 2, 3]]
    assert wave._waves(list(range(4)), general, True) == [[0, 1], [2, 3]]  # 2M rows each, with the values
    specific = [(0, 1), (0, 0), (1, 1)]  # meet at level 0 of a million codes: two nodes would join 4M rows
    assert wave._waves(list(range(3)), specific, False) == [[0, 1], [2]]
    assert wave._rows_at([3, 2], False) == 1  # every node leaves both attributes out
    assert wave._rows_at([3, 2], True) == 10_000


def test_the_cube_looks_small_dimensions_up_as_the_joins_would(adult_duck: str, monkeypatch):
    """On a small table, DuckDB's cube looks each row's code up in the small dimensions' bound lists instead of
    joining them, and an integer column (age) indexes an array of its codes at any size. Same answers as joins
    alone."""
    from sqlalchemy import event

    from sqlanon.engine import star as dimensions

    job = dataclasses.replace(
        adult_job(adult_duck, ["age", "sex", "education", "native-country"], k=5, load_csv=False), strategy="topdown"
    )
    statements: list[str] = []

    def seen(conn, cursor, statement, *_):
        statements.append(statement)

    def cube_of_a_search():
        statements.clear()
        result = search(job)
        return result, next(s for s in statements if "packed_cube" in s and " AS SELECT " in s)

    event.listen(sa.engine.Engine, "before_cursor_execute", seen)
    try:
        looked_up, cube = cube_of_a_search()
        monkeypatch.setattr(dimensions, "LOOKUP_ROWS", 0)  # a table too large for lookups: the text columns joined
        indexed, index_only = cube_of_a_search()
        monkeypatch.setattr(dimensions, "INDEX_SPAN", 0)  # and no integer span small enough: every column joined
        joined, joins_only = cube_of_a_search()
    finally:
        event.remove(sa.engine.Engine, "before_cursor_execute", seen)
    assert cube.count("list_position") == 3 and " JOIN " not in cube and "$index_0_0" in cube
    assert "list_position" not in index_only and index_only.count(" JOIN ") == 3 and "$index_0_0" in index_only
    assert "list_position" not in joins_only and "$index" not in joins_only and joins_only.count(" JOIN ") == 4
    for other in (indexed, joined):
        assert looked_up.satisfying == other.satisfying and looked_up.minimal == other.minimal


@st.composite
def integer_tables(draw):
    """A small table of two integer QIs (negative values, gaps), each with a hierarchy whose leaves may include
    texts no integer is written as (`07`, `+3`), and a k."""
    hierarchies, columns = [], []
    for _ in range(2):
        values = sorted(draw(st.sets(st.integers(-20, 40), min_size=1, max_size=8)))
        width = draw(st.integers(1, 3))
        paths = [[str(v), f"b{i % width}", "*"] for i, v in enumerate(values)]
        paths += [[odd, "b0", "*"] for odd in draw(st.lists(st.sampled_from(["07", "+3", "-0", "x"]), unique=True))]
        hierarchies.append(paths)
        columns.append([str(v) for v in values])
    rows = draw(st.lists(st.tuples(*(st.sampled_from(c) for c in columns)), min_size=1, max_size=40))
    return hierarchies, rows, draw(st.integers(1, 4))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=integer_tables())
def test_integer_columns_coded_by_index_equal_exhaustive(tmp_path_factory, case):
    """Integer QIs coded by indexing an array (the cube) give the answers of the exhaustive search, which joins
    the dimensions by the values' text."""
    hierarchies, rows, k = case
    tmp = tmp_path_factory.mktemp("integers")
    job = _write_random_job(tmp, hierarchies, rows, min(k, len(rows)), all_varchar=False)
    exhaustive = search(dataclasses.replace(job, strategy="exhaustive"))
    for strategy in ("topdown", "incognito"):
        found = search(dataclasses.replace(job, strategy=strategy))
        assert found.satisfying == exhaustive.satisfying and found.minimal == exhaustive.minimal


def test_an_integer_column_indexes_the_span_of_its_integer_leaves():
    from sqlanon.engine.star import Dimension
    from sqlanon.model.hierarchies import Hierarchy

    paths = [("-2", "*"), ("5", "*"), ("07", "*"), ("+9", "*"), ("x", "*")]
    dim = Dimension.of(Hierarchy(column="a", paths=tuple(paths)), attr=0, column="a", table="d", integer=True)
    assert dim.integer_span() == (-2, 5)
    assert dataclasses.replace(dim, integer=False).integer_span() is None


@pytest.mark.parametrize("strategy", ["topdown", "border", "samarati"])
def test_a_wave_search_records_its_final_progress(adult_duck: str, strategy: str):
    """Progress is written at most every half second on the way, and always at the end: the run's row holds
    every check of a search too short for any intermediate write."""
    result = search(dataclasses.replace(adult_job(adult_duck, ADULT_QIS[:4], k=5, load_csv=False), strategy=strategy))
    engine = sa.create_engine(adult_duck)
    with engine.connect() as conn:
        checked = conn.execute(
            sa.text("SELECT nodes_checked FROM sqlanon.runs WHERE run_id = :r"), {"r": result.run_id}
        ).scalar_one()
    engine.dispose()
    assert checked == result.stats.nodes_checked > 0


@settings(max_examples=60, deadline=None)
@given(heights=st.lists(st.integers(0, 3), min_size=1, max_size=4), data=st.data())
def test_minimal_nodes_of_a_closed_set_read_one_step_below(heights: list[int], data):
    """Given the lattice's heights, a set closed under generalization is answered from direct specializations
    alone; any set (closed or not) the same as without them."""
    import itertools

    lattice = list(itertools.product(*(range(h + 1) for h in heights)))
    seeds = data.draw(st.lists(st.sampled_from(lattice), max_size=4))
    closed = [n for n in lattice if any(all(a >= b for a, b in zip(n, seed)) for seed in seeds)]
    anything = data.draw(st.lists(st.sampled_from(lattice), max_size=10))
    assert (
        minimal_nodes(closed, heights)
        == minimal_nodes(closed)
        == sorted(
            set(seeds) - {s for s in seeds for t in seeds if t != s and all(a >= b for a, b in zip(s, t))},
            key=lambda n: (sum(n), n),
        )
    )
    assert minimal_nodes(anything, heights) == minimal_nodes(anything)
