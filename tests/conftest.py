"""Suite-wide settings: reproducible property tests and a CLI runner."""

from __future__ import annotations

import os

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


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def cli():
    from opgen.cli import cli as group

    return group
