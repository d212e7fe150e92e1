"""The plan of a wave's roll-ups over a large cube: every node read once, from a roll-up below its levels."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sqlanon.engine import rollups
from sqlanon.engine.rollups import RollUp, nodes_of, plan, statements

# the hospital's hierarchies: zip and birth date with six levels each, sex, race, marital status
LEVEL_SIZES = [[1205, 496, 60, 45, 9, 1], [35040, 1153, 97, 20, 10, 1], [2, 1], [5, 1], [6, 2, 1]]
CUBE_ROWS = 992_403


def rows_at(meets: np.ndarray, cube_rows: float = CUBE_ROWS) -> np.ndarray:
    """The product of the levels' sizes (a level above the top: the attribute left out), at most the cube."""
    logs = [np.log(np.array(sizes + [1], dtype=float)) for sizes in LEVEL_SIZES]
    total = sum(logs[a][meets[:, a]] for a in range(len(LEVEL_SIZES)))
    return np.exp(np.minimum(total, np.log(cube_rows)))


def walk(forest: list[RollUp], above: tuple[int, ...] | None = None):
    """(roll-up, the meet of the one above it) of every roll-up of the forest."""
    for roll_up in forest:
        yield roll_up, above
        yield from walk(roll_up.below, roll_up.meet)


def cost(forest: list[RollUp]) -> float:
    """The plan's estimated rows read, as the planner counts them."""

    def own(r: RollUp) -> float:
        rows = float(rows_at(np.array([r.meet]))[0])
        return (
            rollups.GROUP_ROWS * rows
            + rollups.ROLLUP_ROWS
            + rows * (len(r.nodes) + len(r.below))
            + sum(own(b) for b in r.below)
        )

    return sum(CUBE_ROWS + own(r) for r in forest)


def check_valid(forest: list[RollUp], levels: list[tuple[int, ...]]) -> None:
    seen = []
    for roll_up, above in walk(forest):
        seen += roll_up.nodes
        assert all(m <= lv for j in roll_up.nodes for m, lv in zip(roll_up.meet, levels[j]))
        assert above is None or all(a <= m for a, m in zip(above, roll_up.meet))
    assert sorted(seen) == list(range(len(levels)))


HEIGHT_FOUR = [n for n in itertools.product(range(6), range(6), range(2), range(2), range(3)) if sum(n) == 9]


@pytest.mark.parametrize(
    "levels", [HEIGHT_FOUR, [(0, 5, 0, 1, 2)], [(5, 0, 1, 1, 2), (0, 5, 1, 1, 2)], [(5, 5, 1, 1, 2)] * 3]
)
def test_every_node_is_read_once_from_a_roll_up_below_it(levels):
    forest = plan(levels, rows_at, CUBE_ROWS, 4e6)
    check_valid(forest, levels)
    alone = [RollUp(lv, [j]) for j, lv in enumerate(levels)]
    assert cost(forest) <= cost(alone)


def test_nodes_that_keep_high_levels_share_roll_ups():
    forest = plan(HEIGHT_FOUR, rows_at, CUBE_ROWS, 4e6)
    assert len(forest) < len(HEIGHT_FOUR) / 4  # far fewer passes over the cube than nodes
    assert any(r.below for r in forest)  # some roll-ups are read by others
    # zip and birth date at their lowest levels together: the cube itself, which a general node reads in the
    # same pass rather than a pass of its own
    bottom = plan([(0, 0, 1, 1, 2), (5, 5, 1, 1, 2)], rows_at, CUBE_ROWS, 4e6)
    assert [(r.meet, r.nodes, r.below) for r in bottom] == [((0, 0, 1, 1, 2), [0, 1], [])]


def test_a_roll_up_below_another_is_put_under_it():
    levels = [(2, 3, 0, 0, 0), (3, 3, 0, 0, 0), (2, 4, 0, 0, 0), (4, 5, 1, 1, 2)]
    forest = plan(levels, rows_at, CUBE_ROWS, 4e6)
    check_valid(forest, levels)
    assert len(forest) == 1


def test_no_roll_up_joins_more_rows_than_a_statement_should_and_statements_split_the_forest():
    levels = [(0, 0, 1, 1, 2), (0, 0, 0, 1, 2), (0, 0, 1, 0, 2), (5, 5, 1, 1, 2), (2, 1, 1, 1, 2)]
    forest = plan(levels, rows_at, CUBE_ROWS, 1.5e6)
    check_valid(forest, levels)
    for roll_up, _ in walk(forest):
        reads = len(roll_up.nodes) + len(roll_up.below)
        assert reads == 1 or float(rows_at(np.array([roll_up.meet]))[0]) * reads <= 1.5e6
    groups = statements(forest, rows_at, 1.5e6)
    assert sorted(j for group in groups for j in nodes_of(group)) == list(range(len(levels)))
    assert len(groups) >= 3  # the three nodes at the bottom of zip and birth date: a statement each


@settings(max_examples=300, deadline=None)
@given(
    levels=st.lists(
        st.tuples(*(st.integers(0, len(sizes)) for sizes in LEVEL_SIZES)), min_size=1, max_size=60, unique=True
    ),
    cube_rows=st.sampled_from([2e5, CUBE_ROWS, 4.9e6]),
    max_join=st.sampled_from([2e5, 1.5e6, 4e6]),
)
def test_any_wave_is_planned_validly(levels, cube_rows, max_join):
    """Any wave (attributes left out included), any cube and join bound: every node read once from a roll-up below
    its levels, each roll-up below the one it groups, no roll-up's join with its nodes above the bound unless it
    has one node, and the statements hold every node."""

    def estimate(meets: np.ndarray) -> np.ndarray:
        return rows_at(meets, cube_rows)

    forest = plan(levels, estimate, cube_rows, max_join)
    check_valid(forest, levels)
    for roll_up, _ in walk(forest):
        rows = float(estimate(np.array([roll_up.meet]))[0])
        assert len(roll_up.nodes) <= 1 or rows * len(roll_up.nodes) <= max_join * (1 + 1e-9)
    groups = statements(forest, estimate, max_join)
    assert sorted(j for group in groups for j in nodes_of(group)) == list(range(len(levels)))
