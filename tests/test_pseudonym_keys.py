"""No key material in any statement, parameter, log or plan (issue: the HMAC pads were bound parameters, so a
server logging statements with their parameters held them, and one XOR gives the key back).

Every publication method pseudonymizes a column with a key; meanwhile every statement and parameter any engine
of the process sends is captured, PostgreSQL logs every statement with its parameters (and auto_explain its plan),
DuckDB logs every query to files, and Spark's SQL executions (what its UI shows) are read afterwards. None holds
the key, its pads, or their hex, base64 or bytea spellings; and the pseudonyms are HMAC-SHA256 of the values.
"""

from __future__ import annotations

import base64
import glob
import hashlib
import hmac
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.pool import Pool

from sqlanon import RunOptions, anonymize, bucketize, partition
from sqlanon.config import job_from_dict
from sqlanon.publish.identifiers import hmac_pads

from .conftest import ADULT_DIR, adult_config

KEY_ENV = "SQLANON_TEST_PSEUDONYM_KEY"


def _spellings(key: bytes) -> set[str]:
    """Every way the key or its pads could be written out in a log or plan (lower case: the search is too)."""
    found = set()
    for secret in (key, *hmac_pads(key)):
        found |= {secret.hex(), base64.b64encode(secret).decode().lower(), f"\\x{secret.hex()}"}
    found.add(key.decode().lower())
    return found


@pytest.fixture
def key(monkeypatch) -> bytes:
    value = secrets.token_hex(16)  # 32 characters: the key's text, as the environment gives it
    monkeypatch.setenv(KEY_ENV, value)
    return value.encode()


@pytest.fixture
def sent() -> Iterator[list[str]]:
    """Every statement and its parameters, as sent through SQLAlchemy by any engine of this process."""
    captured: list[str] = []

    def capture(conn, cursor, statement, parameters, context, executemany) -> None:
        captured.append(f"{statement} {parameters!r}")
        if parameters:
            values = parameters.values() if isinstance(parameters, dict) else parameters
            captured.extend(v.hex() for v in values if isinstance(v, (bytes, bytearray, memoryview)))

    event.listen(sa.engine.Engine, "before_cursor_execute", capture)
    yield captured
    event.remove(sa.engine.Engine, "before_cursor_execute", capture)


def _people_job(url: str, method: str, schema: str | None = None) -> Any:
    """Adult with a person number, pseudonymized, published by `method` (generalize, mondrian or anatomy)."""
    qis = ["sex", "race", "marital-status"]
    output: dict[str, Any] = {"table": f"people_{method}"}
    extra: dict[str, Any] = {"identifying": {"person_id": {"pseudonym": {"key_env": KEY_ENV}}}}
    if method == "mondrian":
        output["method"] = "mondrian"
    if method == "anatomy":
        output.update(method="anatomy", l=2)
        extra["sensitive"] = ["occupation"]
    if schema:
        extra["schema"] = schema
    config = adult_config(url, qis, k=5, load_csv=False, table="people", output=output, **extra)
    if method == "anatomy":  # exact QIs, l values per bucket: no hierarchy, no criteria
        config.update(quasi_identifiers=qis)
        del config["criteria"]
    return job_from_dict(config, ADULT_DIR)


def _check_pseudonyms(engine: sa.Engine, table: str, key: bytes) -> None:
    """The published pseudonyms are HMAC-SHA256(key, the person number as text) of the source's rows."""
    with engine.connect() as conn:
        published = set(conn.execute(sa.text(f"SELECT person_id FROM {table}")).scalars())
    expected = {hmac.new(key, str(n).encode(), hashlib.sha256).hexdigest() for n in range(1, 30163)}
    assert published == expected


def _assert_clean(text: str, key: bytes, where: str) -> None:
    lowered = text.lower()
    leaked = [s for s in _spellings(key) if s in lowered]
    assert not leaked, f"{where} holds key material ({len(leaked)} spelling(s))"


def test_duckdb_statements_and_query_log_hold_no_key(tmp_path: Path, key: bytes, sent: list[str]):
    url = f"duckdb:///{tmp_path / 'people.duckdb'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE TABLE adult AS SELECT * FROM read_csv('{ADULT_DIR / 'adult.csv.gz'}', delim = ';')"
        )
        conn.exec_driver_sql(
            "CREATE TABLE people AS SELECT CAST(ROW_NUMBER() OVER () AS INTEGER) AS person_id, * FROM adult"
        )
    logs = tmp_path / "duckdb_logs"
    logs.mkdir()

    def log_queries(dbapi_connection, _record) -> None:  # every connection of the process to any DuckDB file
        if type(dbapi_connection).__module__.startswith("duckdb"):
            dbapi_connection.execute(f"CALL enable_logging(level = 'trace', storage = 'file', storage_path = '{logs}')")

    event.listen(Pool, "connect", log_queries)
    try:
        anonymize(_people_job(url, "generalize"))
        partition(_people_job(url, "mondrian"))
        bucketize(_people_job(url, "anatomy"))
    finally:
        event.remove(Pool, "connect", log_queries)
    written = "\n".join(Path(f).read_text() for f in glob.glob(str(logs / "*.csv")))
    assert "CREATE TABLE" in written.upper()  # the log is on
    _assert_clean(written, key, "DuckDB's query log")
    _assert_clean("\n".join(sent), key, "a statement or its parameters")
    for method in ("generalize", "mondrian", "anatomy"):
        _check_pseudonyms(engine, f"people_{method}", key)
    engine.dispose()


