"""The two habits of CONTRIBUTING.md ("Habits"), read from the source with ``ast``.

1. A module of the package is imported under its own name; an alias (``from opgen import recipe as
   R``) only where that name is taken in the file (a parameter, variable, function, class, another
   import, a builtin). Third-party conventions (``numpy as np``) are not opgen modules.
2. A function-local import of an opgen module must defer loading something: the module it loads is
   not yet loaded when the enclosing module is imported (measured in a fresh interpreter, one forked
   child per module: a slow test; the fast loop checks the static part, the modules the enclosing
   one imports at its top level, directly or through others). One kept for another reason (a
   documented cycle) says so on its line with ``# habits: keep (<why>)``.

/work/tools/fix_habits.py (the lead's tool) rewrites a tree to satisfy both.
"""

from __future__ import annotations

import ast
import builtins
import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

import opgen

ROOT = Path(opgen.__file__).resolve().parent.parent
PACKAGE_DIRS = {"opgen": "opgen", "cli": "opgen.cli"}  # pyproject's package-dir: opgen.cli is cli/
KEEP = "habits: keep ("


def module_name(path: Path, root: Path = ROOT) -> str:
    rel = path.relative_to(root).with_suffix("").parts
    parts = PACKAGE_DIRS[rel[0]].split(".") + list(rel[1:])
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def _parse(path: Path) -> tuple[str, ast.Module]:
    """Each file read and parsed once for the whole module (the checks share them)."""
    source = path.read_text(encoding="utf-8")
    return source, ast.parse(source)


def files(root: Path = ROOT, dirs=tuple(PACKAGE_DIRS)) -> list[Path]:
    return [p for d in dirs if (root / d).is_dir() for p in sorted((root / d).rglob("*.py"))]


