"""Shared fixtures: bundled Adult data, job builders, DuckDB files and the PostgreSQL server."""

from __future__ import annotations

import dataclasses
import itertools
import os
import sysconfig
import uuid
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa

from sqlanon import RunOptions, hierarchies, search
from sqlanon.backends import open_database, unreachable_reason
from sqlanon.config import job_from_dict
from sqlanon.criteria import criteria_from_config
from sqlanon.model.job import Job, Selection
from sqlanon.model.names import KEPT_DIMENSION_PREFIX
from sqlanon.model.selection import levels_rank, selection_metric
from sqlanon.session import lattice_run
from sqlanon.steps import SearchResult, run_search
from sqlanon.store.migrate import migrate
from sqlanon.testing import every_node_violations

ADULT_DIR = Path(str(resources.files("sqlanon.data").joinpath("adult")))
ADULT_QIS = [
    "sex",
    "age",
    "race",
    "marital-status",
    "education",
    "native-country",
    "workclass",
    "occupation",
    "salary-class",
]
KS = [2, 5, 10]
#: the tables of sqlanon's metadata schema at the newest revision
METADATA_TABLES = {
    "alembic_version",
    "runs",
    "run_attributes",
    "lattice_nodes",
    "lattice_node_levels",
    "lattice_edges",
    "frequency_sets",
    "node_metrics",
    "jobs",
    "job_files",
    "owned_tables",
    "pseudonym_keys",
    "release_ledger",
}
PG_URL = os.environ.get("SQLANON_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def adult_config(url: str, qis: list[str], k: int = 5, load_csv: bool = True, **extra: Any) -> dict[str, Any]:
    """The config of a job over the bundled Adult data with file hierarchies for `qis` (absolute paths);
    the columns it names in no other role are insensitive."""
    source: dict[str, Any] = {"url": url, "table": extra.pop("table", "adult")}
    if load_csv:
        source.update(csv=str(ADULT_DIR / "adult.csv.gz"), csv_options={"delimiter": ";"})
    if "schema" in extra:
        source["schema"] = extra.pop("schema")
    config = {
        "source": source,
        "quasi_identifiers": {q: {"hierarchy": str(ADULT_DIR / "hierarchies" / f"{q}.csv")} for q in qis},
        "criteria": {"k_anonymity": {"k": k}},
        **extra,
    }
    return with_rest_insensitive(config)


def with_rest_insensitive(config: dict[str, Any]) -> dict[str, Any]:
    """The Adult config with every column it gives no role listed as insensitive."""
    named = set(config["quasi_identifiers"]) | set(config.get("sensitive") or [])
    for spec in config["criteria"].values():
        if isinstance(spec, dict):
            named |= {spec.get("attribute")} | set(spec.get("attributes") or [])
    return {**config, "insensitive": [c for c in ADULT_QIS if c not in named]}


def adult_job(url: str, qis: list[str], k: int = 5, load_csv: bool = True, **extra: Any) -> Job:
    """A job over the bundled Adult data with file hierarchies for `qis`."""
    return job_from_dict(adult_config(url, qis, k, load_csv, **extra), ADULT_DIR)


def reclassified(job: Job, **changes: Any) -> Job:
    """`dataclasses.replace(job, **changes)`, with the Adult columns left without a role made insensitive."""
    job = dataclasses.replace(job, **changes)
    named = set(job.qi_names) | set(job.sensitive)
    for criterion in job.criteria:
        named |= set(criterion.sensitive_attributes())
    return dataclasses.replace(job, insensitive=[c for c in ADULT_QIS if c not in named])


def with_cropped_hierarchies(job: Job, folder: Path, dropped: dict[str, tuple[str, ...]]) -> Job:
    """`job` with the Adult hierarchies of the QIs in `dropped` rewritten into `folder` without the lines of
    those values (values missing from a hierarchy)."""
    qis = []
    for qi in job.quasi_identifiers:
        if qi.column in dropped:
            lines = (ADULT_DIR / "hierarchies" / f"{qi.column}.csv").read_text().splitlines()
            kept = [line for line in lines if line.split(";")[0] not in dropped[qi.column]]
            (folder / f"{qi.column}.csv").write_text("\n".join(kept) + "\n")
            qi = dataclasses.replace(qi, hierarchy=folder / f"{qi.column}.csv")
        qis.append(qi)
    return dataclasses.replace(job, quasi_identifiers=qis)


class Recorded(list[str]):
    """A progress callback that keeps the phases it was given, for the steps of one verb (`steps`)."""

    def __call__(self, phase: str, done: int, total: int | None) -> None:
        self.append(phase)

    def steps(self, verb: str) -> list[str]:
        return [phase.split(": ", 1)[1] for phase in dict.fromkeys(self) if phase.startswith(f"{verb}: ")]


@pytest.fixture
def duck_url(tmp_path: Path) -> str:
    return f"duckdb:///{tmp_path / 'test.duckdb'}"


@pytest.fixture(scope="session")
def pg_server() -> str:
    problem = unreachable_reason(PG_URL)
    if problem:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL tests must run in CI but {PG_URL} is unreachable: {problem}")
        pytest.skip(f"no PostgreSQL server at {PG_URL} ({problem}); set SQLANON_TEST_PG_URL to run these tests")
    return PG_URL


@pytest.fixture
def pg_schema(pg_server: str):
    """A fresh schema for one test's tables (and its own sqlanon metadata schema), dropped afterwards."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    engine = sa.create_engine(pg_server)
    with engine.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{name}"')
    yield name
    with engine.begin() as conn:
        conn.exec_driver_sql(f'DROP SCHEMA "{name}" CASCADE')
        conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{name}_meta" CASCADE')
        for work in (
            conn.execute(
                sa.text("SELECT nspname FROM pg_namespace WHERE nspname LIKE :w"), {"w": f"{name}\\_meta\\_work\\_%"}
            )
            .scalars()
            .all()
        ):
            conn.exec_driver_sql(f'DROP SCHEMA "{work}" CASCADE')  # runners' work schemas
    engine.dispose()


def plpython_or_skip(conn: sa.Connection, meta: str, set_path: bool = True) -> None:
    """Skip (fail in CI) where the store `meta` has no PL/Python routines; else point the server's Python at this
    interpreter's site-packages (where sqlanon is installed, editable or not)."""
    installed = conn.execute(
        sa.text("SELECT to_regprocedure(:p) IS NOT NULL"), {"p": f'"{meta}".run_job(text, boolean, json)'}
    ).scalar_one()
    if not installed:
        message = "PL/Python is not installed in this PostgreSQL server (package postgresql-plpython3-NN)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    if not set_path:
        return
    conn.commit()
    db = open_database(conn.engine.url.render_as_string(hide_password=False))
    try:
        migrate(db, meta, python_path=sysconfig.get_paths()["purelib"])
    finally:
        db.dispose()


RUNNER = "sqlanon_ci_runner"  # CI maps the server's OS user to it for peer auth (.ci/run; docs/postgresql.md)


@pytest.fixture
def runner(pg_server: str, pg_schema: str):
    """A login role set up exactly as docs/postgresql.md's Security section says (`sqlanon grant-runner`, then
    SELECT on the Adult table and CREATE on an output schema; no superuser, no trust auth where CI configured peer).
    Yields its URL, the output schema and how the server authenticates it over the Unix socket."""
    from click.testing import CliRunner

    from sqlanon.cli import main

    meta, out = f"{pg_schema}_meta", f"{pg_schema}_out"
    search(adult_job(pg_server, ["sex"], k=1, schema=pg_schema), RunOptions(metadata_schema=meta))
    engine = sa.create_engine(pg_server)
    with engine.connect() as conn:
        plpython_or_skip(conn, meta)
        drop_role(conn, RUNNER)
        conn.exec_driver_sql(f'CREATE ROLE "{RUNNER}" LOGIN')
        conn.commit()
        granted = CliRunner().invoke(main, ["grant-runner", RUNNER, "--db", pg_server, "--metadata-schema", meta])
        assert granted.exit_code == 0, granted.output
        for statement in (
            f'CREATE SCHEMA "{out}"',
            f'GRANT USAGE, CREATE ON SCHEMA "{out}" TO "{RUNNER}"',
            f'GRANT USAGE ON SCHEMA "{pg_schema}" TO "{RUNNER}"',
            f'GRANT SELECT ON "{pg_schema}".adult TO "{RUNNER}"',
        ):
            conn.exec_driver_sql(statement)
        conn.commit()
        loopback_auth = local_auth_method(conn, RUNNER)
    engine.dispose()
    yield sa.engine.make_url(pg_server).set(username=RUNNER).render_as_string(hide_password=False), out, loopback_auth
    engine = sa.create_engine(pg_server)
    with engine.begin() as conn:
        conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{out}" CASCADE')
        drop_role(conn, RUNNER)
    engine.dispose()


def drop_role(conn: sa.Connection, role: str) -> None:
    if conn.execute(sa.text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": role}).first():
        conn.exec_driver_sql(f'DROP OWNED BY "{role}" CASCADE')
        conn.exec_driver_sql(f'DROP ROLE "{role}"')


def local_auth_method(conn: sa.Connection, role: str) -> str:
    """How the server authenticates `role` over its Unix socket (the loopback of in-server runs): the first
    `local` rule of pg_hba.conf for this database that names the role, a group of it, or all."""
    for databases, users, method in conn.execute(
        sa.text(
            "SELECT database, user_name, auth_method FROM pg_hba_file_rules WHERE type = 'local' "
            "AND error IS NULL ORDER BY line_number"
        )
    ):
        if not ({"all", conn.exec_driver_sql("SELECT current_database()").scalar()} & set(databases)):
            continue
        for user in users:
            if user in ("all", role) or (
                user.startswith("+")
                and conn.execute(sa.text("SELECT pg_has_role(:r, :g, 'MEMBER')"), {"r": role, "g": user[1:]}).scalar()
            ):
                return method
    return "none"


def user_tables(url: str, exclude_schema: str = "sqlanon") -> set[tuple[str, str]]:
    """(schema, table) of every table outside sqlanon's metadata schema and the catalogs."""
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT table_schema, table_name FROM information_schema.tables "
            "WHERE table_schema NOT IN ('information_schema', 'pg_catalog') AND table_catalog = current_database()"
        ).all()
    engine.dispose()
    return {(s, t) for s, t in rows if not s.startswith(exclude_schema)}


def metadata_tables(url: str, schema: str = "sqlanon") -> set[str]:
    """The tables of sqlanon's schema but the dimension tables it keeps across runs (`kept_dimension_tables`)."""
    return {t for t in _schema_tables(url, schema) if not t.startswith(KEPT_DIMENSION_PREFIX)}


def kept_dimension_tables(url: str, schema: str = "sqlanon") -> set[str]:
    """The dimension tables a DuckDB file keeps across runs (engine.star.KeptDimensions)."""
    return {t for t in _schema_tables(url, schema) if t.startswith(KEPT_DIMENSION_PREFIX)}


def _schema_tables(url: str, schema: str) -> set[str]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = (
            conn.execute(
                sa.text(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = :s "
                    "AND table_catalog = current_database()"
                ),
                {"s": schema},
            )
            .scalars()
            .all()
        )
    engine.dispose()
    return set(rows)


@pytest.fixture(scope="session")
def spark_url(tmp_path_factory) -> str:
    """One local Spark session for the whole run (2 cores, 2 shuffle partitions, 1 GB of driver memory), its
    warehouse and sqlanon's metadata store in a temporary folder."""
    from sqlanon.backends.spark_dbapi import require_spark
    from sqlanon.errors import ConfigError

    try:
        require_spark()
    except ConfigError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"Spark tests must run in CI: {exc}")
        pytest.skip(str(exc))
    os.environ.setdefault("SQLANON_SPARK_CONF", "spark.sql.shuffle.partitions=2,spark.driver.memory=1g")
    folder = tmp_path_factory.mktemp("spark")
    return f"spark://local[2]?warehouse={folder / 'warehouse'}&metadata=duckdb:///{folder / 'metadata.duckdb'}"


