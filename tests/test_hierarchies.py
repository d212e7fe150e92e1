"""Hierarchy files and generators."""

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sqlanon.config import job_from_dict
from sqlanon.errors import ConfigError, HierarchyError
from sqlanon.model.hierarchies import Hierarchy, PathCodes, generate_hierarchy, read_hierarchy_file


def test_mask_generator_matches_the_issue_example():
    h = generate_hierarchy("zip", "mask", {}, ["13053", "13068"])
    assert h.paths[0] == ("13053", "1305*", "130**", "13***", "1****", "*")
    assert h.height == 5


def test_mask_generator_with_values_of_different_length():
    h = generate_hierarchy("code", "mask", {}, ["123", "12345"])
    # masked whole, a short value shows the full width (its length is hidden too), never the top label
    assert {p[0]: p for p in h.paths}["123"] == ("123", "12*", "1**", "*****", "*****", "*")
    single = generate_hierarchy("digit", "mask", {}, ["5", "12"])
    assert {p[0]: p for p in single.paths}["5"] == ("5", "**", "*")
    single.check_masking()


def test_interval_generator_nests_widths():
    h = generate_hierarchy("age", "intervals", {"widths": [5, 10, 20]}, ["39", "41", "7"])
    paths = {p[0]: p for p in h.paths}
    assert paths["39"] == ("39", "[35,40)", "[30,40)", "[20,40)", "*")
    assert paths["41"] == ("41", "[40,45)", "[40,50)", "[40,60)", "*")
    assert paths["7"] == ("7", "[5,10)", "[0,10)", "[0,20)", "*")


def test_interval_generator_codes_the_top_and_the_bottom():
    """ARX's top and bottom coding: the tails get one label each, and the intervals between are cut at the bounds
    so that no label claims values it does not hold (a value of 85 is >=85, never in [80,100))."""
    values = ["17", "20", "24", "39", "80", "84", "85", "90"]
    h = generate_hierarchy("age", "intervals", {"widths": [5, 10, 20], "bottom": 20, "top": 85}, values)
    paths = {p[0]: p for p in h.paths}
    assert paths["17"] == ("17", "<20", "<20", "<20", "*")
    assert paths["20"] == ("20", "[20,25)", "[20,30)", "[20,40)", "*")
    assert paths["84"] == ("84", "[80,85)", "[80,85)", "[80,85)", "*")
    assert paths["85"][1:] == paths["90"][1:] == (">=85", ">=85", ">=85", "*")
    only_top = generate_hierarchy("age", "intervals", {"widths": [10], "top": 90.5}, ["89", "95"])
    assert {p[0]: p[1] for p in only_top.paths} == {"89": "[80,90)", "95": ">=90.5"}
    with pytest.raises(ConfigError, match="bottom must be a number"):
        generate_hierarchy("age", "intervals", {"widths": [5], "bottom": True}, ["1"])


def test_groups_generator_builds_levels_from_named_groups():
    marital = {
        "married": ["Married-civ-spouse", "Married-AF-spouse"],
        "alone": ["Divorced", "Never-married", "Separated"],
    }
    values = ["Divorced", "Married-civ-spouse", "Widowed"]
    one = generate_hierarchy("ms", "groups", {"groups": marital, "other": "other"}, values)
    assert {p[0]: p for p in one.paths} == {
        "Divorced": ("Divorced", "alone", "*"),
        "Married-civ-spouse": ("Married-civ-spouse", "married", "*"),
        "Widowed": ("Widowed", "other", "*"),
    }
    levels = [marital | {"widowed": ["Widowed"]}, {"partnered": ["married"], "single": ["alone", "widowed"]}]
    two = generate_hierarchy("ms", "groups", {"groups": levels}, values)
    assert {p[0]: p[1:] for p in two.paths}["Widowed"] == ("widowed", "single", "*")
    codes = generate_hierarchy("code", "groups", {"groups": {"low": [1, 2], "high": [3]}}, ["1", "3"])
    assert {p[0]: p[1] for p in codes.paths} == {"1": "low", "3": "high"}  # numbers name the values they read as
    with pytest.raises(HierarchyError, match="level 2 puts level 1 group 'widowed' in no group"):
        generate_hierarchy("ms", "groups", {"groups": [levels[0], {"partnered": ["married", "alone"]}]}, values)
    with pytest.raises(ConfigError, match="needs groups:"):
        generate_hierarchy("ms", "groups", {"groups": ["married"]}, values)


