"""Additive noise of a randomized publication (`output.method: randomize`, Agrawal and Srikant): which numeric
column gets noise from which distribution, as the job declares it and as the published noise table describes it.

A value x is published as z = x + y, y drawn independently for every value from the column's distribution:
`uniform` of a `width` (y in [-width/2, width/2]) or `gaussian` of a standard deviation `sd` (mean 0). The
distribution is public (published beside the table); the key that draws the noise is not (see
sqlanon.publish.randomize).
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .job import read_key

#: each distribution and the one parameter that sets its spread
DISTRIBUTIONS = {"uniform": "width", "gaussian": "sd"}


@dataclass(frozen=True)
class Noise:
    """The noise of one column: its distribution and that distribution's parameter (`scale`: the uniform's width,
    the gaussian's standard deviation)."""

    column: str
    distribution: str
    scale: float

    @property
    def parameter(self) -> str:
        return DISTRIBUTIONS[self.distribution]

    @property
    def sd(self) -> float:
        """The noise's standard deviation (a uniform's of width w: w / sqrt(12))."""
        return self.scale / math.sqrt(12) if self.distribution == "uniform" else self.scale

    @property
    def bound(self) -> float | None:
        """How far the noise moves a value at most (None: unbounded)."""
        return self.scale / 2 if self.distribution == "uniform" else None

    def describe(self) -> dict[str, Any]:
        return {"distribution": self.distribution, self.parameter: self.scale}

    @classmethod
    def parse(cls, column: str, spec: Any, where: str) -> Noise:
        """`{distribution: uniform, width: W}` or `{distribution: gaussian, sd: S}`, W and S finite and > 0."""
        shapes = " or ".join(f"{{distribution: {d}, {p}: NUMBER}}" for d, p in DISTRIBUTIONS.items())
        if not isinstance(spec, Mapping) or spec.get("distribution") not in DISTRIBUTIONS:
            raise ConfigError(f"{where} must be {shapes}; got {spec!r}")
        distribution = str(spec["distribution"])
        parameter = DISTRIBUTIONS[distribution]
        unknown = sorted(set(spec) - {"distribution", parameter})
        if unknown or parameter not in spec:
            raise ConfigError(f"{where}: a {distribution} noise takes {parameter}: NUMBER only; got {dict(spec)!r}")
        return cls(column, distribution, positive_number(spec[parameter], f"{where}.{parameter}"))


def positive_number(value: Any, where: str) -> float:
    """`value` as a finite number above 0, or ConfigError naming `where`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{where} must be a finite number above 0, got {value!r}")
    return float(value)


def key_source(raw: Any, base_dir: Path) -> dict[str, str] | None:
    """`output.noise_key`: `{key_env: VARIABLE}` or `{key_file: FILE}` (relative to the config's folder), where the
    key that draws a publication's noise is read from at run time; None when the job names none."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or len(raw) != 1 or not set(raw) <= {"key_env", "key_file"}:
        raise ConfigError(f"output.noise_key takes one of key_env: VARIABLE or key_file: FILE, got {raw!r}")
    ((kind, value),) = raw.items()
    if not isinstance(value, str) or not value:
        raise ConfigError(f"output.noise_key.{kind} must be a name, got {value!r}")
    return {kind: value if kind == "key_env" else str((base_dir / value).resolve())}


def read_noise_key(source: Mapping[str, str] | None) -> tuple[bytes, bool]:
    """The noise's key, read now from where `key_source` says, and True; without a source, a fresh 32-byte key that
    nobody keeps, and False (the noise can never be drawn again)."""
    if source is None:
        return secrets.token_bytes(32), False
    file = source.get("key_file")
    return read_key("output.noise_key", source.get("key_env"), None if file is None else Path(file)), True
