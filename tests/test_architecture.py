"""The package tree as the architecture states it: every package ships."""

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_ships_in_the_distribution():
    """A package missing from pyproject's list works in an editable install and is absent from a wheel."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    packages = {".".join(init.parent.relative_to(ROOT).parts) for init in (ROOT / "sqlanon").rglob("__init__.py")}
    assert packages <= listed, f"add {sorted(packages - listed)} to [tool.setuptools] packages in pyproject.toml"


# --- the import graph -------------------------------------------------------------------------------------------
#: sqlanon's layers, bottom to top: a module may import its own package and packages of lower layers only; two
#: packages of one layer know nothing of each other. TYPE_CHECKING imports (annotations) do not count.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "data"),  # data: the packaged example dataset (files only)
    ("model", "backends"),
    ("criteria",),
    ("store",),
    ("engine",),
    ("search",),
    ("publish",),
    ("analysis",),
    ("config",),
    ("registry",),
    ("session",),  # sequencing a run
    ("steps",),  # the steps of a run (search, selection, metrics, publication) and their results
    ("api", "testing"),  # the verbs; the exhaustive oracle (for tests)
    ("",),  # the package's own __init__: the public API's names
    ("cli", "inserver"),
    ("__main__",),
)
LAYER = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in (ROOT / "sqlanon").rglob("*.py")}


def _imports(module: str) -> list[tuple[str, int]]:
    """(imported sqlanon module, line) of every import the module runs, at its top or inside functions."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for statement in child.orelse:
                    visit(statement)
                continue
            if isinstance(child, ast.Import):
                found.extend((a.name, child.lineno) for a in child.names if a.name.split(".")[0] == "sqlanon")
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - child.level + 1] + ([child.module] if child.module else []))
                if base.split(".")[0] == "sqlanon":
                    found.extend(
                        (f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base, child.lineno)
                        for a in child.names
                    )
            visit(child)

    visit(ast.parse(path.read_text()))
    return found


GRAPH = {module: _imports(module) for module in MODULES}


def _unit(module: str) -> str:
    """The layer unit a module belongs to: its top package under sqlanon ("" for sqlanon/__init__.py)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_module_has_a_layer():
    missing = sorted({_unit(m) for m in MODULES} - set(LAYER))
    assert not missing, f"add {missing} to LAYERS in tests/test_architecture.py (and say why in its docstring)"


def test_no_module_imports_against_the_layers():
    wrong = [
        f"{module}:{line} imports {target}"
        for module, imports in GRAPH.items()
        for target, line in imports
        if _unit(target) != _unit(module) and LAYER[_unit(target)] >= LAYER[_unit(module)]
    ]
    assert not wrong, "imports against the layers (a lower layer must not know a higher one):\n" + "\n".join(wrong)


def test_no_import_cycles():
    """Strongly connected components of the module graph (function-level imports included) are single modules."""
    edges = {m: sorted({t for t, _ in imports if t in MODULES and t != m}) for m, imports in GRAPH.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = stack[stack.index(v) :]
            del stack[stack.index(v) :]
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in edges:
        if module not in index:
            visit(module)
    assert not cycles, f"import cycles: {cycles}"


def test_the_graph_sees_imports():
    """The checks above would pass vacuously if the parser missed imports: spot-check known edges."""
    assert any(t == "sqlanon.criteria" for t, _ in GRAPH["sqlanon.config"])
    assert any(t.startswith("sqlanon.model") for t, _ in GRAPH["sqlanon.engine.star"])
    assert any(t == "sqlanon.api" for t, _ in GRAPH["sqlanon.inserver"])  # imported inside functions


# --- where SQL is written ---------------------------------------------------------------------------------------
#: the packages that build SQL: each database's own spelling, catalog and routines (backends), the criteria's
#: per-class statistics (criteria), every statement over the user's data (engine). The store's operations are
#: literal statements over its own tables, their dialect filled in by the backends (`StoreSpelling`)
SQL_PACKAGES = {"backends", "criteria", "engine"}
#: an f-string that composes a statement: it starts with a statement's keyword, or names a table it formats in
STATEMENT = re.compile(
    r"^[\s(]*(\{\}\s*)?(SELECT|WITH|INSERT|UPDATE|DELETE|CREATE|DROP|ALTER|GRANT|REVOKE|CALL|LOCK|ANALYZE|"
    r"TRUNCATE)\b|\b(FROM|JOIN|INTO|UPDATE|TABLE) \{\}"
)


def _sql_f_strings(module: str) -> list[int]:
    """Lines of the module's f-strings that compose SQL (literal text with `{}` where values are formatted)."""
    found = []
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
            if STATEMENT.search(text):
                found.append(node.lineno)
    return found


def test_sql_is_composed_in_the_sql_packages_only():
    """A statement assembled anywhere else is a dialect or a query a newcomer will not look for; the packages
    above call the builders of `engine` and the hooks of `backends`."""
    stray = [
        f"{module}:{line}" for module in MODULES if _unit(module) not in SQL_PACKAGES for line in _sql_f_strings(module)
    ]
    assert not stray, "SQL composed outside " + ", ".join(sorted(SQL_PACKAGES)) + ":\n" + "\n".join(stray)


def test_the_sql_scan_sees_statements():
    """The check above would pass vacuously if the pattern missed statements: the engine composes many (the
    search's waves, the criteria's statements, the analyses)."""
    assert sum(len(_sql_f_strings(m)) for m in MODULES if _unit(m) == "engine") > 50


#: the statements composed as f-strings when the structure was first laid out (314, counted as the scan above
#: counts them: 294) halved: the rest of the statements are built with SQLAlchemy Core. Only fewer from here
MAX_SQL_F_STRINGS = 152


def test_sql_f_strings_stay_halved():
    """A new statement over sqlanon's own tables is built with SQLAlchemy Core, as the solver's, Mondrian's and
    Anatomy's are; text stays for the search's waves and the criteria (measured: Core's compiler costs more
    than a wave) and for each database's own spelling."""
    found = sum(len(_sql_f_strings(m)) for m in MODULES)
    assert found <= MAX_SQL_F_STRINGS, f"{found} SQL f-strings in sqlanon/; build new statements with Core"