@pytest.fixture(scope="session")
def spark_adult(spark_url: str) -> str:
    """Adult loaded once into the Spark session's catalog (a Parquet table)."""
    search(adult_job(spark_url, ["sex"], k=1))
    return spark_url


@pytest.fixture(scope="session")
def adult_duck(tmp_path_factory) -> str:
    """Adult loaded once into a DuckDB file shared by the Adult tests."""
    url = f"duckdb:///{tmp_path_factory.mktemp('adult') / 'adult.duckdb'}"
    search(adult_job(url, ["sex"], k=1))  # loads the CSV
    return url


@pytest.fixture(scope="session")
def all_qi_violations(adult_duck: str) -> dict[int, dict[tuple, int]]:
    """The expensive oracle, computed once: every node's violating tuples over all 9 QIs for every k in
    KS (so it answers any suppression limit too)."""
    job = adult_job(adult_duck, ADULT_QIS, load_csv=False)
    return dict(zip(KS, k_violations_rolled_up(job, KS)))


def k_violations_rolled_up(job: Job, ks: list[int]) -> list[dict[tuple[int, ...], int]]:
    """Brute force in numpy, for k-anonymity: every node's violating tuples for each k, each node rolled up from
    the table's level-0 frequency set (read once, a few thousand rows) by its hierarchies' paths. Independent of
    the search's SQL, like sqlanon.testing.every_node_violations (a GROUP BY of the table per node), which took
    133 s over Adult's 9-QI lattice where this takes seconds."""
    qis = [q.column for q in job.quasi_identifiers]
    found = hierarchies(job)
    engine = sa.create_engine(job.source.url)
    columns = ", ".join(f'CAST("{c}" AS VARCHAR)' for c in qis)
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(f'SELECT {columns}, COUNT(*) FROM "{job.source.table}" GROUP BY ALL').all()
    engine.dispose()
    counts = np.array([row[-1] for row in rows], dtype=np.int64)
    codes = []  # per QI, per level: each level-0 cell's ancestor there, as an integer (its path up to the top)
    for j, column in enumerate(qis):
        path_of = {path[0]: path for path in found[column].paths}
        codes.append(
            [
                np.unique([path_of[row[j]][level:] for row in rows], axis=0, return_inverse=True)[1].ravel()
                for level in range(found[column].height + 1)
            ]
        )
    violations: list[dict[tuple[int, ...], int]] = [{} for _ in ks]
    for node in itertools.product(*(range(found[c].height + 1) for c in qis)):
        key = np.zeros(len(rows), dtype=np.int64)
        for j, level in enumerate(node):
            key = key * (int(codes[j][level].max()) + 1) + codes[j][level]
        sizes = np.bincount(np.unique(key, return_inverse=True)[1].ravel(), weights=counts)
        for found_k, k in zip(violations, ks):
            found_k[node] = int(sizes[sizes < k].sum())
    return violations


