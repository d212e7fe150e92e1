"""The verbs every backend supports, run the same way on each (DuckDB, PostgreSQL, Spark) through one `backend`
fixture (`compared`: all but DuckDB, for searches checked against DuckDB's): the same answers as DuckDB's; where a
backend lacks a verb, the one-line error it gives instead."""

from __future__ import annotations

import dataclasses
import json
import random
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from sqlanon import (
    RunOptions,
    analyze,
    analyze_table,
    anonymize,
    apply,
    audit,
    bucketize,
    inference,
    job_from_dict,
    report,
    search,
)
from sqlanon.cli import main
from sqlanon.criteria import KAnonymity, criteria_from_config
from sqlanon.errors import ConfigError, DataError, HierarchyError, SqlanonError
from sqlanon.model.job import Job, Selection, Subset, Suppression
from sqlanon.model.selection import node_label

from .conftest import (
    ADULT_DIR,
    Recorded,
    adult_config,
    adult_job,
    chosen_release,
    reclassified,
    user_tables,
    with_cropped_hierarchies,
)
from .republishing_example import example_config, write_example
from .test_criteria import RANDOM_CASES, _named

QIS = ["sex", "race", "marital-status"]
SUBSET = ["age", "education", "marital-status", "workclass"]
CRITERIA_QIS = ["sex", "age", "race", "marital-status"]
OCCUPATION = str(ADULT_DIR / "hierarchies" / "occupation.csv")
CRITERIA = [
    {"k_anonymity": {"k": 5}},
    {"distinct_l_diversity": {"attribute": "occupation", "l": 3}},
    {"entropy_l_diversity": {"attribute": "occupation", "l": 3}},
    {"recursive_l_diversity": {"attribute": "occupation", "c": 4, "l": 3}},
    {"t_closeness": {"attribute": "occupation", "t": 0.2, "distance": "equal"}},
    {"t_closeness": {"attribute": "occupation", "t": 0.2, "distance": "hierarchical", "hierarchy": OCCUPATION}},
    # the risk bounds on the whole release: beside a size bound, and beside a criterion read per class
    {"k_anonymity": {"k": 2}, "average_risk": {"threshold": 0.1}},
    {"distinct_l_diversity": {"attribute": "occupation", "l": 2}, "sample_uniqueness": {"threshold": 0.005}},
    # decided in Python over each node's class sizes, which SQL reads
    {"k_anonymity": {"k": 2}, "population_uniqueness": {"threshold": 0.001, "sampling_fraction": 0.1}},
]
#: with 2% suppression: the border search (k-anonymity), the exact search (entropy, t-closeness), the risk bounds
SUPPRESSED = [CRITERIA[0], CRITERIA[2], CRITERIA[5], CRITERIA[6], CRITERIA[7], CRITERIA[8]]


@dataclass(frozen=True)
class Backend:
    """Adult loaded into one database: where it is, and the options its runs take."""

    name: str
    url: str
    schema: str | None
    options: RunOptions
    transactions: bool  # whether it writes several tables in one transaction (Mondrian, anatomy)

    def job(self, qis: list[str] = QIS, **extra: Any) -> Job:
        return adult_job(self.url, qis, load_csv=False, schema=self.schema, **extra)

    def table(self, name: str) -> str:
        """A table name of this backend's own (the tests share DuckDB's file and Spark's catalog)."""
        return f"{name}_{self.name}"

    def as_owner(self, statement: str) -> list[Any]:
        """Run `statement` as the data's owner would, not through sqlanon (`{schema}` is the backend's schema,
        `{using}` Spark's table format); its rows, if any."""
        statement = statement.format(
            schema=f"{self.schema}." if self.schema else "", using="USING parquet" if self.name == "spark" else ""
        )
        if self.name == "spark":
            from sqlanon.backends.spark_dbapi import session_for

            return list(session_for("local[2]").sql(statement).collect())
        engine = sa.create_engine(self.url)
        try:
            with engine.begin() as conn:
                result = conn.exec_driver_sql(statement)
                return list(result.all()) if result.returns_rows else []
        finally:
            engine.dispose()

    def quote(self, name: str) -> str:
        """`name` as an identifier in a statement of `as_owner`."""
        mark = "`" if self.name == "spark" else '"'
        return mark + name.replace(mark, 2 * mark) + mark

    def config(self, qis: Any, **extra: Any) -> dict[str, Any]:
        config = adult_config(self.url, qis, load_csv=False, **extra)
        if self.schema is not None:
            config["source"]["schema"] = self.schema
        return config


