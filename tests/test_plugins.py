"""Registries fill themselves: a criterion, a strategy, a backend or a publication method is one class, and the job
file, the search, the CLI and the errors know it at once. Each test adds a throwaway one, uses it through the public
API, and removes it."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
import yaml
from click.testing import CliRunner

from sqlanon import RunOptions, search
from sqlanon.backends import Database, DuckDB, normalize_url
from sqlanon.cli import main
from sqlanon.config import job_from_dict
from sqlanon.criteria import CRITERIA, Criterion
from sqlanon.criteria.view import FrequencySetView, SqlFragment
from sqlanon.errors import ConfigError
from sqlanon.model.job import Job
from sqlanon.publish.methods import METHODS, PublicationMethod, publishes
from sqlanon.publish.staging import Destination, staged_table
from sqlanon.search.strategies import STRATEGIES, Exhaustive, SearchContext, SearchStats, SearchStrategy
from sqlanon.session import Target, table_run

from .conftest import adult_config

QIS = ["age", "sex", "race"]


@pytest.fixture
def registries():
    """Whatever a test registers is gone afterwards."""
    kept = (CRITERIA, STRATEGIES, Database.kinds, METHODS)
    saved = [dict(registry) for registry in kept]
    yield
    for registry, before in zip(kept, saved):
        registry.clear()
        registry.update(before)


def test_a_criterion_is_one_class(registries, adult_duck):
    class AtLeast(Criterion):
        """Every class holds at least `size` tuples (k-anonymity under another name)."""

        name = "throwaway_at_least"
        monotone_under_suppression = True
        figure_name = "min_class_size"

        def __init__(self, size: int):
            self.size = size

        @classmethod
        def from_config(cls, spec: Any) -> AtLeast:
            return cls(spec["size"])

        def params(self) -> dict[str, Any]:
            return {"size": self.size}

        def class_statistic(self, fs: FrequencySetView) -> SqlFragment:
            return SqlFragment(f"SELECT {fs.classes}, n, n AS stat FROM ({fs.class_sizes()}) AS sizes", {})

        def violation(self) -> SqlFragment:
            return SqlFragment("stat < :throwaway_size", {"throwaway_size": self.size})

    config = adult_config(adult_duck, QIS, load_csv=False)
    plugged = job_from_dict({**config, "criteria": {"throwaway_at_least": {"size": 7}}})
    reference = job_from_dict({**config, "criteria": {"k_anonymity": {"k": 7}}})
    assert search(plugged).minimal == search(reference).minimal
    with pytest.raises(ConfigError, match="throwaway_at_least"):  # the list of criteria names it
        job_from_dict({**config, "criteria": {"nonesuch": {}}})


def test_a_strategy_is_one_class(registries, adult_duck):
    calls = []

    class Recording(SearchStrategy):
        name = "throwaway_recording"

        def search(self, ctx: SearchContext, stats: SearchStats) -> list[tuple[int, ...]]:
            calls.append(ctx)
            return Exhaustive().search(ctx, stats)

    config = adult_config(adult_duck, QIS, load_csv=False)
    plugged = search(job_from_dict({**config, "search": {"strategy": "throwaway_recording"}}))
    reference = search(job_from_dict({**config, "search": {"strategy": "exhaustive"}}))
    assert calls and plugged.minimal == reference.minimal
    with pytest.raises(ConfigError, match="throwaway_recording"):  # the choices listed name it
        job_from_dict({**config, "search": {"strategy": "nonesuch"}})


def test_a_backend_is_one_class(registries, adult_duck):
    class Renamed(DuckDB):
        """DuckDB under another URL scheme."""

        schemes = ("throwawaydb",)
        url_examples = ("throwawaydb:///file",)

        @classmethod
        def open(cls, url: str, memory_limit: str | None = None, temp_directory: Any = None) -> Database:
            db = DuckDB.open(url.replace("throwawaydb", "duckdb", 1), memory_limit, temp_directory)
            db.__class__ = cls
            return db

    url = adult_duck.replace("duckdb", "throwawaydb", 1)
    assert normalize_url(url, ".") == url
    plugged = search(job_from_dict(adult_config(url, QIS, load_csv=False)))
    assert plugged.minimal == search(job_from_dict(adult_config(adult_duck, QIS, load_csv=False))).minimal
    with pytest.raises(ConfigError, match="throwawaydb:///file"):  # the supported URLs name it
        normalize_url("nonesuch://x/y", ".")


def test_a_publication_method_is_one_class(registries, adult_duck, tmp_path):
    class Starred(PublicationMethod):
        """Every QI published as '*' (the top of any hierarchy), the other columns as they are."""

        name = "throwaway_starred"
        settings = ("star",)

    class Written(dict[str, Any]):
        def to_dict(self) -> dict[str, Any]:
            return dict(self)

    @publishes(Starred.name)
    def starred(job: Job, options: RunOptions | None = None, replace: bool = False) -> Written:
        options = options or RunOptions()
        assert job.output is not None
        target = Target(output=job.output, replace=replace)
        with table_run(job, options, Starred.name, targets=[target], transactional=Starred.name) as run:
            db, conn = run.db, run.conn
            with conn.begin():
                qis = {db.name_key(q) for q in job.qi_names}
                select = ", ".join(f"'*' AS {db.q(c)}" if db.name_key(c) in qis else db.q(c) for c in run.columns)
                source = db.q(target.source.schema, target.source.table)
                destination = Destination(name=target.name, source=target.source, replace=replace)
                select_sql = f"SELECT {select} FROM {source}"
                with staged_table(
                    db, conn, destination=destination, select=select_sql, ownership=run.ownership, run_id=run.id
                ) as staged:
                    audit = f"SELECT COUNT(*) FROM {staged.ref} WHERE {db.q(job.qi_names[0])} <> '*'"
                    assert db.execute(conn, audit).scalar_one() == 0
                    rows = db.execute(conn, f"SELECT COUNT(*) FROM {staged.ref}").scalar_one()
                    staged.audited(rows)
            run.finish({"rows": rows})
        return Written(table="starred", rows=rows)

    config = adult_config(adult_duck, QIS, load_csv=False, output={"table": "starred", "method": Starred.name})
    job_file = tmp_path / "starred.yaml"
    job_file.write_text(yaml.safe_dump(config))
    answer = CliRunner().invoke(main, ["anonymize", str(job_file)])
    assert answer.exit_code == 0, answer.output
    assert "30162" in answer.output  # the rows it reported
    engine = sa.create_engine(adult_duck)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT DISTINCT sex FROM starred")).all() == [("*",)]
    engine.dispose()
    with pytest.raises(ConfigError, match=Starred.name):  # the methods listed name it
        job_from_dict({**config, "output": {"table": "x", "method": "nonesuch"}})
    starred_output = {"table": "x", "method": Starred.name, "star": "*"}
    assert job_from_dict({**config, "output": starred_output}).output.settings == {"star": "*"}  # the method's own
    with pytest.raises(ConfigError, match=f"output.star belong to method: {Starred.name}"):
        job_from_dict({**config, "output": {"table": "x", "star": 1}})
    # a method that does not say it counts persons refuses a job that names them
    by_person = {**config, "identifying": {"pid": {"pseudonym": {"key_env": "K"}}}, "unit": "pid"}
    with pytest.raises(ConfigError, match=f"output.method {Starred.name} counts rows, not persons"):
        job_from_dict({**by_person, "output": starred_output})
