"""The in-server security model, played as an attacker (PostgreSQL): a plain login role set up exactly as the
PostgreSQL guide (docs/postgresql.md) says (`sqlanon grant-runner`), trying each class of attack against sqlanon's
schema and against a DBA.

After every attempt the runner is no superuser, the DBA's calls ran sqlanon's code only, and no role read or
changed another role's work.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sysconfig
import tempfile
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from sqlanon import RunOptions, search
from sqlanon.api import register_job, run_job
from sqlanon.backends import open_database
from sqlanon.cli import main
from sqlanon.errors import DataError, SqlanonError
from sqlanon.store import postgres as routines
from sqlanon.store.migrate import migrate

from .conftest import RUNNER, adult_config, adult_job, drop_role

pytestmark = pytest.mark.postgres
GUIDE = Path(__file__).parent.parent / "docs" / "postgresql.md"  # its Security section
DENIED = "permission denied|must be owner"


@pytest.fixture
def attack(runner, pg_server: str, pg_schema: str):
    """The runner's engine, the DBA's, and the names an attacker works with; at the end the runner must not be a
    superuser, whatever the test did."""
    url, out, _ = runner
    meta = f"{pg_schema}_meta"
    as_runner, as_dba = sa.create_engine(url), sa.create_engine(pg_server)
    yield {
        "runner": as_runner,
        "dba": as_dba,
        "url": url,
        "meta": meta,
        "out": out,
        "schema": pg_schema,
        "work": f"{meta}_work_{RUNNER}",
    }
    with as_dba.connect() as conn:
        superuser = conn.execute(sa.text("SELECT rolsuper FROM pg_roles WHERE rolname = :r"), {"r": RUNNER}).scalar()
    as_runner.dispose()
    as_dba.dispose()
    assert superuser is False, "the runner became a superuser"


@pytest.fixture
def login_role(attack):
    """Makes a new login role (a name starting with `prefix`, granted `grants`), dropped at the end."""
    made: list[str] = []

    def make(prefix: str, *grants: str) -> str:
        name = f"{prefix}_{uuid.uuid4().hex[:8]}"
        with attack["dba"].begin() as conn:
            conn.exec_driver_sql(f'CREATE ROLE "{name}" LOGIN')
            for grant in grants:
                conn.exec_driver_sql(grant.format(role=f'"{name}"'))
        made.append(name)
        return name

    yield make
    with attack["dba"].begin() as conn:
        for name in made:
            drop_role(conn, name)


def _denied(engine: sa.Engine, statement: str, params: dict | None = None) -> str:
    """Run `statement` in a transaction that is rolled back; returns the error, which must be a refusal."""
    with engine.connect() as conn:
        with pytest.raises(sa.exc.DBAPIError) as refused:
            conn.execute(sa.text(statement), params or {})
        conn.rollback()
    message = str(refused.value.orig)
    assert re.search(
        DENIED + "|there is no run|no job named|registered by another role|is recorded as written", message
    ), message
    return message


def _privileges(conn: sa.Connection, role: str) -> set[tuple[str, str, str]]:
    """Every privilege `role` holds in this database, directly or through the roles it is a member of (PUBLIC's
    aside): (kind, object, privilege); schemas it owns as ("owns", schema, "")."""
    return set(
        conn.execute(
            sa.text("""
        WITH roles AS (SELECT oid FROM pg_roles WHERE pg_has_role(:r, oid, 'MEMBER'))
        SELECT 'member', b.rolname, '' FROM pg_auth_members m JOIN pg_roles b ON b.oid = m.roleid
         WHERE m.member = (SELECT oid FROM pg_roles WHERE rolname = :r)
        UNION SELECT 'schema', n.nspname, a.privilege_type FROM pg_namespace n, aclexplode(n.nspacl) a
         WHERE a.grantee IN (SELECT oid FROM roles) AND a.grantee <> n.nspowner
        UNION SELECT 'owns', n.nspname, '' FROM pg_namespace n WHERE n.nspowner IN (SELECT oid FROM roles)
        UNION SELECT 'relation', n.nspname || '.' || c.relname, a.privilege_type FROM pg_class c
         JOIN pg_namespace n ON n.oid = c.relnamespace, aclexplode(c.relacl) a
         WHERE a.grantee IN (SELECT oid FROM roles) AND a.grantee <> c.relowner
        UNION SELECT 'routine', n.nspname || '.' || p.proname, a.privilege_type FROM pg_proc p
         JOIN pg_namespace n ON n.oid = p.pronamespace, aclexplode(p.proacl) a
         WHERE a.grantee IN (SELECT oid FROM roles) AND a.grantee <> p.proowner
        UNION SELECT 'database', d.datname, a.privilege_type FROM pg_database d, aclexplode(d.datacl) a
         WHERE a.grantee IN (SELECT oid FROM roles) AND d.datname = current_database()
    """),
            {"r": role},
        ).all()
    )


def _documented_routines() -> set[str]:
    """The routines the Security section of the PostgreSQL guide says a runner may execute."""
    block = GUIDE.read_text().split("<!-- runner-privileges")[1].split("<!-- /runner-privileges -->")[0]
    line = next(line for line in block.splitlines() if "EXECUTE" in line)
    return set(re.findall(r"`(\w+)`", line.split(":", 1)[1]))


def test_a_runner_holds_exactly_the_documented_privileges(attack):
    """`sqlanon grant-runner` gives the runner role's membership, USAGE on sqlanon's schema, EXECUTE on the
    routines the PostgreSQL guide lists and a work schema of its own: nothing on any table, sequence or other schema of
    sqlanon's (the source and output grants are the DBA's own, on the test's schemas)."""
    a = attack
    with a["dba"].connect() as conn:
        held = _privileges(conn, RUNNER)
        group = conn.execute(sa.text(f'SELECT runner_role FROM "{a["meta"]}".installation()')).scalar_one()
        # other sqlanon schemas of this database (other tests', a shared one) grant the same runner role
        stores = set(
            conn.execute(
                sa.text(
                    "SELECT n.nspname FROM pg_proc p JOIN pg_namespace n ON n.oid = "
                    "p.pronamespace WHERE p.proname = 'installation'"
                )
            ).scalars()
        ) - {a["meta"]}
    data = {a["schema"], a["out"]}  # what the fixture granted on its own data, as the PostgreSQL guide tells a DBA to
    elsewhere = data | stores
    mine = {p for p in held if p[1].split(".")[0] not in elsewhere}
    routines_held = {name.split(".", 1)[1] for kind, name, _ in mine if kind == "routine"}
    assert group == "sqlanon_runner_test"  # the database's own runner role
    assert {p for p in mine if p[0] != "routine"} == {
        ("member", group, ""),
        ("schema", a["meta"], "USAGE"),
        ("owns", a["work"], ""),
    }
    assert routines_held == _documented_routines()
    assert all(p[1].startswith(f"{a['meta']}.") and p[2] == "EXECUTE" for p in mine if p[0] == "routine")