@pytest.fixture(scope="module")
def postgres_adult(pg_server: str) -> Iterator[Backend]:
    """Adult loaded once into a schema of its own (and its own metadata schema), dropped at the end."""
    schema = f"shared_{uuid.uuid4().hex[:8]}"
    options = RunOptions(metadata_schema=f"{schema}_meta")
    engine = sa.create_engine(pg_server)
    with engine.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    search(adult_job(pg_server, ["sex"], k=1, schema=schema), options)
    yield Backend("postgresql", pg_server, schema, options, transactions=True)
    with engine.begin() as conn:
        for dropped in (schema, f"{schema}_meta"):
            conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{dropped}" CASCADE')
    engine.dispose()


POSTGRESQL = pytest.param("postgresql", marks=pytest.mark.postgres)
SPARK = pytest.param("spark", marks=pytest.mark.spark)


def _backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "postgresql":
        found: Backend = request.getfixturevalue("postgres_adult")
        return found
    if request.param == "spark":
        return Backend("spark", request.getfixturevalue("spark_adult"), None, RunOptions(), transactions=False)
    return Backend("duckdb", request.getfixturevalue("adult_duck"), None, RunOptions(), transactions=True)


@pytest.fixture(params=["duckdb", POSTGRESQL, SPARK])
def backend(request: pytest.FixtureRequest) -> Backend:
    """Every backend."""
    return _backend(request)


@pytest.fixture(params=[POSTGRESQL, SPARK])
def compared(request: pytest.FixtureRequest) -> Backend:
    """Every backend but DuckDB, for the searches checked against DuckDB's (which would only repeat itself)."""
    return _backend(request)


@pytest.fixture
def duckdb(adult_duck: str) -> Backend:
    """The reference every backend is compared with."""
    return Backend("duckdb", adult_duck, None, RunOptions(), transactions=True)


@pytest.mark.parametrize("k", [2, 10])
def test_search_finds_duckdbs_nodes(compared: Backend, duckdb: Backend, k: int) -> None:
    found = search(compared.job(SUBSET, k=k), compared.options)
    expected = search(duckdb.job(SUBSET, k=k))
    assert (found.satisfying, found.minimal) == (expected.satisfying, expected.minimal)
    assert found.stats.nodes_checked == expected.stats.nodes_checked


def _with_criteria(backend: Backend, spec: dict[str, Any], limit: float) -> Job:
    sensitive = ["occupation"] if "k_anonymity" not in spec else []
    return reclassified(
        backend.job(CRITERIA_QIS),
        criteria=criteria_from_config(spec),
        sensitive=sensitive,
        suppression=Suppression(limit),
    )


@pytest.mark.parametrize(
    ("spec", "limit"),
    [(spec, 0.0) for spec in CRITERIA] + [(spec, 0.02) for spec in SUPPRESSED],
    ids=lambda v: "-".join(v) + str(v[next(iter(v))].get("distance", "")) if isinstance(v, dict) else f"{v:.0%}",
)
def test_every_criterion_finds_duckdbs_nodes(compared: Backend, duckdb: Backend, spec: dict, limit: float) -> None:
    found = search(_with_criteria(compared, spec, limit), compared.options)
    expected = search(_with_criteria(duckdb, spec, limit))
    assert (found.satisfying, found.minimal) == (expected.satisfying, expected.minimal)
    assert found.stats.nodes_checked == expected.stats.nodes_checked


def test_incognito_finds_duckdbs_nodes(compared: Backend, duckdb: Backend) -> None:
    """Incognito's lattice tables and their SQL live in the metadata store; its frequency sets in the backend."""
    qis = ["sex", "race", "salary-class"]
    found = search(dataclasses.replace(compared.job(qis, k=10), strategy="incognito"), compared.options)
    expected = search(dataclasses.replace(duckdb.job(qis, k=10), strategy="incognito"))
    assert (found.satisfying, found.minimal) == (expected.satisfying, expected.minimal)


