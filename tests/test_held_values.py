"""Persons who hold several values of a sensitive attribute (1:M data: a diagnosis per visit), on DuckDB,
PostgreSQL and Spark.

A class's count of a value is its persons who hold it, its size its persons, and l-diversity also asks that at least
l - 1 of a class's persons lack each value. The search is checked against a brute force over every node that
counts each class's persons and holders in Python (random tables, a different code path); publications are
re-counted from the written table.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sqlanon import RunOptions, analyze, analyze_table, anonymize, apply, audit, load_csv, node_metrics, search
from sqlanon.analysis.attacks import REVEALED_SHOWN, AnalysisSettings
from sqlanon.criteria import criteria_from_config
from sqlanon.errors import ConfigError, DataError
from sqlanon.model.job import Ledger, Subset

from .test_persons import (
    HIERARCHIES,
    KEY,
    KEY_ENV,
    _anatomy_job,
    _job,
    _load,
    _max_suppressed,
    _pseudonym,
    _published_values,
    person_tables,
)

#: the criteria the random tables are searched with (on `diagnosis`), beside k-anonymity
CRITERIA: dict[str, dict[str, Any]] = {
    "distinct": {"distinct_l_diversity": {"attribute": "diagnosis", "l": 2}},
    "distinct l=3": {"distinct_l_diversity": {"attribute": "diagnosis", "l": 3}},
    "entropy": {"entropy_l_diversity": {"attribute": "diagnosis", "l": 2}},
    "recursive": {"recursive_l_diversity": {"attribute": "diagnosis", "l": 2, "c": 2}},
    "t": {"t_closeness": {"attribute": "diagnosis", "t": 0.25}},
    "t kl": {"t_closeness": {"attribute": "diagnosis", "t": 0.3, "distance": "kl"}},
}


@pytest.fixture(autouse=True)
def pseudonym_key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)


@pytest.fixture(params=["duckdb", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str | None]:
    """Where a check runs: a DuckDB file, or the PostgreSQL test schema (URL, schema)."""
    if request.param == "duckdb":
        return f"duckdb:///{tmp_path / 't.duckdb'}", None
    return request.getfixturevalue("pg_server"), request.getfixturevalue("pg_schema")


@st.composite
def holding_tables(draw):
    """`person_tables` whose rows draw their diagnosis from four, so that a person holds one to four of them, and
    one of `CRITERIA`."""
    hierarchies, rows, k, limit = draw(person_tables())
    rows = [(*row[:4], f"d{draw(st.integers(0, 3))}") for row in rows]
    return hierarchies, rows, k, limit, draw(st.sampled_from(sorted(CRITERIA)))


def holds(name: str, holders: Counter[str], persons: int, table: Counter[str]) -> bool:
    """Whether a class of `persons` persons, `holders[s]` of whom hold s, satisfies `CRITERIA[name]`, given the
    table's holders of each value."""
    ((kind, spec),) = CRITERIA[name].items()
    if kind == "t_closeness":
        whole, held = sum(table.values()), sum(holders.values())
        if spec.get("distance") == "kl":
            distance = sum(h / held * math.log(h / held / (table[s] / whole)) for s, h in holders.items() if h)
        else:
            distance = 0.5 * sum(abs(holders[s] / held - table[s] / whole) for s in table)
        return distance <= spec["t"] + 1e-9
    l, counts = spec["l"], sorted(holders.values(), reverse=True)
    if max(counts) > persons - (l - 1):  # l - 1 of the class's persons lack each value
        return False
    if kind == "distinct_l_diversity":
        return len(counts) >= l
    if kind == "entropy_l_diversity":
        total = sum(counts)
        return -sum(c / total * math.log(c / total) for c in counts) >= math.log(l) - 1e-9
    return len(counts) >= l and counts[0] < spec["c"] * sum(counts[l - 1 :])


def held_brute_force(
    hierarchies, rows, k: int, max_suppressed: int, name: str, *more: tuple[int, str], multi: bool = False
) -> list[tuple[int, ...]]:
    """Every node whose classes that hold fewer than k persons or fail the criterion (`name` over the rows' fifth
    column, and each of `more` over its column: (index, name)) hold at most `max_suppressed` persons: each
    person's values counted once, in Python. With `multi`, the criteria are multi-attribute l-diversity's: each
    column's over each subclass of the persons who hold the same set of values of every other column."""
    labels = [{path[0]: path for path in paths} for paths in hierarchies]
    qis = {row[0]: row[1:3] for row in rows}
    checks = [(4, name), *more]
    values: list[dict[str, set[str]]] = [{} for _ in checks]
    for row in rows:
        for held, (column, _) in zip(values, checks):
            held.setdefault(row[0], set()).add(row[column])
    tables = [Counter(value for person in held.values() for value in person) for held in values]

    def subclasses(pids: list[str], column: int) -> list[list[str]]:
        if not multi:
            return [pids]
        sets: dict[tuple[frozenset[str], ...], list[str]] = {}
        for p in pids:
            sets.setdefault(tuple(frozenset(held[p]) for j, held in enumerate(values) if j != column), []).append(p)
        return list(sets.values())

    def fails(pids: list[str]) -> bool:
        return len(pids) < k or not all(
            holds(name, Counter(v for p in sub for v in held[p]), len(sub), table)
            for column, (held, table, (_, name)) in enumerate(zip(values, tables, checks))
            for sub in subclasses(pids, column)
        )

    passing = []
    for node in itertools.product(*(range(len(paths[0])) for paths in hierarchies)):
        classes: dict[tuple[str, ...], list[str]] = {}
        for pid, person_qis in qis.items():
            key = tuple(labels[i][value][level] for i, (value, level) in enumerate(zip(person_qis, node)))
            classes.setdefault(key, []).append(pid)
        if sum(len(pids) for pids in classes.values() if fails(pids)) <= max_suppressed:
            passing.append(node)
    return sorted(passing)


def _held_job(folder: Path, url: str, hierarchies, k: int, limit: float, name: str, schema: str | None = None, **extra):
    job = _job(folder, url, hierarchies, k, limit, schema, **extra)
    criteria = criteria_from_config({"k_anonymity": {"k": k}, **CRITERIA[name]})
    return dataclasses.replace(job, insensitive=["visit"], sensitive=["diagnosis"], criteria=criteria)


