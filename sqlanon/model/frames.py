"""A pandas DataFrame as a job's source: checked, described and fingerprinted here, loaded by the database.

The Python API's verbs take `source=frame`: the job then reads the frame instead of its `source.url` and
`source.table`, from a DuckDB database in this process' memory (nothing on disk), or from the database
`RunOptions.db_url` names when the caller asks for one, where the frame becomes a table sqlanon loaded, as a CSV
file does (reused while the frame is the same, never replacing a table of someone else's). DuckDB scans the frame
in place (`DuckDB.load_frame`); nothing here reads its rows but the fingerprint.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError

#: where a DataFrame source goes unless the caller names a database: DuckDB in this process' memory
MEMORY_URL = "duckdb:///:memory:"
#: the source table's name for a job that names none (a job written for DataFrames needs no `source:`)
FRAME_TABLE = "source"
#: the table a DataFrame given to a verb that reads a published table (audit, analyze_table) becomes
READ_TABLE = "published"
#: what pandas' infer_dtype says of a column whose values are of several kinds that no one SQL type holds
MIXED = ("mixed", "mixed-integer")


@dataclass(frozen=True, eq=False)
class SourceFrame:
    """A DataFrame a job reads as its source table (its index is not read: `reset_index()` keeps it)."""

    frame: Any  # a pandas DataFrame (typed loosely: importing pandas costs every CLI run 0.3 s)

    @classmethod
    def of(cls, frame: Any) -> SourceFrame:
        """The frame, once its columns can be a table's: unique, non-empty text names."""
        import pandas as pd

        if not isinstance(frame, pd.DataFrame):
            raise ConfigError(f"source must be a pandas DataFrame, got {type(frame).__name__}")
        names = list(frame.columns)
        odd = [n for n in names if not isinstance(n, str) or not n or "\x00" in n]
        if odd:
            raise ConfigError(
                f"the DataFrame's column names must be non-empty text, got {odd[0]!r}; rename its columns "
                "(frame.columns = [...]) or flatten a MultiIndex first"
            )
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ConfigError(f"the DataFrame has two columns named {twice[0]!r}; give each column its own name")
        return cls(frame)

    @property
    def rows(self) -> int:
        return len(self.frame)

    def describe(self) -> str:
        return f"a DataFrame of {self.rows:,} rows"

    def digest(self) -> str:
        """SHA-256 of the columns, their types and every row's hash (pandas hashes the columns vectorized: 0.1 s
        per million rows of the hospital table): the same digest means the same table, as `file_digest` says of
        a CSV file. The rows are the user's, already in this process; nothing is grouped or counted here."""
        import pandas as pd

        digest = hashlib.sha256(repr([(str(n), str(t)) for n, t in self.frame.dtypes.items()]).encode())
        digest.update(pd.util.hash_pandas_object(self.frame, index=False).to_numpy().tobytes())
        return digest.hexdigest()

    def categorical_columns(self) -> list[str]:
        """Columns of pandas' categorical type, which the table holds as text (DuckDB would make them ENUMs)."""
        import pandas as pd

        return [str(n) for n, t in self.frame.dtypes.items() if isinstance(t, pd.CategoricalDtype)]

    def mixed_columns(self) -> list[str]:
        """Text-typed columns whose values are of several kinds (text and numbers, bytes), as pandas infers them
        (in C, without a Python step per row): for an error that names the column."""
        import pandas as pd

        return [
            str(name)
            for name, column in self.frame.items()
            if column.dtype == object and pd.api.types.infer_dtype(column, skipna=True) in MIXED
        ]
