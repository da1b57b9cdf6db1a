"""Where the bundled JSON Schemas and recipes live, in a source checkout and in an installed wheel."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_PACKAGES = {"schemas": "opgen.schemas", "datasets": "opgen.recipes"}


def resource_dir(name: str) -> Path:
    """The folder ``schemas`` or ``datasets``: the checkout's own (editable installs), else the wheel's copy."""
    checkout = Path(__file__).resolve().parent.parent / name
    if checkout.is_dir() and (checkout.parent / "pyproject.toml").is_file():
        return checkout
    spec = importlib.util.find_spec(_PACKAGES[name])
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    raise FileNotFoundError(f"opgen's bundled {name!r} folder is missing from this installation")


def schema_path(name: str) -> Path:
    return resource_dir("schemas") / name


def recipe_path(name: str) -> Path:
    """A bundled recipe by name (``eval-suite`` or ``eval-suite.yaml``)."""
    folder = resource_dir("datasets")
    candidate = folder / (name if name.endswith((".yaml", ".yml")) else f"{name}.yaml")
    if not candidate.is_file():
        known = sorted(p.stem for p in folder.glob("*.yaml"))
        raise FileNotFoundError(f"no bundled recipe {name!r} (bundled: {', '.join(known) or 'none'})")
    return candidate