PUBLICATION_STEPS = ["writing the table", "checking its columns and values", "auditing"]


def test_anonymize_publishes_duckdbs_node_audited(backend: Backend, duckdb: Backend) -> None:
    output, recorded = {"table": f"shared_anon_{backend.name}"}, Recorded()
    options = dataclasses.replace(backend.options, progress=recorded)
    published = anonymize(backend.job(output=output), options, replace=True)
    expected = anonymize(duckdb.job(output={"table": "shared_anon_reference"}), replace=True)
    assert published.node == expected.node and published.audit.ok
    assert published.audit.rows == expected.audit.rows and published.audit.classes == expected.audit.classes
    assert recorded.steps("publish") == ["starting", *PUBLICATION_STEPS, "committing"]


def test_anonymize_leaves_nothing_but_its_output(backend: Backend) -> None:
    """Every table of every schema after a publication is one from before or the output: the run's dimension
    tables, cube and staging are gone (on Spark, its temporary views too)."""
    output = backend.table("tidy_anon")
    backend.as_owner(f"DROP TABLE IF EXISTS {{schema}}{output}")
    before = _every_table(backend)
    anonymize(backend.job(k=5, output={"table": output}), backend.options)
    assert {name for _, name in _every_table(backend) - before} == {output}
    columns = ", ".join(backend.quote(c) for c in QIS)  # k read off the output itself, not from sqlanon's audit
    [(smallest, rows)] = backend.as_owner(
        f"SELECT MIN(n), SUM(n) FROM (SELECT COUNT(*) AS n FROM {{schema}}{output} GROUP BY {columns}) c"
    )
    assert smallest >= 5 and rows == 30162


def _every_table(backend: Backend) -> set[tuple[str, str]]:
    if backend.name == "spark":
        return {(str(row[0]), str(row[1])) for row in backend.as_owner("SHOW TABLES")}
    return user_tables(backend.url, exclude_schema="\x00")  # every schema, sqlanon's own included


def _cut_batches(backend: Backend) -> tuple[str, str]:
    """Two batches of Adult's rows in `backend`: one that the first minimal node keeps k-anonymous, one too odd."""
    usual, odd = backend.table("batch"), backend.table("odd_batch")
    for name, rows in ((usual, "age BETWEEN 20 AND 60"), (odd, "age > 85 OR race = 'Other'")):
        backend.as_owner(f"DROP TABLE IF EXISTS {{schema}}{name}")
        backend.as_owner(f"CREATE TABLE {{schema}}{name} {{using}} AS SELECT * FROM {{schema}}adult WHERE {rows}")
    return usual, odd


def _grouped_rows(backend: Backend, table: str) -> list[tuple[str, ...]]:
    columns = ", ".join(backend.quote(c) for c in QIS)
    found = backend.as_owner(f"SELECT {columns}, COUNT(*) FROM {{schema}}{table} GROUP BY {columns}")
    return sorted(tuple(str(v) for v in row) for row in found)


def test_apply_publishes_duckdbs_rows_and_refuses_a_violating_batch_alike(backend: Backend, duckdb: Backend) -> None:
    """`apply` of a node to a new batch: the rows DuckDB publishes, audited; a batch that breaks k at that node is
    refused with the same one-line error, nothing written."""
    node = search(duckdb.job(k=5)).minimal[0]
    found, expected = {}, {}
    for side, into in ((backend, found), (duckdb, expected)):
        usual, odd = _cut_batches(side)
        output = side.table("batch_applied")
        applied = apply(
            side.job(k=5), usual, node=node, output=output, batch_schema=side.schema, options=side.options, replace=True
        )
        assert applied.audit.ok and applied.node == node
        into["rows"] = _grouped_rows(side, output)
        with pytest.raises(DataError) as refused:
            apply(
                side.job(k=5),
                odd,
                node=node,
                output=side.table("odd_applied"),
                batch_schema=side.schema,
                options=side.options,
            )
        into["error"] = str(refused.value).replace(odd, "ODD")
        assert "Nothing was written" in into["error"]
    assert found == expected


