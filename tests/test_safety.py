"""Safe by default: only declared columns published, identifiers pseudonymized with a key kept out of the
database, no table of the user's ever dropped or replaced, names compared as the database resolves them.
(The malformed inputs are in test_bad_inputs.py.)"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from sqlanon import RunOptions, anonymize, load_csv, search
from sqlanon.cli import main
from sqlanon.config import job_from_dict
from sqlanon.errors import ConfigError, DataError, HierarchyError

from .conftest import ADULT_DIR, ADULT_QIS

KEY = "correct horse battery staple, 32"
QIS = ["sex", "age", "race"]


def _people(
    url: str, schema: str | None, table: str = "people", rows: int = 3000, id_column: str = "patient_id"
) -> None:
    """Adult rows with a direct identifier column, in a table of `url`."""
    csv = str(ADULT_DIR / "adult.csv.gz")
    load_csv(
        csv, "raw_load", url, schema, {"delimiter": ";"}, metadata_schema=f"{schema}_meta" if schema else "sqlanon"
    )
    engine = sa.create_engine(url)
    ref = ".".join('"' + p.replace('"', '""') + '"' for p in (schema, table) if p)
    raw = ".".join('"' + p.replace('"', '""') + '"' for p in (schema, "raw_load") if p)
    ident = '"' + id_column.replace('"', '""') + '"'
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE TABLE {ref} AS SELECT 'P' || CAST(100000 + row_number() OVER () AS VARCHAR) "
            f"AS {ident}, r.* FROM {raw} r LIMIT {rows}".replace("%", "%%")
        )
        conn.exec_driver_sql(f"DROP TABLE {raw}".replace("%", "%%"))
    engine.dispose()


def _job(url: str, source_schema: str | None, output: str, identifying, table: str = "people", **extra):
    """A 3-QI job over `table`; `extra` goes into `output:` (schema, grant_to)."""
    qis = extra.pop("qis", QIS)
    config = {
        "source": {"url": url, "table": table, **({"schema": source_schema} if source_schema else {})},
        "quasi_identifiers": {q: str(ADULT_DIR / "hierarchies" / f"{q}.csv") for q in qis},
        "sensitive": ["occupation"],
        "identifying": identifying,
        "insensitive": [c for c in ADULT_QIS if c not in qis + ["occupation"]],
        "criteria": {"k_anonymity": {"k": 5}},
        "output": {"table": output, **extra},
    }
    return job_from_dict(config, ".")


def _rows(url: str, sql: str) -> list:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(sql).all()
    engine.dispose()
    return rows


@pytest.fixture(params=["duckdb", "postgresql"])
def database(request, tmp_path: Path):
    """(url, schema, metadata schema) on each backend."""
    if request.param == "duckdb":
        yield f"duckdb:///{tmp_path / 'db.duckdb'}", None, "sqlanon"
        return
    pg_server = request.getfixturevalue("pg_server")
    schema = request.getfixturevalue("pg_schema")
    yield pg_server, schema, f"{schema}_meta"


def test_identifiers_are_dropped_or_pseudonymized_with_an_hmac_computed_in_sql(database, monkeypatch):
    url, schema, meta = database
    _people(url, schema)
    monkeypatch.setenv("SQLANON_TEST_KEY", KEY)
    identifying = {"patient_id": {"pseudonym": {"key_env": "SQLANON_TEST_KEY"}}}
    result = anonymize(_job(url, schema, "pseudo", identifying), RunOptions(metadata_schema=meta))
    assert result.audit.ok
    prefix = f'"{schema}".' if schema else ""
    published = _rows(url, f"SELECT patient_id FROM {prefix}pseudo ORDER BY patient_id")
    source = _rows(url, f"SELECT patient_id FROM {prefix}people")
    expected = sorted(hmac.new(KEY.encode(), v.encode(), hashlib.sha256).hexdigest() for (v,) in source)
    assert [v for (v,) in published] == expected
    # the key is in no table: not in the run's recorded config, not in the output
    stored = _rows(url, f'SELECT config FROM "{meta}".runs')
    assert stored and all(KEY not in config and "SQLANON_TEST_KEY" in config for (config,) in stored)
    dropped = anonymize(_job(url, schema, "dropped", ["patient_id"]), RunOptions(metadata_schema=meta))
    assert dropped.audit.ok
    columns = _rows(
        url,
        f"SELECT column_name FROM information_schema.columns WHERE table_name = 'dropped' "
        f"AND table_schema = '{schema or 'main'}' ORDER BY ordinal_position",
    )
    assert [c for (c,) in columns] == ADULT_QIS


def test_a_key_file_works_and_a_short_key_is_refused(tmp_path: Path):
    url = f"duckdb:///{tmp_path / 'db.duckdb'}"
    _people(url, None)
    (tmp_path / "key").write_text(KEY + "\n")  # a trailing newline is not part of the key
    job = _job(url, None, "out", {"patient_id": {"pseudonym": {"key_file": str(tmp_path / "key")}}})
    anonymize(job)
    [(first,)] = _rows(url, "SELECT patient_id FROM out WHERE patient_id IS NOT NULL LIMIT 1")
    assert len(first) == 64 and int(first, 16) >= 0
    (tmp_path / "key").write_text("too short")
    with pytest.raises(ConfigError, match="the key has 9 bytes"):
        anonymize(job, replace=True)


def test_an_undeclared_column_is_refused_before_anything_is_written(database):
    url, schema, meta = database
    _people(url, schema)
    job = _job(url, schema, "out", [])
    with pytest.raises(ConfigError, match="do(es)? not classify: patient_id"):
        anonymize(job, RunOptions(metadata_schema=meta))


def test_the_output_is_never_the_source_however_spelled(tmp_path: Path):
    url = f"duckdb:///{tmp_path / 'db.duckdb'}"
    _people(url, None, "src")
    before = _rows(url, "SELECT COUNT(*), COUNT(DISTINCT patient_id) FROM src")
    for name in ("src", "Src", "SRC"):
        with pytest.raises(ConfigError, match="is the source table"):
            anonymize(_job(url, None, name, ["patient_id"], table="src"), replace=True)
        with pytest.raises(ConfigError, match="is the source table"):
            anonymize(_job(url, None, name, ["patient_id"], table="src", schema="MAIN"), replace=True)
    assert _rows(url, "SELECT COUNT(*), COUNT(DISTINCT patient_id) FROM src") == before


@pytest.mark.postgres
def test_postgres_names_that_would_be_truncated_are_refused(pg_server, pg_schema):
    long = "s" * 63
    _people(pg_server, pg_schema, long)
    with pytest.raises(ConfigError, match="PostgreSQL cuts names to 63 bytes"):
        anonymize(
            _job(pg_server, pg_schema, long + "_anon", ["patient_id"], table=long),
            RunOptions(metadata_schema=f"{pg_schema}_meta"),
            replace=True,
        )
    assert _rows(pg_server, f'SELECT COUNT(*) FROM "{pg_schema}"."{long}"') == [(3000,)]
    with pytest.raises(ConfigError, match="has 64 characters"):
        search(_job(pg_server, pg_schema, "x", ["patient_id"], table=long), RunOptions(metadata_schema="m" * 64))


@pytest.mark.postgres
def test_percent_and_colon_in_postgres_names_work(pg_server, pg_schema):
    """Hostile characters for the driver (`%` placeholders) and for SQLAlchemy (`:name` binds)."""
    table, column = "we%ird:t%sab", "pa%tient:id"
    _people(pg_server, pg_schema, table, 500, column)
    job = _job(pg_server, pg_schema, "out%:put", [column], table=table, qis=["sex", "race"])
    result = anonymize(job, RunOptions(metadata_schema=f"{pg_schema}_meta"))
    assert result.audit.ok and result.audit.rows == 500
    assert _rows(pg_server, f'SELECT COUNT(*) FROM "{pg_schema}"."out%%:put"') == [(500,)]


@pytest.mark.postgres
def test_output_checks_come_before_the_search(pg_server, pg_schema):
    meta = f"{pg_schema}_meta"
    _people(pg_server, pg_schema, rows=500)
    runs_before = _rows(pg_server, f'SELECT COUNT(*) FROM "{meta}".runs')
    with pytest.raises(DataError, match="schema 'nowhere' of output table 'out' does not exist"):
        anonymize(_job(pg_server, pg_schema, "out", ["patient_id"], schema="nowhere"), RunOptions(metadata_schema=meta))
    with pytest.raises(DataError, match="role 'no_such_role_x' does not exist"):
        anonymize(
            _job(pg_server, pg_schema, "out", ["patient_id"], grant_to=["no_such_role_x"]),
            RunOptions(metadata_schema=meta),
        )
    with pytest.raises(ConfigError, match="metadata schema"):
        anonymize(
            _job(pg_server, pg_schema, "job_files", ["patient_id"], schema=meta), RunOptions(metadata_schema=meta)
        )
    assert _rows(pg_server, f'SELECT COUNT(*) FROM "{meta}".runs') == runs_before  # no run started


def test_replace_overwrites_only_what_sqlanon_wrote(tmp_path: Path):
    url = f"duckdb:///{tmp_path / 'db.duckdb'}"
    _people(url, None, rows=500)
    job = _job(url, None, "out", ["patient_id"])
    anonymize(job)
    anonymize(job, replace=True)  # its own output: replaced
    engine = sa.create_engine(url)
    with engine.begin() as conn:  # someone drops it and makes their own table of that name
        conn.exec_driver_sql("DROP TABLE out")
        conn.exec_driver_sql("CREATE TABLE out AS SELECT 42 AS mine")
    engine.dispose()
    with pytest.raises(DataError, match="was not written by sqlanon"):
        anonymize(job, replace=True)
    assert _rows(url, "SELECT * FROM out") == [(42,)]


def test_a_csv_source_is_loaded_once_and_never_over_a_users_table(tmp_path: Path):
    url = f"duckdb:///{tmp_path / 'db.duckdb'}"
    config = {
        "source": {
            "url": url,
            "table": "adult",
            "csv": str(ADULT_DIR / "adult.csv.gz"),
            "csv_options": {"delimiter": ";"},
        },
        "quasi_identifiers": {q: str(ADULT_DIR / "hierarchies" / f"{q}.csv") for q in QIS},
        "insensitive": [c for c in ADULT_QIS if c not in QIS],
        "criteria": {"k_anonymity": {"k": 5}},
    }
    job = job_from_dict(config, ".")
    search(job)
    engine = sa.create_engine(url)
    with engine.begin() as conn:  # a change of the user's to the loaded table is kept, not reloaded over
        conn.exec_driver_sql("UPDATE adult SET race = 'Other' WHERE age = 39")
    search(job)
    assert _rows(url, "SELECT COUNT(*) FROM adult WHERE age = 39 AND race <> 'Other'") == [(0,)]
    with engine.begin() as conn:  # 10 rows more: no longer the loaded table
        conn.exec_driver_sql("INSERT INTO adult SELECT * FROM adult LIMIT 10")
    with pytest.raises(DataError, match="changed since; reload it with: sqlanon load") as changed:
        search(job)
    assert "--table adult --delimiter ';' --db URL --replace" in str(changed.value)  # the file read as the job reads it
    assert url not in str(changed.value)
    with engine.begin() as conn:  # the user's own table of that name
        conn.exec_driver_sql("DROP TABLE adult")
        conn.exec_driver_sql("CREATE TABLE adult AS SELECT 1 AS mine")
    engine.dispose()
    with pytest.raises(DataError, match="sqlanon did not load it"):
        search(job)
    assert _rows(url, "SELECT * FROM adult") == [(1,)]
    # replaced on purpose with `sqlanon load --replace`; the job then reuses the loaded table
    loaded = CliRunner().invoke(
        main,
        ["load", str(ADULT_DIR / "adult.csv.gz"), "--table", "adult", "--delimiter", ";", "--db", url, "--replace"],
    )
    assert loaded.exit_code == 0, loaded.output
    assert search(job).rows == 30162


def test_the_star_schema_check_catches_a_dimension_that_would_duplicate_tuples(tmp_path: Path, monkeypatch):
    """Hierarchies reject duplicate leaves when read; the SQL check proves the join keeps the row count even
    for a dimension table that holds a value twice."""
    from sqlanon.engine import star as dimensions

    url = f"duckdb:///{tmp_path / 'db.duckdb'}"
    _people(url, None, rows=300)
    original = dimensions._create_dimension_table

    def doubled(db, conn, dim):
        original(db, conn, dim)
        db.execute(conn, f"INSERT INTO {dim.table} SELECT * FROM {dim.table} LIMIT 1")

    monkeypatch.setattr(dimensions, "_create_dimension_table", doubled)
    with pytest.raises(HierarchyError, match="appear more than once in its hierarchy"):
        search(_job(url, None, "x", ["patient_id"]))


def test_scratch_names_are_never_dropped_first(tmp_path: Path):
    """A user table with the name an older version used for its scratch output survives a publication."""
    url = f"duckdb:///{tmp_path / 'db.duckdb'}"
    _people(url, None, rows=300)
    engine = sa.create_engine(url)
    run_ids = range(1, 6)
    with engine.begin() as conn:
        for run_id in run_ids:
            conn.exec_driver_sql(f"CREATE TABLE sqlanon_tmp_{run_id} AS SELECT {run_id} AS mine")
    engine.dispose()
    anonymize(_job(url, None, "out", ["patient_id"]))
    for run_id in run_ids:
        assert _rows(url, f"SELECT mine FROM sqlanon_tmp_{run_id}") == [(run_id,)]


@pytest.mark.parametrize("setting", ["true", "false"])
def test_a_csv_load_puts_the_database_s_row_order_setting_back(tmp_path: Path, setting: str):
    """DuckDB loads a CSV without keeping the file's row order (a setting of the whole database), and sets it back
    as it was, whether the load succeeds or fails on a malformed file."""
    from sqlanon.backends import open_database

    good, bad = tmp_path / "good.csv", tmp_path / "bad.csv"
    good.write_text("a;b\n1;2\n3;4\n")
    bad.write_bytes(b"a;b\n\xff\xfe;1\n")
    db = open_database(f"duckdb:///{tmp_path / 'db.duckdb'}")
    try:
        with db.engine.connect() as conn:
            conn.exec_driver_sql(f"SET preserve_insertion_order = {setting}")
        for name, path in (("good", good), ("bad", bad)):
            with db.engine.connect() as conn:
                try:
                    with conn.begin():
                        db.load_csv(conn, path, {"delimiter": ";"}, db.q(name))
                except DataError as exc:
                    assert name == "bad" and "cannot read CSV file" in str(exc)
            with db.engine.connect() as conn:
                current = conn.exec_driver_sql("SELECT current_setting('preserve_insertion_order')").scalar()
                assert current is (setting == "true")
        assert _rows(f"duckdb:///{tmp_path / 'db.duckdb'}", "SELECT COUNT(*) FROM good") == [(2,)]
    finally:
        db.dispose()


#: column names of sqlanon's own in the SQL it writes: Mondrian's work tables and aliases, anatomy's scratch table,
#: the generalization's frequency sets and joins. A source column of any of these names, in any role, is published
#: as itself (none is ever read, or published, in its place)
INTERNAL_NAMES = [
    "rid",
    "part",
    "cnt",
    "dim",
    "n",
    "child",
    "shift",
    "cut",
    "first",
    "rank",
    "new_part",
    "whole_table",
    "low0",
    "high0",
    "mean0",
    "lev0",
    "q0",
    "v0",
    "c0",
    "k0",
    "s0",
    "s1",
    "u0",
    "u1",
    "cut0",
    "has0",
    "width",
    "value",
    "code",
    "level",
    "node",
    "label",
    "leaves",
    "a0",
    "key0",
    "fs",
    "b",
    "t",
    "g",
    "w",
    "d0",
    "h0",
    "sqlanon_value__",
]
METHODS = ("generalize", "mondrian", "anatomy")


def _internal_names_table(url: str, schema: str | None, rows: int = 400) -> str:
    """A table with a column of every internal name (small integers: 5 to 7 values in each column)."""
    ref = ".".join('"' + p + '"' for p in (schema, "names") if p)
    columns = ", ".join(
        f'CAST(MOD(n + {i}, {5 + i % 3}) AS INTEGER) AS "{name}"' for i, name in enumerate(INTERNAL_NAMES)
    )
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE TABLE {ref} AS SELECT {columns} FROM (SELECT CAST(g AS INTEGER) AS n FROM "
            f"generate_series(1, {rows}) AS s(g)) x"
        )
    engine.dispose()
    return ref


ROLES = ("quasi_identifiers", "sensitive", "pseudonym", "drop", "insensitive")


def _roles_job(url: str, schema: str | None, method: str, turn: int, key_env: str):
    """Each internal name in one role, by turns (turn t gives name i role (i + t) mod the roles): QIs, sensitive
    columns (all read by the criteria), pseudonymized and dropped identifiers, insensitive columns. Anatomy takes
    one sensitive column, names[turn], and no other. Returns the job and each role's names."""
    roles: dict[str, list[str]] = {role: [] for role in ROLES}
    anatomy = method == "anatomy"
    for i, name in enumerate(INTERNAL_NAMES):
        if anatomy and i == turn:
            roles["sensitive"].append(name)
            continue
        kinds = [r for r in ROLES if r != "sensitive"] if anatomy else ROLES
        roles[kinds[(i + turn) % len(kinds)]].append(name)
    output: dict = {"table": f"out_{method}"}
    config: dict = {
        "source": {"url": url, "table": "names", **({"schema": schema} if schema else {})},
        "sensitive": roles["sensitive"],
        "insensitive": roles["insensitive"],
        "identifying": {
            **{c: {"pseudonym": {"key_env": key_env}} for c in roles["pseudonym"]},
            **dict.fromkeys(roles["drop"], "drop"),
        },
        "output": output,
        "unit": "rows",
    }  # the identifiers here are small numbers that repeat
    criteria = {
        "k_anonymity": {"k": 2},
        "multi_attribute_l_diversity": {"attributes": roles["sensitive"], "l": 1},
    }  # reads every one
    if method == "generalize":
        config.update(
            quasi_identifiers={q: {"generate": "suppress"} for q in roles["quasi_identifiers"]}, criteria=criteria
        )
    elif method == "mondrian":  # the QIs are numbers, cut at their medians
        config.update(quasi_identifiers=dict.fromkeys(roles["quasi_identifiers"]), criteria=criteria)
        output["method"] = "mondrian"
    else:
        config["quasi_identifiers"] = roles["quasi_identifiers"]
        output.update(method="anatomy", l=2, sensitive_table=f"out_{method}_values")
    return job_from_dict(config, "."), roles