def test_a_runner_writes_no_table_of_sqlanons_and_creates_nothing_beside_its_routines(attack):
    """No table or sequence of the store is readable or writable by a runner, and nothing can be created in its
    schema (an overload of a routine, such as run_nodes(integer), would be picked over run_nodes(bigint))."""
    a = attack
    s = f'"{a["meta"]}"'
    with a["dba"].connect() as conn:
        tables = (
            conn.execute(sa.text("SELECT tablename FROM pg_tables WHERE schemaname = :s"), {"s": a["meta"]})
            .scalars()
            .all()
        )
    assert "server_settings" not in tables  # the settings live in a routine's body (installation())
    for table in tables:
        for statement in (
            f"SELECT * FROM {s}.{table}",
            f"DELETE FROM {s}.{table}",
            f"TRUNCATE {s}.{table}",
            f"INSERT INTO {s}.{table} SELECT * FROM {s}.{table}",
        ):
            _denied(a["runner"], statement)
    _denied(a["runner"], f"SELECT nextval('{s}.run_ids')")
    for plant in (
        f"CREATE FUNCTION {s}.run_nodes(run integer) RETURNS integer LANGUAGE sql AS 'SELECT 1'",
        f"CREATE FUNCTION {s}.audit(t text, q text[], s text[]) RETURNS integer LANGUAGE sql AS 'SELECT 1'",
        f"CREATE TABLE {s}.planted (x integer)",
        f"CREATE VIEW {s}.planted AS SELECT 1 AS x",
        f"CREATE OR REPLACE FUNCTION {s}.load_sqlanon() RETURNS text LANGUAGE sql AS 'SELECT 1'",
        f"ALTER FUNCTION {s}.installation() OWNER TO {RUNNER}",
    ):
        _denied(a["runner"], plant)


