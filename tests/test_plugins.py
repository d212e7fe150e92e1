"""Registries fill themselves: a criterion, a strategy or a backend is one class, and the job file, the search
and the errors know it at once. Each test adds a throwaway one, uses it through the public API, and removes it."""

from __future__ import annotations

from typing import Any

import pytest

from sqlanon import search
from sqlanon.backends import Database, DuckDB, normalize_url
from sqlanon.config import job_from_dict
from sqlanon.criteria import CRITERIA, Criterion
from sqlanon.errors import ConfigError
from sqlanon.model.view import FrequencySetView, SqlFragment
from sqlanon.search.strategies import STRATEGIES, Exhaustive, SearchContext, SearchStats, SearchStrategy

from .conftest import adult_config

QIS = ["age", "sex", "race"]


@pytest.fixture
def registries():
    """Whatever a test registers is gone afterwards."""
    saved = dict(CRITERIA), dict(STRATEGIES), dict(Database.kinds)
    yield
    for registry, before in zip((CRITERIA, STRATEGIES, Database.kinds), saved):
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
