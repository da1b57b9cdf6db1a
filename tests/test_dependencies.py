"""What a plain `pip install opgen` pulls: no `datasets` (no opgen module imports it), and no extra
that installs a broken environment (vLLM on CPU is scripts/setup-vllm-cpu.sh, docs/eval.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_datasets_is_only_in_the_extras_that_need_it():
    project = _project()
    assert not [d for d in project["dependencies"] if d.startswith("datasets")]
    extras = project["optional-dependencies"]
    for extra in ("hub", "test"):
        assert any(d.startswith("datasets") for d in extras[extra]), extra


def test_no_library_module_imports_datasets():
    for folder in ("opgen", "cli"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
                assert not [n for n in names if n.split(".")[0] == "datasets"], path


def test_no_vllm_cpu_extra_and_the_setup_script_is_documented():
    assert "vllm-cpu" not in _project()["optional-dependencies"]
    assert (ROOT / "scripts" / "setup-vllm-cpu.sh").is_file()
    assert "scripts/setup-vllm-cpu.sh" in (ROOT / "docs" / "eval.md").read_text()
    assert "[vllm-cpu]" not in (ROOT / "README.md").read_text() + (ROOT / "docs" / "eval.md").read_text()