def source_of(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = (module if is_package else module.rpartition(".")[0]).split(".")
    return ".".join(base[:len(base) - node.level + 1] + ([node.module] if node.module else []))


def _imported(alias: ast.alias, node, module: str, is_package: bool) -> str:
    if isinstance(node, ast.Import):
        return alias.name
    return f"{source_of(node, module, is_package)}.{alias.name}"


def needless_aliases(path: Path, modules: set[str], root: Path = ROOT) -> list[str]:
    """``line: module as alias`` for each alias of an opgen module whose own name is free in the file."""
    tree = _parse(path)[1]
    module, is_package = module_name(path, root), path.name == "__init__.py"
    taken = set(dir(builtins))
    imports: dict[str, set[str]] = {}  # a name an import binds -> what it imports
    aliased = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                bound = a.asname or (a.name.split(".")[0] if isinstance(node, ast.Import) else a.name)
                target = _imported(a, node, module, is_package)
                imports.setdefault(bound, set()).add(target)
                if a.asname and target in modules and a.asname != target.rsplit(".", 1)[1]:
                    aliased.append((node.lineno, target, a.asname))
        elif isinstance(node, ast.Name):
            taken.add(node.id)
        elif isinstance(node, ast.arg):
            taken.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            taken.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            taken.update(node.names)
        elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
            taken.add(node.name)
    out = []
    for line, target, alias in aliased:
        own = target.rsplit(".", 1)[1]
        if own not in taken and imports.get(own, {target}) == {target}:
            out.append(f"{path.relative_to(root)}:{line}: {target} as {alias}")
    return out


def local_imports(path: Path, modules: set[str], root: Path = ROOT) -> list[tuple[int, str, list[str]]]:
    """(line, statement, opgen modules it loads) for each function-local import of an opgen module."""
    source, tree = _parse(path)
    lines = source.splitlines()
    module, is_package = module_name(path, root), path.name == "__init__.py"
    out = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
                names = [_imported(a, child, module, is_package) if isinstance(child, ast.ImportFrom) else a.name
                         for a in child.names]
                if isinstance(child, ast.ImportFrom):
                    names = [n if n in modules else n.rpartition(".")[0] for n in names]
                targets = sorted({n for n in names if n in modules})
                text = " ".join(lines[child.lineno - 1:child.end_lineno])
                if targets and KEEP not in text:
                    out.append((child.lineno, ast.unparse(child), targets))
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    visit(tree, False)
    return out


# One interpreter; each module is imported in a forked child of it that has loaded nothing of opgen
# (the third-party modules the package imports at its top levels are loaded first, once: they
# import no opgen module, and each child would otherwise load numpy, pyarrow ... again).
_PROBE = r"""
import importlib, json, os, sys
preload, names = json.loads(sys.argv[1]), sys.argv[2:]
for name in preload:
    try:
        importlib.import_module(name)
    except BaseException:
        pass
assert not any(m == "opgen" or m.startswith("opgen.") for m in sys.modules)
out = {}
for name in names:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            importlib.import_module(name)
            found = sorted(m for m in sys.modules if m == "opgen" or m.startswith("opgen."))
        except BaseException as exc:  # an optional dependency missing here: not measured
            found = {"error": f"{type(exc).__name__}: {exc}"}
        with os.fdopen(w, "w") as f:
            json.dump(found, f)
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        out[name] = json.loads(f.read())
    os.waitpid(pid, 0)
print(json.dumps(out))
"""


def third_party(paths: list[Path]) -> list[str]:
    """The non-opgen modules imported at the top level of these files (not under ``if``/``try``)."""
    out = set()
    for path in paths:
        for node in _parse(path)[1].body:
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                out.add(node.module)
    return sorted(m for m in out if m.split(".")[0] != "opgen")


def loaded_at_import(names: list[str], root: Path = ROOT) -> dict:
    preload = json.dumps(third_party(files(root, ("opgen",))))
    run = subprocess.run([sys.executable, "-c", _PROBE, preload, *names], cwd=root, capture_output=True,
                         text=True, check=True)
    return json.loads(run.stdout)


def needless_local_imports(root: Path = ROOT) -> list[str]:
    modules = {module_name(p, root) for p in files(root)}
    found = {module_name(p, root): (p, local_imports(p, modules, root)) for p in files(root, ("opgen",))}
    found = {m: v for m, v in found.items() if v[1]}
    loaded = loaded_at_import(sorted(found), root)
    out = []
    for module, (path, imports) in sorted(found.items()):
        if isinstance(loaded[module], dict):
            continue
        for line, text, targets in imports:
            if all(t in loaded[module] for t in targets):
                out.append(f"{path.relative_to(root)}:{line}: {text}")
    return out


def test_opgen_modules_are_imported_under_their_own_name_unless_it_clashes():
    modules = {module_name(p) for p in files()}
    assert "opgen.splits.compounds" in modules and "opgen.cli.options" in modules
    bad = [line for p in files() for line in needless_aliases(p, modules)]
    assert not bad, "alias of an opgen module whose own name is free in the file:\n" + "\n".join(bad)


def statically_loaded(root: Path = ROOT) -> dict[str, set[str]]:
    """For each opgen/ module, the opgen modules its unconditional top-level imports load (parents
    and all, transitively): a subset of what importing it measures, found in well under a second."""
    paths = {module_name(p, root): p for p in files(root, ("opgen",))}
    direct: dict[str, set[str]] = {}
    for module, path in paths.items():
        is_package = path.name == "__init__.py"
        names = [".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)]
        for node in _parse(path)[1].body:
            if isinstance(node, ast.Import):
                names += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                src = source_of(node, module, is_package)
                names += [src] + [f"{src}.{a.name}" for a in node.names]
        found = set()
        for name in names:  # importing a.b.c runs a, a.b and a.b.c
            parts = name.split(".")
            found |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & set(paths)
        direct[module] = found - {module}
    closed: dict[str, set[str]] = {}

    def close(module: str, stack: frozenset = frozenset()) -> set[str]:
        if module not in closed:
            out = {module}
            for dep in direct[module] - stack:
                out |= close(dep, stack | {module})
            closed[module] = out
        return closed[module]

    return {m: close(m) for m in paths}


def test_function_local_imports_of_modules_imported_at_the_top_are_hoisted():
    # The fast, static half of the check below: a module the enclosing one imports at its top level,
    # directly or through others, is loaded by then.
    modules = {module_name(p) for p in files()}
    loaded = statically_loaded()
    bad = [f"{p.relative_to(ROOT)}:{line}: {text}" for p in files(ROOT, ("opgen",))
           for line, text, targets in local_imports(p, modules)
           if all(t in loaded[module_name(p)] for t in targets)]
    assert not bad, ("function-local import of a module the enclosing module already imports at its top "
                     "(move it there):\n" + "\n".join(bad))


@pytest.mark.slow  # imports ~40 modules, one fresh child each: ~5-10 s on a loaded 2-core machine
def test_function_local_imports_defer_loading():
    bad = needless_local_imports()
    assert not bad, ("function-local import of a module the enclosing module already loads at import "
                     "(move it to the top):\n" + "\n".join(bad))


def test_the_checks_can_fail(tmp_path):
    pkg = tmp_path / "opgen"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text("X = 1\n")
    (pkg / "sub" / "b.py").write_text("VALUE = 2\n")
    (pkg / "c.py").write_text(
        "from opgen.sub import a as A\n"                     # needless: a is free here
        "from . import sub as s\n"                           # fine: sub is a parameter below
        "from opgen.sub import b\n\n\n"
        "def f(sub):\n"
        "    from opgen.sub import b as bb\n"                # needless twice: b is free, and loaded
        "    from opgen import sub as sub2  # habits: keep (a documented cycle)\n"
        "    return A.X + bb.VALUE + s + sub + sub2\n\n\n"
        "def g():\n"
        "    from opgen import d\n"                          # defers d: fine
        "    return d\n"
    )
    (pkg / "d.py").write_text("")
    modules = {module_name(p, tmp_path) for p in files(tmp_path)}
    assert needless_aliases(pkg / "c.py", modules, tmp_path) == [
        "opgen/c.py:1: opgen.sub.a as A", "opgen/c.py:7: opgen.sub.b as bb"]
    assert needless_local_imports(tmp_path) == ["opgen/c.py:7: from opgen.sub import b as bb"]
    loaded = statically_loaded(tmp_path)
    assert loaded["opgen.c"] == {"opgen", "opgen.c", "opgen.sub", "opgen.sub.a", "opgen.sub.b"}
    assert loaded["opgen.d"] == {"opgen", "opgen.d"}