def _escalation(work: str) -> str:
    """A function that makes the runner a superuser when it runs with a superuser's rights, and does nothing (no
    error) otherwise: planted where an attacker hopes a DBA's session calls it."""
    return (
        f'CREATE FUNCTION "{work}".escalate() RETURNS integer LANGUAGE plpgsql AS $$ BEGIN '
        "BEGIN RESET ROLE; EXCEPTION WHEN OTHERS THEN NULL; END; "
        f"BEGIN EXECUTE 'ALTER ROLE {RUNNER} SUPERUSER'; EXCEPTION WHEN OTHERS THEN NULL; END; "
        "RETURN 1; END $$"
    )


def _register(a: dict, name: str, config: dict) -> None:
    """`config` registered by the runner as job `name`, from a job file of its client."""
    folder = Path(tempfile.mkdtemp())
    try:
        (folder / "job.json").write_text(json.dumps(config))
        register_job(name, folder / "job.json", a["url"], a["meta"])
    finally:
        shutil.rmtree(folder)


def _registered_run(a: dict, name: str, qis: list[str], **extra) -> int:
    """A job registered and run by the runner itself (from its client); returns the run's number."""
    _register(a, name, adult_config(a["url"], qis, k=5, load_csv=False, schema=a["schema"], **extra))
    result = run_job(name, a["url"], RunOptions(metadata_schema=a["meta"]))
    return getattr(result, "search", result).run_id


def test_the_dbas_documented_calls_run_sqlanons_code_only(attack):
    """The runner plants look-alikes of every routine a DBA calls, with the argument types an untyped call would
    prefer, wherever it may create them (its work schema); the DBA then makes each call as the PostgreSQL guide
    writes it (schema and argument types named): every one resolves to sqlanon's routine, and none of the runner's
    code runs. The PostgreSQL guide's own calls name the schema and every argument's type."""
    a = attack
    run_id = _registered_run(a, "mine", ["sex", "race"], output={"table": "mine", "schema": a["out"]})
    w = f'"{a["work"]}"'
    with a["runner"].begin() as conn:
        conn.exec_driver_sql(_escalation(a["work"]))
        for signature in (
            "run_nodes(run integer)",
            "passing_nodes(run integer)",
            "job_runs(job varchar)",
            "audit(t text, q text[], s text[])",
            "analyze_job(j varchar)",
        ):
            conn.exec_driver_sql(
                f"CREATE FUNCTION {w}.{signature} RETURNS integer LANGUAGE sql AS 'SELECT {w}.escalate()'"
            )
    m = f'"{a["meta"]}"'
    with a["dba"].connect() as conn:
        conn.exec_driver_sql(f"SET search_path = {w}, public")  # even with the runner's schema first
        nodes = conn.execute(sa.text(f"SELECT * FROM {m}.run_nodes(CAST(:r AS bigint))"), {"r": run_id}).all()
        passing = conn.execute(sa.text(f"SELECT * FROM {m}.passing_nodes(CAST(:r AS bigint))"), {"r": run_id}).all()
        runs = conn.execute(sa.text(f"SELECT * FROM {m}.job_runs(CAST(:j AS text))"), {"j": "mine"}).all()
        audited = conn.execute(
            sa.text(
                f"SELECT * FROM {m}.audit(CAST(:t AS regclass), CAST(ARRAY['sex', 'race'] AS "
                "text[]), CAST(ARRAY[] AS text[]))"
            ),
            {"t": f'"{a["out"]}".mine'},
        ).all()
        conn.rollback()
    assert nodes and runs and audited[0].min_class_size >= 5 and passing
    calls = re.findall(
        r"sqlanon\.(\w+)\(([^;]*)\);",
        "\n".join(block.split("```")[0] for block in GUIDE.read_text().split("```sql")[1:]),
    )
    assert calls
    for routine, args in calls:
        for argument in _arguments(args):
            assert "::" in argument or "CAST(" in argument or argument.endswith(("true", "false")), (
                f"docs/postgresql.md: sqlanon.{routine}(...) passes {argument!r} without its type"
            )


def _arguments(text: str) -> list[str]:
    """A call's top-level arguments (commas inside brackets and quotes kept)."""
    found, depth, quoted, current = [], 0, False, ""
    for char in text.split(")")[0] if text.count("(") < text.count(")") else text:
        if char == "'":
            quoted = not quoted
        elif not quoted and char in "([":
            depth += 1
        elif not quoted and char in ")]":
            depth -= 1
        if char == "," and depth == 0 and not quoted:
            found.append(current.strip())
            current = ""
        else:
            current += char
    return [arg for arg in found + [current.strip()] if arg]


