"""Value generalization hierarchies: ARX-style files and generated ones.

A hierarchy is a list of paths, one per original value:
`(value, level1, ..., top)`. Level 0 is the original value. Every value at
level i must have exactly one parent at level i+1. A path whose value is the
empty string maps NULLs in the column (write `;level1;...;top` in the file).
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import hashlib
import io
import itertools
import math
import operator
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from functools import cached_property
from pathlib import Path
from typing import Any

from ..errors import ConfigError, HierarchyError

NULL_VALUE = ""
GENERATED_TOP = "*"  # the top label of every generated hierarchy


@dataclass(kw_only=True, frozen=True)
class HierarchyShape:
    """What a run reads of a hierarchy beside its dimension table: enough to pack class keys and size the search
    without the hierarchy's paths (a dimension table kept across runs comes with it, see `engine.star`)."""

    height: int
    level_sizes: tuple[int, ...]  # distinct labels (codes 0..size-1) of each level
    level_bits: tuple[int, ...]  # the bits of each level's index among its siblings in a path code
    leaves: int
    maps_null: bool
    top_labels: tuple[str, ...]
    examples: tuple[tuple[str, ...], ...]  # per level, its first labels (`Hierarchy.examples`)

    @property
    def layout(self) -> CodeLayout:
        return CodeLayout(level_bits=self.level_bits)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @staticmethod
    def from_dict(found: dict[str, Any]) -> HierarchyShape:
        """The shape `to_dict` gave, as JSON read it back (lists for tuples)."""
        return HierarchyShape(
            height=int(found["height"]),
            level_sizes=tuple(map(int, found["level_sizes"])),
            level_bits=tuple(map(int, found["level_bits"])),
            leaves=int(found["leaves"]),
            maps_null=bool(found["maps_null"]),
            top_labels=tuple(map(str, found["top_labels"])),
            examples=tuple(tuple(map(str, labels)) for labels in found["examples"]),
        )


@dataclass(kw_only=True, frozen=True)
class Hierarchy:
    column: str
    paths: tuple[tuple[str, ...], ...]
    origin: str = "file"
    lines: tuple[int, ...] | None = None  # the file's line number of each path, for messages
    #: the paths by level: each level's label of every value, in the hierarchy's order, as the validation reads
    #: them (loops over columns run in C where loops over paths cost a hierarchy of 36k leaves 0.1 s)
    columns: tuple[tuple[str, ...], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "columns", _validate_paths(self.column, self.paths, self.origin, self.lines))

    def where(self, index: int) -> str:
        """`line N` of the file, or the value's path for a generated hierarchy."""
        return f"line {self.lines[index]}" if self.lines else f"path {' -> '.join(self.paths[index])}"

    def check_masking(self) -> None:
        """With suppression by masking, a masked tuple is one whose every QI holds its top label: no label
        below the top may equal a top label, or released tuples would count (and read) as masked."""
        tops = set(self.top_labels)
        for index, path in enumerate(self.paths):
            for level, label in enumerate(path[:-1]):
                if label in tops:
                    raise HierarchyError(
                        f"hierarchy for {self.column!r} ({self.origin}), {self.where(index)}: {label!r} at level "
                        f"{level} is also its top label; with suppression mode mask a masked tuple holds the top "
                        "label in every QI, so it could not be told from a released one: give the lower levels "
                        "another label, or use suppression mode remove"
                    )

    @property
    def height(self) -> int:
        return len(self.paths[0]) - 1

    @cached_property
    def values(self) -> frozenset[str]:
        return frozenset(self.columns[0])

    @property
    def top_labels(self) -> list[str]:
        """The labels of the highest level (usually just `*`), sorted."""
        return sorted({p[-1] for p in self.paths})

    def examples(self, level: int, count: int = 3) -> list[str]:
        """The first `count` distinct labels of `level`, in the hierarchy's order (NULL shown as 'NULL')."""
        wanted, labels = min(count, self.level_sizes()[level]), dict[str, None]()
        for p in self.paths:  # up to the last one wanted (a level's first labels come early)
            labels["NULL" if level == 0 and p[0] == NULL_VALUE else p[level]] = None
            if len(labels) == wanted:
                break
        return list(labels)

    @property
    def maps_null(self) -> bool:
        return NULL_VALUE in self.values

    def level_sizes(self) -> list[int]:
        """How many distinct labels (so codes 0..size-1) each level has."""
        return [len(codes) for codes in self.level_codes]

    @cached_property
    def level_codes(self) -> tuple[dict[str, int], ...]:
        """Per level: each label's integer code, its index among the level's labels sorted (computed once: a pass
        over every path)."""
        return tuple({label: i for i, label in enumerate(sorted(set(labels)))} for labels in self.columns)

    def dimension_rows(self) -> list[tuple[Any, ...]]:
        """Rows (value, c0..ch, l0..lh, p0..): an integer code and a label per level, and the value's path code
        in pieces (see PathCodes).

        Codes number the distinct labels of each level (sorted), so frequency sets
        group on integers, not text.
        """
        columns = self.columns
        codes = [list(map(level.__getitem__, labels)) for level, labels in zip(self.level_codes, columns)]
        pieces = self.path_codes.piece_columns(columns[0])
        return list(zip(columns[0], *codes, *columns, *pieces))

    @cached_property
    def path_codes(self) -> PathCodes:
        return PathCodes.of(self)

    @cached_property
    def shape(self) -> HierarchyShape:
        return HierarchyShape(
            height=self.height,
            level_sizes=tuple(self.level_sizes()),
            level_bits=self.path_codes.level_bits,
            leaves=len(self.paths),
            maps_null=self.maps_null,
            top_labels=tuple(self.top_labels),
            examples=tuple(tuple(self.examples(level)) for level in range(self.height + 1)),
        )


