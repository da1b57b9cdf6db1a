"""Tests import what a bare `pytest` (CI's command) can import: `opgen.cli`, never the top-level
`cli` folder, and shared helpers as plain modules (`import tiny_model`), never `tests.x`.
`python -m pytest` puts the checkout on sys.path and hides both mistakes; CI's `pytest` does not."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_no_test_imports_a_name_only_the_checkout_root_provides():
    bad = []
    for path in sorted(TESTS.rglob("*.py")):
        if "hostile" in path.parts:
            continue  # model-written programs, graded, never imported
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                if name.split(".")[0] in ("cli", "tests"):
                    bad.append(f"{path.relative_to(TESTS)}:{node.lineno}: import {name}")
    assert not bad, "\n".join(bad)


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def test_a_name_imported_from_another_test_module_is_there():
    """`from test_build import DET_RECIPE` inside a test that skips without Ray failed only in CI's
    Ray group once the name moved; every such import is checked here, whatever the test needs."""
    bad = []
    for path in sorted(TESTS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                    and (TESTS / f"{node.module}.py").exists()):
                continue
            there = _top_level_names(ast.parse((TESTS / f"{node.module}.py").read_text(encoding="utf-8")))
            bad += [f"{path.name}:{node.lineno}: {node.module}.{a.name}" for a in node.names if a.name not in there]
    assert not bad, "names imported from test modules that do not define them:\n" + "\n".join(bad)