@pytest.fixture(scope="session")
def all_qi_oracle(all_qi_violations) -> dict[int, set]:
    """Satisfying nodes over all 9 QIs without suppression, for every k in KS."""
    return {k: {n for n, tuples in found.items() if tuples == 0} for k, found in all_qi_violations.items()}


def minimal_only_search(job: Job, policy: str = "max_distribution") -> SearchResult:
    """The search as a publication choosing among the minimal nodes by `policy` runs it (SearchContext.minimal_only;
    by default a policy on the data, which reads every minimal node: SearchContext.rank is None)."""
    job = dataclasses.replace(job, select=Selection(policy=policy))
    with lattice_run(job, RunOptions(), "anonymize") as run:
        assert run.ctx.minimal_only
        return run_search(job, run.ctx)


def assert_best_ranked(found: SearchResult, minimal: list[tuple[int, ...]], policy: str) -> tuple[int, ...]:
    """`found`, a search ranked by a policy on the levels alone (SearchContext.rank), returns minimal nodes among
    `minimal` (every minimal node), the best of them the best of `minimal`, and leaves out only nodes that rank
    after it; returns that best node."""
    rank = levels_rank(selection_metric(policy, None), found.heights)
    assert rank is not None
    best = min(minimal, key=rank, default=None)
    assert set(found.minimal) <= set(minimal)
    assert min(found.minimal, key=rank, default=None) == best
    assert all(rank(node) > rank(best) for node in set(minimal) - set(found.minimal))
    assert found.every_minimal_node == (found.stats.unchecked_outranked == 0)
    assert found.every_minimal_node or not found.every_passing_node
    return best