def test_a_dba_who_runs_or_audits_a_runners_job_runs_none_of_its_code_with_the_dbas_rights(attack):
    """The runner's job reads a view that calls its escalation function. A DBA who runs the job in the server
    runs it on a connection of the runner's (a session switched to the runner could switch back, and escalate);
    from the DBA's own client the job is refused; the DBA's audit of the view is refused (it would run the view's
    code with the DBA's rights)."""
    a = attack
    w = f'"{a["work"]}"'
    with a["runner"].begin() as conn:
        conn.exec_driver_sql(_escalation(a["work"]))
        conn.exec_driver_sql(
            f'CREATE VIEW {w}.adult_view AS SELECT t.*, {w}.escalate() AS probe FROM "{a["schema"]}".adult t'
        )
    config = adult_config(
        a["url"],
        ["sex", "race"],
        k=5,
        load_csv=False,
        table="adult_view",
        schema=a["work"],
        output={"table": "trapped", "schema": a["out"]},
    )
    config["insensitive"].append("probe")  # published: the view's function runs for every row
    _register(a, "trap", config)
    with a["dba"].connect() as conn:
        result = conn.execute(
            sa.text(f'CALL "{a["meta"]}".run_job(job => CAST(:j AS text))'), {"j": "trap"}
        ).scalar_one()
        conn.commit()
        with pytest.raises(sa.exc.DBAPIError, match="not a plain table"):
            conn.execute(
                sa.text(
                    f"SELECT * FROM \"{a['meta']}\".audit(CAST(:t AS regclass), CAST(ARRAY['sex'] AS "
                    "text[]), CAST(ARRAY[] AS text[]))"
                ),
                {"t": f"{w}.adult_view"},
            )
        conn.rollback()
        owner = conn.execute(
            sa.text(f'SELECT owner_role FROM "{a["meta"]}".runs WHERE run_id = :r'), {"r": result["run_id"]}
        ).scalar_one()
        probes = conn.execute(sa.text(f'SELECT COUNT(*) FROM "{a["out"]}".trapped WHERE probe = 1')).scalar_one()
    assert result["minimal"] and owner == RUNNER and probes > 0  # it ran, the trap too, as the runner
    with pytest.raises(DataError, match=f"registered by role '{RUNNER}'.*CALL"):
        run_job("trap", str(a["dba"].url.render_as_string(hide_password=False)), RunOptions(metadata_schema=a["meta"]))
    with a["dba"].connect() as conn:  # the trap is real: a DBA's session switched to the runner escalates it
        conn.exec_driver_sql(f'SET ROLE "{RUNNER}"')
        conn.execute(sa.text(f"SELECT probe FROM {w}.adult_view LIMIT 1"))
        escalated = conn.execute(sa.text("SELECT rolsuper FROM pg_roles WHERE rolname = :r"), {"r": RUNNER}).scalar()
        conn.rollback()
    assert escalated is True


