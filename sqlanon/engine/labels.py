"""The exhaustive oracle's own path to frequency sets: labels, not codes.

The source joined once with every dimension table, each level's label side by side (`create_label_table`), and a
node's frequency set as a GROUP BY of that table on the node's label columns (`node_view`). Nothing here uses the
packed cube, path codes or roll-ups of `checker`, so the oracle checks them by a different code path.
"""

from __future__ import annotations

from sqlalchemy.engine import Connection

from ..backends import Database
from ..criteria.view import FrequencySetView
from .star import StarSchema


def create_label_table(db: Database, conn: Connection, star: StarSchema, name: str) -> str:
    """A scratch table `name`: the source with the label of every level of every QI (q<attr>_l<level>) and the
    sensitive columns; returns its reference."""
    columns = ", ".join(
        [f"d{d.attr}.l{level} AS q{d.attr}_l{level}" for d in star.dimensions for level in range(d.height + 1)]
        + star.sensitive_select("t")
    )
    return db.create_scratch(conn, name, f"SELECT {columns} FROM {star.joins()}")


def node_view(star: StarSchema, labels: str, index: int, node: tuple[int, ...]) -> FrequencySetView:
    """The node's classes: a GROUP BY of the label table on the node's label (and sensitive) columns, as the
    CTE `node_<index>`."""
    sensitive = star.sensitive_columns()
    columns = [f"q{attr}_l{level}" for attr, level in enumerate(node)]
    select = ", ".join([f"{c} AS g{i}" for i, c in enumerate(columns)] + list(sensitive.values()))
    group = ", ".join(columns + list(sensitive.values()))
    return FrequencySetView(
        table=f"node_{index}",
        class_columns=[f"g{i}" for i in range(len(node))],
        count_column="cnt",
        sensitive_columns=sensitive,
        definition=f"SELECT {select}, COUNT(*) AS cnt FROM {labels} GROUP BY {group}",
        held=star.held,
    )
