"""Errors a user can act on.

Every problem caused by input (config, files, data, database state) is raised as
a SqlanonError whose message names the problem and the fix. The CLI prints it on
one line and exits with code 2; anything else is a bug and keeps its traceback.
"""

import threading

#: set by the CLI's Ctrl-C handler: the database driver may turn the interrupt into an error of its own (DuckDB:
#: RuntimeError 'Query interrupted'), and a run that ends while it is set was cancelled by the user
USER_INTERRUPT = threading.Event()


def interrupted(exc: BaseException) -> bool:
    """Whether `exc` ended a run because the user interrupted it (Ctrl-C)."""
    return isinstance(exc, KeyboardInterrupt) or USER_INTERRUPT.is_set()


class SqlanonError(Exception):
    """A problem with the user's input or environment, with a message that says what to do."""


class ConfigError(SqlanonError):
    """The job configuration is invalid."""


class HierarchyError(SqlanonError):
    """A hierarchy file or generated hierarchy is invalid or does not cover the data."""


class DataError(SqlanonError):
    """The data in the database does not fit the job (unknown table/column, NULLs, ...)."""


class AuditError(SqlanonError):
    """An anonymized output failed its independent re-check; nothing was written."""


class RunCancelled(SqlanonError):
    """The statement that started the run was cancelled (or timed out); the run can be resumed."""
