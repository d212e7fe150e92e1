"""How long work reports how far it got: one callable type for every verb (the CLI draws it as a bar)."""

from __future__ import annotations

from collections.abc import Callable

#: (phase description, done, total: None while unknown)
Progress = Callable[[str, int, "int | None"], None]


def silent(phase: str, done: int, total: int | None) -> None:
    """No progress shown."""
