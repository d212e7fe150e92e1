"""The store: sqlanon's own tables (runs, lattices, registered jobs, the tables it owns) and the only way to them.

Contract:
- Every read and write of the store's tables is an operation (`ops.Op`, `ops.Insert`) called through `Store`; no
  other module spells SQL against them. Operations are defined in this package, one module per kind of record
  (`runs`, `lattice`, `jobs`, `tables`, `keys`, `ledger`), and `OPERATIONS` lists them all.
- On PostgreSQL each operation is a routine of the store's schema (`postgres`): SECURITY DEFINER with its
  search_path pinned, checking that a run or job it touches is the caller's. Roles that run sqlanon (granted the
  database's runner role by `sqlanon grant-runner`) hold EXECUTE on those routines and no privilege on any table;
  they create nothing in the store's schema: a run's scratch tables (dimensions, cube) go to the role's own work
  schema (`<store>_work_<role>`). On DuckDB, one user per file, the statements run as they are.
- This package imports only `backends` and `errors`.

Adding an operation: define it in the module of its records, add it to that module's `OPS`, call it with
`Store.call` / `Store.insert`. The migration installs its routine on PostgreSQL the next time `sqlanon migrate`
runs (the routines' digest changes), and grants it to runners unless it is `owner_only`.
"""

from __future__ import annotations

from . import jobs, keys, lattice, ledger, runs, tables
from .ops import Insert, Op, Store

OPERATIONS: tuple[Op | Insert, ...] = runs.OPS + lattice.OPS + jobs.OPS + tables.OPS + keys.OPS + ledger.OPS

__all__ = ["OPERATIONS", "Insert", "Op", "Store"]