def test_the_servers_python_path_is_its_owners_alone(attack, tmp_path: Path):
    """What the server's Python imports is decided by the superuser who installed sqlanon, and read in a way no
    caller's transaction changes: a session setting, a runner's migrate, a writable folder and files a job stores
    but does not name all run nothing; no file of a job is written on the server, and no run record names a
    folder of it."""
    a = attack
    evil = Path(tempfile.mkdtemp(prefix="sqlanon-evil-", dir="/tmp"))
    marker = evil / "ran"
    (evil / "evil.pth").write_text(f"import os; open({str(marker)!r}, 'w').close()\n")
    os.chmod(evil, 0o777)
    os.chmod(evil / "evil.pth", 0o666)
    s = f'"{a["meta"]}"'
    try:
        with a["runner"].connect() as conn:
            conn.execute(sa.text("SELECT set_config('sqlanon.python_path', :p, true)"), {"p": str(evil)})
            assert conn.execute(sa.text(f"SELECT {s}.load_sqlanon()")).scalar_one()
            conn.rollback()
        runner_db = open_database(a["url"])
        with pytest.raises(SqlanonError, match="only a superuser"):
            migrate(runner_db, a["meta"], python_path=str(evil))
        runner_db.dispose()
        dba_db = open_database(str(a["dba"].url.render_as_string(hide_password=False)))
        migrate(dba_db, a["meta"], python_path=str(evil))  # a folder anyone may write: the server refuses it
        with a["runner"].connect() as conn:
            with pytest.raises(sa.exc.DBAPIError, match="may be written by users other than root"):
                conn.execute(sa.text(f"SELECT {s}.load_sqlanon()"))
        migrate(dba_db, a["meta"], python_path=sysconfig.get_paths()["purelib"])
        dba_db.dispose()
        assert not marker.exists()
        before = set(Path(tempfile.gettempdir()).glob("sqlanon-job-*"))
        config = adult_config("ignored", ["sex"], k=5, load_csv=False, schema=a["schema"])
        config["quasi_identifiers"]["sex"]["hierarchy"] = "sex.csv"
        files = {
            "sex.csv": Path(adult_config("x", ["sex"])["quasi_identifiers"]["sex"]["hierarchy"]).read_text(),
            "evil.pth": marker.read_text() if marker.exists() else "import os\n",
        }
        with a["runner"].connect() as conn:
            conn.execute(
                sa.text(
                    f"SELECT {s}.register_job(name => CAST(:n AS text), config => CAST(:c AS json), "
                    "files => CAST(:f AS json))"
                ),
                {"n": "sly", "c": json.dumps(config), "f": json.dumps(files)},
            )
            result = conn.execute(sa.text(f"CALL {s}.run_job(job => CAST(:j AS text))"), {"j": "sly"}).scalar_one()
            conn.commit()
        with a["dba"].connect() as conn:
            stored = conn.execute(sa.text(f"SELECT path FROM {s}.job_files WHERE job_name = 'sly'")).scalars().all()
            records = " ".join(
                str(v)
                for v in conn.execute(
                    sa.text(
                        f"SELECT config, result, error FROM {s}.runs WHERE run_id = :r UNION ALL SELECT hierarchy, "
                        f"dimension_table, NULL FROM {s}.run_attributes WHERE run_id = :r"
                    ),
                    {"r": result["run_id"]},
                ).all()
            )
    finally:
        shutil.rmtree(evil, ignore_errors=True)
    assert not marker.exists()
    assert [Path(p).name for p in stored] == ["0_sex.csv"]  # only the file the config names is kept
    assert set(Path(tempfile.gettempdir()).glob("sqlanon-job-*")) == before
    assert "/tmp" not in records and "sqlanon-job" not in records


@pytest.fixture
def other_runner(attack, login_role, pg_server: str):
    """A second runner, set up the same way, that tries to reach the first one's work."""
    a = attack
    name = login_role(
        "other",
        f'GRANT USAGE ON SCHEMA "{a["schema"]}" TO {{role}}',
        f'GRANT SELECT ON "{a["schema"]}".adult TO {{role}}',
    )
    granted = CliRunner().invoke(main, ["grant-runner", name, "--db", pg_server, "--metadata-schema", a["meta"]])
    assert granted.exit_code == 0, granted.output
    return name, sa.engine.make_url(pg_server).set(username=name).render_as_string(hide_password=False)


