"""Small tmpfs mounts for the tests of full and read-only file systems (root only; a test is skipped
where ``mount`` fails). A plain module (``import tmpfs``): CI runs a bare ``pytest``."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def mounted(path: Path, size: str = "4m", ro: bool = False) -> Iterator[Path]:
    """A fresh tmpfs of ``size`` at ``path`` (made here), read-only with ``ro``; unmounted after."""
    path.mkdir()
    opts = f"size={size}" + (",ro" if ro else "")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()})")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)