@pytest.mark.parametrize("method", METHODS)
def test_no_internal_column_name_collides_with_a_source_column(database, method: str, monkeypatch):
    """Every internal name, as a source column in every role, is published as that column's own values (the
    audit compares every column published unchanged or pseudonymized with the source, and so does this test)."""
    from sqlanon import bucketize, partition

    url, schema, meta = database
    ref = _internal_names_table(url, schema)
    monkeypatch.setenv("SQLANON_TEST_KEY", KEY)
    publish = {"generalize": anonymize, "mondrian": partition, "anatomy": bucketize}[method]
    turns = range(len(INTERNAL_NAMES) if method == "anatomy" else len(ROLES))
    if not url.startswith("duckdb") and method == "anatomy":
        turns = range(0, len(INTERNAL_NAMES), 5)
    out = f"{f'{chr(34)}{schema}{chr(34)}.' if schema else ''}out_{method}"
    engine = sa.create_engine(url)
    for turn in turns:
        job, roles = _roles_job(url, schema, method, turn, "SQLANON_TEST_KEY")
        publish(job, RunOptions(metadata_schema=meta), replace=True)
        with engine.connect() as conn:
            columns = set(conn.exec_driver_sql(f"SELECT * FROM {out} LIMIT 0").keys())
            unchanged = roles["insensitive"] + ([] if method == "anatomy" else roles["sensitive"])
            for column in unchanged:
                published = Counter(conn.exec_driver_sql(f'SELECT "{column}" FROM {out}').scalars())
                assert published == Counter(conn.exec_driver_sql(f'SELECT "{column}" FROM {ref}').scalars()), (
                    method,
                    turn,
                    column,
                )
            for column in roles["pseudonym"]:
                published = Counter(conn.exec_driver_sql(f'SELECT "{column}" FROM {out}').scalars())
                expected = Counter(
                    hmac.new(KEY.encode(), str(v).encode(), hashlib.sha256).hexdigest()
                    for v in conn.exec_driver_sql(f'SELECT "{column}" FROM {ref}').scalars()
                )
                assert published == expected, (method, turn, column)
        assert not columns & set(roles["drop"])
    engine.dispose()


def test_several_rows_per_person_are_refused_unless_the_job_protects_rows(database):
    """A pseudonymized identifier that repeats means persons with several rows: every criterion would count
    rows. The job is refused before anything is written, unless it says rows are what it protects."""
    url, schema, meta = database
    _people(url, schema, rows=500)
    prefix = f'"{schema}".' if schema else ""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f"UPDATE {prefix}people SET patient_id = 'P100001' WHERE patient_id IN ('P100002', 'P100003', 'P100004')"
        )
    engine.dispose()
    job = _job(url, schema, "by_rows", ["patient_id"])
    with pytest.raises(DataError, match="repeats: 1 person.* up to 4 for one.*unit: rows"):
        anonymize(job, RunOptions(metadata_schema=meta))
    assert not _rows(url, "SELECT 1 FROM information_schema.tables WHERE table_name = 'by_rows'")
    protected = anonymize(dataclasses.replace(job, unit="rows"), RunOptions(metadata_schema=meta))
    assert protected.audit.ok
