"""Writing a file whole or not at all: a temporary sibling, the umask's mode, then one rename.

``tempfile.mkstemp`` creates files mode 0600; results meant to be shared (metrics, summaries,
sweeps, manifests) get the mode ``open()`` would give them (0666 less the umask). On any failure
(a full disk, a read-only directory, an interrupt) the temporary file is removed and the old file,
if any, is left as it was.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.filename is None:
            exc.filename = str(path)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def write_json_atomic(path: Path, obj: object) -> None:
    """``obj`` as indented JSON (keys sorted, UTF-8 as it is), whole or not at all; the folder is made.
    The one way opgen writes a JSON report (metrics.json, fit.json, a Ray report...)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=True) + "\n")


def describe_os_error(exc: OSError, what: str = "") -> str:
    """``<file>: <reason>`` for a write that failed (disk full, read-only, permission)."""
    where = exc.filename or what
    reason = exc.strerror or str(exc)
    return f"{where}: {reason}" if where else reason