PIECE_BITS = 62  # a piece of a path code, shifted into a packed class key, stays within a signed BIGINT


@dataclass(frozen=True, kw_only=True)
class CodeLayout:
    """Where each level of a hierarchy's path codes lies (see PathCodes): all that packing class keys and masking
    them to a node's levels needs, without the codes themselves.

    A code may be wider than a BIGINT (a mask hierarchy of a long identifier); databases get it in pieces of
    consecutive levels of at most PIECE_BITS bits each (usually one), and the pieces keep the property."""

    level_bits: tuple[int, ...]  # per level: the bits of its index among siblings

    @cached_property
    def shifts(self) -> tuple[int, ...]:
        """Per level: the bits of the levels below it."""
        return tuple(sum(self.level_bits[:level]) for level in range(len(self.level_bits)))

    @property
    def bits(self) -> int:
        return sum(self.level_bits)

    def pieces(self) -> list[tuple[int, int]]:
        """The levels (lowest, highest) of each piece, bottom up: as many levels as fit PIECE_BITS (a level
        never needs more bits than it has values, so each fits alone)."""
        pieces: list[tuple[int, int]] = []
        low = used = 0
        for level, bits in enumerate(self.level_bits):
            if used + bits > PIECE_BITS:
                pieces.append((low, level - 1))
                low, used = level, 0
            used += bits
        return pieces + [(low, len(self.level_bits) - 1)]

    def _cut(self, piece: tuple[int, int]) -> tuple[int, int]:
        """How a path code is cut to `piece`: shifted right by this, then masked with this."""
        return self.shifts[piece[0]], (1 << self.piece_bits(piece)) - 1

    def piece_mask(self, piece: tuple[int, int], level: int) -> int:
        """The bits of a piece that name the node at `level` (-1: none, the attribute left out)."""
        low, high = piece
        if level < 0 or level > high:
            return 0
        below = self.piece_bits((low, level - 1)) if level > low else 0
        return ((1 << self.piece_bits(piece)) - 1) >> below << below

    def piece_bits(self, piece: tuple[int, int]) -> int:
        return sum(self.level_bits[piece[0] : piece[1] + 1])


