"""The verbs every backend supports, run the same way on each (DuckDB, PostgreSQL, Spark) through one `backend`
fixture: the same answers as DuckDB's; where a backend lacks a verb, the one-line error it gives instead."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import sqlalchemy as sa

from sqlanon import RunOptions, anonymize, audit, job_from_dict, search
from sqlanon.errors import ConfigError
from sqlanon.model.job import Job

from .conftest import ADULT_DIR, adult_config, adult_job

QIS = ["sex", "race", "marital-status"]


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


@pytest.fixture(
    params=[
        "duckdb",
        pytest.param("postgresql", marks=pytest.mark.postgres),
        pytest.param("spark", marks=pytest.mark.spark),
    ]
)
def backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "postgresql":
        found: Backend = request.getfixturevalue("postgres_adult")
        return found
    if request.param == "spark":
        return Backend("spark", request.getfixturevalue("spark_adult"), None, RunOptions(), transactions=False)
    return Backend("duckdb", request.getfixturevalue("adult_duck"), None, RunOptions(), transactions=True)


@pytest.fixture
def duckdb(adult_duck: str) -> Backend:
    """The reference every backend is compared with."""
    return Backend("duckdb", adult_duck, None, RunOptions(), transactions=True)


def test_search_finds_duckdbs_nodes(backend: Backend, duckdb: Backend) -> None:
    found = search(backend.job(), backend.options)
    expected = search(duckdb.job())
    assert (found.satisfying, found.minimal) == (expected.satisfying, expected.minimal)


def test_anonymize_publishes_duckdbs_node_audited(backend: Backend, duckdb: Backend) -> None:
    output = {"table": f"shared_anon_{backend.name}"}
    published = anonymize(backend.job(output=output), backend.options, replace=True)
    expected = anonymize(duckdb.job(output={"table": "shared_anon_reference"}), replace=True)
    assert published.node == expected.node and published.audit.ok
    assert published.audit.rows == expected.audit.rows and published.audit.classes == expected.audit.classes


def test_audit_of_the_source_agrees(backend: Backend, duckdb: Backend) -> None:
    found = audit(backend.job(k=2), "adult", backend.schema, backend.options)
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
    job = job_from_dict(config, ADULT_DIR)
    if not backend.transactions:
        with pytest.raises(ConfigError, match="Mondrian partitioning is not available on"):
            anonymize(job, backend.options, replace=True)
        return
    report = anonymize(job, backend.options, replace=True)
    assert report.audit.ok and report.rows == 30162


def test_anatomy_bucketizes_or_says_why_not(backend: Backend) -> None:
    config = backend.config(
        [], output={"table": f"shared_anatomy_{backend.name}", "method": "anatomy", "l": 2}, sensitive=["occupation"]
    )
    config["quasi_identifiers"] = ["age", "sex"]
    config["insensitive"] = [c for c in config["insensitive"] if c not in ("age", "sex", "occupation")]
    del config["criteria"]
    job = job_from_dict(config, ADULT_DIR)
    if not backend.transactions:
        with pytest.raises(ConfigError, match="an anatomy publication is not available on"):
            anonymize(job, backend.options, replace=True)
        return
    report = anonymize(job, backend.options, replace=True)
    assert report.rows == 30162 and report.l == 2 and report.fewest_values >= 2