def test_roles_see_and_change_their_own_work_only(attack, other_runner):
    """Another runner finds none of the first one's jobs, runs, nodes, results or files through any routine, and
    can neither replace nor run them; a DBA sees them all. No run record keeps published rows."""
    a = attack
    _name, url = other_runner
    run_id = _registered_run(a, "private", ["sex", "race"], output={"table": "private", "schema": a["out"]})
    m = f'"{a["meta"]}"'
    other = sa.create_engine(url)
    try:
        with other.connect() as conn:
            seen = {
                "job_runs": conn.execute(sa.text(f"SELECT * FROM {m}.job_runs(job => CAST('private' AS text))")).all(),
                "run_nodes": conn.execute(
                    sa.text(f"SELECT * FROM {m}.run_nodes(run => CAST(:r AS bigint))"), {"r": run_id}
                ).all(),
                "passing_nodes": conn.execute(
                    sa.text(f"SELECT * FROM {m}.passing_nodes(run => CAST(:r AS bigint))"), {"r": run_id}
                ).all(),
                "jobs_list": conn.execute(sa.text(f"SELECT * FROM {m}.jobs_list()")).all(),
                "job_runs_list": conn.execute(
                    sa.text(f"SELECT * FROM {m}.job_runs_list(p_job => CAST('private' AS text), p_most => 10)")
                ).all(),
                "owned_table": conn.execute(
                    sa.text(
                        f"SELECT * FROM {m}.owned_table(p_schema_name => CAST(:s AS text), p_table_name => "
                        "CAST('private' AS text))"
                    ),
                    {"s": a["out"]},
                ).all(),
            }
        assert seen == {key: [] for key in seen}
        for call in (
            f"SELECT * FROM {m}.job_definition(p_job => CAST('private' AS text))",
            f"SELECT * FROM {m}.job_files_of(p_job => CAST('private' AS text))",
            f"SELECT * FROM {m}.run_outcome(p_run => CAST(:r AS bigint))",
            f"SELECT {m}.run_close(p_run => CAST(:r AS bigint), p_status => CAST('failed' AS text), "
            "p_finished_at => CAST(NULL AS timestamp), p_result => CAST(NULL AS text), "
            "p_error => CAST('hijacked' AS text))",
            f"SELECT {m}.lattice_clear(p_run => CAST(:r AS bigint))",
            f"SELECT {m}.job_register(p_job => CAST('private' AS text), p_config => CAST('{{}}' AS text), "
            "p_registered_at => CAST(NULL AS timestamp), p_paths => CAST(ARRAY[] AS text[]), "
            "p_contents => CAST(ARRAY[] AS text[]))",
            f"SELECT {m}.owned_table_record(p_schema_name => CAST(:s AS text), p_table_name => "
            "CAST('private' AS text), p_kind => CAST('output' AS text), p_token => CAST('x' AS text), "
            "p_run => CAST(NULL AS bigint), p_file_path => CAST(NULL AS text), p_file_sha256 => CAST(NULL "
            "AS text), p_row_count => CAST(0 AS bigint), p_created_at => CAST(NULL AS timestamp))",
        ):
            _denied(other, call, {"r": run_id, "s": a["out"]})
        with pytest.raises(SqlanonError, match="no job named 'private'"):
            run_job("private", url, RunOptions(metadata_schema=a["meta"]))
        listed = CliRunner().invoke(main, ["job", "list", "--db", url, "--metadata-schema", a["meta"], "--json"])
        assert listed.exit_code == 0 and json.loads(listed.output) == []
    finally:
        other.dispose()
    with a["dba"].connect() as conn:
        dba_sees = conn.execute(sa.text(f"SELECT * FROM {m}.job_runs(job => CAST('private' AS text))")).all()
        record = conn.execute(sa.text(f"SELECT status, result FROM {m}.runs WHERE run_id = :r"), {"r": run_id}).one()
    assert len(dba_sees) == 1 and record.status == "finished"
    assert "preview" not in json.loads(record.result)  # published rows belong to the output, not to run records


def test_the_runner_role_is_per_database(attack, pg_server: str):
    """Granting a runner in one database grants it nothing in another where sqlanon is installed too."""
    database = f"sqlanon_second_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(pg_server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{database}"')
    second = sa.engine.make_url(pg_server).set(database=database)
    try:
        db = open_database(second.render_as_string(hide_password=False))
        migrate(db, "sqlanon")
        db.dispose()
        as_runner = sa.create_engine(second.set(username=RUNNER).render_as_string(hide_password=False))
        for call in (
            'SELECT * FROM "sqlanon".jobs_list()',
            'SELECT "sqlanon".work_schema()',
            "CALL \"sqlanon\".run_job(job => CAST('x' AS text))",
        ):
            _denied(as_runner, call)
        as_runner.dispose()
        with sa.create_engine(second.render_as_string(hide_password=False)).connect() as conn:
            role = conn.execute(sa.text('SELECT runner_role FROM "sqlanon".installation()')).scalar_one()
            member = conn.execute(sa.text("SELECT pg_has_role(:r, :g, 'MEMBER')"), {"r": RUNNER, "g": role}).scalar()
        assert role == f"sqlanon_runner_{database}" and member is False
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE "{database}" WITH (FORCE)')
            conn.exec_driver_sql(f'DROP ROLE IF EXISTS "sqlanon_runner_{database}"')
        admin.dispose()