def test_apply_by_run_id_publishes_at_the_node_the_run_published(backend: Backend) -> None:
    """`apply --run ID`: the node is read back from the run's record, in the backend's own metadata store."""
    published = anonymize(backend.job(k=5, output={"table": backend.table("run_anon")}), backend.options, replace=True)
    usual, odd = _cut_batches(backend)
    applied = apply(
        backend.job(k=5),
        usual,
        run_id=published.search.run_id,
        output=backend.table("run_applied"),
        batch_schema=backend.schema,
        options=backend.options,
        replace=True,
    )
    assert applied.node == published.node and applied.audit.ok
    assert applied.audit.rows == backend.as_owner(f"SELECT COUNT(*) FROM {{schema}}{usual}")[0][0]
    before = _every_table(backend)
    with pytest.raises(DataError, match="alone violates the criteria"):
        apply(
            backend.job(k=5), odd, run_id=published.search.run_id, batch_schema=backend.schema, options=backend.options
        )
    assert _every_table(backend) == before


def test_audit_of_the_source_agrees(backend: Backend, duckdb: Backend) -> None:
    recorded = Recorded()
    options = dataclasses.replace(backend.options, progress=recorded)
    found = audit(backend.job(k=2), "adult", backend.schema, options)
    assert recorded.steps("audit") == ["one grouping of the table"]
    expected = audit(duckdb.job(k=2), "adult")
    assert (found.rows, found.classes, found.min_class_size, found.ok) == (
        expected.rows,
        expected.classes,
        expected.min_class_size,
        expected.ok,
    )


def test_mondrian_partitions_or_says_why_not(backend: Backend) -> None:
    config = backend.config(["sex"], output={"table": f"shared_mondrian_{backend.name}", "method": "mondrian"})
    config["quasi_identifiers"]["age"] = None  # cut at its median, as a number
    config["insensitive"] = [c for c in config["insensitive"] if c != "age"]
    recorded = Recorded()
    report = _published_or_refused(backend, job_from_dict(config, ADULT_DIR), "Mondrian partitioning", recorded)
    assert report is None or (report.audit.ok and report.rows == 30162)
    assert report is None or ("Mondrian: rounds" in recorded and recorded.steps("publish") == PUBLICATION_STEPS)


def test_anatomy_bucketizes_or_says_why_not(backend: Backend) -> None:
    config = backend.config(
        [], output={"table": f"shared_anatomy_{backend.name}", "method": "anatomy", "l": 2}, sensitive=["occupation"]
    )
    config["quasi_identifiers"] = ["age", "sex"]
    config["insensitive"] = [c for c in config["insensitive"] if c not in ("age", "sex", "occupation")]
    del config["criteria"]
    recorded = Recorded()
    report = _published_or_refused(backend, job_from_dict(config, ADULT_DIR), "an anatomy publication", recorded)
    assert report is None or (report.rows == 30162 and report.l == 2 and report.fewest_values >= 2)
    steps = ["checking the sensitive values", "drawing the buckets", "writing the tables", "auditing"]
    assert report is None or recorded.steps("anatomy") == steps


def _published_or_refused(backend: Backend, job: Job, what: str, progress: Recorded | None = None) -> Any:
    """What the job's method published, on a backend with transactions; elsewhere None, after the one-line
    refusal naming `what` that the method must give there."""
    if backend.transactions:
        recorded = Recorded() if progress is None else progress
        return anonymize(job, dataclasses.replace(backend.options, progress=recorded), replace=True)
    with pytest.raises(ConfigError, match=f"{what} is not available on"):
        anonymize(job, backend.options, replace=True)
    return None


def test_unknown_table_and_column_are_named(backend: Backend) -> None:
    with pytest.raises(DataError, match=r"table '.*nope' not found"):
        search(backend.job(table="nope"), backend.options)
    with pytest.raises(SqlanonError, match="no_such_column"):
        search(backend.job(QIS + ["no_such_column"]), backend.options)


def test_values_missing_from_hierarchies_are_named_alike(backend: Backend, tmp_path: Path) -> None:
    """Every QI's values are looked up before the search: the first QI in job order with values missing from its
    hierarchy is named, with the same values and count on every backend."""
    dropped = {"race": ("Black", "Other"), "education": ("Masters",)}
    job = with_cropped_hierarchies(backend.job(["sex", "education", "race"], k=2), tmp_path, dropped)
    with pytest.raises(HierarchyError) as caught:
        search(job, backend.options)
    assert "column 'education': 1 value(s) missing from its hierarchy" in str(caught.value)
    assert str(caught.value).split("): ")[1] == "'Masters'; add a line for each"