def _server_log(conn: sa.Connection) -> Path | None:
    """The server's log file (the logging collector's, or Debian's pg_ctlcluster file), where this process may
    read it."""
    current = conn.execute(sa.text("SELECT pg_current_logfile()")).scalar()
    if current:
        data = conn.execute(sa.text("SHOW data_directory")).scalar_one()
        path = Path(current) if os.path.isabs(current) else Path(data) / current
        return path if os.access(path, os.R_OK) else None
    version = conn.execute(sa.text("SELECT current_setting('server_version_num')::int / 10000")).scalar_one()
    found = sorted(glob.glob(f"/var/log/postgresql/postgresql-{version}-*.log"), key=os.path.getmtime)
    return Path(found[-1]) if found and os.access(found[-1], os.R_OK) else None


#: what a DBA's server may log: every statement, every duration with its parameters, every plan
LOG_EVERYTHING = (
    "-c log_statement=all -c log_min_duration_statement=0 -c log_parameter_max_length=-1 "
    "-c log_parameter_max_length_on_error=-1 -c session_preload_libraries=auto_explain "
    "-c auto_explain.log_min_duration=0 -c auto_explain.log_verbose=on "
    "-c auto_explain.log_nested_statements=on"
)


def test_postgresql_logging_every_statement_parameter_and_plan_holds_no_key(
    pg_server: str, pg_schema: str, key: bytes, sent: list[str]
):
    engine = sa.create_engine(pg_server)
    with engine.connect() as conn:
        log = _server_log(conn)
    if log is None:
        message = "the PostgreSQL server's log file is not readable here (pg_current_logfile, /var/log/postgresql)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from sqlanon import search

    search(
        job_from_dict(adult_config(pg_server, ["sex"], k=1, schema=pg_schema), ADULT_DIR),
        RunOptions(metadata_schema=f"{pg_schema}_meta"),
    )  # loads adult into the test's schema
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f'CREATE TABLE "{pg_schema}".people AS SELECT CAST(ROW_NUMBER() OVER () AS INTEGER) '
            f'AS person_id, t.* FROM "{pg_schema}".adult t'
        )
    logged = sa.engine.make_url(pg_server).update_query_dict({"options": LOG_EVERYTHING})
    url = logged.render_as_string(hide_password=False)
    start = log.stat().st_size
    options = RunOptions(metadata_schema=f"{pg_schema}_meta")
    anonymize(_people_job(url, "generalize", pg_schema), options)
    partition(_people_job(url, "mondrian", pg_schema), options)
    bucketize(_people_job(url, "anatomy", pg_schema), options)
    with open(log, "rb") as fh:
        fh.seek(start)
        written = fh.read().decode(errors="replace")
    assert "people_generalize" in written and "Query Text" in written  # statements and plans were logged
    _assert_clean(written, key, "the server log")
    _assert_clean("\n".join(sent), key, "a statement or its parameters")
    for method in ("generalize", "mondrian", "anatomy"):
        _check_pseudonyms(engine, f'"{pg_schema}".people_{method}', key)
    engine.dispose()


def test_spark_statements_plans_and_ui_hold_no_key(spark_adult: str, key: bytes, sent: list[str]):
    from sqlanon.backends.spark_dbapi import session_for

    spark = session_for("local[2]")
    spark.sql("DROP TABLE IF EXISTS people")
    spark.sql(
        "CREATE TABLE people USING parquet AS SELECT CAST(ROW_NUMBER() OVER (ORDER BY age, sex, race, "
        "`marital-status`, education, `native-country`, workclass, occupation, `salary-class`) AS INT) "
        "AS person_id, * FROM adult"
    )
    store = spark._jsparkSession.sharedState().statusStore()

    def executions() -> list:
        """The executions the UI keeps (the latest spark.sql.ui.retainedExecutions: counted by id, not position)."""
        kept = store.executionsList()
        return [kept.apply(i) for i in range(kept.size())]

    before = max((e.executionId() for e in executions()), default=-1)
    try:
        job = _people_job(spark_adult, "generalize")
        anonymize(job, replace=True)
        shown = [e for e in executions() if e.executionId() > before]
        plans = "\n".join(f"{e.description()}\n{e.details()}\n{e.physicalPlanDescription()}" for e in shown)
        assert "people_generalize" in plans.lower()  # the publication's statements are among them
        _assert_clean(plans, key, "Spark's SQL executions (plans, descriptions)")
        _assert_clean("\n".join(sent), key, "a statement or its parameters")
        published = {r[0] for r in spark.sql("SELECT person_id FROM people_generalize").collect()}
        numbers = {r[0] for r in spark.sql("SELECT person_id FROM people").collect()}
        assert published == {hmac.new(key, str(n).encode(), hashlib.sha256).hexdigest() for n in numbers}
    finally:
        spark.sql("DROP TABLE IF EXISTS people")
        spark.sql("DROP TABLE IF EXISTS people_generalize")


