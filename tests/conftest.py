"""Suite-wide settings: reproducible property tests, a CLI runner, a build's imports, the adapter
and server tests' graded build."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, settings

# "ci" (the default) derandomizes hypothesis and keeps no example database, so every run of the
# suite draws the same examples on every machine; HYPOTHESIS_PROFILE=dev explores fresh ones.
settings.register_profile(
    "ci", derandomize=True, database=None, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session", autouse=True)
def _library_store(tmp_path_factory):
    """Every test's library store is a temporary one (docs/security.md, "The library store"): builds
    register their library there, never in the user's own store. A test that needs an empty store
    sets OPGEN_HOME itself."""
    old = os.environ.get("OPGEN_HOME")
    os.environ["OPGEN_HOME"] = str(tmp_path_factory.mktemp("opgen-home"))
    yield
    if old is None:
        os.environ.pop("OPGEN_HOME", None)
    else:
        os.environ["OPGEN_HOME"] = old


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def cli():
    from opgen.cli import cli as group

    return group


@pytest.fixture
def modules_after_build(tmp_path):
    """``(recipe, limit, names) -> sorted names among ``names`` that a one-worker ``opgen build``
    without a progress bar left imported, in a fresh interpreter (the build runs in-process there)."""

    def run(recipe: str, limit: int, names: tuple[str, ...]) -> list[str]:
        code = ("import json, sys; from click.testing import CliRunner; from opgen.cli import cli; "
                f"r = CliRunner().invoke(cli, ['build', {recipe!r}, '--out', {str(tmp_path / 'out')!r}, "
                f"'--limit', '{limit}', '--workers', '1', '--no-progress']); assert r.exit_code == 0, r.output; "
                f"print(json.dumps(sorted(m for m in {names!r} if m in sys.modules)))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        return json.loads(out)

    return run


@pytest.fixture(scope="session")
def _graded_build(tmp_path_factory):
    from integration_fixtures import graded_build

    return graded_build(tmp_path_factory.mktemp("graded"))


@pytest.fixture
def graded(_graded_build):
    """(rows, responses, `opgen score`'s per-row scores, build dir) of tests/integration_fixtures.py's
    RECIPE: built and scored once a session; each test gets its own copy of the rows (the build
    directory is shared: read it, never write to it)."""
    rows, responses, scores, out = _graded_build
    return copy.deepcopy(rows), list(responses), list(scores), out