@dataclass(frozen=True, kw_only=True)
class PathCodes(CodeLayout):
    """A hierarchy's values as path codes: from the top down, each level's index among its siblings, in its own
    bits, so the node above a value at level L is `code >> shifts[L]` (unique among level L's nodes), and two
    values share their node at level L exactly when their codes agree from bit `shifts[L]` up."""

    code: dict[str, int]  # value -> its path code
    labels: tuple[tuple[str, ...], ...]  # the hierarchy's paths, for `nodes`

    @staticmethod
    def of(hierarchy: Hierarchy) -> PathCodes:
        columns, top = hierarchy.columns, len(hierarchy.columns) - 1
        index: list[dict[str, int]] = []  # per level: label -> its index among its siblings (labels sorted)
        for level, labels in enumerate(columns):
            # siblings share the label above (the top level: all of its labels); each label has one parent
            parent_of = dict(zip(labels, columns[level + 1] if level < top else itertools.repeat("")))
            numbered, siblings = dict[str, int](), dict[str, int]()  # siblings: per parent, the last index given
            for label in sorted(parent_of):  # one pass in order (grouping by parent, then sorting, took 2.5x)
                parent = parent_of[label]
                numbered[label] = siblings[parent] = siblings.get(parent, -1) + 1
            index.append(numbered)
        bits = tuple(max(numbered.values()).bit_length() for numbered in index)
        code = [0] * len(columns[0])
        for shift, numbered, labels in zip(itertools.accumulate(bits, initial=0), index, columns):
            code = [c + (numbered[label] << shift) for c, label in zip(code, labels)]
        return PathCodes(code=dict(zip(columns[0], code)), level_bits=bits, labels=hierarchy.paths)

    def piece_columns(self, values: Sequence[str]) -> list[list[int]]:
        """Per piece (see `pieces`), the codes of `values` cut to it: `piece_codes` for many values at once."""
        codes = list(map(self.code.__getitem__, values))
        pieces = self.pieces()
        if len(pieces) == 1:  # the usual case: the whole code fits a piece
            return [codes]
        return [[(c >> shift) & mask for c in codes] for shift, mask in map(self._cut, pieces)]

    def piece_codes(self, value: str, pieces: list[tuple[int, int]] | None = None) -> list[int]:
        """The value's code cut into `pieces` (by default, its pieces)."""
        code = self.code[value]
        return [(code >> shift) & mask for shift, mask in map(self._cut, self.pieces() if pieces is None else pieces)]

    def nodes(self) -> list[tuple[int, int, str, int]]:
        """(level, node code, label, leaves under it) of every node of the hierarchy: a level at a time, its
        leaves counted by Counter, in C (a path and level at a time in Python took 0.3 s for 35k dates)."""
        codes = [self.code[path[0]] for path in self.labels]
        found: list[tuple[int, int, str, int]] = []
        for level, shift in enumerate(self.shifts):
            nodes = [code >> shift for code in codes]
            labels = dict(zip(nodes, map(operator.itemgetter(level), self.labels)))  # a node has one label
            found += [(level, node, labels[node], n) for node, n in Counter(nodes).items()]
        return sorted(found)


def _validate_paths(
    column: str, paths: tuple[tuple[str, ...], ...], origin: str, lines: tuple[int, ...] | None
) -> tuple[tuple[str, ...], ...]:
    """The paths by level, once they are checked: the same length, each value once, each label of a level above
    the values under one parent. Counted by sets first; only a hierarchy that fails is walked in order, so the
    error names its first offending line."""
    if not paths:
        raise HierarchyError(f"hierarchy for {column!r} ({origin}) is empty")
    width = len(paths[0])
    if len(set(map(len, paths))) == 1:
        columns = tuple(tuple(map(operator.itemgetter(level), paths)) for level in range(width))
        if len(set(columns[0])) == len(paths) and all(
            len(set(zip(labels, above))) == len(set(labels)) for labels, above in itertools.pairwise(columns[1:])
        ):
            return columns
    _first_offence(column, paths, origin, lines, width)
    raise AssertionError("a hierarchy that fails a count has an offending line")