@pytest.mark.postgres
def test_a_key_the_database_holds_pseudonymizes_a_job_run_from_sql_and_no_runner_reads_it(
    runner, pg_server: str, pg_schema: str, key: bytes, sent: list[str]
):
    """`sqlanon key create` as the DBA (statements and plans logged): a runner's registered job pseudonymizes
    from SQL with it (CALL run_job, no key in any environment), the pseudonyms are HMAC-SHA256 with that key, and
    the runner reads neither the key table nor a key made for another role; no log or statement holds the key."""
    from sqlanon.api import create_key

    from .conftest import RUNNER
    from .test_jobs import register_from_sql

    url, out, _ = runner
    meta = f"{pg_schema}_meta"
    admin = sa.create_engine(pg_server)
    with admin.begin() as conn:
        conn.exec_driver_sql(
            f'CREATE TABLE "{pg_schema}".people AS SELECT CAST(ROW_NUMBER() OVER () AS INTEGER) '
            f'AS person_id, t.* FROM "{pg_schema}".adult t'
        )
        conn.exec_driver_sql(f'GRANT SELECT ON "{pg_schema}".people TO "{RUNNER}"')
        log = _server_log(conn)
    start = log.stat().st_size if log else 0
    logged = sa.engine.make_url(pg_server).update_query_dict({"options": LOG_EVERYTHING})
    create_key("census", logged.render_as_string(hide_password=False), [RUNNER], key, meta)
    create_key("theirs", pg_server, ["postgres"], metadata_schema=meta)  # a random key, for another role
    identifying = {"person_id": {"pseudonym": {"key_name": "census"}}}
    config = adult_config(
        "ignored",
        ["sex", "race", "marital-status"],
        k=5,
        load_csv=False,
        table="people",
        schema=pg_schema,
        identifying=identifying,
        output={"table": "people_held", "schema": out},
    )
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        register_from_sql(conn, meta, "held", config)
        result = conn.execute(sa.text(f'CALL "{meta}".run_job(job => CAST(:j AS text))'), {"j": "held"}).scalar_one()
        conn.commit()
        for attempt, refusal in (
            (f'SELECT * FROM "{meta}".pseudonym_keys', "permission denied"),
            (f'SELECT * FROM "{meta}".pseudonym_keys_list()', "permission denied"),
            (f"SELECT \"{meta}\".pseudonym('theirs', '1')", "pseudonym key theirs is not one of this role's"),
        ):
            with pytest.raises(sa.exc.DBAPIError, match=refusal):
                conn.exec_driver_sql(attempt)
            conn.rollback()
    engine.dispose()
    assert result["audit"]["k_anonymity"]["holds"]
    _check_pseudonyms(admin, f'"{out}".people_held', key)
    admin.dispose()
    _assert_clean("\n".join(sent), key, "a statement or its parameters")
    if log is not None:
        with open(log, "rb") as fh:
            fh.seek(start)
            written = fh.read().decode(errors="replace")
        assert "pseudonym_key_store" in written  # the creation's statements were logged
        _assert_clean(written, key, "the server log")
    elif os.environ.get("CI"):
        pytest.fail("the PostgreSQL server's log file is not readable here")


def test_a_key_the_duckdb_file_holds_gives_the_pseudonyms_of_the_same_key_from_the_environment(
    tmp_path: Path, key: bytes
):
    from sqlanon.api import create_key, list_keys
    from sqlanon.errors import ConfigError

    url = f"duckdb:///{tmp_path / 'people.duckdb'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE people AS SELECT CAST(ROW_NUMBER() OVER () AS INTEGER) AS person_id, * FROM "
            f"read_csv('{ADULT_DIR / 'adult.csv.gz'}', delim = ';')"
        )
    engine.dispose()
    held = job_from_dict(
        adult_config(
            url,
            ["sex", "race"],
            load_csv=False,
            table="people",
            identifying={"person_id": {"pseudonym": {"key_name": "census"}}},
            output={"table": "people_generalize"},
        ),
        ADULT_DIR,
    )
    with pytest.raises(ConfigError, match="the database holds no pseudonym key 'census'"):
        anonymize(held)
    create_key("census", url, key=key)
    with pytest.raises(ConfigError, match="already holds a pseudonym key 'census'"):
        create_key("census", url)
    assert [k["name"] for k in list_keys(url)] == ["census"] and "inner_pad" not in list_keys(url)[0]
    anonymize(held)
    engine = sa.create_engine(url)
    _check_pseudonyms(engine, "people_generalize", key)
    engine.dispose()
