"""The names of a run's scratch tables, in one place: where they are made and where cleanup finds the tables a
killed run left behind (a table named here and nowhere else would leak after a kill)."""

from __future__ import annotations

import re


def dimension_table(run_id: int, attr: int) -> str:
    """A QI's dimension table: its values, their codes and labels at every level."""
    return f"dim_{run_id}_{attr}"


def cube_table(run_id: int, part: int = 0) -> str:
    """The search's packed cube: the table grouped once at level 0, its codes packed into class keys (`part`: a
    second cube of the run's, e.g. over a population table)."""
    return f"packed_cube_{run_id}" + (f"_{part}" if part else "")


def rows_table(run_id: int, part: int = 0) -> str:
    """The source's rows with their packed keys, when the waves read the table rather than a cube."""
    return f"packed_rows_{run_id}" + (f"_{part}" if part else "")


def subset_table(run_id: int) -> str:
    """The rows of a job's research subset, which the run anonymizes (the source table is their population)."""
    return f"subset_rows_{run_id}"


def sample_table(run_id: int) -> str:
    """The rows of a random sample of a job's source, which the run anonymizes (a differentially private
    publication's)."""
    return f"sample_rows_{run_id}"


def kept_dimension_table(digest: str) -> str:
    """A dimension table kept across runs (engine.star.KeptDimensions), by the digest of its hierarchy: no run's,
    so cleanup never takes it for a killed run's."""
    return f"dimension_{digest}"


KEPT_DIMENSION_PREFIX = kept_dimension_table("")

# parents_<run>: the parent-code arrays that earlier sqlanon versions made per run (a killed one may have left them)
_RUN_TABLE = re.compile(r"dim_(\d+)_\d+|parents_(\d+)|packed_(?:cube|rows)_(\d+)(?:_\d+)?|subset_rows_(\d+)")


def run_of_table(name: str) -> int | None:
    """The run a scratch table named above belongs to, or None for any other table."""
    found = _RUN_TABLE.fullmatch(name)
    return int(next(run for run in found.groups() if run)) if found else None
