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