def test_k_larger_than_the_table_is_refused(backend: Backend) -> None:
    job = dataclasses.replace(backend.job(["sex"]), criteria=[KAnonymity(10**6)])
    with pytest.raises(SqlanonError, match="larger than the table"):
        search(job, backend.options)


def test_cli_search_prints_duckdbs_nodes(backend: Backend, duckdb: Backend, tmp_path: Path) -> None:
    config = tmp_path / "job.yaml"
    config.write_text(json.dumps(backend.config(QIS, k=3)))
    result = CliRunner().invoke(
        main, ["search", str(config), "--format", "json", "--metadata-schema", backend.options.metadata_schema]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["minimal"] == [list(n) for n in search(duckdb.job(k=3)).minimal]


CLASSIFICATION = Selection(None, "classification", targets=("salary-class", "occupation", "race"))  # race: a QI


@pytest.mark.parametrize("select", [Selection(None, "non_uniform_entropy_nm"), CLASSIFICATION])
def test_suppression_metrics_and_publication_equal_duckdbs(
    compared: Backend, duckdb: Backend, select: Selection
) -> None:
    """Entropy l-diversity with 2% suppression (the exact, non-pruning search), every minimal node's metrics,
    selection by ARX's non-monotonic non-uniform entropy (its marginal counts, its suppressed tuples' entropy) or
    by its classification metric (each class's most frequent values, a window over the stored sets; for the QI
    target, over the released classes grouped by the other QIs), and a masked output: what DuckDB gives."""
    changes = {
        "criteria": criteria_from_config({"entropy_l_diversity": {"attribute": "occupation", "l": 3}}),
        "sensitive": ["occupation", "salary-class"],
        "suppression": Suppression(0.02, "mask"),
        "select": select,
    }
    qis = ["sex", "race", "marital-status"]  # metrics of 12 nodes (each costs Spark a few statements)
    found = anonymize(
        reclassified(compared.job(qis, output={"table": compared.table("masked")}), **changes),
        compared.options,
        replace=True,
    )
    expected = anonymize(reclassified(duckdb.job(qis, output={"table": "masked_reference"}), **changes), replace=True)
    assert found.search.satisfying == expected.search.satisfying and found.node == expected.node
    assert found.suppressed == expected.suppressed > 0 and found.audit.suppressed == found.suppressed
    assert found.audit.ok
    for node, values in expected.search.metrics.items():
        assert found.search.metrics[node] == pytest.approx(values)


RELEASE_BOUNDS = {
    # with masking: the smallest classes suppressed beside a size bound
    "average_risk": (
        {"k_anonymity": {"k": 2}, "average_risk": {"threshold": 0.05}, "sample_uniqueness": {"threshold": 0.0}},
        "mask",
    ),
    # decided over class sizes in Python, the classes then taken in SQL by rank
    "population_uniqueness": (
        {"population_uniqueness": {"threshold": 0.0005, "model": "zayatz", "sampling_fraction": 0.1}},
        "remove",
    ),
}


@pytest.mark.parametrize("bound", list(RELEASE_BOUNDS))
def test_risk_bounds_publish_duckdbs_release(compared: Backend, duckdb: Backend, bound: str) -> None:
    """The bounds on the whole release, with 2% suppression: the smallest classes suppressed, as on DuckDB, and the
    audit (over a published table, without the wave's nodes) finds them held, with DuckDB's figure."""
    spec, how = RELEASE_BOUNDS[bound]
    changes = {"criteria": criteria_from_config(spec), "suppression": Suppression(0.02, how)}
    qis = ["sex", "race", "marital-status", "age"]
    # a table per bound: xdist's workers may run both at once over the same databases
    found = anonymize(
        reclassified(compared.job(qis, output={"table": compared.table(f"risk_{bound}")}), **changes),
        compared.options,
        replace=True,
    )
    reference = reclassified(duckdb.job(qis, output={"table": f"{bound}_reference"}), **changes)
    expected = anonymize(reference, replace=True)
    assert found.node == expected.node and found.suppressed == expected.suppressed > 0
    assert found.audit.ok and found.audit.classes == expected.audit.classes
    assert found.audit.criteria[bound].figure == pytest.approx(expected.audit.criteria[bound].figure)


def _study(backend: Backend, name: str) -> str:
    """Adult with a research subset flagged (the rows of two educations), as the backend's table `name`."""
    name = backend.table(name)
    flag = "CASE WHEN education IN ('Bachelors', 'Some-college') THEN 1 ELSE 0 END"
    backend.as_owner(f"DROP TABLE IF EXISTS {{schema}}{name}")
    backend.as_owner(f"CREATE TABLE {{schema}}{name} {{using}} AS SELECT *, {flag} AS in_study FROM {{schema}}adult")
    return name


POPULATION_CRITERIA = {
    "presence": {"k_anonymity": {"k": 2}, "delta_presence": {"d_min": 0.05, "d_max": 0.6}},
    "k_map": {"k_map": {"k": 30}},
}


@pytest.mark.parametrize(("name", "limit"), [("presence", 0), ("presence", 0.02), ("k_map", 0.02)])
def test_population_criteria_publish_duckdbs_release(
    compared: Backend, duckdb: Backend, name: str, limit: float
) -> None:
    """delta-presence, and k-map counted in the population, over a research subset: the search's nodes (the
    population read from a cube of its own), the node published by the journalist's publisher payout (the
    population's classes grouped per batch), its suppressed rows and the audit's figure (the population read
    through the published labels), as on DuckDB; `audit` of the written table finds the node from its labels and
    the same figures."""
    qis = ["sex", "race", "marital-status", "age"]
    spec = POPULATION_CRITERIA[name]
    found = []
    for backend in (compared, duckdb):
        job = reclassified(
            backend.job(qis, output={"table": backend.table(f"{name}_{int(limit * 100)}")}),
            criteria=criteria_from_config(spec),
            suppression=Suppression(limit),
            subset=Subset(column="in_study"),
            select=Selection(None, "publisher_payout", attacker="journalist"),  # counted in the population too
        )
        study = _study(backend, f"adult_study_{name}_{int(limit * 100)}")
        job = dataclasses.replace(job, source=dataclasses.replace(job.source, table=study))
        result = anonymize(job, backend.options, replace=True)
        assert result.audit.ok
        if name == "presence" and limit:  # one case (Spark's audit takes 7 s): the node found from the table's labels
            assert job.output is not None
            again = audit(job, job.output.table, job.output.schema or job.source.schema, backend.options)
            assert again.to_dict() == {**result.audit.to_dict(), "population_node": list(result.node)}
        found.append(
            (
                result.search.rows,
                result.node,
                sorted(result.search.satisfying),
                result.suppressed,
                result.audit.to_dict(),
                round(result.search.metrics[result.node]["publisher_payout"], 6),
            )
        )
    assert found[0] == found[1]


def test_analysis_with_suppression_equals_duckdbs(compared: Backend, duckdb: Backend) -> None:
    """A node's attacks, risk, utility and Bayes audit with its suppressed classes left out: DuckDB's figures (on
    PostgreSQL the Bayes audit's joins of eight-column intermediate results once nested loops for minutes)."""
    changes = {"sensitive": ["occupation"], "suppression": Suppression(0.05)}
    qis = ["sex", "age", "race", "marital-status"]
    found = analyze(reclassified(compared.job(qis, k=20), **changes), compared.options, node=(0, 1, 0, 0))
    expected = analyze(reclassified(duckdb.job(qis, k=20), **changes), node=(0, 1, 0, 0))
    [table], [reference] = found.tables, expected.tables
    assert reference.suppressed > 0 and reference.bayes["positive_disclosure_tuples"] > 0
    found_figures, expected_figures = _flat(table.to_dict()), _flat(reference.to_dict())
    assert found_figures.keys() == expected_figures.keys()
    for key, value in expected_figures.items():
        assert found_figures[key] == (pytest.approx(value) if isinstance(value, float) else value), key


def test_analysis_of_a_published_table_equals_duckdbs(compared: Backend, duckdb: Backend) -> None:
    """`analyze --table`: the attacks and risk of a table already published, read as it is: DuckDB's figures."""
    figures = []
    for side in (compared, duckdb):
        job = reclassified(side.job(k=5, output={"table": side.table("analyzed_anon")}), sensitive=["occupation"])
        anonymize(job, side.options, replace=True)
        report = analyze_table(job, side.table("analyzed_anon"), side.schema, side.options)
        figures.append(_flat(report.tables[0].to_dict()))
    found, expected = figures
    assert found.keys() == expected.keys() and expected["rows"] == 30162
    for key, value in expected.items():
        if key != "label":
            assert found[key] == (pytest.approx(value) if isinstance(value, float) else value), key


def test_report_lists_duckdbs_releases(backend: Backend, duckdb: Backend, tmp_path: Path) -> None:
    """`report`: one page naming every minimal release the search finds on DuckDB, and showing the chosen
    release as DuckDB shows it (with 2% suppressed: its class sizes, least diverse classes, and each attribute
    before and after)."""
    job = reclassified(backend.job(k=5), sensitive=["occupation"])
    page = report(job, tmp_path / f"{backend.name}.html", backend.options).read_text()
    minimal = search(reclassified(duckdb.job(k=5), sensitive=["occupation"])).minimal
    assert minimal and all(node_label(node) in page for node in minimal)
    suppressing = {"sensitive": ["occupation"], "suppression": Suppression(0.02)}
    shown = [chosen_release(reclassified(b.job(k=5), **suppressing), b.options) for b in (backend, duckdb)]
    assert shown[0] == shown[1]


def test_inference_across_releases_or_says_why_not(backend: Backend) -> None:
    """Inference across two bucketized releases of the republishing example: the paper's positive disclosures;
    where tables cannot be written in one transaction, the one-line refusal."""
    config = example_config(backend.url, ["d1", "d2"], backend.schema, table=backend.table("inferred"))
    job = job_from_dict(config)
    if not backend.transactions:
        with pytest.raises(ConfigError, match="inference across releases is not available on"):
            inference(job, backend.options)
        return
    write_example(backend.url, backend.schema)
    found = inference(job, backend.options, replace=True)
    assert {(d["pseudonym"], d["value"]) for d in found.positive} == {
        ("10", "Lung Cancer"),
        ("7", "Diabetes"),
        ("13", "Diabetes"),
    }
    rows = backend.as_owner(f"SELECT pid, disease, probability FROM {{schema}}{backend.table('inferred')}")
    p = {(str(pid), disease): float(value) for pid, disease, value in rows}
    assert p[("14", "Flu")] == pytest.approx(0, abs=1e-6) and p[("11", "Pneumonia")] == pytest.approx(0.5)
    anatomy = {key: config[key] for key in ("source", "quasi_identifiers", "sensitive", "identifying")}
    anatomy["output"] = {"table": backend.table("patients_qi"), "method": "anatomy", "l": 2}
    published = bucketize(job_from_dict(anatomy), backend.options, replace=True)
    assert published.rows == 12 and published.fewest_values >= 2


def _flat(figures: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A report's nested figures as one level of dotted keys (floats compared approximately)."""
    flat: dict[str, Any] = {}
    for key, value in figures.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def test_outputs_are_refused_or_replaced_only_when_sqlanons_own(backend: Backend) -> None:
    """An output that exists is refused without --replace, replaced with it when sqlanon wrote it (told by its
    own records, or on Spark by the token in its table comment), and never replaced when someone else made it."""
    job = backend.job(["sex", "race"], output={"table": backend.table("own_output")})
    assert anonymize(job, backend.options).audit.ok
    with pytest.raises(DataError, match="already exists"):
        anonymize(job, backend.options)
    assert anonymize(job, backend.options, replace=True).audit.ok
    foreign = backend.table("not_sqlanons")
    backend.as_owner(f"CREATE TABLE {{schema}}{foreign} {{using}} AS SELECT 1 AS a")
    with pytest.raises(DataError, match="not written by sqlanon"):
        anonymize(backend.job(["sex", "race"], output={"table": foreign}), backend.options, replace=True)
    assert [tuple(row) for row in backend.as_owner(f"SELECT a FROM {{schema}}{foreign}")] == [(1,)]


def _random_rows(seed: int) -> list[tuple]:
    rng = random.Random(seed)
    return [
        (
            rng.choice(["v0", "v1", "v2", "v3"]),
            rng.choice(["w0", "w1", "w2"]),
            rng.choice("abcd"),
            rng.choice("xy"),
            rng.randint(1, 4),
        )
        for _ in range(rng.randint(8, 40))
    ]


def _random_job(
    tmp: Path, url: str, table: str, rows: list[tuple], spec: dict, limit: int, schema: str | None = None
) -> Job:
    (tmp / "data.csv").write_text("p,q,occupation,extra,cost\n" + "\n".join(",".join(map(str, r)) for r in rows))
    (tmp / "p.csv").write_text("v0;A;*\nv1;A;*\nv2;B;*\nv3;B;*\n")
    (tmp / "q.csv").write_text("w0;*\nw1;*\nw2;*\n")
    (tmp / "occ.csv").write_text("a;G1;*\nb;G1;*\nc;G2;*\nd;G2;*\n")
    return job_from_dict(
        {
            "source": {"url": url, "table": table, "csv": "data.csv", **({"schema": schema} if schema else {})},
            "quasi_identifiers": {"p": "p.csv", "q": "q.csv"},
            "criteria": spec,
            "insensitive": [c for c in ("occupation", "extra", "cost") if c not in _named(spec)],
            "suppression": {"limit": limit},
        },
        tmp,
    )


@pytest.mark.parametrize("case", range(len(RANDOM_CASES)))
def test_random_tables_equal_duckdb(compared: Backend, tmp_path: Path, case: int) -> None:
    """Every criterion of the random-table cases, on a seeded random table, with and without suppression."""
    spec, rows = RANDOM_CASES[case], _random_rows(case)
    distinct = {"occupation": len({r[2] for r in rows}), "extra": len({r[3] for r in rows})}
    if any(
        p.get("l", 1) > min(distinct[a] for a in p.get("attributes", [p.get("attribute")]) if a in distinct)
        for p in spec.values()
        if "l" in p
    ):
        rows = rows + [("v0", "w0", v, e, 1) for v in "abcd" for e in "xy"]  # every value, so l is possible
    limit = case % 3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # don't-care values absent from a small random table
        table = compared.table(f"random_{case}")
        found = search(_random_job(tmp_path, compared.url, table, rows, spec, limit, compared.schema), compared.options)
        duck = search(_random_job(tmp_path, f"duckdb:///{tmp_path / 'r.duckdb'}", "t", rows, spec, limit))
    assert found.satisfying == duck.satisfying and found.minimal == duck.minimal


def test_hostile_identifiers_are_quoted_not_injected(backend: Backend) -> None:
    """Table and column names with quotes, semicolons and comment marks are plain names on every backend: the
    source is read, the output is written under its own name, nothing else is touched. Spark's catalog takes
    letters, digits and _ only in table names (and Parquet no space or semicolon in column names): there the
    column is the hostile name, and a hostile output name is refused before anything is written."""
    spark = backend.name == "spark"
    table = backend.table("weird" if spark else 'we"ird; DROP TABLE adult; --')
    output = backend.table("out" if spark else "o'ut\"; --")
    column = "a'ge`\"--" if spark else "a'ge\"; --"
    backend.as_owner(
        f"CREATE TABLE {{schema}}{backend.quote(table)} {{using}} AS SELECT sex, age AS {backend.quote(column)}, race "
        "FROM {schema}adult"
    )
    job = dataclasses.replace(
        backend.job(["sex", "race"], k=5, table=table, output={"table": output}), insensitive=[column]
    )
    assert anonymize(job, backend.options).audit.ok
    assert [tuple(r) for r in backend.as_owner(f"SELECT COUNT(*) FROM {{schema}}{backend.quote(output)}")] == [(30162,)]
    assert [tuple(r) for r in backend.as_owner("SELECT COUNT(*) FROM {schema}adult")] == [(30162,)]
    if spark:
        hostile = dataclasses.replace(job, output=dataclasses.replace(job.output, table="o'ut; --"))
        with pytest.raises(ConfigError, match="output table \"o'ut; --\" is not a name Spark's catalog takes"):
            anonymize(hostile, backend.options)
