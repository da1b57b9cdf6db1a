"""opgen.fit reads other modules through their public names only (the sweep's counting and PNG
writer are public in opgen.sweep), so a private helper there can change without breaking the fit."""

from __future__ import annotations

import ast
from pathlib import Path

import opgen.fit

FIT = Path(opgen.fit.__file__).parent


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def test_fit_imports_no_private_name_of_another_module():
    found = []
    for path in sorted(FIT.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("opgen.") \
                    and not node.module.startswith("opgen.fit"):
                found += [f"{path.name}: {node.module}.{a.name}" for a in node.names if _private(a.name)]
    assert found == []
    assert len(list(FIT.glob("*.py"))) >= 8  # the walk saw the package
