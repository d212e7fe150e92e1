"""The metadata schema: versioned, idempotent, reversible, on both databases."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from sqlanon.backends import open_database
from sqlanon.cli import main
from sqlanon.store.migrate import current_version, downgrade, head_revision, migrate

from .conftest import METADATA_TABLES, metadata_tables

KEYS = {"pseudonym_keys"}  # revision 0014's
LEDGER = {"release_ledger"}  # revision 0015's


def _round_trip(url: str, schema: str) -> None:
    db = open_database(url)
    try:
        migrate(db, schema)
        migrate(db, schema)  # idempotent
        assert current_version(db, schema) == "0017"
        assert metadata_tables(url, schema) == METADATA_TABLES
        assert "owner_role" in _columns(db, schema, "runs")
        assert "publisher_payout" in _columns(db, schema, "node_metrics")
        downgrade(db, schema, "-1")  # the store's routines go first, then the payout models' columns
        assert current_version(db, schema) == "0016" and metadata_tables(url, schema) == METADATA_TABLES
        columns = _columns(db, schema, "node_metrics")
        assert "non_uniform_entropy" in columns and "publisher_payout" not in columns
        assert not _routines(db, schema)
        downgrade(db, schema, "-1")  # ARX's quality models' columns
        assert current_version(db, schema) == "0015" and metadata_tables(url, schema) == METADATA_TABLES
        assert "non_uniform_entropy" not in _columns(db, schema, "node_metrics")
        assert not _routines(db, schema)
        downgrade(db, schema, "-1")  # the release ledger
        assert current_version(db, schema) == "0014" and metadata_tables(url, schema) == METADATA_TABLES - LEDGER
        assert not _routines(db, schema)
        downgrade(db, schema, "-1")  # the held pseudonym keys
        assert current_version(db, schema) == "0013" and metadata_tables(url, schema) == METADATA_TABLES - KEYS - LEDGER
        assert not _routines(db, schema)
        downgrade(db, schema, "-1")  # the owners of runs and owned tables
        assert current_version(db, schema) == "0012" and "owner_role" not in _columns(db, schema, "runs")
        downgrade(db, schema, "-5")
        assert current_version(db, schema) == "0007"
        assert metadata_tables(url, schema) == METADATA_TABLES - KEYS - LEDGER
        downgrade(db, schema, "-3")
        assert current_version(db, schema) == "0004"
        assert metadata_tables(url, schema) == METADATA_TABLES - KEYS - LEDGER - {"owned_tables"}
        downgrade(db, schema, "-1")
        assert metadata_tables(url, schema) == METADATA_TABLES - KEYS - LEDGER - {"jobs", "job_files", "owned_tables"}
        downgrade(db, schema, "base")
        assert metadata_tables(url, schema) == {"alembic_version"}
        migrate(db, schema)
        assert current_version(db, schema) == "0017"
    finally:
        db.dispose()


def _columns(db, schema: str, table: str) -> list[str]:
    with db.engine.connect() as conn:
        return db.columns(conn, schema, table)


def _routines(db, schema: str) -> set[str]:
    """The routines of the schema (PostgreSQL; none on DuckDB)."""
    import sqlalchemy as sa

    if db.kind != "postgresql":
        return set()
    with db.engine.connect() as conn:
        return set(
            conn.execute(
                sa.text(
                    "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = :s"
                ),
                {"s": schema},
            ).scalars()
        )


def test_migrations_on_duckdb(duck_url: str):
    _round_trip(duck_url, "sqlanon")


@pytest.mark.postgres
def test_migrations_on_postgres(pg_server: str, pg_schema: str):
    _round_trip(pg_server, f"{pg_schema}_meta")  # with PL/Python (CI installs it): its routines come and go too


def _statistics_targets(db, schema: str) -> dict[str, set[int]]:
    """Per lattice table of `schema`, its columns' statistics targets."""
    import sqlalchemy as sa

    with db.engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT c.relname, a.attstattarget FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN "
                "pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = :s AND c.relkind = 'r' AND a.attnum > 0 "
                "AND NOT a.attisdropped AND c.relname LIKE 'lattice%'"
            ),
            {"s": schema},
        ).all()
    targets: dict[str, set[int]] = {}
    for table, target in rows:
        targets.setdefault(table, set()).add(target)
    return targets


@pytest.mark.postgres
def test_lattice_tables_sample_few_rows_for_statistics_on_postgres(pg_server: str, pg_schema: str):
    """Incognito analyzes them after each bulk write; they keep every run's lattice (migration 0012)."""
    db = open_database(pg_server)
    schema = f"{pg_schema}_meta"  # dropped by the fixture
    try:
        migrate(db, schema)
        assert _statistics_targets(db, schema) == {
            t: {10} for t in ("lattice_nodes", "lattice_node_levels", "lattice_edges")
        }
        downgrade(db, schema, "0011")  # the store's routines, 0017 to 0013, then 0012
        assert all(10 not in targets for targets in _statistics_targets(db, schema).values())
    finally:
        db.dispose()


def test_the_head_read_from_the_files_is_alembic_s():
    from importlib import resources

    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(resources.files("sqlanon.migrations")))
    assert head_revision() == ScriptDirectory.from_config(config).get_current_head() == "0017"


def test_a_schema_at_head_is_checked_without_alembic(duck_url: str):
    import subprocess
    import sys

    db = open_database(duck_url)
    migrate(db)
    db.dispose()
    code = (
        "import sys; from sqlanon.backends import open_database; from sqlanon.store.migrate import migrate; "
        f"db = open_database({duck_url!r}); migrate(db); db.dispose(); "
        "assert 'alembic' not in sys.modules, 'Alembic was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_migrate_command(duck_url: str):
    runner = CliRunner()
    result = runner.invoke(main, ["migrate", "--db", duck_url])
    assert result.exit_code == 0 and "version 0017" in result.output
    result = runner.invoke(main, ["migrate", "--db", duck_url, "--downgrade", "base"])
    assert result.exit_code == 0 and "base" in result.output