def test_groups_from_a_mapping_file_equal_the_same_groups_inline(tmp_path: Path):
    """`groups: FILE` (relative to the job) reads `value;group;group of groups` lines into the levels written
    inline; a value or group listed twice names both lines, a short line names itself."""
    (tmp_path / "ms.csv").write_text(
        "\ufeffMarried-civ-spouse;married;partnered\r\nDivorced;alone;single\r\n\r\nNever-married;alone;single\r\n"
    )
    config = {
        "source": {"url": "duckdb:///x.duckdb", "table": "t"},
        "quasi_identifiers": {"ms": {"generate": "groups", "groups": "ms.csv", "other": "other"}},
        "criteria": {"k_anonymity": {"k": 2}},
    }
    [qi] = job_from_dict(config, tmp_path).quasi_identifiers
    inline = [{"married": ["Married-civ-spouse"], "alone": ["Divorced", "Never-married"]}]
    inline.append({"partnered": ["married"], "single": ["alone"]})
    assert qi.options["groups"] == inline
    values = ["Divorced", "Married-civ-spouse", "Never-married"]
    assert generate_hierarchy("ms", "groups", qi.options, values) == generate_hierarchy(
        "ms", "groups", {"groups": inline, "other": "other"}, values
    )
    for text, fragment in [
        ("a;x\nb;y\na;y\n", "value 'a' is on lines 1 and 3"),
        ("a;x;top\nb;x;other\n", "'x' is in 'top' on line 1 and in 'other' on line 2"),
        ("a;x;top\nb;x\n", "line 2 must be `value;group`"),
        ("a\n", "line 1 must be `value;group`"),
        ("\n\n", "is empty"),
    ]:
        (tmp_path / "ms.csv").write_text(text)
        with pytest.raises(HierarchyError, match=re.escape(fragment)):
            job_from_dict(config, tmp_path)
    (tmp_path / "ms.csv").unlink()
    with pytest.raises(HierarchyError, match="groups file for 'ms' not found"):
        job_from_dict(config, tmp_path)


def test_interval_generator_rejects_widths_that_are_not_multiples():
    with pytest.raises(ConfigError, match="multiple"):
        generate_hierarchy("age", "intervals", {"widths": [5, 7]}, ["1"])


def test_interval_generator_rejects_non_numbers():
    with pytest.raises(HierarchyError, match="needs numbers"):
        generate_hierarchy("age", "intervals", {"widths": [5]}, ["abc"])


def test_date_generator_levels():
    h = generate_hierarchy("birth", "date", {"bands": [5, 10]}, ["1968-07-14"])
    assert h.paths[0] == ("1968-07-14", "1968-07", "1968", "1965-1969", "1960-1969", "*")


def test_date_generator_rejects_non_dates():
    with pytest.raises(HierarchyError, match="ISO dates"):
        generate_hierarchy("birth", "date", {}, ["14/07/1968"])


def test_suppress_generator():
    h = generate_hierarchy("sex", "suppress", {}, ["F", "M"])
    assert h.paths == (("F", "*"), ("M", "*"))


def test_unknown_generator_option():
    with pytest.raises(ConfigError, match="no option 'width'"):
        generate_hierarchy("age", "intervals", {"width": [5]}, ["1"])


def test_file_with_crlf_and_bom(tmp_path: Path):
    f = tmp_path / "h.csv"
    f.write_bytes("\ufeffa;x;*\r\nb;x;*\r\n".encode())
    h = read_hierarchy_file("c", f)
    assert h.paths == (("a", "x", "*"), ("b", "x", "*"))


@pytest.mark.parametrize(
    "text",
    [
        "a;x;*\n\n b ; x;*\nc;y;*\n",  # split as it is
        "a;x;*\r\n\r\n b ; x;*\r\nc;y;*",  # CRLF, no last line end
        'a;x;*\n\n"b";x;*\nc;"y";*\n',  # quoted: read by the csv module
        'a;x;*\n"";"";""\n"b";x;*\nc;"y";*\n',  # a quoted blank line
    ],
)
def test_every_way_of_writing_a_file_reads_alike(tmp_path: Path, text: str):
    """Paths, stripped, and each path's line number, whether the file is split as it is or by the csv module."""
    f = tmp_path / "h.csv"
    f.write_bytes(text.encode())
    h = read_hierarchy_file("c", f)
    assert h.paths == (("a", "x", "*"), ("b", "x", "*"), ("c", "y", "*")) and h.lines == (1, 3, 4)


def test_file_with_ragged_rows(tmp_path: Path):
    f = tmp_path / "h.csv"
    f.write_text("a;x;*\nb;*\n")
    with pytest.raises(HierarchyError, match="line 2 has 2 fields"):
        read_hierarchy_file("c", f)


def test_file_with_wrong_separator(tmp_path: Path):
    f = tmp_path / "h.csv"
    f.write_text("a,x,*\n")
    with pytest.raises(HierarchyError, match="one field"):
        read_hierarchy_file("c", f)


def test_value_with_two_parents():
    with pytest.raises(HierarchyError, match="'x' at level 1 has two parents"):
        Hierarchy(column="c", paths=(("a", "x", "p"), ("b", "x", "q")))


