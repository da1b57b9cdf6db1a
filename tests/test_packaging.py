"""The wheel must carry every package of the library: a non-editable install is what users get."""

from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the package itself supports 3.10

ROOT = Path(__file__).resolve().parent.parent


def test_pyproject_lists_every_python_package():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    mapping = config["package-dir"]
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "opgen").rglob("__init__.py")}
    on_disk |= {"opgen.cli." + ".".join(p.parent.relative_to(ROOT / "cli").parts)
                for p in (ROOT / "cli").rglob("__init__.py") if p.parent != ROOT / "cli"}
    on_disk.add("opgen.cli")
    assert on_disk <= listed, f"packages missing from pyproject.toml: {sorted(on_disk - listed)}"
    for package, folder in mapping.items():
        assert (ROOT / folder).is_dir(), f"{package} maps to missing folder {folder}"


def test_bundled_data_is_declared():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    data = config["package-data"]
    assert list((ROOT / "schemas").glob("*.json")) and "*.json" in data["opgen.schemas"]
    assert list((ROOT / "datasets").glob("*.yaml")) and "*.yaml" in data["opgen.recipes"]
    assert not (ROOT / "datasets" / "__init__.py").exists(), "datasets/ must never shadow the datasets package"


def test_the_version_lives_in_one_place():
    import importlib.metadata

    import opgen

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert importlib.metadata.version("opgen") == opgen.__version__


def test_python_dash_m_opgen_runs_the_cli():
    import subprocess
    import sys

    import opgen

    proc = subprocess.run([sys.executable, "-m", "opgen", "--version"], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == f"opgen, version {opgen.__version__}"