def _first_offence(
    column: str, paths: tuple[tuple[str, ...], ...], origin: str, lines: tuple[int, ...] | None, width: int
) -> None:
    """Raise the error of the first line that breaks a hierarchy's rules."""
    seen: dict[str, int] = {}
    parents: list[dict[str, str]] = [{} for _ in range(width - 1)]
    for index, path in enumerate(paths):
        if len(path) != width:
            raise HierarchyError(
                f"hierarchy for {column!r} ({origin}): value {path[0]!r} has {len(path) - 1} "
                f"levels above it, the first row has {width - 1}; every row needs the same number"
            )
        if path[0] in seen:  # a leaf twice would put its tuples twice into every join with the dimension
            first = seen[path[0]]
            on = f"on lines {lines[first]} and {lines[index]}" if lines else "twice"
            shown = "the NULL line (empty value)" if path[0] == NULL_VALUE else f"value {path[0]!r}"
            raise HierarchyError(
                f"hierarchy for {column!r} ({origin}): {shown} is listed {on}; each original "
                "value needs exactly one line"
            )
        seen[path[0]] = index
        for level in range(width - 1):
            parent = parents[level].setdefault(path[level], path[level + 1])
            if parent != path[level + 1] and level > 0:
                raise HierarchyError(
                    f"hierarchy for {column!r} ({origin}): {path[level]!r} at level {level} has two parents at "
                    f"level {level + 1}, {parent!r} and {path[level + 1]!r}; each value needs exactly one"
                )


#: a registered job's stored files, by the path its config names them with, while the job is loaded (see
#: stored_files): then no hierarchy is read from the disk
STORED: ContextVar[dict[Path, str] | None] = ContextVar("stored_files", default=None)


@contextmanager
def stored_files(files: dict[Path, str]) -> Iterator[None]:
    """Within: hierarchy files are the given texts (a registered job's files, kept in the database), and a path
    that is not one of them is refused: a registered job reads no file of the machine that runs it."""
    token = STORED.set(files)
    try:
        yield
    finally:
        STORED.reset(token)


