"""Operations on a run's lattice: its nodes, their (attribute, level) pairs and edges, per Incognito iteration.

Incognito's self-join, subset pruning and edge generation are the SQL files under sql/ (candidates, prune,
edges): one operation builds the next iteration from the survivors of the last.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from .ops import ANALYZE, Insert, Op
from .runs import RUN


@cache
def sql_file(name: str) -> tuple[str, ...]:
    """The statements of sql/<name>.sql."""
    body = resources.files("sqlanon.sql").joinpath(f"{name}.sql").read_text()
    return tuple(stmt for stmt in body.split(";\n") if stmt.strip() and not _only_comments(stmt))


def _only_comments(stmt: str) -> bool:
    return all(not line.strip() or line.strip().startswith("--") for line in stmt.splitlines())


ITERATION = RUN + (("iteration", "integer"),)

NODES = Insert(
    name="lattice_nodes_add",
    table="lattice_nodes",
    columns=(
        ("node_id", "bigint"),
        ("iteration", "integer"),
        ("node_key", "text"),
        ("prefix_key", "text"),
        ("last_attr", "integer"),
        ("last_level", "integer"),
        ("height", "integer"),
        ("status", "text"),
    ),
)
LEVELS = Insert(
    name="lattice_levels_add",
    table="lattice_node_levels",
    columns=(("node_id", "bigint"), ("attr", "integer"), ("level", "integer")),
)
EDGES = Insert(
    name="lattice_edges_add",
    table="lattice_edges",
    columns=(("iteration", "integer"), ("start_id", "bigint"), ("end_id", "bigint")),
)

CLEAR = Op(name="lattice_clear", params=RUN, sql=("DELETE FROM {s}.lattice_nodes WHERE run_id = :run",), guard="run")

#: the last iteration a run completed: every one of its nodes has a status (statuses are written and committed at
#: the end of an iteration, never in between)
COMPLETED = (
    "(SELECT COALESCE(MAX(iteration), 0) FROM {s}.lattice_nodes WHERE run_id = :run AND iteration NOT IN "
    "(SELECT iteration FROM {s}.lattice_nodes WHERE run_id = :run AND status = 'candidate'))"
)
RESUME = Op(
    name="lattice_resume",
    params=RUN,
    sql=(
        "DELETE FROM {s}.lattice_node_levels WHERE run_id = :run AND node_id IN (SELECT node_id FROM "
        "{s}.lattice_nodes WHERE run_id = :run AND iteration > " + COMPLETED + ")",
        "DELETE FROM {s}.lattice_edges WHERE run_id = :run AND iteration > " + COMPLETED,
        "DELETE FROM {s}.lattice_nodes WHERE run_id = :run AND iteration > " + COMPLETED,
        "SELECT " + COMPLETED,
    ),
    returns=(("completed", "integer"),),
    guard="run",
)

#: fresh planner statistics after a bulk write (PostgreSQL; DuckDB keeps its own)
ANALYZE_TABLES = Op(name="lattice_analyze", params=RUN, sql=(ANALYZE,), guard="run")

NEXT = Op(
    name="lattice_next",
    params=ITERATION,
    sql=sql_file("candidates") + (ANALYZE,) + sql_file("prune") + sql_file("edges") + (ANALYZE,),
    guard="run",
)

ITERATION_NODES = Op(
    name="lattice_iteration",
    params=ITERATION,
    sql=(
        "SELECT node_id, node_key FROM {s}.lattice_nodes WHERE run_id = :run AND iteration = :iteration "
        "ORDER BY node_id",
    ),
    returns=(("node_id", "bigint"), ("node_key", "text")),
    guard="run",
)

ITERATION_EDGES = Op(
    name="lattice_iteration_edges",
    params=ITERATION,
    sql=("SELECT start_id, end_id FROM {s}.lattice_edges WHERE run_id = :run AND iteration = :iteration",),
    returns=(("start_id", "bigint"), ("end_id", "bigint")),
    guard="run",
)

STATUS = Op(
    name="lattice_set_status",
    params=RUN + (("ids", "bigint[]"), ("status", "text")),
    sql=("UPDATE {s}.lattice_nodes SET status = :status WHERE run_id = :run AND node_id IN (SELECT unnest(:ids))",),
    guard="run",
)

SURVIVORS = Op(
    name="lattice_survivors",
    params=ITERATION,
    sql=("SELECT node_key FROM {s}.lattice_nodes WHERE run_id = :run AND iteration = :iteration AND status <> 'fail'",),
    returns=(("node_key", "text"),),
    guard="run",
)

OPS = (NODES, LEVELS, EDGES, CLEAR, RESUME, ANALYZE_TABLES, NEXT, ITERATION_NODES, ITERATION_EDGES, STATUS, SURVIVORS)
