"""How long work reports how far it got: one callable type for every verb (the CLI draws it as a bar).

A phase reads `"<verb>: <step>"` when a verb goes through named steps (`Phases`): the bar keeps one line per
verb and shows the step it is in.
"""

from __future__ import annotations

from collections.abc import Callable

#: (phase description, done, total: None while unknown)
Progress = Callable[[str, int, "int | None"], None]


def silent(phase: str, done: int, total: int | None) -> None:
    """No progress shown."""


class Phases:
    """A verb's named steps reported in order: `phases.step("auditing")` reports "verb: auditing" with the steps
    before it finished, out of `total`."""

    def __init__(self, progress: Progress, verb: str, total: int) -> None:
        self.progress, self.verb, self.total = progress, verb, total
        self.started = 0

    def step(self, name: str) -> None:
        """Entering step `name`: the steps entered before it are finished."""
        self.progress(f"{self.verb}: {name}", min(self.started, self.total), self.total)
        self.started += 1