def test_grant_runner_refuses_what_it_cannot_do_safely(attack, login_role, pg_server: str):
    """An unknown role, a work schema someone else created first (to read or plant in the runner's scratch
    tables) and DuckDB each get one line; revoking takes the membership and the work schema away."""
    a = attack
    squatter = login_role("squat")
    with a["dba"].begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{a["meta"]}_work_{squatter}" AUTHORIZATION "{RUNNER}"')
    try:
        cli = CliRunner()
        for role, message in (("nobody_here", "does not exist"), (squatter, "belongs to role")):
            refused = cli.invoke(main, ["grant-runner", role, "--db", pg_server, "--metadata-schema", a["meta"]])
            assert refused.exit_code == 2 and message in refused.output and "Traceback" not in refused.output
        duck = cli.invoke(main, ["grant-runner", "x", "--db", "duckdb:///:memory:"])
        assert duck.exit_code == 2 and "PostgreSQL" in duck.output
        revoked = cli.invoke(
            main, ["grant-runner", RUNNER, "--revoke", "--db", pg_server, "--metadata-schema", a["meta"]]
        )
        assert revoked.exit_code == 0, revoked.output
        with a["dba"].connect() as conn:
            left = {p for p in _privileges(conn, RUNNER) if p[1].split(".")[0] in (a["meta"], a["work"])}
            assert not left and conn.execute(sa.text("SELECT to_regnamespace(:w)"), {"w": a["work"]}).scalar() is None
        with pytest.raises(SqlanonError, match="grant-runner"):
            search(
                adult_job(a["url"], ["sex"], k=5, load_csv=False, schema=a["schema"]),
                RunOptions(metadata_schema=a["meta"]),
            )
    finally:
        with a["dba"].begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{a["meta"]}_work_{squatter}" CASCADE')


def test_the_installed_routines_are_the_ones_sqlanon_documents(attack):
    """Every routine of sqlanon's schema is one sqlanon installed (marked), none is executable by PUBLIC, and the
    runner role may execute exactly `runner_routines` (the PostgreSQL guide's list)."""
    a = attack
    with a["dba"].connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT p.proname, obj_description(p.oid, 'pg_proc'), has_function_privilege('public', p.oid, "
                "'EXECUTE'), has_function_privilege(:g, p.oid, 'EXECUTE') FROM pg_proc p JOIN "
                "pg_namespace n ON n.oid = "
                "p.pronamespace WHERE n.nspname = :s"
            ),
            {"s": a["meta"], "g": "sqlanon_runner_test"},
        ).all()
    assert all(marker == routines.MARKER and not public for _, marker, public, _ in rows)
    granted = {name for name, _, _, runner in rows if runner}
    expected = {re.search(r"\.(\w+)\(", signature)[1] for signature in routines.runner_routines(a["meta"])}
    assert granted == expected == _documented_routines()


def test_a_role_that_is_no_runner_executes_nothing(attack, login_role):
    """A role a DBA granted USAGE on sqlanon's schema by hand, but not the runner role, may execute none of its
    routines (EXECUTE is revoked from PUBLIC on every one)."""
    a = attack
    stranger = login_role("stranger", f'GRANT USAGE ON SCHEMA "{a["meta"]}" TO {{role}}')
    with a["dba"].connect() as conn:
        allowed = (
            conn.execute(
                sa.text(
                    "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                    "WHERE n.nspname = :s AND has_function_privilege(:r, p.oid, 'EXECUTE')"
                ),
                {"s": a["meta"], "r": stranger},
            )
            .scalars()
            .all()
        )
    assert allowed == []
    engine = sa.create_engine(a["dba"].url.set(username=stranger))
    for call in (
        f'SELECT * FROM "{a["meta"]}".jobs_list()',
        f'SELECT "{a["meta"]}".load_sqlanon()',
        f"CALL \"{a['meta']}\".run_job(job => CAST('x' AS text))",
        f'SELECT * FROM "{a["meta"]}".installation()',
    ):
        _denied(engine, call)
    engine.dispose()


def test_no_routine_reads_for_a_runner_what_it_may_not_read(attack):
    """The in-server routines run a job with its registrant's rights: a runner's job over a table it may not
    read fails on it (and publishes nothing), whether the runner or a DBA calls it; audit() reads with the
    caller's rights too."""
    a = attack
    with a["dba"].begin() as conn:
        conn.exec_driver_sql(f'CREATE TABLE "{a["schema"]}".secret AS SELECT * FROM "{a["schema"]}".adult')
    config = adult_config(
        a["url"],
        ["sex", "race"],
        k=5,
        load_csv=False,
        table="secret",
        schema=a["schema"],
        output={"table": "leak", "schema": a["out"]},
        sensitive=["occupation"],
    )
    _register(a, "peek", config)
    m = f'"{a["meta"]}"'
    for engine in (a["runner"], a["dba"]):
        with engine.connect() as conn:
            with pytest.raises(sa.exc.DBAPIError, match="may not read table"):
                conn.execute(sa.text(f"CALL {m}.run_job(job => CAST('peek' AS text))"))
            conn.rollback()
            with pytest.raises(sa.exc.DBAPIError, match="may not read table"):
                conn.execute(sa.text(f"SELECT {m}.analyze_job(job => CAST('peek' AS text))"))
            conn.rollback()
    _denied(
        a["runner"],
        f"SELECT * FROM {m}.audit(CAST(:t AS regclass), CAST(ARRAY['sex'] AS text[]), CAST(ARRAY[] AS text[]))",
        {"t": f'"{a["schema"]}".secret'},
    )
    with a["dba"].connect() as conn:
        assert conn.execute(sa.text("SELECT to_regclass(:t)"), {"t": f'"{a["out"]}".leak'}).scalar() is None


