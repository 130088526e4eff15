"""The architecture as a test: which packages may import which (docs/architecture.md).

Imports are read from the source (module-level and lazy ones inside functions alike), so
a rule cannot be dodged by importing late, and no two modules may import each other,
directly or around a cycle. The air-gapped side is also imported in a
fresh interpreter to prove that neither SQLAlchemy nor the index models come along.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "mirror"

FOUNDATIONS = {
    "mirror",
    "mirror.errors",
    "mirror.config",
    "mirror.units",
    "mirror.timestamps",
    "mirror.fsutil",
    "mirror.logs",
    "mirror.httpserver",
    "mirror.archive",
    "mirror.versions",
    "mirror.sites",
    "mirror.integrity",
    "mirror.completeness",
    "mirror.hostnames",
    "mirror.links",
    "mirror.progress",
    "mirror.spill",
    "mirror.heap",
}
SIDES = ("vendor", "store", "export", "transferset", "outbound", "airgap", "oneway", "cli", "sim")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(module: str) -> str:
    """`foundation`, one of SIDES, or the module itself for the top-level odd ones out."""
    if module in FOUNDATIONS:
        return "foundation"
    parts = module.split(".")
    if len(parts) >= 2 and parts[1] in SIDES:
        return parts[1]
    return module


def imports_of(path: Path) -> set[str]:
    """Every `mirror...` and third-party top-level module the file imports, anywhere in it."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "mirror" or node.module.startswith("mirror."):
                # `graph` trims each name back to the module it is in: `from mirror.sim
                # import tree` imports mirror.sim.tree, not (for the graph) mirror.sim
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
            else:
                found.add(node.module)
    return found


def graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    known = set(modules)
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        for imported in imports_of(path):
            if imported.startswith("mirror"):
                # `from mirror.x import y` names a module only when y is one
                while imported not in known and "." in imported:
                    imported = imported.rsplit(".", 1)[0]
                if imported in known:
                    targets.add(imported)
            else:
                targets.add(imported.split(".")[0])
        edges[name] = targets - {name}
    return edges


GRAPH = graph()

# What each layer may import (besides itself and the standard library / third parties).
ALLOWED: dict[str, set[str]] = {
    "foundation": {"foundation"},
    "vendor": {"foundation"},
    "store": {"foundation"},
    "transferset": {"foundation"},
    "export": {"foundation", "vendor", "store"},
    "airgap": {"foundation", "transferset"},
    "oneway": {"foundation", "transferset"},
    "outbound": {"foundation", "store", "transferset", "airgap"},
    "sim": {"foundation"},
    "cli": {"foundation", "mirror.demo", "mirror.preflight", *SIDES},
    "mirror.preflight": {"foundation", "vendor", "store", "transferset", "airgap", "outbound"},
    "mirror.demo": {"foundation", "sim"},
    "mirror.__main__": {"cli"},
}
DATABASE_LIBRARIES = {"sqlalchemy", "alembic", "psycopg"}


def violations() -> list[str]:
    found = []
    for module, targets in sorted(GRAPH.items()):
        own = layer(module)
        allowed = ALLOWED.get(own)
        assert allowed is not None, f"{module}: no rule for its layer {own!r}"
        for target in sorted(targets):
            if not target.startswith("mirror"):
                continue
            other = layer(target)
            if other != own and other not in allowed:
                found.append(f"{module} ({own}) imports {target} ({other})")
    return found


def test_every_import_follows_the_dependency_rules() -> None:
    assert violations() == []


@pytest.mark.parametrize("side", ["airgap", "transferset", "vendor", "foundation"])
def test_no_database_library_where_no_database_belongs(side: str) -> None:
    offenders = {
        module: sorted(targets & DATABASE_LIBRARIES)
        for module, targets in GRAPH.items()
        if layer(module) == side and targets & DATABASE_LIBRARIES
    }
    assert offenders == {}


def test_the_rules_see_every_package() -> None:
    layers = {layer(module) for module in GRAPH}
    assert {"foundation", "vendor", "store", "export", "transferset", "airgap", "cli"} <= layers
    assert GRAPH["mirror.cli"], "the import graph must see the CLI's imports"


def test_the_air_gapped_side_loads_no_database_in_a_fresh_interpreter() -> None:
    """Importing every air-gapped and transfer-set module pulls in neither SQLAlchemy nor
    the index models: the air-gapped host needs no database."""
    modules = sorted(m for m in GRAPH if layer(m) in {"airgap", "transferset"})
    assert modules
    code = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "print(json.dumps(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('sqlalchemy', 'alembic', 'psycopg') "
        "or m.startswith(('mirror.store', 'mirror.export', 'mirror.vendor', 'mirror.outbound')))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=PACKAGE.parent,
    )
    assert json.loads(done.stdout) == []


# Cycles other packages still have, each with its reason; empty is the goal. A cycle is
# named by its modules, sorted.
KNOWN_CYCLES: set[tuple[str, ...]] = set()


def cycles(edges: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """The strongly connected components of more than one module (Tarjan), each sorted:
    every import cycle among mirror modules, lazy imports inside functions included."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[tuple[str, ...]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(t for t in edges.get(module, ()) if t in edges):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(tuple(sorted(component)))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return sorted(found)


def test_no_import_cycles() -> None:
    """A cycle hides in lazy imports inside functions; GRAPH reads those too."""
    found = cycles(GRAPH)
    assert ["cycle among " + ", ".join(c) for c in found if c not in KNOWN_CYCLES] == []
    assert set(found) >= KNOWN_CYCLES, "a known cycle is gone: remove it from KNOWN_CYCLES"


def test_the_cycle_check_finds_a_cycle_through_three_modules() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(edges) == [("a", "b", "c")]
    assert cycles({"a": {"b"}, "b": set()}) == []


MAX_FUNCTION_LINES = 50
MAX_CLASS_LINES = 300


def test_functions_and_classes_stay_small() -> None:
    """Functions under 50 lines, classes under 300, outside the simulator (a test double
    whose request handler mirrors the vendor's API in one place)."""
    too_long: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if module_name(path).startswith("mirror.sim"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            limit = (
                MAX_FUNCTION_LINES
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                else MAX_CLASS_LINES
                if isinstance(node, ast.ClassDef)
                else None
            )
            if limit is not None and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    too_long.append(f"{module_name(path)}.{node.name}: {lines} lines")
    assert too_long == []
