"""Warehouse roles on PostgreSQL: a runner with SELECT on the source only, readers of the output."""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from sqlanon import RunOptions, anonymize, search
from sqlanon.errors import ConfigError, DataError

from .conftest import adult_job

pytestmark = pytest.mark.postgres
QIS = ["sex", "race", "marital-status"]


@pytest.fixture
def warehouse(pg_server: str, pg_schema: str):
    """Source schema (Adult, loaded by the superuser), an output schema and a metadata schema owned by a
    plain login role that may only read the source; a reader role with no privileges; a role with none."""
    suffix = uuid.uuid4().hex[:8]
    runner, reader, stranger = f"runner_{suffix}", f"reader_{suffix}", f"stranger_{suffix}"
    out, meta = f"out_{suffix}", f"meta_{suffix}"
    search(adult_job(pg_server, ["sex"], k=1, schema=pg_schema), RunOptions(metadata_schema=f"{pg_schema}_meta"))
    engine = sa.create_engine(pg_server)
    with engine.begin() as conn:
        for statement in (
            f'CREATE ROLE "{runner}" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE',
            f'CREATE ROLE "{reader}" NOLOGIN',
            f'CREATE ROLE "{stranger}" LOGIN',
            f'GRANT USAGE ON SCHEMA "{pg_schema}" TO "{runner}", "{stranger}"',
            f'GRANT SELECT ON "{pg_schema}".adult TO "{runner}"',
            f'CREATE SCHEMA "{out}" AUTHORIZATION "{runner}"',
            f'CREATE SCHEMA "{meta}" AUTHORIZATION "{runner}"',
            f'GRANT USAGE ON SCHEMA "{out}" TO "{reader}"',
        ):
            conn.exec_driver_sql(statement)
    url = make_url(pg_server)
    yield {
        "schema": pg_schema,
        "out": out,
        "meta": meta,
        "runner": runner,
        "reader": reader,
        "runner_url": url.set(username=runner).render_as_string(hide_password=False),
        "stranger_url": url.set(username=stranger).render_as_string(hide_password=False),
        "admin": pg_server,
    }
    with engine.begin() as conn:
        conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{out}" CASCADE')
        conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{meta}" CASCADE')
        for role in (runner, reader, stranger):
            conn.exec_driver_sql(f'DROP OWNED BY "{role}" CASCADE')
            conn.exec_driver_sql(f'DROP ROLE "{role}"')
    engine.dispose()


def test_a_plain_role_anonymizes_into_another_schema_and_grants_readers(warehouse):
    w = warehouse
    job = adult_job(
        w["runner_url"],
        QIS,
        k=5,
        load_csv=False,
        schema=w["schema"],
        output={"table": "adult_pub", "schema": w["out"], "grant_to": [w["reader"]]},
    )
    result = anonymize(job, RunOptions(metadata_schema=w["meta"]))
    assert result.audit.ok
    engine = sa.create_engine(w["admin"])
    with engine.connect() as conn:
        can = conn.execute(
            sa.text("SELECT has_table_privilege(:r, :out, 'SELECT'), has_table_privilege(:r, :src, 'SELECT')"),
            {"r": w["reader"], "out": f'"{w["out"]}".adult_pub', "src": f'"{w["schema"]}".adult'},
        ).one()
        leftovers = conn.execute(
            sa.text(
                "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = :m "
                "AND (table_name LIKE 'dim%' OR table_name LIKE 'parents%')"
            ),
            {"m": w["meta"]},
        ).scalar_one()
    engine.dispose()
    assert tuple(can) == (True, False)  # the reader sees the output, not the source
    assert leftovers == 0  # scratch, dimension and parent-code tables are gone after the run


def test_a_role_without_select_on_the_source_gets_a_clear_error(warehouse):
    w = warehouse
    job = adult_job(w["stranger_url"], QIS, k=5, load_csv=False, schema=w["schema"])
    with pytest.raises(DataError, match=r"may not read table .*adult.*GRANT SELECT ON"):
        search(job, RunOptions(metadata_schema=w["meta"]))


def test_grants_need_postgresql(duck_url: str):
    job = adult_job(duck_url, ["sex"], k=2, output={"table": "o", "grant_to": "reader"})
    with pytest.raises(ConfigError, match="grant_to needs PostgreSQL"):
        anonymize(job)