def test_value_listed_twice_differently():
    with pytest.raises(HierarchyError, match="listed twice"):
        Hierarchy(column="c", paths=(("a", "x", "*"), ("a", "y", "*")))


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("a;x;*\nb;x;*\na;x;*\n", "value 'a' is listed on lines 1 and 3"),  # the same line twice
        ("a;x;*\n\nb;x;*\na;y;*\n", "value 'a' is listed on lines 1 and 4"),  # different parents; blank line 2
        (";x;*\nb;x;*\n;x;*\n", "the NULL line (empty value) is listed on lines 1 and 3"),
    ],
)
def test_duplicate_leaves_are_rejected_with_their_lines(tmp_path: Path, text: str, fragment: str):
    f = tmp_path / "h.csv"
    f.write_text(text)
    with pytest.raises(HierarchyError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        read_hierarchy_file("c", f)


def test_a_lower_label_equal_to_the_top_is_refused_for_masking(tmp_path: Path):
    f = tmp_path / "h.csv"
    f.write_text("a;*;*\nb;x;*\n")
    hierarchy = read_hierarchy_file("c", f)  # fine without masking
    with pytest.raises(HierarchyError, match="line 1: '\\*' at level 1 is also its top label"):
        hierarchy.check_masking()


def test_codes_are_consistent_per_level():
    h = Hierarchy(column="c", paths=(("a", "x", "*"), ("b", "x", "*"), ("c", "y", "*")))
    rows = {r[0]: r for r in h.dimension_rows()}
    assert rows["a"][2] == rows["b"][2] != rows["c"][2]  # c1 codes
    assert rows["a"][3] == rows["c"][3]  # c2: everything is '*'


@st.composite
def hierarchies(draw) -> Hierarchy:
    """Random trees: a few top labels, any fan-out (one child included), 1 to 4 levels above the values."""
    height = draw(st.integers(1, 4))
    level = [f"t{i}" for i in range(draw(st.integers(1, 3)))]
    paths = [[label] for label in level]
    for _depth in range(height, 0, -1):
        paths = [[f"{path[0]}.{i}", *path] for path in paths for i in range(draw(st.integers(1, 5)))]
    return Hierarchy(column="q", paths=tuple(tuple(path) for path in paths))


@settings(max_examples=60, deadline=None)
@given(hierarchies())
def test_path_codes_name_every_node_and_keep_subtrees_contiguous(hierarchy: Hierarchy) -> None:
    """What Mondrian's rounds rely on: `code >> shifts[L]` names the value's level-L node, one code per node, and codes
    in order keep every subtree contiguous (so a partition's smallest and largest codes tell whether its rows
    fall under one child or more)."""
    codes = PathCodes.of(hierarchy)
    ordered = sorted(hierarchy.paths, key=lambda path: codes.code[path[0]])
    labels = {(lv, node): label for lv, node, label, _ in codes.nodes()}
    for level in range(hierarchy.height + 1):
        nodes = [codes.code[path[0]] >> codes.shifts[level] for path in ordered]
        assert nodes == sorted(nodes)  # ancestors in code order: subtrees are contiguous runs
        assert all(labels[(level, node)] == path[level] for node, path in zip(nodes, ordered))
        assert len(set(nodes)) == len({path[level] for path in ordered})
    leaves = {(lv, label): n for lv, _, label, n in codes.nodes()}
    assert all(
        leaves[(lv, path[lv])] == sum(1 for other in hierarchy.paths if other[lv] == path[lv])
        for path in hierarchy.paths
        for lv in range(hierarchy.height + 1)
    )


@settings(max_examples=60, deadline=None)
@given(hierarchies(), st.integers(1, 6))
def test_path_code_pieces_and_masks_tell_every_level_apart(hierarchy: Hierarchy, piece_bits: int) -> None:
    """What the search's packed class keys rely on: two values' pieces ANDed with the masks of a level are equal
    exactly when the values share their node at that level, however the code is cut into pieces."""
    codes = PathCodes.of(hierarchy)
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(PathCodes.pieces.__globals__, "PIECE_BITS", piece_bits)  # the module's constant
        pieces = codes.pieces()
    assert [low for low, _ in pieces] == [0] + [high + 1 for _, high in pieces[:-1]]
    assert pieces[-1][1] == hierarchy.height
    assert all(codes.piece_bits(piece) <= piece_bits or piece[0] == piece[1] for piece in pieces)
    for level in range(-1, hierarchy.height + 1):
        keys: dict[tuple[int, ...], set[str]] = {}  # masked pieces -> the labels of the values that have them
        for path in hierarchy.paths:
            key = tuple(
                code & codes.piece_mask(piece, level) for code, piece in zip(codes.piece_codes(path[0], pieces), pieces)
            )
            keys.setdefault(key, set()).add(path[level] if level >= 0 else "")
        assert all(len(labels) == 1 for labels in keys.values())  # one key, one node
        assert len(keys) == len({path[level] if level >= 0 else "" for path in hierarchy.paths})  # one node, one key
