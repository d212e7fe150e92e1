"""The bad-input corpus: every malformed input gets exit code 2 and a one-line message that names the
problem, the tables stay as they were (same content, none added or dropped), and no output or scratch
table is left behind. The reliability page's table (docs/reliability.md) is this corpus's summary, checked below."""

from __future__ import annotations

import gzip
import hashlib
import shutil
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml
from click.testing import CliRunner

from sqlanon import anonymize
from sqlanon.cli import main
from sqlanon.config import job_from_dict

from .conftest import ADULT_DIR, ADULT_QIS, METADATA_TABLES, kept_dimension_tables, metadata_tables

ROOT = Path(__file__).resolve().parent.parent
ROWS = 2000
KEY = "0123456789abcdef0123456789abcdef"


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A DuckDB file with `people`: 2,000 Adult rows and a direct identifier, patient_id."""
    path = tmp_path_factory.mktemp("corpus") / "template.duckdb"
    engine = sa.create_engine(f"duckdb:///{path}")
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "CREATE TABLE people AS SELECT row_number() OVER () AS patient_id, * FROM "
                f"read_csv(:f, delim = ';') LIMIT {ROWS}"
            ),
            {"f": str(ADULT_DIR / "adult.csv.gz")},
        )
    engine.dispose()
    return path


@dataclass
class Env:
    """One case's folder: a copy of the template database, the hierarchies, the config and the CLI args."""

    folder: Path
    config: dict[str, Any]
    args: list[str] = field(default_factory=list)
    command: str = "anonymize"

    @property
    def url(self) -> str:
        return f"duckdb:///{self.folder / 'db.duckdb'}"

    def sql(self, *statements: str) -> None:
        engine = sa.create_engine(self.url)
        with engine.begin() as conn:
            for statement in statements:
                conn.exec_driver_sql(statement)
        engine.dispose()

    def hierarchy(self, name: str, text: str | bytes) -> str:
        path = self.folder / "h" / name
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        return f"h/{name}"

    def qi(self, column: str, spec: Any) -> None:
        self.config["quasi_identifiers"][column] = spec

    def criteria(self, **criteria: Any) -> None:
        self.config["criteria"] = criteria

    def without_role(self, column: str) -> None:
        for role in ("sensitive", "insensitive"):
            if column in self.config.get(role, []):
                self.config[role] = [c for c in self.config[role] if c != column]


def base_config() -> dict[str, Any]:
    """A valid job: 3 QIs, occupation sensitive, patient_id dropped, the rest insensitive."""
    qis = ["sex", "age", "race"]
    return {
        "source": {"url": "db.duckdb", "table": "people"},
        "quasi_identifiers": {q: {"hierarchy": f"h/{q}.csv"} for q in qis},
        "sensitive": ["occupation"],
        "insensitive": [c for c in ADULT_QIS if c not in qis + ["occupation"]],
        "identifying": ["patient_id"],
        "criteria": {"k_anonymity": {"k": 5}},
        "output": {"table": "people_anon"},
    }


def prepare(folder: Path, template: Path) -> Env:
    shutil.copy(template, folder / "db.duckdb")
    (folder / "h").mkdir()
    for name in ("sex", "age", "race", "occupation"):
        shutil.copy(ADULT_DIR / "hierarchies" / f"{name}.csv", folder / "h" / f"{name}.csv")
    return Env(folder, base_config())


def snapshot(url: str, folder: Path) -> dict[tuple[str, str], str]:
    """Every table (metadata schema aside) with a digest of its content, the dimension tables kept across runs,
    and every file of the case's folder (but the database's own) with a digest of its bytes: what must not
    change."""
    found = {
        ("file", str(path.relative_to(folder))): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and not path.name.startswith("db.duckdb")
    }
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        tables = conn.exec_driver_sql(
            "SELECT table_schema, table_name FROM information_schema.tables "
            "WHERE table_schema <> 'sqlanon' AND table_catalog = current_database()"
        ).all()
        for schema, table in tables:
            ref = '"' + schema + '"."' + table.replace('"', '""') + '"'
            rows = conn.exec_driver_sql(f"SELECT * FROM {ref} ORDER BY ALL").all()  # small test tables only
            found[(schema, table)] = hashlib.sha256(repr(rows).encode()).hexdigest()
    engine.dispose()
    found.update({("kept", name): "" for name in kept_dimension_tables(url)})
    return found


def metadata_leftovers(url: str) -> set[str]:
    """Tables in sqlanon's schema besides its own: a run's dimension or scratch tables left behind (the dimension
    tables kept across runs are in the snapshot)."""
    return metadata_tables(url) - METADATA_TABLES


# --- the cases ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    category: str
    fragment: str
    change: Callable[[Env], None]


def _set(path: str, value: Any) -> Callable[[Env], None]:
    """Set config[a][b]... = value (None removes the key)."""

    def change(env: Env) -> None:
        *parents, last = path.split(".")
        node = env.config
        for key in parents:
            node = node.setdefault(key, {})
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value

    return change


def _criteria(**spec: Any) -> Callable[[Env], None]:
    return lambda env: env.criteria(**spec)


def _both(first: Callable[[Env], None], then: Callable[[Env], None]) -> Callable[[Env], None]:
    def change(env: Env) -> None:
        first(env)
        then(env)

    return change


def _raw_yaml(text: str) -> Callable[[Env], None]:
    def change(env: Env) -> None:
        env.config = {"__raw__": text}

    return change


def _hierarchy(column: str, text: str | bytes) -> Callable[[Env], None]:
    return lambda env: env.qi(column, {"hierarchy": env.hierarchy(f"{column}-bad.csv", text)})


def _then(*changes: Callable[[Env], None]) -> Callable[[Env], None]:
    def change(env: Env) -> None:
        for step in changes:
            step(env)

    return change


def _presence_of_subset(*changes: Callable[[Env], None]) -> Callable[[Env], None]:
    """delta-presence over a research subset (the people named in table people itself), then `changes`."""
    return _then(
        _criteria(delta_presence={"d_min": 0.0, "d_max": 0.5}),
        _set("subset", {"table": "people", "key": "patient_id"}),
        *changes,
    )


def _sql(*statements: str) -> Callable[[Env], None]:
    return lambda env: env.sql(*statements)


def _args(*args: str) -> Callable[[Env], None]:
    return lambda env: env.args.extend(args)


def _roles(**roles: Any) -> Callable[[Env], None]:
    def change(env: Env) -> None:
        env.config.update(roles)

    return change


def _people_anon_by_user(env: Env) -> None:
    env.sql("CREATE TABLE people_anon AS SELECT 1 AS mine")