def test_hostile_names_and_labels_are_data_in_every_routine(attack):
    """A job name, file name and hierarchy labels written as SQL (the equivalent of PostgreSQL Anonymizer's
    injection through masking rule text) travel as values through the routines and the in-server run: the job
    registers, runs and lists under its name, its labels are published as they are, and nothing else happens."""
    a = attack
    name = "x'); DROP SCHEMA public CASCADE; --"
    config = adult_config(
        "ignored",
        ["sex", "race"],
        k=5,
        load_csv=False,
        schema=a["schema"],
        output={"table": "hostile", "schema": a["out"]},
    )
    evil = "Ma'le\"), DROP TABLE x --"  # (a hierarchy file separates its fields by ';')
    files = {
        "h/$$sex$$.csv": f"Male;{evil};*\nFemale;F;*\n",
        "h/race.csv": Path(config["quasi_identifiers"]["race"]["hierarchy"]).read_text(),
    }
    config["quasi_identifiers"] = {"sex": "h/$$sex$$.csv", "race": "h/race.csv"}
    m = f'"{a["meta"]}"'
    with a["runner"].connect() as conn:
        conn.execute(
            sa.text(
                f"SELECT {m}.register_job(name => CAST(:n AS text), config => CAST(:c AS json), "
                "files => CAST(:f AS json))"
            ),
            {"n": name, "c": json.dumps(config), "f": json.dumps(files)},
        )
        result = conn.execute(sa.text(f"CALL {m}.run_job(job => CAST(:n AS text))"), {"n": name}).scalar_one()
        conn.commit()
        runs = conn.execute(sa.text(f"SELECT status FROM {m}.job_runs(job => CAST(:n AS text))"), {"n": name}).all()
        labels = set(conn.execute(sa.text(f'SELECT sex FROM "{a["out"]}".hostile')).scalars())
    with a["dba"].connect() as conn:
        public = conn.execute(sa.text("SELECT to_regnamespace('public') IS NOT NULL")).scalar_one()
    assert result["audit"]["k_anonymity"]["holds"] and [r.status for r in runs] == ["finished"]
    assert public and labels <= {"Male", "Female", evil, "F", "*"}


def test_another_runner_neither_lists_nor_forgets_a_runners_ledger(attack, other_runner, monkeypatch):
    """The release ledger's routines act on the caller's own entries: another runner lists none of the first one's
    releases and forgets none; the store's owner sees them."""
    from sqlanon import anonymize, releases
    from sqlanon.config import job_from_dict

    a = attack
    monkeypatch.setenv("SQLANON_TEST_LEDGER_KEY", "0123456789abcdef0123456789abcdef")
    config = adult_config(a["url"], ["sex", "race"], k=5, load_csv=False, schema=a["schema"])
    config |= {
        "name": "ledgered",
        "insensitive": [c for c in config["insensitive"] if c != "native-country"],
        "identifying": {"native-country": {"pseudonym": {"key_env": "SQLANON_TEST_LEDGER_KEY"}}},
        "ledger": {"person": "native-country", "check": False},  # recorded only: the column names no person
        "unit": "rows",
        "output": {"table": "ledgered", "schema": a["out"]},
    }
    published = anonymize(job_from_dict(config), RunOptions(metadata_schema=a["meta"]))
    run_id = published.search.run_id
    _name, url = other_runner
    as_other = job_from_dict(config | {"source": {**config["source"], "url": url}})
    assert releases(as_other, RunOptions(metadata_schema=a["meta"])) == []
    with pytest.raises(SqlanonError, match="no release of run"):
        releases(as_other, RunOptions(metadata_schema=a["meta"]), forget=run_id)
    as_dba = job_from_dict(config | {"source": {**config["source"], "url": str(a["dba"].url)}})
    assert [r["run"] for r in releases(as_dba, RunOptions(metadata_schema=a["meta"]))] == [run_id]
