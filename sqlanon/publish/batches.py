"""Applying a published transformation to a new batch: the node a run published, read back from its record,
and the refusal, naming the tuples and classes, of a batch that violates the criteria at that node beyond the
suppression limit.
"""

from __future__ import annotations

import json

from ..backends import open_database
from ..engine.frequency import (
    violating_classes_labelled,
)
from ..errors import ConfigError, DataError
from ..model.job import Job
from ..model.selection import node_label
from ..search.strategies import SearchContext
from ..store import Store
from ..store import runs as store_runs
from ..store.migrate import migrate


def published_node(job: Job, run_id: int, schema: str) -> tuple[int, ...]:
    """The node a finished anonymize (or publish, or apply) run of the same job wrote, checked to be over the job's
    QIs."""
    opened = open_database(job.source.url)
    db = opened.metadata
    try:
        with db.connect() as conn:
            if not db.schema_exists(conn, schema):
                raise ConfigError(f"run {run_id} not found: the database has no sqlanon schema {schema!r}")
            migrate(opened, schema)
            row = Store(db, schema).call(conn, store_runs.OUTCOME, run=run_id).one_or_none()
    finally:
        opened.dispose()
    if row is None:
        raise ConfigError(
            f"run {run_id} not found in {schema}.runs; `sqlanon job status` or the runs table lists the runs"
        )
    job_name, command, status, result = row
    found = json.loads(result) if result else {}
    if job_name != job.name:
        raise ConfigError(
            f"run {run_id} is a run of job {job_name!r}, not of this job ({job.name!r}): apply a run of "
            "the same job, or the node itself with --node"
        )
    if status != "finished" or "node" not in found:
        raise ConfigError(
            f"run {run_id} ({command}, {status}) published no table; give a finished anonymize run, "
            "or the node itself with --node"
        )
    qis = found.get("qi", [])  # the node's levels are in this order
    if qis != job.qi_names:
        raise ConfigError(
            f"run {run_id} generalized {', '.join(qis)}, this job {', '.join(job.qi_names)}: apply a "
            "run of the same job"
        )
    return tuple(found["node"])


def refuse_violating_batch(ctx: SearchContext, node: tuple[int, ...], batch: str, violating: int) -> None:
    """A batch whose violating tuples at `node` exceed the suppression limit: the error says how many, and which
    classes (their labels), before anything is written."""
    if violating <= ctx.max_suppressed:
        return
    rows = violating_classes_labelled(ctx.conn, ctx.star, node, ctx.criteria, VIOLATING_CLASSES_SHOWN)
    shown = "; ".join("(" + ", ".join(map(str, labels)) + f"): {n} tuple(s)" for labels, n, _ in rows)
    limit = f"the job's suppression limit of {ctx.max_suppressed}" if ctx.max_suppressed else "no suppression"
    raise DataError(
        f"batch {batch!r} alone violates the criteria at node {node_label(node)}: {violating} tuple(s) "
        f"in {rows[0][2] if rows else '?'} class(es), with {limit}; e.g. {shown}. Nothing was written: "
        "raise the job's suppression limit, apply a more general node (--node), or publish the batch "
        "together with more rows"
    )


VIOLATING_CLASSES_SHOWN = 3  # classes an apply error names