def _pseudonym_env(variable: str) -> Callable[[Env], None]:
    return _roles(identifying={"patient_id": {"pseudonym": {"key_env": variable}}})


def _ledger_release(*statements: str, key: bytes | None = None) -> Callable[[Env], None]:
    """The job keeps a ledger (persons by patient_id's pseudonym), and an earlier release of it was published (to
    people_release1, with `key` where given), then `statements` ran; the case publishes people_anon."""

    def change(env: Env) -> None:
        env.config["identifying"] = {"patient_id": {"pseudonym": {"key_env": "SQLANON_BAD_INPUT_KEY"}}}
        env.config["ledger"] = {"person": "patient_id"}
        first = {**env.config, "output": {"table": "people_release1"}}
        if key is not None:
            (env.folder / "earlier.key").write_bytes(key)
            first["identifying"] = {"patient_id": {"pseudonym": {"key_file": "earlier.key"}}}
        anonymize(job_from_dict(first, env.folder))
        env.sql(*statements)

    return change


def _key_file(content: bytes) -> Callable[[Env], None]:
    def change(env: Env) -> None:
        (env.folder / "key").write_bytes(content)
        env.config["identifying"] = {"patient_id": {"pseudonym": {"key_file": "key"}}}

    return change


def _csv_source(env: Env, name: str = "fromcsv") -> None:
    csv = env.folder / "people.csv"
    with gzip.open(ADULT_DIR / "adult.csv.gz", "rt") as src:
        csv.write_text("".join(line for _, line in zip(range(ROWS + 1), src)))
    env.config["source"].update(table=name, csv="people.csv", csv_options={"delimiter": ";"})
    env.config["identifying"] = []


def _loaded_from_another_file(env: Env) -> None:
    _csv_source(env, "loaded")
    other = env.folder / "other.csv"
    other.write_text((env.folder / "people.csv").read_text())
    result = CliRunner().invoke(main, ["load", str(other), "--table", "loaded", "--delimiter", ";", "--db", env.url])
    assert result.exit_code == 0, result.output
    (env.folder / "people.csv").write_text(
        (env.folder / "people.csv").read_text() + "Male;39;White;Never-married;"
        "Bachelors;United-States;State-gov;Adm-clerical;<=50K\n"
    )


def _command(command: str, *args: str) -> Callable[[Env], None]:
    def change(env: Env) -> None:
        env.command = command
        env.args.extend(args)

    return change


def _method(method: str, **settings: Any) -> Callable[[Env], None]:
    """Publish by `method` (mondrian; anatomy: exact QIs, no criteria, l values per bucket; randomize: noise on
    age, no criteria; condense: synthetic ages, k = 5; differential_privacy: epsilon 1, delta 1e-5, the medium
    degree, no criteria)."""

    def change(env: Env) -> None:
        env.config["output"].update(method=method, **settings)
        if method == "anatomy":
            env.config["quasi_identifiers"] = list(env.config["quasi_identifiers"])
            env.config.pop("criteria")
            env.config["output"].setdefault("l", 2)
        if method == "condense":  # synthetic ages from groups of 5, the other columns dropped
            env.config["quasi_identifiers"] = ["age"]
            env.config.pop("criteria")
            dropped = env.config.pop("sensitive") + env.config.pop("insensitive") + ["sex", "race"]
            env.config["identifying"] = env.config["identifying"] + dropped
            env.config["unit"] = "rows"  # the dropped columns repeat: rows, not persons, are what k counts
            env.config["output"].setdefault("k", 5)
        if method == "differential_privacy":  # the QIs published, every other column dropped
            env.config.pop("criteria")
            env.config["identifying"] += env.config.pop("sensitive") + env.config.pop("insensitive")
            env.config["unit"] = "rows"  # the dropped columns repeat: rows, not persons, are what k counts
            for key, value in {"epsilon": 1.0, "delta": 1e-5, "generalization": "medium"}.items():
                env.config["output"].setdefault(key, value)
            if "search" in settings and "generalization" not in settings:
                env.config["output"].pop("generalization")
        if method == "randomize":  # age with noise, the other QIs published as they are
            env.config["quasi_identifiers"] = ["age"]
            env.config["insensitive"] += ["sex", "race"]
            env.config.pop("criteria")
            env.config["output"].setdefault("noise", {"age": {"distribution": "uniform", "width": 10}})

    return change


def _file(name: str, text: str) -> Callable[[Env], None]:
    return lambda env: (env.folder / name).write_text(text)


def _run_of_another_job(env: Env) -> None:
    """A finished anonymize run of another job (job `other`), the database's run 1."""
    other = {**env.config, "name": "other", "output": {"table": "people_other"}}
    (env.folder / "other.yaml").write_text(yaml.safe_dump(other, sort_keys=False))
    result = CliRunner().invoke(main, ["anonymize", str(env.folder / "other.yaml")])
    assert result.exit_code == 0, result.output


def _release_series(*tables: str, table: str | None = None) -> Callable[[Env], None]:
    """An inference job over releases named by their tables (and inference.table)."""

    def change(env: Env) -> None:
        env.command = "inference"
        env.config.pop("output")
        env.config["identifying"] = []
        env.config["releases"] = {"pseudonym": "patient_id", "series": [{"name": t, "table": t} for t in tables]}
        if table:
            env.config["inference"] = {"table": table}

    return change


