"""docs/architecture.md's module table names every module of the package (issue 33: it had drifted)."""

import re
from pathlib import Path

import opgen

ROOT = Path(opgen.__file__).parent
DOC = ROOT.parent / "docs" / "architecture.md"


def _table() -> str:
    text = DOC.read_text()
    start = text.index("## Modules")
    section = text[start:text.index("\n## ", start + 1)]
    return "\n".join(line for line in section.splitlines() if line.startswith("|"))


def _named_in_table() -> set[str]:
    names: set[str] = set()
    for quoted in re.findall(r"`([^`]+)`", _table()):
        for word in re.split(r"[\s,()]+", quoted):
            parts = word.strip("/").removesuffix(".py").split("/")
            names.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
            names.add(parts[-1])
    return names


def _modules() -> list[str]:
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts and parts[-1] != "__main__":
            out.append("/".join(parts))
    return out


def test_the_module_table_names_every_module():
    named = _named_in_table()
    missing = [m for m in _modules() if m not in named and m.rsplit("/", 1)[-1] not in named]
    assert not missing, f"docs/architecture.md's module table does not name: {', '.join(missing)}"


def test_the_table_names_no_module_that_is_gone():
    paths = re.findall(r"`((?:[a-z_]+/)+[a-z_]+\.py)`", _table())
    gone = [p for p in paths if not (ROOT / p).exists() and not any(ROOT.glob(f"*/{p}"))]
    assert not gone, f"docs/architecture.md names files that do not exist: {gone}"
