"""A small `opgen build` through the CLI, for the tests of the commands that read a build."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from opgen.cli import cli


def native_stage1(out: Path, limit: int) -> Path:
    """``opgen build native-stage1 --limit LIMIT`` into ``out``: one worker, no progress bar."""
    res = CliRunner().invoke(cli, ["build", "native-stage1", "--out", str(out), "--limit", str(limit),
                                   "--workers", "1", "--no-progress"])
    assert res.exit_code == 0, res.output
    return out
