"""The user's library store: the operator libraries the user vouched for, one canonical file per digest.

Only the user's own acts fill it: ``opgen ops add SPEC`` and every build (``opgen build``,
``opgen.create_dataset`` ...) registering the library it was given. Every command and entry point
then finds a row's library here by the digest the row names, from any directory and after a build
folder moved, with no flag. Nothing a dataset, a manifest or a request names is ever added.

Where: ``$OPGEN_HOME/libraries`` when ``OPGEN_HOME`` is set, else ``$XDG_DATA_HOME/opgen/libraries``
(``~/.local/share/opgen/libraries`` by default). The folder is made mode 0700 and each entry
``<digest>.yaml`` (a library file, :func:`opgen.library.canonical_text`) mode 0600, written whole or
not at all. An entry is compiled only when a row names its digest, once per process, and refused
when its content is not the digest its name says, or when the folder or the entry is another
user's or writable by others (someone else could plant a library there).
"""

from __future__ import annotations

import os
import stat
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from opgen.library import files
from opgen.library.errors import LibraryError
from opgen.ops import OperatorLibrary

_LOADED: dict[tuple[str, str], OperatorLibrary] = {}
_LOCK = threading.Lock()


def root() -> Path:
    """The store's folder (it may not exist yet)."""
    home = os.environ.get("OPGEN_HOME", "").strip()
    if home:
        return Path(home).expanduser() / "libraries"
    data = os.environ.get("XDG_DATA_HOME", "").strip()
    base = Path(data).expanduser() if data and Path(data).is_absolute() else Path.home() / ".local" / "share"
    return base / "opgen" / "libraries"


def path_of(digest: str) -> Path:
    return root() / f"{digest}.yaml"


def add(lib: OperatorLibrary) -> Path:
    """Register ``lib`` (the user's own act): its canonical file under its digest; returns the path.
    The study's library is built in and never stored (its path is returned all the same)."""
    path = path_of(lib.digest)
    if lib.is_study:
        return path
    text = files.canonical_text(lib)
    folder = path.parent
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        _check_owned(folder)
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            _check_owned(path)
            return path
        _write_private(path, text)
    except OSError as exc:
        raise LibraryError(f"cannot register library {lib.name!r} in the library store {folder}: "
                           f"{exc.strerror or exc}") from None
    with _LOCK:
        _LOADED[(str(folder), lib.digest)] = lib
    return path


def get(digest: str) -> OperatorLibrary | None:
    """The registered library of ``digest``, compiled once per process (None when not registered)."""
    path = path_of(digest)
    key = (str(path.parent), digest)
    with _LOCK:
        known = _LOADED.get(key)
    if known is not None:
        return known
    if not path.is_file():
        return None
    _check_owned(path.parent)
    _check_owned(path)
    found = files.digest_of_file(path)  # as data first: a tampered entry is refused before it is compiled
    if found != digest:
        raise LibraryError(f"{path}: the library store's entry gives digest {found[:12]}, not the digest its "
                           f"name says ({digest[:12]}); remove it (opgen ops remove {digest[:12]}) and add the "
                           "library again")
    lib = files.from_yaml(path)
    with _LOCK:
        return _LOADED.setdefault(key, lib)


@dataclass(frozen=True)
class Entry:
    digest: str
    name: str
    operators: int
    path: Path


def entries() -> list[Entry]:
    """The registered libraries (read as data), by name then digest."""
    folder = root()
    out = []
    for path in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
        try:
            name, ops = files.read_file(path)
        except LibraryError:
            name, ops = "(unreadable)", []
        out.append(Entry(path.stem, name, len(ops), path))
    return sorted(out, key=lambda e: (e.name, e.digest))


def remove(prefix: str) -> list[Entry]:
    """Remove the entries whose digest starts with ``prefix`` (at least 6 hex digits); returns them.
    A prefix that names more than one entry removes none (LibraryError naming them)."""
    if len(prefix) < 6 or any(c not in "0123456789abcdef" for c in prefix):
        raise LibraryError(f"{prefix!r}: give at least 6 lowercase hex digits of a digest (opgen ops libraries)")
    hits = [e for e in entries() if e.digest.startswith(prefix)]
    if len(hits) > 1:
        raise LibraryError(f"{prefix!r} names {len(hits)} libraries ({', '.join(e.digest[:12] for e in hits)}); "
                           "give more digits")
    for e in hits:
        e.path.unlink()
    forget_cache()
    return hits


def forget_cache() -> None:
    """Drop what this process compiled from the store (an entry is read again when next named)."""
    with _LOCK:
        _LOADED.clear()


def _check_owned(path: Path) -> None:
    """``path`` is the user's own and writable by no one else, else :class:`LibraryError`."""
    if not hasattr(os, "getuid"):
        return
    st = path.stat()
    if st.st_uid != os.getuid():
        raise LibraryError(f"{path}: the library store belongs to another user (uid {st.st_uid}); a store holds "
                           "code you run: set OPGEN_HOME to a folder of your own")
    if stat.S_IMODE(st.st_mode) & 0o022:
        raise LibraryError(f"{path}: in the library store and writable by others (mode "
                           f"{stat.S_IMODE(st.st_mode):o}); someone else could plant a library there: "
                           f"chmod go-w {path}")


def _write_private(path: Path, text: str) -> None:
    """``text`` to ``path`` whole or not at all, mode 0600."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
