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


def create_label_table(db: Database, conn: Connection, star: StarSchema, name: str, population: bool = False) -> str:
    """A scratch table `name`: the source (with `population`, the population its research subset was drawn from)
    with the label of every level of every QI (q<attr>_l<level>) and the sensitive columns (the source's only);
    returns its reference."""
    columns = ", ".join(
        [f"d{d.attr}.l{level} AS q{d.attr}_l{level}" for d in star.dimensions for level in range(d.height + 1)]
        + ([] if population else star.sensitive_select("t"))
    )
    rows = star.population_joins() if population else star.joins()
    return db.create_scratch(conn, name, f"SELECT {columns} FROM {rows}")


def node_view(
    star: StarSchema, labels: str, index: int, node: tuple[int, ...], population: str | None = None
) -> FrequencySetView:
    """The node's classes: a GROUP BY of the label table on the node's label (and sensitive) columns, as the
    CTE `node_<index>`; with `population` (a label table of the population), the population's classes too, and
    only the counts of violators read (see FrequencySetView.counts_only)."""
    sensitive = list(star.sensitive_columns().values())
    columns = [f"q{attr}_l{level}" for attr, level in enumerate(node)]
    return FrequencySetView(
        table=f"node_{index}",
        class_columns=[f"g{i}" for i in range(len(node))],
        count_column="cnt",
        sensitive_columns=star.sensitive_columns(),
        definition=_counted(labels, columns, sensitive),
        held=star.held,
        population=None if population is None else "(" + _counted(population, columns, []) + ") AS p",
        counts_only=population is not None,
    )


def _counted(labels: str, columns: list[str], sensitive: list[str]) -> str:
    """A label table grouped on the label `columns` (as g0..) and the `sensitive` ones, with each group's cnt."""
    select = ", ".join([f"{c} AS g{i}" for i, c in enumerate(columns)] + sensitive)
    return f"SELECT {select}, COUNT(*) AS cnt FROM {labels} GROUP BY {', '.join(columns + sensitive)}"
