"""No import cycle within the opgen package.

Every module's imports are read with ``ast``, function-local and ``if TYPE_CHECKING:`` ones
included (a local import that dodges a cycle at run time is still a cycle in the design), and the
graph of opgen modules must be acyclic. A failure prints the cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from test_habits import files, loaded_at_import, module_name

import opgen

ROOT = Path(opgen.__file__).resolve().parent


def _modules(root: Path = ROOT) -> dict[str, Path]:
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The opgen module that importing ``name`` runs: itself, or its nearest enclosing package."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The opgen modules ``module`` imports anywhere in its source (not itself)."""
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            # ``from pkg import sub`` imports the submodule pkg.sub when there is one
            names = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names]
        for name in names:
            target = _resolve(name, modules)
            if target is not None and target != module:
                found.add(target)
    return found


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    modules = _modules(root)
    return {m: imports_of(m, p, modules) for m, p in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None; deterministic (sorted visiting order)."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_import_cycle_in_opgen():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_checker_sees_local_and_relative_imports(tmp_path):
    # The checker itself must be able to fail: a cycle made only of a function-local import and a
    # relative one is found.
    pkg = tmp_path / "opgen"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from opgen.sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .. import a\n")
    graph = import_graph(pkg)
    assert graph["opgen.a"] == {"opgen.sub.b"}
    assert graph["opgen.sub.b"] == {"opgen.a"}
    assert find_cycle(graph) == ["opgen.a", "opgen.sub.b", "opgen.a"]
    (pkg / "a.py").write_text("")
    assert find_cycle(import_graph(pkg)) is None


@pytest.mark.slow
def test_every_module_imports_first_in_a_fresh_interpreter():
    """Import order is a cycle's other face: a module imported first must not meet itself half made
    (a hoisted import once made ``import opgen.generate.cells`` fail this way: trees registers, the
    registry loads probes, probes reads cells). Each module is imported by test_habits's probe, in a
    child that has loaded no opgen module."""
    optional = {"opgen.integrations.verl_agent"}  # imported by verl only
    names = [n for n in (module_name(p) for p in files()) if not n.endswith("__main__") and n not in optional]
    failed = [f"{n}: {got['error']}" for n, got in loaded_at_import(names).items() if isinstance(got, dict)]
    assert not failed, "\n".join(failed)