def _visits_in_new_database(tmp_path_factory, name: str, rows: list[tuple]) -> tuple[Path, str]:
    """A new folder `name` and the URL of a DuckDB file in it whose table `visits` holds `rows`."""
    folder = tmp_path_factory.mktemp(name)
    url = f"duckdb:///{folder / 't.duckdb'}"
    _load(url, rows)
    return folder, url


def assert_searched_as_expected(job_and_expected: Callable[[], tuple[Any, list[tuple[int, ...]]]]) -> None:
    """The search of the job `job_and_expected` gives finds the nodes it expects; a random case whose job is
    refused (a limit that lets every person go, an l above the values the table holds: ConfigError) is skipped."""
    try:
        job, expected = job_and_expected()
        with warnings.catch_warnings():  # persons holding several values are said to
            warnings.simplefilter("ignore")
            found = search(job)
    except ConfigError:
        return
    assert sorted(found.satisfying) == expected


def assert_figures(analysis: Any, expected: dict[str, Any]) -> None:
    """The analysis' figures are `expected` (floats to pytest.approx)."""
    found = {figure: getattr(analysis, figure) for figure in expected}
    assert found == {f: pytest.approx(v) if isinstance(v, float) else v for f, v in expected.items()}, analysis.label


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=holding_tables())
def test_persons_holding_several_values_are_searched_as_a_brute_force_does(tmp_path_factory, case):
    hierarchies, rows, k, limit, name = case
    folder, url = _visits_in_new_database(tmp_path_factory, "held", rows)
    try:
        job = _held_job(folder, url, hierarchies, k, limit, name)
        expected = held_brute_force(hierarchies, rows, k, _max_suppressed(job, len({r[0] for r in rows})), name)
        with warnings.catch_warnings():  # persons holding several values are said to
            warnings.simplefilter("ignore")
            found = search(job)
            exhaustive = search(dataclasses.replace(job, strategy="exhaustive"))
    except ConfigError:  # a limit that lets every person go; l above the values the table holds
        return
    assert sorted(found.satisfying) == expected
    assert sorted(exhaustive.satisfying) == expected


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=holding_tables())
def test_postgresql_searches_holders_as_a_brute_force_does(pg_server: str, pg_schema: str, tmp_path_factory, case):
    hierarchies, rows, k, limit, name = case
    folder = tmp_path_factory.mktemp("held")
    _load(pg_server, rows, pg_schema)
    try:
        job = _held_job(folder, pg_server, hierarchies, k, limit, name, pg_schema)
        expected = held_brute_force(hierarchies, rows, k, _max_suppressed(job, len({r[0] for r in rows})), name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            found = search(job, RunOptions(metadata_schema=f"{pg_schema}_meta"))
    except ConfigError:  # as on DuckDB
        return
    assert sorted(found.satisfying) == expected


def _published_classes(url: str, schema: str | None = None) -> dict[tuple[str, str], dict[str, set[str]]]:
    """Per class (q0, q1) of the written table: each diagnosis and the pseudonyms of its holders."""
    engine = sa.create_engine(url)
    ref = f'"{schema}".visits_anon' if schema else "visits_anon"
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(f"SELECT q0, q1, diagnosis, pid FROM {ref}").all()
    engine.dispose()
    classes: dict[tuple[str, str], dict[str, set[str]]] = {}
    for q0, q1, diagnosis, pid in rows:
        classes.setdefault((q0, q1), {}).setdefault(diagnosis, set()).add(pid)
    return classes


def _check_publication(tmp_path: Path, url: str, name: str, schema: str | None = None) -> dict:
    """Publish the visits with k = 4 and the criterion `name`, 20% of persons suppressible: every class of the
    written table holds 4 persons and the criterion over its holders, the audit counts so, and every row of a
    published person is there. Returns the classes."""
    rows = _holding_visits()
    _load(url, rows, schema)
    job = _held_job(tmp_path, url, HIERARCHIES, 4, 0.2, name, schema, output={"table": "visits_anon"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = anonymize(job, RunOptions(metadata_schema=f"{schema}_meta") if schema else None)
    classes = _published_classes(url, schema)
    table = Counter(d for pid in {r[0] for r in rows} for d in {r[4] for r in rows if r[0] == pid})
    for holders in classes.values():
        persons = len(set().union(*holders.values()))
        assert persons >= 4 and holds(name, Counter({d: len(p) for d, p in holders.items()}), persons, table)
    published = {pid for holders in classes.values() for pids in holders.values() for pid in pids}
    assert result.audit.ok and result.audit.counted == "persons" and result.audit.split_persons == 0
    assert result.audit.rows == len(published) and result.suppressed == 30 - len(published)
    assert audit(job, "visits_anon", schema=schema).ok  # the audit verb counts holders as the publication did
    return classes


def _holding_visits() -> list[tuple]:
    """30 persons with 1-4 visits, each with a diagnosis of its own: most persons hold several; p0-p4 (class z0,
    a0) hold d0 in every visit and something else in one."""
    return [
        (f"p{p}", f"z{p % 3}", f"a{p % 2}", f"visit{v}", "d0" if p < 5 and v else f"d{(p * 7 + v * 3) % 5}")
        for p in range(30)
        for v in range(1 + p % 4)
    ]


@pytest.mark.parametrize("name", ["distinct", "t"])
def test_a_publication_holds_the_criterion_over_each_class_holders(tmp_path, name):
    _check_publication(tmp_path, f"duckdb:///{tmp_path / 't.duckdb'}", name)


def test_postgresql_publishes_persons_holding_several_values_as_duckdb_does(
    pg_server: str, pg_schema: str, tmp_path: Path
):
    duck = _check_publication(tmp_path, f"duckdb:///{tmp_path / 't.duckdb'}", "distinct")
    assert _check_publication(tmp_path, pg_server, "distinct", pg_schema) == duck
    rows = _holding_visits()
    _load(pg_server, rows, pg_schema)
    job = _held_job(tmp_path, pg_server, HIERARCHIES, 2, 0.1, "entropy", pg_schema)
    _load(f"duckdb:///{tmp_path / 'e.duckdb'}", rows)
    on_duckdb = _held_job(tmp_path, f"duckdb:///{tmp_path / 'e.duckdb'}", HIERARCHIES, 2, 0.1, "entropy")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = search(job, RunOptions(metadata_schema=f"{pg_schema}_meta")).satisfying
        assert sorted(found) == sorted(search(on_duckdb).satisfying)


def test_the_audit_finds_a_class_whose_persons_all_hold_one_value(tmp_path):
    """Three persons who each hold flu and another value: three values, but every person of the class has flu."""
    url = f"duckdb:///{tmp_path / 't.duckdb'}"
    rows = [(f"p{p}", "z0", "a0", f"visit{v}", d) for p in range(3) for v, d in enumerate(["flu", f"other{p}"])]
    _load(url, rows)
    job = _held_job(tmp_path, url, HIERARCHIES, 3, 0, "distinct")
    report = audit(job, "visits")
    assert report.counted == "persons" and report.rows == 3 and report.min_class_size == 3
    assert report.criteria["distinct_l_diversity"].figure == 4 and not report.ok  # 4 values, all with flu
    _load(url, rows + [("p3", "z0", "a0", "visit0", "other3")])  # a fourth person without flu
    assert audit(job, "visits").ok


def test_anatomy_which_draws_one_value_per_person_refuses_several(tmp_path):
    url = f"duckdb:///{tmp_path / 't.duckdb'}"
    _load(url, _holding_visits())
    with pytest.raises(DataError, match="different values of the sensitive column 'diagnosis'"):
        anonymize(_anatomy_job(tmp_path, url))
    assert not sa.inspect(sa.create_engine(url)).has_table("visits_anon")


def held_mondrian(hierarchies, rows, k: int, name: str) -> dict[str, tuple[str, str]] | None:
    """Strict Mondrian of the persons in memory (None: the whole table fails the criteria): per partition, the cut
    of the widest QI (the leaves under the partition's node over all leaves; ties: QI order) into the children of
    its node whose every part holds k persons and `CRITERIA[name]` over its holders; each person's published
    labels."""
    paths = [{path[0]: path for path in qi_paths} for qi_paths in hierarchies]
    leaves = [Counter(label for path in qi_paths for label in path) for qi_paths in hierarchies]
    qis = {row[0]: row[1:3] for row in rows}
    values: dict[str, set[str]] = {}
    for row in rows:
        values.setdefault(row[0], set()).add(row[4])
    table = Counter(value for held in values.values() for value in held)

    def ok(pids: list[str]) -> bool:
        return len(pids) >= k and holds(name, Counter(v for p in pids for v in values[p]), len(pids), table)

    def label(pid: str, j: int, level: int) -> str:
        return paths[j][qis[pid][j]][level]

    published: dict[str, tuple[str, str]] = {}

    def split(pids: list[str], levels: list[int]) -> None:
        allowed = []
        for j, level in enumerate(levels):
            children: dict[str, list[str]] = {}
            for pid in pids if level else []:
                children.setdefault(label(pid, j, level - 1), []).append(pid)
            if len(children) > 1 and all(ok(part) for part in children.values()):
                width = leaves[j][label(pids[0], j, level)] / len(paths[j])
                allowed.append((width, -j, j, list(children.values())))  # the widest, then the first QI
        if not allowed:
            published.update({pid: (label(pid, 0, levels[0]), label(pid, 1, levels[1])) for pid in pids})
            return
        *_, cut, parts = max(allowed, key=lambda allowed_cut: allowed_cut[:2])
        for part in parts:
            split(part, [level - 1 if i == cut else level for i, level in enumerate(levels)])

    if not ok(list(qis)):
        return None
    split(list(qis), [len(qi_paths[0]) - 1 for qi_paths in hierarchies])
    return published


def _check_held_mondrian(folder: Path, url: str, case, schema: str | None = None) -> None:
    """Mondrian of `case` (holding_tables) publishes each person, every row of theirs, where `held_mondrian` does;
    a table that fails the criteria as a whole is refused, nothing written."""
    hierarchies, rows, k, _, name = case
    _load(url, rows, schema)
    output = {"table": "visits_anon", "method": "mondrian"}
    job = _held_job(folder, url, hierarchies, k, 0, name, schema, output=output)
    expected = held_mondrian(hierarchies, rows, k, name)
    options = RunOptions(metadata_schema=f"{schema}_meta") if schema else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if expected is None:
            with pytest.raises((DataError, ConfigError)):
                anonymize(job, options, replace=True)
            return
        result = anonymize(job, options, replace=True)
    assert result.audit.ok and result.audit.counted == "persons"
    published = _published_values(url, "visits_anon", schema)
    assert published == {_pseudonym(pid): {labels} for pid, labels in expected.items()}
    assert result.rows == len(expected) and len(rows) == _written_rows(url, schema)


def _written_rows(url: str, schema: str | None = None) -> int:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        table = f'"{schema}".visits_anon' if schema else "visits_anon"
        written = conn.exec_driver_sql(f"SELECT COUNT(*) FROM {table}").scalar()
    engine.dispose()
    return int(written or 0)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=holding_tables())
def test_mondrian_cuts_holders_as_an_in_memory_mondrian_does(tmp_path_factory, case):
    """Persons holding 1-4 values: every part of a cut holds the criterion over its holders and k persons."""
    folder = tmp_path_factory.mktemp("held_mondrian")
    _check_held_mondrian(folder, f"duckdb:///{folder / 't.duckdb'}", case)


def test_postgresql_cuts_holders_as_an_in_memory_mondrian_does(pg_server: str, pg_schema: str, tmp_path: Path):
    hierarchies = [[[f"z{i}", f"Z{i % 2}", "*"] for i in range(6)], [[f"a{i}", f"A{i % 3}", "*"] for i in range(6)]]
    rows = [(pid, f"z{int(pid[1:]) % 6}", f"a{int(pid[1:]) % 5}", *rest) for pid, _, _, *rest in _holding_visits()]
    for name in ("distinct", "t"):
        _check_held_mondrian(tmp_path, pg_server, (hierarchies, rows, 3, 0, name), pg_schema)


def test_what_reads_one_value_per_person_refuses_several(tmp_path):
    url = f"duckdb:///{tmp_path / 't.duckdb'}"
    _load(url, _holding_visits())
    job = _held_job(tmp_path, url, HIERARCHIES, 3, 0.1, "distinct", output={"table": "visits_anon"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ledgered = dataclasses.replace(job, ledger=Ledger(person="pid"))
        with pytest.raises(DataError, match="the release ledger's inference reads one value per person"):
            anonymize(ledgered)
        output = {"table": "visits_anon", "method": "mondrian"}
        mondrian = _held_job(tmp_path, url, HIERARCHIES, 3, 0, "distinct", output=output)
        with pytest.raises(DataError, match="the release ledger's inference reads one value per person"):
            anonymize(dataclasses.replace(mondrian, ledger=Ledger(person="pid")))
    assert not sa.inspect(sa.create_engine(url)).has_table("visits_anon")


def _sql(url: str, *statements: str) -> None:
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        for statement in statements:
            conn.exec_driver_sql(statement)
    engine.dispose()


@pytest.mark.spark
def test_spark_counts_holders_as_a_brute_force_does(spark_url: str, tmp_path: Path):
    rows = _holding_visits()
    csv = tmp_path / "visits.csv"
    csv.write_text("pid,q0,q1,visit,diagnosis\n" + "\n".join(",".join(row) for row in rows) + "\n")
    load_csv(csv, "visits", spark_url, csv_options={"all_varchar": True}, replace=True)
    job = _held_job(tmp_path, spark_url, HIERARCHIES, 4, 0.2, "distinct", output={"table": "visits_anon"})
    expected = held_brute_force(HIERARCHIES, rows, 4, job.suppression.max_suppressed(30), "distinct")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert sorted(search(job).satisfying) == expected
        result = anonymize(job, replace=True)
        analyses = analyze(job).tables
    assert result.audit.ok and result.audit.counted == "persons"
    assert audit(job, "visits_anon").ok
    assert_node_figures(analyses, HIERARCHIES, rows, 4, "distinct", suppress=True)  # as on DuckDB and PostgreSQL


def test_apply_counts_holders_as_anonymize_does(tmp_path):
    """A batch of the same persons, applied at the node anonymize published: the same classes, holding the
    criterion over their holders; a batch whose classes cannot hold it is refused, nothing written."""
    url = f"duckdb:///{tmp_path / 't.duckdb'}"
    _check_publication(tmp_path, url, "distinct")
    published = _published_classes(url)
    _sql(url, "CREATE TABLE batch AS SELECT * FROM visits", "DROP TABLE visits_anon")
    job = _held_job(tmp_path, url, HIERARCHIES, 4, 0.2, "distinct", output={"table": "visits_anon"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        node = anonymize(job).node
        _sql(url, "DROP TABLE visits_anon")
        result = apply(job, "batch", node=node, output="visits_anon")
    assert result.audit.ok and _published_classes(url) == published
    _sql(url, "CREATE TABLE flu AS SELECT * FROM visits WHERE pid IN ('p0', 'p1', 'p2', 'p3')")
    with warnings.catch_warnings():  # four persons, four values, all of them hold d0: their one class fails
        warnings.simplefilter("ignore")
        with pytest.raises(DataError, match="batch 'flu' alone violates the criteria at node 2,2: 4 tuple"):
            apply(job, "flu", node=(2, 2), output="flu_anon")
    assert not sa.inspect(sa.create_engine(url)).has_table("flu_anon")


@st.composite
def holding_classes(draw):
    """Visits of 1-12 persons (their QIs their own, drawn from 3 x 2 classes), each with 1-3 visits whose
    diagnosis is one of three: most persons hold several."""
    persons = draw(
        st.lists(st.tuples(st.integers(0, 2), st.integers(0, 1), st.integers(1, 3)), min_size=1, max_size=12)
    )
    return [
        (f"p{p}", f"z{z}", f"a{a}", f"visit{v}", f"d{draw(st.integers(0, 2))}")
        for p, (z, a, visits) in enumerate(persons)
        for v in range(visits)
    ]


def holder_figures(rows, settings: AnalysisSettings) -> dict[str, Any]:
    """The analysis' figures of a table of visits, its classes as they are, counted in Python (`class_figures`)."""
    classes: dict[tuple[str, ...], dict[str, set[str]]] = {}
    for pid, q0, q1, _, diagnosis in rows:
        classes.setdefault((q0, q1), {}).setdefault(pid, set()).add(diagnosis)
    return class_figures(classes, settings)


def class_figures(classes: dict[tuple[str, ...], dict[str, set[str]]], settings: AnalysisSettings) -> dict[str, Any]:
    """The analysis' figures of released classes (each person's values, by class): a class's size is its persons,
    a value's count its holders; a class is homogeneous where all of its persons hold one value."""
    sizes = {c: len(persons) for c, persons in classes.items()}
    holders = {c: Counter(v for held in persons.values() for v in held) for c, persons in classes.items()}
    homogeneous = [c for c in classes if max(holders[c].values()) == sizes[c]]
    nearly = [c for c in classes if max(holders[c].values()) >= settings.near * sizes[c]]
    revealed = sorted({v for c in homogeneous for v, h in holders[c].items() if h == sizes[c]})
    rows = sum(sizes.values())
    return {
        "rows": rows,
        "classes": len(classes),
        "homogeneous_classes": len(homogeneous),
        "homogeneous_tuples": sum(sizes[c] for c in homogeneous),
        "nearly_homogeneous_classes": len(nearly),
        "nearly_homogeneous_tuples": sum(sizes[c] for c in nearly),
        "revealed_values": revealed[:REVEALED_SHOWN],
        "disclosed_by_background": {
            b: sum(sizes[c] for c in classes if len(holders[c]) <= b + 1) for b in range(settings.background + 1)
        },
        "highest_risk": max((1 / n for n in sizes.values()), default=0.0),
        "records_at_risk": sum(n for n in sizes.values() if 1 / n > settings.risk_threshold),
        "unique_share": sum(1 for n in sizes.values() if n == 1) / rows if rows else 0.0,
    }


def assert_node_figures(analyses: list[Any], hierarchies, rows, k: int, name: str, suppress: bool) -> None:
    """Each node's analysis (labelled by its levels) has the figures `node_figures` counts."""
    for analysis in analyses:
        node = tuple(int(level) for level in analysis.label.split(","))
        assert_figures(analysis, node_figures(hierarchies, rows, node, k, name, suppress))


def node_figures(hierarchies, rows, node, k: int, name: str, suppress: bool) -> dict[str, Any]:
    """The analysis' figures of `node`'s release of the visits (`class_figures`), where with `suppress` the classes
    of fewer than k persons or failing `CRITERIA[name]` over their holders are left out (and counted)."""
    labels = [{path[0]: path for path in paths} for paths in hierarchies]
    table: Counter[str] = Counter()
    values: dict[str, set[str]] = {}
    for pid, *_, diagnosis in rows:
        values.setdefault(pid, set()).add(diagnosis)
    table.update(v for held in values.values() for v in held)
    classes: dict[tuple[str, ...], dict[str, set[str]]] = {}
    for pid, q0, q1, *_ in rows:
        key = tuple(labels[i][value][level] for i, (value, level) in enumerate(zip((q0, q1), node)))
        classes.setdefault(key, {})[pid] = values[pid]

    def released(persons: dict[str, set[str]]) -> bool:
        held = Counter(v for s in persons.values() for v in s)
        return not suppress or (len(persons) >= k and holds(name, held, len(persons), table))

    kept = {c: persons for c, persons in classes.items() if released(persons)}
    figures = class_figures(kept, AnalysisSettings())
    figures["suppressed"] = len(values) - figures["rows"]
    return figures


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=holding_classes())
def test_the_analysis_of_a_table_counts_holders_as_python_does(tmp_path_factory, rows):
    folder, url = _visits_in_new_database(tmp_path_factory, "held_analysis", rows)
    job = _held_job(folder, url, HIERARCHIES, 1, 0, "distinct")
    analysis = analyze_table(job, "visits").tables[0]
    assert_figures(analysis, holder_figures(rows, AnalysisSettings()))


def test_postgresql_analyzes_a_table_of_holders_as_python_does(pg_server: str, pg_schema: str, tmp_path: Path):
    rows = _holding_visits()
    _load(pg_server, rows, pg_schema)
    job = _held_job(tmp_path, pg_server, HIERARCHIES, 1, 0, "distinct", pg_schema)
    analysis = analyze_table(job, "visits", schema=pg_schema).tables[0]
    assert_figures(analysis, holder_figures(rows, AnalysisSettings()))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=holding_tables())
def test_the_analysis_of_nodes_counts_holders_as_python_does(tmp_path_factory, case):
    """Every minimal node's release of random holding tables: its classes (less those the criteria suppress, with
    a limit) recounted in Python, each value's holders; no Bayes audit (its adversary learns one value)."""
    hierarchies, rows, k, limit, name = case
    folder, url = _visits_in_new_database(tmp_path_factory, "held_nodes", rows)
    try:
        job = _held_job(folder, url, hierarchies, k, limit, name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = analyze(job)
    except ConfigError:  # as the search's test
        return
    assert_node_figures(report.tables, hierarchies, rows, k, name, suppress=limit > 0)
    several = len({(row[0], row[4]) for row in rows}) > len({row[0] for row in rows})
    assert all((analysis.bayes == {}) == several for analysis in report.tables)


def test_the_chosen_release_shows_holders_as_its_publication_holds_them(tmp_path):
    """The report's chosen release: its class sizes are persons, and each value's count, in the distribution after
    and in the least diverse classes, its holders among the published persons (recounted from the written table)."""
    from .conftest import chosen_release

    url = f"duckdb:///{tmp_path / 't.duckdb'}"
    _load(url, _holding_visits())
    job = _held_job(tmp_path, url, HIERARCHIES, 4, 0.2, "distinct", output={"table": "visits_anon"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        node, chosen = chosen_release(job, attribute="diagnosis")
        assert anonymize(job).node == node
    classes = _published_classes(url)
    persons = {c: set().union(*held.values()) for c, held in classes.items()}
    assert chosen.class_sizes == sorted(Counter(len(p) for p in persons.values()).items())
    holders = Counter({d: 0 for held in classes.values() for d in held})
    for held in classes.values():
        holders.update({d: len(pids) for d, pids in held.items()})
    assert dict(chosen.distributions["diagnosis"][1]) == dict(holders)
    assert chosen.worst_classes
    for label, counts in chosen.worst_classes:
        held = classes[tuple(label.strip("()").split(", "))]
        assert dict(counts) == {d: len(pids) for d, pids in held.items()}


def test_postgresql_analyzes_nodes_of_holders_as_python_does(pg_server: str, pg_schema: str, tmp_path: Path):
    rows = _holding_visits()
    _load(pg_server, rows, pg_schema)
    job = _held_job(tmp_path, pg_server, HIERARCHIES, 4, 0.2, "entropy", pg_schema)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = analyze(job, RunOptions(metadata_schema=f"{pg_schema}_meta"))
    assert report.tables
    assert report.tables
    assert_node_figures(report.tables, HIERARCHIES, rows, 4, "entropy", suppress=True)


@st.composite
def two_column_tables(draw):
    """`holding_tables` whose rows also draw a treatment from three (a person holds one to three), and a criterion
    of `CRITERIA` for each column."""
    hierarchies, rows, k, limit, name = draw(holding_tables())
    rows = [(*row, f"t{draw(st.integers(0, 2))}") for row in rows]
    return hierarchies, rows, k, limit, name, draw(st.sampled_from(sorted(CRITERIA)))


def _load_treatments(url: str, rows: list[tuple], schema: str | None = None) -> None:
    """The visits with a treatment column (the rows' sixth)."""
    _load(url, [row[:5] for row in rows], schema)
    visits = f'"{schema}".visits' if schema else "visits"
    _sql(url, f"ALTER TABLE {visits} ADD COLUMN treatment VARCHAR")
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            sa.text(f"UPDATE {visits} SET treatment = :t WHERE pid = :p AND visit = :v"),
            [{"t": row[5], "p": row[0], "v": row[3]} for row in rows],
        )
    engine.dispose()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=two_column_tables())
def test_persons_holding_several_values_of_two_columns_are_searched_as_a_brute_force_does(tmp_path_factory, case):
    """Each criterion counts the holders of its own column's values; a class's size stays its persons."""
    hierarchies, rows, k, limit, name, other = case
    folder = tmp_path_factory.mktemp("two_held")
    url = f"duckdb:///{folder / 't.duckdb'}"
    _load_treatments(url, rows)
    ((kind, spec),) = CRITERIA[other].items()

    def job_and_expected() -> tuple[Any, list[tuple[int, ...]]]:
        job = _held_job(folder, url, hierarchies, k, limit, name)
        treatment = criteria_from_config({kind: {**spec, "attribute": "treatment"}})
        job = dataclasses.replace(job, sensitive=["diagnosis", "treatment"], criteria=job.criteria + treatment)
        persons = len({r[0] for r in rows})
        return job, held_brute_force(hierarchies, rows, k, _max_suppressed(job, persons), name, (5, other))

    assert_searched_as_expected(job_and_expected)


#: the sets of diagnoses and of treatments a person of `set_tables` holds (as many as they have visits)
DIAGNOSIS_SETS, TREATMENT_SETS = [["d0"], ["d1"], ["d0", "d1"]], [["t0"], ["t1"], ["t0", "t1"]]


@st.composite
def set_tables(draw):
    """`person_tables` whose persons hold one of a few sets of diagnoses and of treatments (a value per visit, in
    turn), so that persons share sets, as multi-attribute diversity's subclasses need."""
    hierarchies, rows, k, limit = draw(person_tables())
    sets: dict[str, tuple[list[str], list[str]]] = {}
    for pid in dict.fromkeys(row[0] for row in rows):
        sets[pid] = (draw(st.sampled_from(DIAGNOSIS_SETS)), draw(st.sampled_from(TREATMENT_SETS)))
    held = []
    for pid, q0, q1, visit, _ in rows:
        diagnoses, treatments = sets[pid]
        v = int(visit.removeprefix("visit"))
        held.append((pid, q0, q1, visit, diagnoses[v % len(diagnoses)], treatments[v % len(treatments)]))
    return hierarchies, held, k, limit


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=set_tables(), instantiation=st.sampled_from(["distinct", "entropy", "recursive"]))
def test_multi_attribute_diversity_over_held_values_is_searched_as_a_brute_force_does(
    tmp_path_factory, case, instantiation
):
    """Multi-attribute l-diversity where persons hold several values of both columns: a person's value of the other
    column is the set of values they hold, each subclass of persons holding the same set counts its holders."""
    hierarchies, rows, k, limit = case
    folder = tmp_path_factory.mktemp("multi_held")
    url = f"duckdb:///{folder / 't.duckdb'}"
    _load_treatments(url, rows)
    ((kind, spec),) = CRITERIA[instantiation].items()
    multi = {"attributes": ["diagnosis", "treatment"], "instantiation": kind.removesuffix("_l_diversity")}
    multi.update((key, value) for key, value in spec.items() if key != "attribute")

    def job_and_expected() -> tuple[Any, list[tuple[int, ...]]]:
        job = _held_job(folder, url, hierarchies, k, limit, instantiation)
        criteria = criteria_from_config({"k_anonymity": {"k": k}, "multi_attribute_l_diversity": multi})
        job = dataclasses.replace(job, sensitive=["diagnosis", "treatment"], criteria=criteria)
        persons = len({r[0] for r in rows})
        maximum = _max_suppressed(job, persons)
        return job, held_brute_force(hierarchies, rows, k, maximum, instantiation, (5, instantiation), multi=True)

    assert_searched_as_expected(job_and_expected)


def _set_visits(narrow: bool = False) -> list[tuple]:
    """30 persons of `_holding_visits`' QIs with 2-3 visits, each holding a set of diagnoses and one of treatments
    of `set_tables`'. `narrow`: the persons holding t0 alone hold d0, or d0 and d1, so that d0 is held by all of
    them (two sets, but one value every person holds)."""
    rows = []
    for p in range(30):
        diagnoses, treatments = DIAGNOSIS_SETS[p % 3], TREATMENT_SETS[p // 3 % 3]
        if narrow and treatments == ["t0"]:
            diagnoses = DIAGNOSIS_SETS[2 * (p % 2)]
        for v in range(2 + p % 2):
            rows.append(
                (
                    f"p{p}",
                    f"z{p % 3}",
                    f"a{p % 2}",
                    f"visit{v}",
                    diagnoses[v % len(diagnoses)],
                    treatments[v % len(treatments)],
                )
            )
    return rows


def _multi_job(folder: Path, url: str, l: int, method: str = "generalize", schema: str | None = None) -> Any:
    """The visits with k = 2 and multi-attribute distinct l-diversity over diagnosis and treatment, published by
    `method` (generalization: 10% of the persons may go)."""
    multi = {"multi_attribute_l_diversity": {"attributes": ["diagnosis", "treatment"], "l": l}}
    output = {"table": "visits_anon", "method": method}
    limit = 0.1 if method == "generalize" else 0
    found = _held_job(folder, url, HIERARCHIES, 2, limit, "distinct", schema, output=output)
    criteria = criteria_from_config({"k_anonymity": {"k": 2}, **multi})
    return dataclasses.replace(found, sensitive=["diagnosis", "treatment"], criteria=criteria)


def _everyone(url: str, schema: str | None = None) -> str:
    """A table of the visits with both QIs at the top (one class), as the top node publishes them."""
    visits, everyone = (f'"{schema}".visits', f'"{schema}".everyone') if schema else ("visits", "everyone")
    _sql(url, f"CREATE TABLE {everyone} AS SELECT pid, '*' AS q0, '*' AS q1, diagnosis, treatment FROM {visits}")
    return "everyone"


def _check_multi_held(folder: Path, url: str, schema: str | None = None) -> None:
    """The search of the visits of `_set_visits` and of its narrow twin under `_multi_job` finds the brute force's
    nodes, and the audit of the narrow table in one class (the top node) fails it, as the brute force does: a
    person's treatments are the set of them, whose subclass's persons all hold d0."""
    options = RunOptions(metadata_schema=f"{schema}_meta") if schema else None
    for narrow in (False, True):
        rows = _set_visits(narrow)
        _load_treatments(url, rows, schema)
        expected = held_brute_force(HIERARCHIES, rows, 2, 3, "distinct", (5, "distinct"), multi=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            found = search(_multi_job(folder, url, 2, schema=schema), options).satisfying
        assert sorted(found) == expected and ((2, 2) in expected) != narrow
    audited = audit(_multi_job(folder, url, 2, schema=schema), _everyone(url, schema), schema, options)
    assert not audited.criteria["multi_attribute_l_diversity"].holds


def test_multi_attribute_diversity_of_held_values_is_searched_and_audited_as_a_brute_force_does(
    tmp_path: Path, database: tuple[str, str | None]
):
    _check_multi_held(tmp_path, *database)


@pytest.mark.parametrize("method", ["generalize", "mondrian"])
def test_a_publication_under_multi_attribute_diversity_of_held_values_passes_its_audit(tmp_path, method):
    """Persons holding sets of diagnoses and treatments, multi-attribute distinct 2-diversity: each publication's
    audit (which reads each person's sets from the written rows) holds it, `sqlanon audit` of the written table
    agrees, and at l = 3 fails it."""
    url = f"duckdb:///{tmp_path / 't.duckdb'}"
    _load_treatments(url, _set_visits())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = anonymize(_multi_job(tmp_path, url, 2, method))
        again, stricter = (audit(_multi_job(tmp_path, url, l, method), "visits_anon") for l in (2, 3))
        if method == "generalize":  # the analysis of the node, with two columns' sets, suppresses as it did
            [release] = analyze(_multi_job(tmp_path, url, 2, method), node=result.node).tables
            assert release.suppressed == result.suppressed
    assert result.audit.ok and result.audit.counted == "persons"
    assert again.ok and again.criteria == result.audit.criteria
    assert not stricter.criteria["multi_attribute_l_diversity"].holds


@pytest.mark.parametrize("method", ["generalize", "mondrian"])
def test_a_publication_of_two_held_columns_holds_each_criterion_over_its_holders(tmp_path, method):
    rows = [(*row, f"t{(int(row[0][1:]) + int(row[3][5:])) % 3}") for row in _holding_visits()]
    url = f"duckdb:///{tmp_path / 't.duckdb'}"
    _load_treatments(url, rows)
    limit = 0.2 if method == "generalize" else 0
    job = _held_job(tmp_path, url, HIERARCHIES, 4, limit, "distinct", output={"table": "visits_anon", "method": method})
    treatment = criteria_from_config({"entropy_l_diversity": {"attribute": "treatment", "l": 2}})
    job = dataclasses.replace(job, sensitive=["diagnosis", "treatment"], criteria=job.criteria + treatment)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = anonymize(job)
    assert result.audit.ok and result.audit.counted == "persons" and audit(job, "visits_anon").ok
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        written = conn.exec_driver_sql("SELECT q0, q1, pid, diagnosis, treatment FROM visits_anon").all()
    engine.dispose()
    classes: dict[tuple[str, str], list[dict[str, set[str]]]] = {}
    for q0, q1, pid, diagnosis, treatment_value in written:
        held = classes.setdefault((q0, q1), [{}, {}])
        held[0].setdefault(pid, set()).add(diagnosis)
        held[1].setdefault(pid, set()).add(treatment_value)
    tables = [Counter(value for _, value in {(r[0], r[i]) for r in rows}) for i in (4, 5)]
    assert classes
    for diagnoses, treatments in classes.values():
        persons = len(diagnoses)
        assert persons >= 4
        assert holds("distinct", Counter(v for s in diagnoses.values() for v in s), persons, tables[0])
        assert holds("entropy", Counter(v for s in treatments.values() for v in s), persons, tables[1])


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=holding_tables(), study=st.sets(st.integers(0, 29), min_size=1))
def test_a_research_subset_of_persons_is_searched_as_a_brute_force_of_its_persons_does(tmp_path_factory, case, study):
    """A subset given by a table of persons' keys: the search counts the subset's persons alone (their values,
    the table's holders for t-closeness, the suppression limit), as the brute force over their rows does."""
    hierarchies, rows, k, limit, name = case
    folder, url = _visits_in_new_database(tmp_path_factory, "held_subset", rows)
    keys = [(f"p{p}",) for p in sorted(study)]
    subset = [row for row in rows if (row[0],) in keys]
    if not subset:
        return
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE study (pid VARCHAR)")
        conn.execute(sa.text("INSERT INTO study VALUES (:p)"), [{"p": key} for (key,) in keys])
    engine.dispose()
    persons = len({row[0] for row in subset})

    def job_and_expected() -> tuple[Any, list[tuple[int, ...]]]:
        job = _held_job(folder, url, hierarchies, min(k, persons), limit, name, subset={"table": "study", "key": "pid"})
        return job, held_brute_force(hierarchies, subset, min(k, persons), _max_suppressed(job, persons), name)

    assert_searched_as_expected(job_and_expected)


def _check_subset_of_persons(tmp_path: Path, url: str, schema: str | None = None) -> None:
    """A research subset of 27 of the 30 persons (a table of their keys): what is published is theirs alone, and the
    audit counts them."""
    _load(url, _holding_visits(), schema)
    where = f'"{schema}".' if schema else ""
    _sql(
        url, f"CREATE TABLE {where}study AS SELECT DISTINCT pid FROM {where}visits WHERE pid NOT IN ('p1', 'p2', 'p7')"
    )
    subset = {"table": "study", "key": "pid", **({"schema": schema} if schema else {})}
    output = {"table": "visits_anon"}
    job = _held_job(tmp_path, url, HIERARCHIES, 3, 0.2, "distinct", schema, output=output, subset=subset)
    options = RunOptions(metadata_schema=f"{schema}_meta") if schema else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = anonymize(job, options)
    assert result.audit.ok and result.audit.counted == "persons" and audit(job, "visits_anon", schema=schema).ok
    published = {pid for held in _published_classes(url, schema).values() for pids in held.values() for pid in pids}
    assert published <= {_pseudonym(f"p{p}") for p in range(30) if p not in (1, 2, 7)}
    assert result.suppressed == 27 - len(published)


def test_a_research_subset_of_persons_publishes_their_rows_alone(tmp_path: Path, database: tuple[str, str | None]):
    _check_subset_of_persons(tmp_path, *database)


@pytest.mark.parametrize("method", ["mondrian", "anatomy"])
def test_mondrian_and_anatomy_publish_a_research_subset_of_persons(tmp_path, method):
    """Every row of each of the subset's persons, and nothing else (neither method suppresses anyone)."""
    url = f"duckdb:///{tmp_path / 't.duckdb'}"
    rows = _holding_visits()
    if method == "anatomy":  # its buckets draw one value per person
        rows = [(pid, q0, q1, visit, f"d{int(pid[1:]) % 5}") for pid, q0, q1, visit, _ in rows]
    _load(url, rows)
    _sql(url, "CREATE TABLE study AS SELECT DISTINCT pid FROM visits WHERE pid NOT IN ('p1', 'p2', 'p7')")
    subset = {"table": "study", "key": "pid"}
    if method == "anatomy":
        job = dataclasses.replace(_anatomy_job(tmp_path, url), subset=Subset(**subset))
    else:
        output = {"table": "visits_anon", "method": method}
        job = _held_job(tmp_path, url, HIERARCHIES, 3, 0, "distinct", output=output, subset=subset)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = anonymize(job)
    assert result.audit.ok if method == "mondrian" else result.smallest_bucket >= 3
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        written = Counter(pid for (pid,) in conn.exec_driver_sql("SELECT pid FROM visits_anon").all())
    engine.dispose()
    study = [row for row in rows if row[0] not in ("p1", "p2", "p7")]
    assert written == Counter(_pseudonym(row[0]) for row in study)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    case=person_tables(),
    study=st.sets(st.integers(0, 29), min_size=1),
    bounds=st.tuples(st.sampled_from([0.0, 0.1, 0.3]), st.sampled_from([0.5, 0.8, 1.0])),
)
def test_delta_presence_over_a_subset_of_persons_counts_them_as_a_table_of_persons_does(
    tmp_path_factory, case, study, bounds
):
    """With a unit, delta-presence compares each class's persons of the subset with its persons of the population:
    the search over the visits finds the nodes that the search over a table of one row per person (no unit) finds."""
    hierarchies, rows, k, limit = case
    folder, url = _visits_in_new_database(tmp_path_factory, "presence_persons", rows)
    people = sorted({row[:3] for row in rows})
    keys = [f"p{p}" for p in sorted(study) if f"p{p}" in {person[0] for person in people}]
    if not keys:
        return
    _sql(url, "CREATE TABLE study (pid VARCHAR)", "CREATE TABLE people (pid VARCHAR, q0 VARCHAR, q1 VARCHAR)")
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO study VALUES (:p)"), [{"p": key} for key in keys])
        conn.execute(sa.text("INSERT INTO people VALUES (:p, :a, :b)"), [dict(zip("pab", p)) for p in people])
    engine.dispose()
    spec = {"k_anonymity": {"k": min(k, len(keys))}, "delta_presence": {"d_min": bounds[0], "d_max": bounds[1]}}
    subset = {"table": "study", "key": "pid"}
    try:
        by_person = _job(folder, url, hierarchies, 1, limit, criteria=spec, subset=subset)
        by_row = dataclasses.replace(
            by_person,
            source=dataclasses.replace(by_person.source, table="people"),
            unit=None,
            unit_column=None,
            insensitive=[],
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            found = search(by_person)
        expected = search(by_row)
    except ConfigError:  # a limit that lets every person go
        return
    assert sorted(found.satisfying) == sorted(expected.satisfying)


def test_the_journalist_s_payout_counts_the_population_s_persons(tmp_path: Path):
    """With a unit and a research subset, the journalist's publisher payout (its success probability 1 / a class's
    persons in the population) scores every passing node and picks the node a table of one row per person gives;
    the visits counted as rows score otherwise."""
    url = f"duckdb:///{tmp_path / 't.duckdb'}"
    rows = _holding_visits()
    _load(url, rows)
    people = sorted({row[:3] for row in rows})
    _sql(url, "CREATE TABLE study AS SELECT DISTINCT pid FROM visits WHERE pid < 'p3' OR pid > 'p6'")
    _sql(url, "CREATE TABLE people (pid VARCHAR, q0 VARCHAR, q1 VARCHAR)")
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO people VALUES (:p, :a, :b)"), [dict(zip("pab", p)) for p in people])
    engine.dispose()
    extra = {
        "subset": {"table": "study", "key": "pid"},
        "select": {"metric": "publisher_payout", "attacker": "journalist"},
        "cost_benefit": {"adversary_gain": 5, "adversary_cost": 2},
    }
    by_person = _job(tmp_path, url, HIERARCHIES, 2, 2, output={"table": "visits_anon"}, **extra)
    by_row = dataclasses.replace(
        by_person,
        source=dataclasses.replace(by_person.source, table="people"),
        unit=None,
        unit_column=None,
        insensitive=["pid"],
        identifying=[],
        output=dataclasses.replace(by_person.output, table="people_anon"),
    )
    visits = dataclasses.replace(by_person, unit="rows", unit_column=None, output=by_row.output)
    jobs = [by_person, by_row, visits]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found, expected = anonymize(by_person), anonymize(by_row)
        assert found.node == expected.node and found.audit.ok and found.audit.counted == "persons"

        nodes = sorted(search(by_person).satisfying)
        payouts = [{n: round(m["publisher_payout"], 6) for n, m in node_metrics(job, nodes).items()} for job in jobs]
    assert len(nodes) > 1 and payouts[0] == payouts[1] != payouts[2]


def _check_presence_of_persons(tmp_path: Path, url: str, schema: str | None = None) -> None:
    """delta-presence over a study of 23 of 30 persons with 1-4 visits each: the publication holds the study's
    persons alone, and each published class's share of study persons among its persons of the whole table (counted
    here from the written table and the source) is within the bounds; a population whose persons' rows disagree on
    a QI is refused."""
    rows = _holding_visits()
    _load(url, rows, schema)
    where = f'"{schema}".' if schema else ""
    _sql(url, f"CREATE TABLE {where}study AS SELECT DISTINCT pid FROM {where}visits WHERE pid < 'p3'")
    study = {row[0] for row in rows if row[0] < "p3"}
    spec = {"k_anonymity": {"k": 2}, "delta_presence": {"d_min": 0.0, "d_max": 0.8}}
    subset = {"table": "study", "key": "pid", **({"schema": schema} if schema else {})}
    job = _job(tmp_path, url, HIERARCHIES, 2, 0, schema, criteria=spec, subset=subset, output={"table": "visits_anon"})
    options = RunOptions(metadata_schema=f"{schema}_meta") if schema else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = anonymize(job, options)
    assert result.audit.ok and result.audit.counted == "persons"
    labels = [{path[0]: path for path in paths} for paths in HIERARCHIES]
    persons = {row[0]: row[1:3] for row in rows}
    classes = set(_published_classes(url, schema))
    assert classes and set(_published_values(url, "visits_anon", schema)) == {_pseudonym(p) for p in study}
    for q0, q1 in classes:
        members = [p for p, (z, a) in persons.items() if q0 in labels[0][z] and q1 in labels[1][a]]
        share = sum(p in study for p in members) / len(members)
        assert 0.0 <= share <= 0.8, (q0, q1, share)
    _sql(url, f"UPDATE {where}visits SET q0 = 'z6' WHERE pid = 'p1' AND visit = 'visit0'")
    with pytest.raises(DataError, match="have rows with different quasi-identifier values in the population"):
        anonymize(job, options, replace=True)


def test_delta_presence_counts_the_persons_of_a_study_among_the_table_s(tmp_path):
    _check_presence_of_persons(tmp_path, f"duckdb:///{tmp_path / 't.duckdb'}")


def test_postgresql_counts_the_persons_of_a_study_as_duckdb_does(pg_server: str, pg_schema: str, tmp_path: Path):
    _check_presence_of_persons(tmp_path, pg_server, pg_schema)