def passing(violations: dict[tuple, int], max_suppressed: int) -> set[tuple]:
    """The oracle's passing nodes under a suppression limit."""
    return {n for n, tuples in violations.items() if tuples <= max_suppressed}


# --- the criteria cases over five Adult QIs (sensitive: occupation) -------------------

QIS = ["sex", "age", "race", "marital-status", "education"]
CASES = {
    "distinct l=3": {"distinct_l_diversity": {"attribute": "occupation", "l": 3}},
    "entropy l=3": {"entropy_l_diversity": {"attribute": "occupation", "l": 3}},
    "recursive c=4 l=3": {"recursive_l_diversity": {"attribute": "occupation", "c": 4, "l": 3}},
    "t equal 0.2": {"t_closeness": {"attribute": "occupation", "t": 0.2, "distance": "equal"}},
    "t kl 0.3": {"t_closeness": {"attribute": "occupation", "t": 0.3, "distance": "kl"}},
    "t hierarchical 0.15": {
        "t_closeness": {
            "attribute": "occupation",
            "t": 0.15,
            "distance": "hierarchical",
            "hierarchy": str(ADULT_DIR / "hierarchies" / "occupation.csv"),
        }
    },
    "k=5 and distinct l=4": {"k_anonymity": {"k": 5}, "distinct_l_diversity": {"attribute": "occupation", "l": 4}},
    "pd-recursive c=2 l=3 Y": {
        "recursive_l_diversity": {
            "attribute": "occupation",
            "c": 2,
            "l": 3,
            "dont_care": ["Prof-specialty", "Craft-repair"],
        }
    },
    "npd-recursive": {
        "npd_recursive_l_diversity": {
            "attribute": "occupation",
            "c1": 3,
            "c2": 2,
            "l": 3,
            "w": ["Sales"],
            "dont_care": ["Prof-specialty"],
        }
    },
    "entropy l=4 Y": {
        "entropy_l_diversity": {"attribute": "occupation", "l": 4, "dont_care": ["Prof-specialty", "Exec-managerial"]}
    },
    "beta basic 1.0": {"beta_likeness": {"attribute": "occupation", "beta": 1.0, "variant": "basic"}},
    "delta disclosure 3.0": {"delta_disclosure": {"attribute": "occupation", "delta": 3.0}},
}


