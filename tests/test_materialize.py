"""Materialization is all or nothing, and the audit has the last word."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from sqlanon import anonymize
from sqlanon.backends import open_database
from sqlanon.engine.audit import AuditReport, CriterionAudit, PublishedClasses
from sqlanon.errors import AuditError
from sqlanon.publish.ownership import Ownership, TableName
from sqlanon.publish.staging import Destination, staged_table

from .conftest import ADULT_DIR, adult_job, user_tables


def _failing_audit(*args, **kwargs) -> AuditReport:
    failing = CriterionAudit(
        params={"k": 5}, figure_name="min_class_size", figure=1.0, holds=False, violating_classes=1, violating_tuples=1
    )
    return AuditReport(rows=30162, classes=1, min_class_size=1, criteria={"k_anonymity": failing})


def test_failed_audit_writes_nothing(duck_url: str, monkeypatch):
    job = adult_job(duck_url, ["sex", "race"], k=5, output={"table": "adult_anon"})
    monkeypatch.setattr(PublishedClasses, "audit", _failing_audit)
    with pytest.raises(AuditError, match="failed its audit"):
        anonymize(job)
    assert {t for _, t in user_tables(duck_url)} == {"adult"}  # no output, no temporary table


def test_failed_audit_keeps_the_existing_output(duck_url: str, monkeypatch):
    job = adult_job(duck_url, ["sex", "race"], k=5, output={"table": "adult_anon"})
    first = anonymize(job)
    monkeypatch.setattr(PublishedClasses, "audit", _failing_audit)
    with pytest.raises(AuditError):
        anonymize(job, replace=True)
    engine = sa.create_engine(duck_url)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT COUNT(*) FROM adult_anon").scalar_one() == first.audit.rows
        status = conn.exec_driver_sql("SELECT status, error FROM sqlanon.runs ORDER BY run_id DESC LIMIT 1").one()
    engine.dispose()
    assert status[0] == "failed" and "audit" in status[1]


def test_generalized_values_come_from_the_hierarchy(duck_url: str):
    job = adult_job(duck_url, ["sex", "age"], k=50, output={"table": "out"})
    result = anonymize(job)
    engine = sa.create_engine(duck_url)
    with engine.connect() as conn:
        ages = set(conn.exec_driver_sql("SELECT DISTINCT age FROM out").scalars())
        attrs = conn.exec_driver_sql(
            "SELECT column_name, height FROM sqlanon.run_attributes WHERE run_id = ? ORDER BY attr",
            (result.search.run_id,),
        ).all()
    engine.dispose()
    level = result.node[1]
    expected = {
        line.split(";")[level] for line in (ADULT_DIR / "hierarchies" / "age.csv").read_text().splitlines() if line
    }
    assert ages <= expected
    assert attrs == [("sex", 1), ("age", 4)]


def test_an_output_nobody_audited_is_not_published(duck_url: str):
    """Every method writes through staged_table: a table its method did not audit is neither kept nor recorded."""
    anonymize(adult_job(duck_url, ["sex", "race"], k=5, output={"table": "adult_anon"}))  # the source, the store
    db = open_database(duck_url)
    try:
        source = TableName("main", "adult")
        destination = Destination(name=TableName("main", "unaudited"), source=source, replace=False)
        with db.connect() as conn, pytest.raises(AssertionError, match="not audited"), conn.begin():
            ownership = Ownership(db, "sqlanon")
            with staged_table(
                db, conn, destination=destination, select="SELECT * FROM adult", ownership=ownership, run_id=1
            ):
                pass  # no audit
    finally:
        db.dispose()
    assert {t for _, t in user_tables(duck_url)} == {"adult", "adult_anon"}


@pytest.mark.parametrize(
    "written, stray",
    [
        ([(1, "x"), (None, "y")], 0),  # a part of the source, NULL as the source holds it
        ([(1, "x"), (1, "x")], 0),  # as often as the source
        ([(1, "x"), (1, "x"), (1, "x")], 1),  # once more than the source
        ([(2, "x"), (None, None), (None, "y"), (None, "y")], 3),  # unknown rows, a NULL row, a row twice
    ],
)
def test_published_values_come_from_the_source(duck_url: str, written: list, stray: int):
    """A written table holding part of the source (suppressed rows removed) publishes no row more often than the
    source holds it; a stray row fails the audit and names how many."""
    from sqlanon.engine.audit import check_published_values

    source = [(1, "x"), (1, "x"), (None, "y"), (3, "z")]
    db = open_database(duck_url)
    with db.engine.begin() as conn:
        for table, rows in (("src", source), ("written", written)):
            conn.exec_driver_sql(f"CREATE TABLE {table} (a INTEGER, b VARCHAR)")
            for row in rows:
                conn.exec_driver_sql(f"INSERT INTO {table} VALUES (?, ?)", row)
        check = lambda: check_published_values(  # noqa: E731
            db, conn, "written", "written", "src", [("a", "t.a"), ("b", "t.b")], every_row=False
        )
        if stray:
            with pytest.raises(AuditError, match=f"publishes {stray} row"):
                check()
        else:
            check()
    db.engine.dispose()


@pytest.mark.parametrize(
    "method",
    [
        {"method": "generalize"},
        {"method": "mondrian"},
        {"method": "anatomy", "l": 2},
    ],
)
def test_others_drop_leaves_every_unnamed_column_out_and_says_which(duck_url: str, method: dict):
    """A wide table need not list every column: `others: drop` publishes the columns with a role only, by every
    method, and warns with the list of those left out."""
    from sqlanon import job_from_dict

    from .conftest import adult_config

    config = adult_config(duck_url, ["sex", "age"], sensitive=["occupation"])
    config.pop("insensitive")
    config.update(others="drop", output={"table": "adult_out", **method})
    if method["method"] == "anatomy":  # exact QIs, l-diverse buckets: no hierarchy, no criteria
        config.update(quasi_identifiers={"sex": None, "age": None})
        config.pop("criteria")
    left_out = "race, marital-status, education, native-country, workclass, salary-class"
    with pytest.warns(UserWarning, match=f"others: drop leaves 6 column\\(s\\) of table 'adult' .*: {left_out}"):
        anonymize(job_from_dict(config, ADULT_DIR))
    engine = sa.create_engine(duck_url)
    with engine.connect() as conn:
        columns = list(conn.exec_driver_sql("SELECT * FROM adult_out LIMIT 0").keys())
    engine.dispose()
    expected = {"generalize": ["sex", "age", "occupation"], "mondrian": ["sex", "age", "occupation"]}
    assert columns == expected.get(method["method"], ["sex", "age", "bucket"])
