"""The inference's connected parts (engine.maxent.parts) against a union-find in Python, on random graphs and on
the shapes that cost label spreading one statement per link (long paths numbered against the grain)."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from sqlanon.backends import open_database
from sqlanon.engine.maxent.parts import connected_parts
from sqlanon.engine.scratch import Scratch


def _smallest_of_each_part(nodes: list[int], edges: list[tuple[int, int]]) -> dict[int, int]:
    parent = {n: n for n in nodes}

    def root(n: int) -> int:
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for u, v in edges:
        a, b = root(u), root(v)
        parent[max(a, b)] = min(a, b)
    return {n: root(n) for n in nodes}


def _parts_in_sql(url: str, nodes: list[int], edges: list[tuple[int, int]]) -> tuple[dict[int, int], int]:
    db = open_database(url)
    try:
        with db.begin() as conn:
            tables = Scratch(db, conn, "parts_test")
            graph = tables.ref("graph")
            links = edges + [(n, n) for n in nodes]
            tables.create_from_rows(graph, [("u", "BIGINT"), ("v", "BIGINT")], links)
            edge_list = db.scratch_table(tables.names[graph], ["u", "v"])
            found = connected_parts(tables, select(edge_list.c.u, edge_list.c.v), "t")
            parts = dict(db.execute(conn, select(found.c.node, found.c.part)).all())
            statements = tables.statements
            tables.drop_all()
        return parts, statements
    finally:
        db.dispose()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.integers(1, 40).flatmap(
        lambda n: st.tuples(st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=60))
    )
)
def test_parts_match_a_union_find_on_random_graphs(duck_url: str, graph: tuple[int, list[tuple[int, int]]]) -> None:
    count, edges = graph
    nodes = list(range(count))
    assert _parts_in_sql(duck_url, nodes, edges)[0] == _smallest_of_each_part(nodes, edges)


@pytest.mark.parametrize("shape", ["path against the grain", "zigzag", "shuffled path"])
def test_a_long_path_takes_a_few_statements_not_one_per_link(duck_url: str, shape: str) -> None:
    """A path of 2,000 nodes: label spreading needs a statement per link here; the parts take a few dozen."""
    order = list(range(2000))
    if shape == "path against the grain":
        order.reverse()
    elif shape == "zigzag":
        order = [n for pair in zip(order[:1000], reversed(order[1000:])) for n in pair]
    else:
        random.Random(7).shuffle(order)
    edges = list(itertools.pairwise(order)) + [(5000, 5001)]  # and a second part
    nodes = order + [5000, 5001]
    parts, statements = _parts_in_sql(duck_url, nodes, edges)
    assert parts == _smallest_of_each_part(nodes, edges)
    assert statements < 80
