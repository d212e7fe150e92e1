"""Publication methods: the ways a job's table is published (`output.method`), one registry of them.

A method is a subclass of `PublicationMethod` in its own module of this package, registered under its `name`
when the module is imported. The config reads the registry to validate a job: the method parses its own output
settings (`parse`: the job's `Output.settings`; another method's settings are refused) and says what it needs of
the job (`check`). The API registers the verb that runs each method (`publishes`), and the CLI's `anonymize`
runs whichever the job names. Every table a method writes goes through `staging.staged_table` (staged, audited,
owned, granted, or nothing).

To add one: a module here with a subclass (its name, its settings and how to parse them, its checks, and the
function that writes and audits its tables through `staged_table`), a verb in `sqlanon.api` that opens a
`session.table_run` and is decorated with `publishes(name)`, and tests.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from ..errors import ConfigError
from ..model.job import Job, Output


class PublicationMethod:
    """One way to publish: its name in `output.method`, the output settings only it reads, and what it needs of a
    job (checked when the job is read, before any database is opened)."""

    name: ClassVar[str]
    settings: ClassVar[tuple[str, ...]] = ()
    #: counts persons where the job names them (`unit: {column: ...}`); a method that does not refuses such a job
    counts_persons: ClassVar[bool] = False
    #: the verb that publishes a job by this method, `run(job, options, replace=...)`: set by `publishes`
    run: ClassVar[Callable[..., Any] | None] = None
    #: a second table the method writes beside output.table: the setting naming it, and its default name's suffix
    companion: ClassVar[tuple[str, str] | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        METHODS[cls.name] = cls

    @classmethod
    def parse(cls, output: Mapping[str, Any], base_dir: Path) -> dict[str, Any]:
        """The method's own settings from the job's `output:` mapping, checked, with their defaults (the job's
        `Output.settings`; files named relative to `base_dir`, the config's folder, resolved); by default each of
        `settings` given, as it is."""
        return {key: output[key] for key in cls.settings if key in output}

    @classmethod
    def check(cls, job: Job) -> None:
        """Raise ConfigError naming what the job lacks for this method, or has that it ignores."""

    @classmethod
    def tables(cls, output: Output) -> list[str]:
        """The names of the tables the method writes."""
        return [output.table] + ([cls.companion_table(output)] if cls.companion else [])

    @classmethod
    def companion_table(cls, output: Output) -> str:
        """The name of the method's second table (`companion`): its setting's, by default TABLE_SUFFIX."""
        assert cls.companion is not None, f"output.method {cls.name} writes one table"
        setting, suffix = cls.companion
        return str(output.settings.get(setting) or f"{output.table}_{suffix}")


METHODS: dict[str, type[PublicationMethod]] = {}


def refuse_criteria(
    job: Job, method: str, does: str, instead: str = "checks no criteria (it guarantees none of them)"
) -> None:
    """ConfigError for a job publishing by `method`, which `does` (what it publishes) and, `instead` of the job's
    criteria, what it says: one with criteria, suppression, a ledger or a research subset."""
    if job.criteria or job.suppression.limit:
        raise ConfigError(
            f"output.method {method} {does} and {instead}; remove criteria and suppression, or publish by "
            "generalization"
        )
    if job.ledger is not None or job.subset is not None:
        raise ConfigError(f"output.method {method} {does}: remove ledger and subset, or publish by generalization")


Verb = TypeVar("Verb", bound=Callable[..., Any])


def publishes(name: str) -> Callable[[Verb], Verb]:
    """Decorator: the API verb that publishes by the method `name`."""

    def register(verb: Verb) -> Verb:
        METHODS[name].run = verb
        return verb

    return register