@pytest.fixture(scope="session")
def adult_violations(adult_duck: str) -> dict[str, dict[tuple, int]]:
    """Every criterion case over the 5-QI Adult lattice: each node's violating tuples, in one exhaustive pass
    (it answers every suppression limit)."""
    job = adult_job(adult_duck, QIS, load_csv=False)
    sets = [criteria_from_config(spec) for spec in CASES.values()]
    job = reclassified(job, sensitive=["occupation"])
    found, _ = every_node_violations(job, sets)
    return dict(zip(CASES, found))


# the fast part of the suite (README): pytest -m "not slow and not postgres and not spark"
ORACLE_FIXTURES = {"all_qi_violations", "all_qi_oracle", "adult_violations", "adult_oracle"}
SLOW_TESTS = {
    "test_criteria_on_random_tables",
    "test_every_strategy_equals_the_reference_on_random_tables",
    "test_runs_killed_at_random_points_leave_nothing_behind",
}
#: tests that share one worker when pytest-xdist runs the suite (--dist loadgroup): PostgreSQL's (they share the
#: server's roles and its default metadata schema, and some list every table of the database), Spark's (one session
#: per worker costs half a minute) and each session-scoped oracle's (computed once, not once per worker; a test's
#: fixture names hold those its fixtures use)
XDIST_GROUPS = ("postgres", "spark", "adult_violations", "all_qi_violations")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark what needs a PostgreSQL server (its fixtures, or a `postgresql` parameter), what needs Spark (its
    fixtures) and what is slow (the brute-force oracles over whole lattices, the random-table and
    kill-at-random-points runs), and put the tests that share a worker in their group (`XDIST_GROUPS`)."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "pg_server" in fixtures or "postgresql" in params.values():
            item.add_marker(pytest.mark.postgres)
        if fixtures & {"spark_url", "spark_adult"}:
            item.add_marker(pytest.mark.spark)
        if fixtures & ORACLE_FIXTURES or item.originalname in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
        group = next((g for g in XDIST_GROUPS if item.get_closest_marker(g) or g in fixtures), None)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def pytest_collection_finish(session: pytest.Session) -> None:
    """In a pytest-xdist worker that groups tests (--dist=loadgroup), the groups took (a grouped test's id ends in
    @group): a pytest whose ids xdist cannot extend would spread the PostgreSQL tests over two workers, which then
    drop each other's roles (pytest-dev/pytest-xdist#1386)."""
    if not getattr(session.config.option, "loadgroup", False):  # set in a worker only
        return
    lost = next((i.nodeid for i in session.items if i.get_closest_marker("xdist_group") and "@" not in i.nodeid), None)
    if lost is not None:
        pytest.exit(
            f"pytest-xdist did not group {lost} under pytest {pytest.__version__} (pytest-dev/pytest-xdist#1386): "
            'install "pytest<9.2" (pyproject\'s test extra), or run in one process with -n 0',
            returncode=pytest.ExitCode.USAGE_ERROR,
        )


def chosen_release(
    job: Job, options: RunOptions | None = None, attribute: str = "occupation"
) -> tuple[tuple[int, ...], Any]:
    """The node the job's selection chooses, and its release over `attribute` as the report shows it (the
    report's own steps: the search, the analysis' cube, the selection)."""
    from sqlanon.analysis.releases import node_analysis
    from sqlanon.session import lattice_run
    from sqlanon.steps import run_search, select_node

    with lattice_run(job, options or RunOptions(), "report") as run:
        result = run_search(job, run.ctx)
        with node_analysis(run.ctx, attribute, [attribute]) as analysis:
            node = select_node(job, run.ctx, result)
            chosen = analysis.chosen(node, [attribute])
        run.finish({})
    return node, chosen