REPEAT_PERSON = "UPDATE people SET patient_id = 1 WHERE patient_id IN (2, 3)"
QI3 = ["sex", "age", "race"]
NAN, INF = float("nan"), float("inf")
CASES: dict[str, Case] = {
    # the config's shape
    "yaml-syntax": Case("config file", "not valid YAML", _raw_yaml("source: [unclosed\n")),
    "yaml-list": Case("config file", "the config must be a mapping", _raw_yaml("- a\n- b\n")),
    "yaml-empty": Case("config file", "the config must be a mapping", _raw_yaml("")),
    "yaml-duplicate-qi": Case(
        "config file",
        "key 'age' is given twice",
        _raw_yaml(
            "source: {url: db.duckdb, table: people}\nquasi_identifiers:\n  age: h/age.csv\n  age: h/age.csv\n"
            "criteria: {k_anonymity: {k: 2}}\n"
        ),
    ),
    "yaml-duplicate-criterion": Case(
        "config file",
        "key 'k_anonymity' is given twice",
        _raw_yaml(
            "source: {url: db.duckdb, table: people}\nquasi_identifiers: {age: h/age.csv}\ncriteria:\n"
            "  k_anonymity: {k: 2}\n  k_anonymity: {k: 50}\n"
        ),
    ),
    "config-missing": Case("config file", "not found", lambda env: env.args.append("MISSING")),
    "unknown-top-key": Case("config file", "unknown key 'criterias'", _set("criterias", {})),
    "no-source": Case("config file", "the job has no source: add source:", _set("source", None)),
    "no-criteria": Case("config file", "the config has no criteria", _set("criteria", None)),
    "no-qis": Case("config file", "quasi_identifiers must map", _set("quasi_identifiers", {})),
    "source-typo": Case("config file", "unknown key 'tabel'", _set("source.tabel", "x")),
    "unknown-criterion": Case("config file", "unknown criterion 'k_anonimity'", _criteria(k_anonimity={"k": 5})),
    "qi-two-sources": Case(
        "config file",
        "needs exactly one of hierarchy",
        lambda env: env.qi("age", {"hierarchy": "h/age.csv", "generate": "intervals"}),
    ),
    "unknown-generator": Case(
        "config file", "unknown generator 'buckets'", lambda env: env.qi("age", {"generate": "buckets"})
    ),
    "unknown-strategy": Case(
        "config file", "search.strategy 'greedy' is unknown", _set("search", {"strategy": "greedy"})
    ),
    "unknown-base": Case("config file", "search.base 'disk' is unknown", _set("search", {"base": "disk"})),
    "monotone-not-bool": Case("config file", "must be true or false", _set("search", {"assume_monotone": "yes"})),
    "select-both": Case(
        "config file", "exactly one of policy", _set("select", {"policy": "min_suppression", "metric": "precision"})
    ),
    "select-unknown": Case("config file", "select.policy 'best' is unknown", _set("select", {"policy": "best"})),
    "select-gs-factor": Case(
        "parameters", "gs_factor must be a number from 0", _set("select", {"metric": "loss", "gs_factor": 2})
    ),
    "select-aggregate-of-one": Case(
        "parameters", "aecs has one figure", _set("select", {"metric": "aecs", "aggregate": "max"})
    ),
    "output-no-table": Case(
        "config file", "output is missing the required key 'table'", _set("output", {"schema": "main"})
    ),
    "grant-on-duckdb": Case("config file", "output.grant_to needs PostgreSQL", _set("output.grant_to", ["analysts"])),
    "bad-url": Case("config file", "not a database URL", _set("source.url", "duckdb://:bad:url:")),
    "unit-unknown": Case(
        "config file", "unit: column 'persons' is not listed under identifying", _set("unit", "persons")
    ),
    "unit-a-qi": Case("config file", "unit: column 'age' is a quasi-identifier", _set("unit", {"column": "age"})),
    "unit-dropped": Case("config file", "unit: column 'patient_id' is dropped", _set("unit", "patient_id")),
    "ledger-person-dropped": Case(
        "config file", "ledger.person: column 'patient_id' is dropped", _set("ledger", {"person": "patient_id"})
    ),
    "ledger-no-person": Case("config file", "ledger.person is missing", _set("ledger", {"check": True})),
    "ledger-m-invariance-without-m": Case(
        "config file",
        "ledger.m is m-invariance's m",
        _then(
            _pseudonym_env("SQLANON_BAD_INPUT_KEY"), _set("ledger", {"person": "patient_id", "check": "m-invariance"})
        ),
    ),
    "mondrian-suppression": Case(
        "config file", "mondrian suppresses no tuples", _then(_method("mondrian"), _set("suppression", {"limit": 0.02}))
    ),
    "anatomy-hierarchies": Case(
        "config file",
        "would ignore the hierarchy given",
        _then(_method("anatomy"), _set("quasi_identifiers", {q: {"hierarchy": f"h/{q}.csv"} for q in ("sex", "age")})),
    ),
    "anatomy-invariant-without-ledger": Case(
        "config file",
        "output.invariant bucketizes after the job's previous release",
        _method("anatomy", invariant=True),
    ),
    "anatomy-suppression": Case(
        "config file", "anatomy suppresses no tuples", _then(_method("anatomy"), _set("suppression", {"limit": 10}))
    ),
    "anatomy-one-table-twice": Case(
        "config file",
        "output.table and output.sensitive_table both name 'main.people_anon'",
        _method("anatomy", sensitive_table="PEOPLE_ANON"),
    ),
    "register-output-is-source": Case(
        "config file",
        "is the source table",
        _then(_set("output.table", "People"), _command("job register", "census", "CONFIG", "--db", "db.duckdb")),
    ),
    "register-no-source": Case(
        "config file",
        "a registered job reads a table of its database",
        _then(_set("source", None), _command("job register", "census", "CONFIG", "--db", "db.duckdb")),
    ),
    "release-is-source": Case("config file", "is the job's source table", _release_series("people")),
    "inference-table-is-release": Case(
        "config file",
        "is a table of release",
        _then(_sql("CREATE TABLE r1 AS SELECT * FROM people"), _release_series("r1", table="R1")),
    ),
    "sqlite-url": Case("config file", "is not supported", _set("source.url", "sqlite:///x.db")),
    "duckdb-url-two-slashes": Case("config file", "three slashes", _set("source.url", "duckdb://db.duckdb")),
    # criteria and generator parameters
    "k-zero": Case("parameters", "k must be >= 1", _criteria(k_anonymity={"k": 0})),
    "k-negative": Case("parameters", "k must be >= 1", _criteria(k_anonymity={"k": -3})),
    "k-fraction": Case("parameters", "whole number", _criteria(k_anonymity={"k": 2.5})),
    "k-text": Case("parameters", "whole number", _criteria(k_anonymity={"k": "five"})),
    "k-bool": Case("parameters", "whole number", _criteria(k_anonymity={"k": True})),
    "k-nan": Case("parameters", "whole number", _criteria(k_anonymity={"k": NAN})),
    "k-above-table": Case("parameters", f"larger than the table ({ROWS} rows)", _criteria(k_anonymity={"k": 5000})),
    "risk-zero": Case("parameters", "threshold must be > 0", _criteria(average_risk={"threshold": 0})),
    "risk-nan": Case("parameters", "threshold must be a finite number", _criteria(average_risk={"threshold": NAN})),
    "risk-below-table": Case(
        "parameters", f"is below 1/{ROWS}, the risk of the whole table", _criteria(average_risk={"threshold": 1e-9})
    ),
    "uniqueness-above-1": Case(
        "parameters", "threshold must be between 0.0 and 1.0", _criteria(sample_uniqueness={"threshold": 2})
    ),
    "k-map-no-population": Case("parameters", "population_size or sampling_fraction", _criteria(k_map={"k": 5})),
    "uniqueness-model": Case(
        "parameters",
        "model 'poisson' is unknown",
        _criteria(population_uniqueness={"threshold": 0.01, "sampling_fraction": 0.1, "model": "poisson"}),
    ),
    "uniqueness-population": Case(
        "parameters",
        "is smaller than the table",
        _criteria(population_uniqueness={"threshold": 0.01, "population_size": 2}),
    ),
    "presence-no-subset": Case(
        "parameters", "declare them as a research subset", _criteria(delta_presence={"d_min": 0.0, "d_max": 0.5})
    ),
    "presence-bounds-crossed": Case(
        "parameters", "is above d_max", _criteria(delta_presence={"d_min": 0.6, "d_max": 0.5})
    ),
    "subset-unknown-column": Case(
        "parameters", "subset.column 'nowhere' is not in table", _set("subset", {"column": "nowhere"})
    ),
    "subset-text-column": Case(
        "parameters", "must be a BOOLEAN or an integer column of 0 and 1", _set("subset", {"column": "education"})
    ),
    "subset-mondrian-presence": Case(
        "parameters", "which Mondrian's partitions of the subset do not count", _presence_of_subset(_method("mondrian"))
    ),
    "profitability-attack": Case(
        "parameters",
        "attack: True is not supported",
        _criteria(profitability={"attacker": "prosecutor", "attack": True}),
    ),
    "profitability-attacker": Case(
        "parameters",
        "attacker must be one of prosecutor, journalist",
        _criteria(profitability={"attacker": "marketer"}),
    ),
    "profitability-journalist-no-subset": Case(
        "parameters", "declare them as a research subset", _criteria(profitability={"attacker": "journalist"})
    ),
    "profitability-k-above-table": Case(
        "parameters",
        "more than the table's 2000 rows; raise cost_benefit.adversary_cost",
        _both(_set("cost_benefit", {"adversary_gain": 1e6}), _criteria(profitability={"attacker": "prosecutor"})),
    ),
    "cost-benefit-negative": Case(
        "parameters",
        "cost_benefit.adversary_cost must be a finite number >= 0",
        _both(_set("cost_benefit", {"adversary_cost": -1}), _criteria(profitability={"attacker": "prosecutor"})),
    ),
    "cost-benefit-unread": Case(
        "parameters", "cost_benefit is read by the profitability criterion", _set("cost_benefit", {"adversary_cost": 1})
    ),
    "classification-no-targets": Case(
        "parameters", "select.targets names the attributes", _set("select", {"metric": "classification"})
    ),
    "targets-without-classification": Case(
        "parameters",
        "select.targets names the attributes",
        _set("select", {"metric": "loss", "targets": ["occupation"]}),
    ),
    "classification-target-not-sensitive": Case(
        "parameters",
        "select.targets: 'nowhere' is neither a sensitive attribute nor a quasi-identifier",
        _set("select", {"metric": "classification", "targets": ["nowhere"]}),
    ),
    "payout-journalist-no-subset": Case(
        "parameters",
        "select.attacker journalist counts each class's rows in the population",
        _set("select", {"metric": "publisher_payout", "attacker": "journalist"}),
    ),
    "attacker-without-payout": Case(
        "parameters",
        "select.attacker names the publisher payout's adversary",
        _set("select", {"metric": "loss", "attacker": "journalist"}),
    ),
    "payout-attacker-unknown": Case(
        "parameters",
        "select.attacker 'marketer' is unknown; choose one of prosecutor, journalist",
        _set("select", {"metric": "publisher_payout", "attacker": "marketer"}),
    ),
    "k-map-population-below-table": Case(
        "parameters", "is smaller than the table", _criteria(k_map={"k": 5, "population_size": 2})
    ),
    "t-nan": Case(
        "parameters", "t must be a finite number", _criteria(t_closeness={"attribute": "occupation", "t": NAN})
    ),
    "t-inf": Case(
        "parameters", "t must be a finite number", _criteria(t_closeness={"attribute": "occupation", "t": INF})
    ),
    "t-above-1": Case(
        "parameters", "t must be between 0 and 1", _criteria(t_closeness={"attribute": "occupation", "t": 1.5})
    ),
    "t-distance": Case(
        "parameters",
        "distance 'cosine' is unknown",
        _criteria(t_closeness={"attribute": "occupation", "t": 0.2, "distance": "cosine"}),
    ),
    "t-ordered-text": Case(
        "parameters",
        "values, which are not numbers: give order: [values, ...] or hierarchy: FILE",
        _criteria(t_closeness={"attribute": "occupation", "t": 0.2, "distance": "ordered"}),
    ),
    "t-hierarchy-missing-values": Case(
        "parameters",
        "value(s) missing from its hierarchy",
        _criteria(
            t_closeness={
                "attribute": "occupation",
                "t": 0.2,
                "distance": "hierarchical",
                "hierarchy": str(ADULT_DIR / "hierarchies" / "race.csv"),
            }
        ),
    ),
    "c-nan": Case(
        "parameters",
        "c must be a finite number",
        _criteria(recursive_l_diversity={"attribute": "occupation", "c": NAN, "l": 2}),
    ),
    "c-zero": Case(
        "parameters", "c must be > 0", _criteria(recursive_l_diversity={"attribute": "occupation", "c": 0, "l": 2})
    ),
    "c1-nan": Case(
        "parameters",
        "c1 must be a finite number",
        _criteria(npd_recursive_l_diversity={"attribute": "occupation", "c1": NAN, "c2": 5, "l": 2, "w": ["Sales"]}),
    ),
    "c2-nan": Case(
        "parameters",
        "c2 must be a finite number",
        _criteria(npd_recursive_l_diversity={"attribute": "occupation", "c1": 3, "c2": NAN, "l": 2, "w": ["Sales"]}),
    ),
    "c2-inf": Case(
        "parameters",
        "c2 must be a finite number",
        _criteria(npd_recursive_l_diversity={"attribute": "occupation", "c1": 3, "c2": -INF, "l": 2, "w": ["Sales"]}),
    ),
    "c2-above-100": Case(
        "parameters",
        "c2 must be between 0 and 100",
        _criteria(npd_recursive_l_diversity={"attribute": "occupation", "c1": 3, "c2": 150, "l": 2, "w": ["Sales"]}),
    ),
    "l-nan": Case(
        "parameters", "l must be a whole number", _criteria(distinct_l_diversity={"attribute": "occupation", "l": NAN})
    ),
    "l-zero": Case("parameters", "l must be >= 1", _criteria(entropy_l_diversity={"attribute": "occupation", "l": 0})),
    "l-above-values": Case(
        "parameters",
        "l=30 is larger than the 14 distinct values",
        _criteria(distinct_l_diversity={"attribute": "occupation", "l": 30}),
    ),
    "multi-one-attribute": Case(
        "parameters",
        "attributes must list two or more",
        _criteria(multi_attribute_l_diversity={"attributes": ["occupation"], "l": 2}),
    ),
    "criterion-on-qi": Case(
        "parameters",
        "listed under both quasi_identifiers and sensitive",
        _criteria(distinct_l_diversity={"attribute": "race", "l": 2}),
    ),
    "intervals-not-multiples": Case(
        "parameters", "not a multiple", lambda env: env.qi("age", {"generate": "intervals", "widths": [5, 7]})
    ),
    "intervals-start-nan": Case(
        "parameters",
        "start must be a finite number",
        lambda env: env.qi("age", {"generate": "intervals", "widths": [5], "start": NAN}),
    ),
    "intervals-top-below-bottom": Case(
        "parameters",
        "bottom (60) must be below top (20)",
        lambda env: env.qi("age", {"generate": "intervals", "widths": [5], "bottom": 60, "top": 20}),
    ),
    "groups-value-in-no-group": Case(
        "parameters",
        "level 1 puts value 'Female' in no group; add it to one, or name a group for the rest with other: LABEL",
        lambda env: env.qi("sex", {"generate": "groups", "groups": {"m": ["Male"]}}),
    ),
    "groups-member-twice": Case(
        "parameters",
        "'Male' is in groups 'a' and 'b' at level 1",
        lambda env: env.qi("sex", {"generate": "groups", "groups": {"a": ["Male"], "b": ["Male", "Female"]}}),
    ),
    "analyze-max-risk-nan": Case(
        "parameters", "--max-risk: 'nan' is not a finite number", _command("analyze", "--max-risk", "nan")
    ),
    "analyze-near-inf": Case(
        "parameters", "--near: 'inf' is not a finite number", _command("analyze", "--near", "inf")
    ),
    "analyze-rho-nan": Case(
        "parameters", "--rho: 'nan' is not a finite number", _command("analyze", "--rho", "0.2", "nan")
    ),
    "analyze-delta-text": Case(
        "parameters", "--delta: 'small' is not a number", _command("analyze", "--delta", "small")
    ),
    "inference-max-probability-nan": Case(
        "parameters",
        "--max-probability: '-inf' is not a finite number",
        _then(_release_series("people"), _args("--max-probability", "-inf")),
    ),
    "intervals-on-text": Case(
        "parameters", "needs numbers, found", lambda env: env.qi("race", {"generate": "intervals", "widths": [5]})
    ),
    "mask-char": Case(
        "parameters", "mask char must be one character", lambda env: env.qi("age", {"generate": "mask", "char": "ab"})
    ),
    "generator-option": Case(
        "parameters",
        "generator intervals has no option 'width'",
        lambda env: env.qi("age", {"generate": "intervals", "width": [5]}),
    ),
    # suppression
    "limit-nan": Case("suppression", "suppression.limit must be a finite number", _set("suppression", {"limit": NAN})),
    "limit-inf": Case("suppression", "suppression.limit must be a finite number", _set("suppression", INF)),
    "limit-negative": Case("suppression", "suppression.limit must be >= 0", _set("suppression", {"limit": -1})),
    "limit-fraction-above-1": Case("suppression", "is a fraction above 1", _set("suppression", {"limit": 1.5})),
    "limit-text": Case("suppression", "must be a count", _set("suppression", {"limit": "lots"})),
    "limit-whole-table": Case(
        "suppression", f"lets all {ROWS} rows of the table be suppressed", _set("suppression", {"limit": ROWS})
    ),
    "limit-fraction-1": Case("suppression", "which would publish nothing", _set("suppression", {"limit": 1.0})),
    "limit-above-table": Case("suppression", "which would publish nothing", _set("suppression", {"limit": 10**6})),
    "mode-unknown": Case(
        "suppression", "suppression.mode 'blank' is unknown", _set("suppression", {"limit": 10, "mode": "blank"})
    ),
    "mask-top-label-below": Case(
        "suppression",
        "'*' at level 1 is also its top label",
        _then(_set("suppression", {"limit": 10, "mode": "mask"}), _hierarchy("sex", "Male;*;*\nFemale;F;*\n")),
    ),
    # column roles
    "unclassified-column": Case(
        "column roles", "column(s) the job does not classify: workclass", lambda env: env.without_role("workclass")
    ),
    "others-not-drop": Case("column roles", "others must be drop", _set("others", "insensitive")),
    "unclassified-identifier": Case(
        "column roles", "column(s) the job does not classify: patient_id", _roles(identifying=[])
    ),
    "qi-and-sensitive": Case(
        "column roles", "listed under both quasi_identifiers and sensitive", _roles(sensitive=["occupation", "age"])
    ),
    "insensitive-twice": Case(
        "column roles",
        "'education' is listed twice under insensitive",
        _roles(insensitive=[c for c in ADULT_QIS if c not in QI3 + ["occupation"]] + ["education"]),
    ),
    "insensitive-and-identifying": Case(
        "column roles", "under both insensitive and identifying", _roles(identifying=["patient_id", "workclass"])
    ),
    "role-case-twice": Case(
        "column roles",
        "the database does not tell them apart",
        _then(lambda env: env.without_role("workclass"), _roles(identifying=["patient_id", "workclass", "WorkClass"])),
    ),
    "unknown-insensitive": Case(
        "column roles", "insensitive column 'salary' is not in table", _roles(insensitive=["salary"])
    ),
    "unknown-qi": Case(
        "column roles",
        "quasi-identifier column 'zipcode' is not in table",
        lambda env: env.qi("zipcode", {"generate": "mask"}),
    ),
    "unknown-sensitive": Case(
        "column roles",
        "column 'diagnosis' is not in table",
        _criteria(distinct_l_diversity={"attribute": "diagnosis", "l": 2}),
    ),
    "identifying-action": Case(
        "column roles", "must be drop, or {pseudonym", _roles(identifying={"patient_id": "hash"})
    ),
    "pseudonym-two-keys": Case(
        "column roles",
        "takes one of key_env",
        _roles(identifying={"patient_id": {"pseudonym": {"key_env": "A", "key_file": "b"}}}),
    ),
    "pseudonym-env-unset": Case(
        "column roles",
        "environment variable 'SQLANON_TEST_UNSET_KEY' is not set",
        _pseudonym_env("SQLANON_TEST_UNSET_KEY"),
    ),
    "pseudonym-key-short": Case("column roles", "the key has 5 bytes", _key_file(b"short\n")),
    "pseudonym-key-file-missing": Case(
        "column roles", "key file", _roles(identifying={"patient_id": {"pseudonym": {"key_file": "nokey"}}})
    ),
    "pseudonym-key-name-not-plain": Case(
        "column roles",
        "key_name must be a plain name",
        _roles(identifying={"patient_id": {"pseudonym": {"key_name": "census'; DROP TABLE people; --"}}}),
    ),
    "pseudonym-held-key-missing": Case(
        "column roles",
        "the database holds no pseudonym key 'census'",
        _roles(identifying={"patient_id": {"pseudonym": {"key_name": "census"}}}),
    ),
    # hierarchies
    "hierarchy-missing": Case(
        "hierarchies", "hierarchy file for 'race' not found", lambda env: env.qi("race", {"hierarchy": "h/none.csv"})
    ),
    "hierarchy-ragged": Case("hierarchies", "line 2 has 1 fields", _hierarchy("race", "White;*\nBlack\n")),
    "hierarchy-separator": Case("hierarchies", "line 1 has one field", _hierarchy("race", "White,*\n")),
    "hierarchy-empty": Case("hierarchies", "is empty", _hierarchy("race", "\n\n")),
    "hierarchy-not-utf8": Case("hierarchies", "is not UTF-8", _hierarchy("race", b"White;\xff\n")),
    "hierarchy-duplicate-line": Case(
        "hierarchies", "value 'Male' is listed on lines 1 and 3", _hierarchy("sex", "Male;*\nFemale;*\nMale;*\n")
    ),
    "hierarchy-duplicate-leaf": Case(
        "hierarchies", "value 'Male' is listed on lines 1 and 2", _hierarchy("sex", "Male;M;*\nMale;X;*\nFemale;F;*\n")
    ),
    "hierarchy-two-parents": Case("hierarchies", "has two parents", _hierarchy("sex", "Male;M;A;*\nFemale;M;B;*\n")),
    "groups-file-missing": Case(
        "hierarchies",
        "groups file for 'sex' not found",
        lambda env: env.qi("sex", {"generate": "groups", "groups": "h/nowhere.csv"}),
    ),
    "groups-file-value-twice": Case(
        "hierarchies",
        "value 'Male' is on lines 1 and 3; list each value once",
        lambda env: env.qi(
            "sex", {"generate": "groups", "groups": env.hierarchy("sex-groups.csv", "Male;m\nFemale;f\nMale;f\n")}
        ),
    ),
    "hierarchy-missing-values": Case(
        "hierarchies", "3 value(s) missing from its hierarchy", _hierarchy("race", "White;*\nBlack;*\n")
    ),
    # the data
    "qi-nulls": Case(
        "data", "column 'race' has 2 NULL value(s)", _sql("UPDATE people SET race = NULL WHERE patient_id IN (1, 2)")
    ),
    "qi-null-and-empty": Case(
        "data",
        "holds both NULL (1 rows) and empty strings (1 rows)",
        _then(
            _sql(
                "UPDATE people SET race = NULL WHERE patient_id = 1", "UPDATE people SET race = '' WHERE patient_id = 2"
            ),
            lambda env: env.qi(
                "race",
                {
                    "hierarchy": env.hierarchy(
                        "race-null.csv", (ADULT_DIR / "hierarchies" / "race.csv").read_text() + ";*\n"
                    )
                },
            ),
        ),
    ),
    "sensitive-all-null": Case(
        "data",
        "sensitive column 'occupation' holds only NULLs",
        _then(
            _sql("UPDATE people SET occupation = NULL"),
            _criteria(distinct_l_diversity={"attribute": "occupation", "l": 1}),
        ),
    ),
    "empty-table": Case("data", "is empty; there is nothing to anonymize", _sql("DELETE FROM people")),
    "person-several-rows": Case(
        "data", "identifying column 'patient_id' repeats: 1 person(s) have several rows", _sql(REPEAT_PERSON)
    ),
    "person-several-rows-search": Case(
        "data", "identifying column 'patient_id' repeats", _then(_sql(REPEAT_PERSON), _command("search"))
    ),
    "person-several-rows-pseudonymized": Case(
        "data",
        "identifying column 'patient_id' repeats",
        _then(_sql(REPEAT_PERSON), _pseudonym_env("SQLANON_BAD_INPUT_KEY")),
    ),
    "person-several-rows-mondrian": Case(
        "data", "identifying column 'patient_id' repeats", _then(_sql(REPEAT_PERSON), _method("mondrian"))
    ),
    "unit-null": Case(
        "data",
        "unit column 'patient_id' is NULL in 2 row(s)",
        _then(
            _sql("UPDATE people SET patient_id = NULL WHERE patient_id IN (2, 3)"),
            _pseudonym_env("SQLANON_BAD_INPUT_KEY"),
            _set("unit", "patient_id"),
        ),
    ),
    "unit-person-sensitive-disagrees-anatomy": Case(
        "data",
        "1 person(s) of unit column 'patient_id' have rows with different values of the sensitive column",
        _then(
            _sql("UPDATE people SET patient_id = 1 WHERE patient_id = 2"),
            _pseudonym_env("SQLANON_BAD_INPUT_KEY"),
            _set("unit", "patient_id"),
            _method("anatomy"),
        ),
    ),
    "unit-person-number-and-null-mondrian": Case(
        "data",
        "1 person(s) of unit column 'patient_id' have a NULL in some rows of the quasi-identifier 'age' and a number",
        _then(
            _sql(
                "UPDATE people SET patient_id = 1, age = NULL, "
                "occupation = (SELECT occupation FROM people WHERE patient_id = 1) WHERE patient_id = 2"
            ),
            _pseudonym_env("SQLANON_BAD_INPUT_KEY"),
            _set("unit", "patient_id"),
            _method("mondrian"),
            lambda env: env.qi("age", None),
        ),
    ),
    "person-several-rows-anatomy": Case(
        "data", "identifying column 'patient_id' repeats", _then(_sql(REPEAT_PERSON), _method("anatomy"))
    ),
    "mondrian-nan": Case(
        "data",
        "but it holds 'nan'",
        _then(
            _sql(
                "ALTER TABLE people ADD COLUMN score DOUBLE",
                "UPDATE people SET score = patient_id * 1.5",
                "UPDATE people SET score = 'NaN' WHERE patient_id = 7",
            ),
            _method("mondrian"),
            lambda env: env.qi("score", None),
        ),
    ),
    "mondrian-infinity": Case(
        "data",
        "but it holds 'inf'",
        _then(
            _sql(
                "ALTER TABLE people ADD COLUMN score DOUBLE",
                "UPDATE people SET score = patient_id * 1.5",
                "UPDATE people SET score = 'Infinity' WHERE patient_id = 7",
            ),
            _method("mondrian"),
            lambda env: env.qi("score", None),
        ),
    ),
    "randomize-negative-width": Case(
        "config file",
        "output.noise.age.width must be a finite number above 0",
        _method("randomize", noise={"age": {"distribution": "uniform", "width": -5}}),
    ),
    "randomize-zero-sd": Case(
        "config file",
        "output.noise.age.sd must be a finite number above 0",
        _method("randomize", noise={"age": {"distribution": "gaussian", "sd": 0}}),
    ),
    "randomize-unknown-distribution": Case(
        "config file",
        "output.noise.age must be {distribution: uniform, width: NUMBER} or",
        _method("randomize", noise={"age": {"distribution": "laplace", "b": 2}}),
    ),
    "randomize-undeclared-column": Case(
        "config file",
        "the job publishes no column 'patient_id'",
        _method(
            "randomize",
            noise={
                "age": {"distribution": "uniform", "width": 2},
                "patient_id": {"distribution": "uniform", "width": 2},
            },
        ),
    ),
    "randomize-with-criteria": Case(
        "config file",
        "adds noise to every record and checks no criteria",
        _then(_method("randomize"), _set("criteria", {"k_anonymity": {"k": 5}})),
    ),
    "randomize-qi-without-noise": Case(
        "config file",
        "quasi-identifier 'sex' would be published as it is",
        _then(
            _method("randomize"),
            lambda env: env.config.update(
                quasi_identifiers=["age", "sex"], insensitive=[c for c in env.config["insensitive"] if c != "sex"]
            ),
        ),
    ),
    "randomize-short-key": Case(
        "config file",
        "output.noise_key: the key has 5 bytes",
        _then(_file("noise.key", "short"), _method("randomize", noise_key={"key_file": "noise.key"})),
    ),
    "randomize-text-column": Case(
        "data",
        "column 'occupation' holds VARCHAR, not numbers",
        _method(
            "randomize",
            noise={
                "age": {"distribution": "uniform", "width": 2},
                "occupation": {"distribution": "uniform", "width": 2},
            },
        ),
    ),
    "randomize-nan": Case(
        "data",
        "column 'score' holds 1 values that are not finite numbers",
        _then(
            _sql(
                "ALTER TABLE people ADD COLUMN score DOUBLE",
                "UPDATE people SET score = patient_id * 1.5",
                "UPDATE people SET score = 'NaN' WHERE patient_id = 7",
            ),
            _method(
                "randomize",
                noise={"age": {"distribution": "uniform", "width": 2}, "score": {"distribution": "gaussian", "sd": 1}},
            ),
            lambda env: env.config["insensitive"].append("score"),
        ),
    ),
    "condense-k-zero": Case("config file", "output.k must be a whole number of at least 1", _method("condense", k=0)),
    "condense-k-above-rows": Case("data", "k = 5000 is above the table's 2000 records", _method("condense", k=5000)),
    "condense-null": Case(
        "data",
        "column 'age' holds 1 records without a number (NULL)",
        _then(_sql("UPDATE people SET age = NULL WHERE patient_id = 7"), _method("condense")),
    ),
    "condense-text-qi": Case(
        "data",
        "quasi-identifier 'race' holds VARCHAR, not numbers",
        _then(
            _method("condense"),
            lambda env: env.config.update(
                quasi_identifiers=["age", "race"], identifying=[c for c in env.config["identifying"] if c != "race"]
            ),
        ),
    ),
    "condense-insensitive": Case(
        "config file",
        "column 'race' cannot be published",
        _then(
            _method("condense"),
            lambda env: env.config.update(
                insensitive=["race"], identifying=[c for c in env.config["identifying"] if c != "race"]
            ),
        ),
    ),
    "condense-label-undeclared": Case(
        "config file",
        "output.label 'race' is not a sensitive or insensitive column of the job",
        _method("condense", label="race"),
    ),
    "condense-label-null": Case(
        "data",
        "column 'race' (output.label) holds 1 records without a value (NULL)",
        _then(
            _sql("UPDATE people SET race = NULL WHERE patient_id = 7"),
            _method("condense", label="race"),
            lambda env: env.config.update(
                insensitive=["race"], identifying=[c for c in env.config["identifying"] if c != "race"]
            ),
        ),
    ),
    "condense-add-without-groups": Case(
        "tables",
        "no groups table 'main.people_anon_groups': publish the job first",
        _then(_method("condense"), _command("condense-add", "--table", "people")),
    ),
    "dp-epsilon-zero": Case(
        "config file", "output.epsilon must be a finite number above 0", _method("differential_privacy", epsilon=0)
    ),
    "dp-delta-one": Case(
        "config file", "output.delta must be a number between 0 and 1", _method("differential_privacy", delta=1)
    ),
    "dp-search-budget-above-epsilon": Case(
        "config file",
        "output.search.budget must be above 0 and below epsilon",
        _method("differential_privacy", search={"budget": 1.5, "steps": 10}),
    ),
    "dp-generalization-and-search": Case(
        "config file",
        "not both",
        _method("differential_privacy", generalization="low", search={"budget": 0.5}),
    ),
    "dp-with-criteria": Case(
        "config file",
        "brings its own k",
        _then(_method("differential_privacy"), _set("criteria", {"k_anonymity": {"k": 5}})),
    ),
    "dp-level-above-top": Case(
        "config file",
        "output.generalization.age: level 9 is above its hierarchy's top",
        _method("differential_privacy", generalization={"sex": 0, "age": 9, "race": 0}),
    ),
    "dp-column-as-is": Case(
        "config file",
        "column 'occupation' would be published as it is",
        _then(
            _method("differential_privacy"),
            lambda env: env.config.update(
                insensitive=["occupation"], identifying=[c for c in env.config["identifying"] if c != "occupation"]
            ),
        ),
    ),
    "dp-sample-below-k": Case(
        "data",
        "needs classes of at least k=50 rows, more than the",
        _method("differential_privacy", epsilon=0.01),
    ),
    "unknown-table": Case("data", "table 'persons' not found", _set("source.table", "persons")),
    "csv-missing": Case("data", "CSV file not found", _then(_csv_source, _set("source.csv", "none.csv"))),
    "csv-malformed": Case(
        "data",
        "cannot read CSV file",
        _then(_csv_source, lambda env: (env.folder / "people.csv").write_bytes(b"a;b\n\xff\xfe;1\n")),
    ),
    "csv-wrong-columns": Case(
        "data",
        "quasi-identifier column 'sex' is not in table 'fromcsv'",
        _then(_csv_source, lambda env: (env.folder / "people.csv").write_text("a;b\n1;2\n")),
    ),
    "csv-wrong-delimiter": Case(
        "data",
        "its delimiter is probably ';'",
        _then(_csv_source, _set("source.csv_options", {"delimiter": ","})),
    ),
    # tables sqlanon must not touch
    "ledger-release-dropped": Case(
        "tables", "release of run 1 (main.people_release1) was dropped", _ledger_release("DROP TABLE people_release1")
    ),
    "ledger-release-changed": Case(
        "tables",
        "was changed (1999 rows, 2000 when published)",
        _ledger_release("DELETE FROM people_release1 WHERE patient_id = (SELECT MIN(patient_id) FROM people_release1)"),
    ),
    "ledger-another-key": Case(
        "tables", "pseudonymized 'patient_id' with another key", _ledger_release(key=b"an earlier key, long enough")
    ),
    "output-is-source": Case("tables", "is the source table", _set("output.table", "people")),
    "output-is-source-case": Case("tables", "is the source table", _set("output.table", "PEOPLE")),
    "output-is-source-with-replace": Case(
        "tables", "is the source table", _then(_set("output.table", "People"), _args("--replace"))
    ),
    "output-in-metadata": Case(
        "tables", "inside sqlanon's metadata schema", _set("output", {"table": "job_files", "schema": "sqlanon"})
    ),
    "audit-missing-table": Case(
        "tables",
        "; check the table's name and schema (--table and --schema)",
        _command("audit", "--table", "people_nowhere"),
    ),
    "analyze-missing-table": Case(
        "tables",
        "check the table's name and schema (--table and --schema)",
        _command("analyze", "--table", "people_nowhere"),
    ),
    "output-exists": Case("tables", "already exists; choose another name, or pass --replace", _people_anon_by_user),
    "output-not-sqlanons": Case(
        "tables", "was not written by sqlanon", _then(_people_anon_by_user, _args("--replace"))
    ),
    "output-case-not-sqlanons": Case(
        "tables",
        "was not written by sqlanon",
        _then(_people_anon_by_user, _set("output.table", "People_Anon"), _args("--replace")),
    ),
    "output-schema-missing": Case(
        "tables", "schema 'published' of output table 'people_anon' does not exist", _set("output.schema", "published")
    ),
    "csv-into-a-missing-schema": Case(
        "tables",
        "schema 'nowhere' of source.table 'fromcsv' does not exist; create it",
        _then(_csv_source, _set("source.schema", "nowhere")),
    ),
    "csv-over-user-table": Case(
        "tables", "sqlanon did not load it from people.csv", lambda env: _csv_source(env, "people")
    ),
    "csv-changed-since-load": Case("tables", "changed since; reload it with: sqlanon load", _loaded_from_another_file),
    "metadata-schema-semicolon": Case(
        "tables", "may hold only letters, digits and underscores", _args("--metadata-schema", "meta;data")
    ),
    "metadata-schema-long": Case("tables", "has 70 characters", _args("--metadata-schema", "m" * 70)),
    "apply-run-of-another-job": Case(
        "tables",
        "run 1 is a run of job 'other'",
        _then(_run_of_another_job, _command("apply", "--table", "people", "--run", "1")),
    ),
    # files sqlanon must not touch or create
    "report-over-database": Case("files", "is the job's database", _command("report", "--out", "db.duckdb")),
    "report-over-database-replace": Case(
        "files", "is the job's database", _command("report", "--out", "db.duckdb", "--replace")
    ),
    "report-over-job-file": Case("files", "is the job's file", _command("report", "--out", "job.yaml", "--replace")),
    "report-over-a-file": Case(
        "files",
        "notes.html exists; choose another file",
        _then(_file("notes.html", "<p>mine</p>"), _command("report", "--out", "notes.html")),
    ),
    "report-replace-a-file": Case(
        "files",
        "is not a report sqlanon wrote",
        _then(_file("notes.html", "<p>mine</p>"), _command("report", "--out", "notes.html", "--replace")),
    ),
    "report-missing-folder": Case(
        "files", "folder reports does not exist", _command("report", "--out", "reports/page.html")
    ),
    "new-database-file": Case(
        "files", "does not exist, and the job loads no file into it", _set("source.url", "new.duckdb")
    ),
    "new-database-file-after-load": Case(
        "files",
        "schema 'published' of output table",
        _then(_csv_source, _set("source.url", "new.duckdb"), _set("output.schema", "published")),
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input(tmp_path: Path, template: Path, name: str, monkeypatch):
    case = CASES[name]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SQLANON_BAD_INPUT_KEY", KEY)
    env = prepare(tmp_path, template)
    case.change(env)
    config = tmp_path / "job.yaml"
    raw = env.config.get("__raw__")
    config.write_text(raw if raw is not None else yaml.safe_dump(env.config, sort_keys=False))
    named = {"MISSING": str(tmp_path / "none.yaml"), "CONFIG": str(config)}
    target = [named.get(arg, arg) for arg in env.args]
    args = env.command.split() + ([] if named.keys() & set(env.args) else [str(config)]) + target
    before = snapshot(env.url, tmp_path)
    result = CliRunner().invoke(main, args)
    message = result.stderr.strip()
    assert result.exit_code == 2, result.output
    assert case.fragment in message, message
    assert len(message.splitlines()) == 1 and "Traceback" not in result.output, message
    assert snapshot(env.url, tmp_path) == before  # no table or file changed, added or dropped
    assert not metadata_leftovers(env.url)


def test_the_base_job_works_and_publishes_only_declared_columns(tmp_path: Path, template: Path, monkeypatch):
    """The corpus's starting point is valid: the cases fail for their one change, not for the base job."""
    monkeypatch.chdir(tmp_path)
    env = prepare(tmp_path, template)
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(env.config, sort_keys=False))
    result = CliRunner().invoke(main, ["anonymize", str(tmp_path / "job.yaml"), "--json"])
    assert result.exit_code == 0, result.output
    engine = sa.create_engine(env.url)
    with engine.connect() as conn:
        columns = list(conn.exec_driver_sql("SELECT * FROM people_anon LIMIT 0").keys())
    engine.dispose()
    assert columns == ADULT_QIS  # patient_id (identifying) removed, every other column kept in order


# --- the reliability page's table is this corpus's summary ----------------------------------------


def reliability_table() -> str:
    counts = Counter(case.category for case in CASES.values())
    lines = ["| bad input | tried | clear error | traceback | wrong result |", "|---|---|---|---|---|"]
    lines += [f"| {category} | {n} | {n} | 0 | 0 |" for category, n in counts.items()]
    lines.append(f"| **all** | **{len(CASES)}** | **{len(CASES)}** | **0** | **0** |")
    return "\n".join(lines)


def test_the_reliability_table_is_the_corpus():
    assert len(CASES) >= 80
    assert reliability_table() in (ROOT / "docs" / "reliability.md").read_text(), reliability_table()