def _file_text(column: str, path: Path, what: str = "hierarchy file") -> str:
    stored = STORED.get()
    if stored is not None:
        if path not in stored:
            raise HierarchyError(f"{what} for {column!r}: {path} is not among the job's stored files")
        return stored[path].removeprefix("\ufeff")
    if not path.is_file():
        raise HierarchyError(f"{what} for {column!r} not found: {path}")
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise HierarchyError(f"{what} {path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _rows(text: str) -> Iterable[tuple[int, list[str]]]:
    """Each row's fields, with the file's line number where the row ends (quoted fields may span lines). A text
    without quotes, NUL or a carriage return but in CRLF is split as it is: the csv module reads it alike, at
    1.4x the time (35k dates: 0.13 against 0.09 s)."""
    if '"' not in text and "\0" not in text and text.count("\r") == text.count("\r\n"):
        return enumerate((line.split(";") for line in text.split("\n")), start=1)
    reader = csv.reader(io.StringIO(text), delimiter=";")
    return ((reader.line_num, row) for row in reader)


def _numbered_cells(text: str) -> list[tuple[int, tuple[str, ...]]]:
    """Each row that is not blank, with its line number, its fields stripped of surrounding whitespace."""
    return [(number, cells) for number, row in _rows(text) if any(cells := tuple(map(str.strip, row)))]


@dataclass(kw_only=True)
class HierarchyFile:
    """A hierarchy file as read, parsed on first use (`load`): a run whose database keeps the file's dimension table
    from an earlier run needs only what that table keeps (see `engine.star`), found by the digest of the text."""

    column: str
    path: Path
    text: str
    _parsed: Hierarchy | None = field(default=None, repr=False)

    @staticmethod
    def read(column: str, path: Path) -> HierarchyFile:
        return HierarchyFile(column=column, path=path, text=_file_text(column, path))

    @cached_property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    def load(self) -> Hierarchy:
        if self._parsed is None:
            self._parsed = _parsed_hierarchy(self.column, self.path, self.text)
        return self._parsed


def read_hierarchy_file(column: str, path: Path) -> Hierarchy:
    """Read `value;level1;...;top` lines (ARX format, any line ending, optional BOM)."""
    return HierarchyFile.read(column, path).load()


def _parsed_hierarchy(column: str, path: Path, text: str) -> Hierarchy:
    numbered = _numbered_cells(text)
    if not numbered:
        raise HierarchyError(f"hierarchy file {path} is empty")
    first_line, first = numbered[0]
    if len(first) < 2:
        raise HierarchyError(
            f"hierarchy file {path}: line {first_line} has one field; lines must be "
            "`value;level1;...;top`, separated by ';'"
        )
    for number, fields in numbered:
        if len(fields) != len(first):
            raise HierarchyError(
                f"hierarchy file {path}: line {number} has {len(fields)} fields, line {first_line} "
                f"has {len(first)}; every line needs value;level1;...;top"
            )
    lines, paths = (tuple(map(operator.itemgetter(i), numbered)) for i in (0, 1))
    return Hierarchy(column=column, paths=paths, origin=str(path), lines=lines)


# --- generators ------------------------------------------------------------


def generate_hierarchy(column: str, kind: str, options: dict[str, Any], values: Iterable[str]) -> Hierarchy:
    """Build a hierarchy for the distinct (text) values of a column."""
    values = sorted(set(values))
    if not values:
        raise HierarchyError(f"column {column!r} has no non-NULL values to build a {kind} hierarchy from")
    options = dict(options)
    null_label = options.pop("null", None)
    builder = GENERATORS[kind]
    paths = builder(column, options, values)
    if null_label is not None:
        paths.append(_null_path(column, null_label, len(paths[0]) - 1, {p[i] for p in paths for i in range(1, len(p))}))
    return Hierarchy(column=column, paths=tuple(paths), origin=f"generated {kind}")


def _null_path(column: str, label: Any, height: int, labels: set[str]) -> tuple[str, ...]:
    """NULL (the empty value) shows `label` at every level but the top, which it shares with every value."""
    if not isinstance(label, str) or not label.strip():
        raise ConfigError(f"quasi_identifiers.{column}: null must be a non-empty label for NULLs, e.g. null: unknown")
    if label in labels or label == GENERATED_TOP:
        raise ConfigError(
            f"quasi_identifiers.{column}: null label {label!r} is already a label of the hierarchy; "
            "NULLs need a label of their own, e.g. null: unknown"
        )
    return (NULL_VALUE, *[label] * (height - 1), GENERATED_TOP)


def _check_options(column: str, kind: str, options: dict[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(options) - allowed)
    if unknown:
        names = ", ".join(sorted(allowed)) or "none"
        raise ConfigError(
            f"quasi_identifiers.{column}: generator {kind} has no option {unknown[0]!r} (options: {names})"
        )


def _suppress(column: str, options: dict[str, Any], values: list[str]) -> list[tuple[str, ...]]:
    _check_options(column, "suppress", options, set())
    return [(v, GENERATED_TOP) for v in values]


def _mask(column: str, options: dict[str, Any], values: list[str]) -> list[tuple[str, ...]]:
    """13053 -> 1305* -> 130** -> 13*** -> 1**** -> *  (masks from the right)."""
    _check_options(column, "mask", options, {"char", "width"})
    char = str(options.get("char", "*"))
    if len(char) != 1:
        raise ConfigError(f"quasi_identifiers.{column}: mask char must be one character, got {char!r}")
    pad = options.get("width")
    if pad is not None:  # integer codes that lost their leading zeros (zip 02134 read as 2134)
        if not isinstance(pad, int) or isinstance(pad, bool) or pad < 1:
            raise ConfigError(f"quasi_identifiers.{column}: mask width must be a positive whole number, e.g. 5")
        longer = [v for v in values if len(v) > pad]
        if longer:
            raise HierarchyError(
                f"mask for {column!r}: value {longer[0]!r} is longer than width {pad}; raise the width or leave it out"
            )
    width = max(len(v) for v in values) if pad is None else pad
    paths = []
    for v in values:
        shown = v if pad is None else v.rjust(pad, "0")  # generalized labels show the padded value
        # once a shorter value is masked whole it shows the full width ('**' for width 2), never the top
        # label: with suppression mode mask, a lower label equal to the top would read as a masked tuple
        masked = [shown[: len(shown) - i] + char * i if i < len(shown) else char * width for i in range(1, width)]
        paths.append((v, *masked, GENERATED_TOP))
    return paths


def _parse_number(column: str, kind: str, text: str) -> Decimal:
    try:
        number = Decimal(text)
    except InvalidOperation:
        raise HierarchyError(f"generator {kind} for {column!r} needs numbers, found {text!r}") from None
    if not number.is_finite():
        raise HierarchyError(f"generator {kind} for {column!r} needs finite numbers, found {text!r}")
    return number


def _widths(column: str, kind: str, raw: Any, unit: str) -> list[int]:
    if (
        not isinstance(raw, list)
        or not raw
        or not all(isinstance(w, int) and not isinstance(w, bool) and w > 0 for w in raw)
    ):
        raise ConfigError(
            f"quasi_identifiers.{column}: generator {kind} needs a list of positive whole {unit}, e.g. [5, 10, 20]"
        )
    for small, big in itertools.pairwise(raw):
        if big % small:
            raise ConfigError(
                f"quasi_identifiers.{column}: each {kind} width must be a multiple of the one "
                f"before it ({big} is not a multiple of {small}), or values would have two parents"
            )
    return raw


def _fmt(number: Decimal) -> str:
    return str(int(number)) if number == number.to_integral_value() else format(number.normalize(), "f")


def _intervals(column: str, options: dict[str, Any], values: list[str]) -> list[tuple[str, ...]]:
    """39 -> [35,40) -> [30,40) -> ... -> *  for widths [5, 10, ...] anchored at `start`.

    Top and bottom coding (as ARX's interval builder offers): with `bottom: 20`, every value below 20 is `<20`
    at every level but the top; with `top: 90`, every value from 90 is `>=90`; the intervals between are cut
    at those bounds ([80,90) at width 20 rather than [80,100)), so each still holds only what its label says.
    """
    _check_options(column, "intervals", options, {"widths", "start", "bottom", "top"})
    widths = _widths(column, "intervals", options.get("widths"), "numbers")
    start = _option_number(column, "start", options.get("start", 0))
    bottom, top = (_option_number(column, b, options[b]) if b in options else None for b in ("bottom", "top"))
    if bottom is not None and top is not None and bottom >= top:
        raise ConfigError(f"quasi_identifiers.{column}: bottom ({_fmt(bottom)}) must be below top ({_fmt(top)})")
    paths = []
    for v in values:
        x = _parse_number(column, "intervals", v)
        if bottom is not None and x < bottom:
            paths.append((v, *[f"<{_fmt(bottom)}"] * len(widths), GENERATED_TOP))
            continue
        if top is not None and x >= top:
            paths.append((v, *[f">={_fmt(top)}"] * len(widths), GENERATED_TOP))
            continue
        levels = []
        for w in widths:
            low = start + math.floor((x - start) / w) * w
            high = low + w
            low, high = max(low, bottom) if bottom is not None else low, min(high, top) if top is not None else high
            levels.append(f"[{_fmt(low)},{_fmt(high)})")
        paths.append((v, *levels, GENERATED_TOP))
    return paths


def _option_number(column: str, name: str, raw: Any) -> Decimal:
    """A generator's numeric option (start, bottom, top): a finite number written as one."""
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
        raise ConfigError(f"quasi_identifiers.{column}: {name} must be a number, got {raw!r}")
    try:
        number = Decimal(str(raw))
    except InvalidOperation:
        raise ConfigError(f"quasi_identifiers.{column}: {name} must be a number, got {raw!r}") from None
    if not number.is_finite():
        raise ConfigError(f"quasi_identifiers.{column}: {name} must be a finite number, got {raw!r}")
    return number


def _groups(column: str, options: dict[str, Any], values: list[str]) -> list[tuple[str, ...]]:
    """Married-civ-spouse -> married -> *  from groups named in the job: `groups` maps each group to its values
    (one level), or is a list of such mappings, each grouping the labels of the level below (several levels).
    `other: LABEL` groups the values no group lists; without it such a value is an error that names it."""
    _check_options(column, "groups", options, {"groups", "other"})
    raw = options.get("groups")
    levels = [raw] if isinstance(raw, dict) else raw
    if not isinstance(levels, list) or not levels or not all(isinstance(level, dict) and level for level in levels):
        raise ConfigError(
            f"quasi_identifiers.{column}: generator groups needs groups: {{GROUP: [VALUE, ...], ...}}, or a list of "
            "such mappings for several levels (each grouping the groups of the level below)"
        )
    other = options.get("other")
    if other is not None and (not isinstance(other, str) or not other.strip() or other == GENERATED_TOP):
        raise ConfigError(f"quasi_identifiers.{column}: other must be a label for the values no group lists")
    paths = [[v] for v in values]
    for depth, level in enumerate(levels, start=1):
        parent = _group_of(column, depth, level)
        for path in paths:
            below = path[-1]
            if below in parent:
                path.append(parent[below])
            elif depth == 1 and other is not None:
                path.append(other)
            else:
                what = "value" if depth == 1 else f"level {depth - 1} group"
                fix = ", or name a group for the rest with other: LABEL" if depth == 1 else ""
                raise HierarchyError(
                    f"generator groups for {column!r}: level {depth} puts {what} {below!r} in no group; add it to "
                    f"one{fix}"
                )
    return [(*path, GENERATED_TOP) for path in paths]


def read_groups_file(column: str, path: Path) -> list[dict[str, list[str]]]:
    """The levels of groups a mapping file gives, as `groups` writes them inline: one line per value,
    `value;group` (one level) or `value;group;group of groups;...` (several), separated by ';' (any line ending,
    optional BOM). A value on two lines, or a group under two groups, is an error naming both lines."""
    numbered = _numbered_cells(_file_text(column, path, "groups file"))
    if not numbered:
        raise HierarchyError(f"groups file {path} is empty")
    width = len(numbered[0][1])
    levels: list[dict[str, list[str]]] = [{} for _ in range(width - 1)]
    seen: list[dict[str, tuple[str, int]]] = [{} for _ in range(width - 1)]  # member -> (its group, line)
    for number, fields in numbered:
        if len(fields) != width or width < 2 or not all(fields):
            raise HierarchyError(
                f"groups file {path}: line {number} must be `value;group` or `value;group;group of groups;...` "
                f"with every field filled and as many fields as line {numbered[0][0]} ({width})"
            )
        for depth, (member, group) in enumerate(itertools.pairwise(fields)):
            if member not in seen[depth]:
                seen[depth][member] = (group, number)
                levels[depth].setdefault(group, []).append(member)
                continue
            first_group, first_line = seen[depth][member]
            if depth == 0:
                raise HierarchyError(
                    f"groups file {path}: value {member!r} is on lines {first_line} and {number}; list each value once"
                )
            if first_group != group:
                raise HierarchyError(
                    f"groups file {path}: {member!r} is in {first_group!r} on line {first_line} and in {group!r} on "
                    f"line {number}; a group has one group above it"
                )
    return levels


def _group_of(column: str, depth: int, level: dict[Any, Any]) -> dict[str, str]:
    """Each member's group at one level of `groups` (members as text: a YAML number names the value it reads)."""
    found: dict[str, str] = {}
    for group, members in level.items():
        if not isinstance(group, (str, int)) or isinstance(group, bool) or str(group) in ("", GENERATED_TOP):
            raise ConfigError(f"quasi_identifiers.{column}: groups level {depth} has a group named {group!r}")
        if not isinstance(members, list) or not members:
            raise ConfigError(
                f"quasi_identifiers.{column}: group {group!r} (level {depth}) must list its members, e.g. [a, b]"
            )
        for member in map(str, members):
            if member in found and found[member] != str(group):
                raise ConfigError(
                    f"quasi_identifiers.{column}: {member!r} is in groups {found[member]!r} and {group!r} at level "
                    f"{depth}; a member has one group"
                )
            found[member] = str(group)
    return found


def _date(column: str, options: dict[str, Any], values: list[str]) -> list[tuple[str, ...]]:
    """1968-07-14 -> 1968-07 -> 1968 -> 1965-1969 -> 1960-1969 -> *  (bands in years)."""
    _check_options(column, "date", options, {"bands"})
    bands = _widths(column, "date", options.get("bands", [5, 10]), "years")
    paths = []
    for v in values:
        try:
            day = dt.date.fromisoformat(v[:10])
        except ValueError:
            raise HierarchyError(f"generator date for {column!r} needs ISO dates (YYYY-MM-DD), found {v!r}") from None
        year_bands = [f"{day.year // b * b}-{day.year // b * b + b - 1}" for b in bands]
        paths.append((v, f"{day.year:04d}-{day.month:02d}", f"{day.year:04d}", *year_bands, GENERATED_TOP))
    return paths


#: generate: KIND in a job file -> the function that builds the hierarchy's paths (the one list config checks)
GENERATORS: dict[str, Callable[[str, dict[str, Any], list[str]], list[tuple[str, ...]]]] = {
    "mask": _mask,
    "intervals": _intervals,
    "date": _date,
    "suppress": _suppress,
    "groups": _groups,
}
