"""A build's output directory: one owner at a time, replaced whole, never left half-written.

- **Lock.** ``DIR.opgen-lock`` (a sibling of DIR, so it survives the swap below) is held with
  ``flock`` for the whole build and names the holder's pid; a second build into DIR refuses at once.
  The holder removes it as it lets go (a command that refused to start included): no lock file is
  left beside DIR.
- **Staging and swap.** A build writes everything, ``manifest.json`` last, into the sibling
  ``DIR.opgen-new-<pid>``, then swaps it in: ``renameat2(RENAME_EXCHANGE)`` exchanges the two
  directories in one atomic step (Linux ≥ 3.15; ext4, xfs, btrfs, tmpfs, overlayfs), and the old
  build, now under the staging name, is removed. Where the exchange is unsupported, two renames
  (DIR → ``DIR.opgen-old-<pid>``, staging → DIR) leave a window without DIR; the next build (or
  ``recover``) finishes it: a staging directory with a manifest is complete and moves in, else the
  old build moves back.
- **Ownership.** DIR is replaced only when it is missing, empty, or an opgen build (a readable
  opgen ``manifest.json`` and no file it does not list); ``force`` lets a build replace an opgen
  build that holds unlisted files too, and never anything else: a folder without an opgen
  manifest (a project folder, ``--out .``) is refused with or without it.
- **Every command that writes** (``score``'s report, ``eval``'s folder, ``fit``, ``push --dry-run``'s tree,
  ...) uses the
  same pieces: :func:`committed` (lock, recovery, ownership by the command's own file names,
  staging, one swap: a report is replaced whole or not at all) or, for an append-only folder
  that is resumed in place (``eval``), :func:`claim` (lock and ownership only). A mount point is
  refused before any work (it cannot be swapped).
- **Faults** (test-only): ``OPGEN_FAULT=<point>:<KILL|TERM|INT>`` sends that signal at a named
  point (``produced``: to the build's main process after a worker finished a shard;
  ``staged``: a report staged, before its swap; ``batch-written``: eval's generations of one
  batch on disk; ``before-swap``, ``between-renames``, ``after-swap``: to itself); ``OPGEN_SWAP=rename`` forces the
  two-rename swap. Neither is meant for anything but tests.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import json
import os
import shutil
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from opgen.errors import OpgenError

# The canonical file of a build's operator library (opgen.library.canonical_text), beside its rows
# when the library is not the study's: the manifest lists it (``library.file``); nothing runs it.
LIBRARY_FILE = "library.yaml"
LOCK_SUFFIX = ".opgen-lock"
NEW_INFIX = ".opgen-new-"
OLD_INFIX = ".opgen-old-"


class OutputError(RuntimeError, OpgenError):
    """The output directory cannot be used (locked, foreign, not writable, too little space)."""

    exit_code = 1


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that clean-up runs as for Ctrl-C."""


class SignalAfterCommit:
    """Mixin: the signal came during :func:`committed`'s swap, which was completed first (DIR holds
    the new output)."""


class InterruptedAfterCommit(SignalAfterCommit, KeyboardInterrupt):
    pass


class TerminatedAfterCommit(SignalAfterCommit, Terminated):
    pass


# ---------------------------------------------------------------- faults (test-only)


def fault(point: str, pid: int | None = None) -> None:
    spec = os.environ.get("OPGEN_FAULT", "")
    if not spec:
        return
    name, _, sig = spec.partition(":")
    if name == point:
        os.kill(pid if pid is not None else os.getpid(), getattr(signal, "SIG" + (sig or "KILL").upper()))


# ---------------------------------------------------------------- signals and workers


_libc = None


def _prctl_pdeathsig(sig: int) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    PR_SET_PDEATHSIG = 1
    _libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)


def worker_init(parent: int) -> None:
    """In each worker process: die with the parent (even on SIGKILL), leave Ctrl-C to the parent."""
    try:
        _prctl_pdeathsig(signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the parent's terminate() is all there is
        pass
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _raise_terminated(signum, frame):
    # One is enough: a second SIGTERM (each worker of a dying build may send one, as may a
    # supervisor) must not interrupt the clean-up the first one started.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Terminated()


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM that arrive while a swap is under way are acted on after it.

    Handlers, not the signal mask: pyarrow's threads would take a signal the main thread blocks."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    old: dict[int, Any] = {sig: signal.signal(sig, lambda signum, frame: got.append(signum))
                           for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    if got:
        handler = old[got[0]]
        if callable(handler):
            handler(got[0], None)
        elif handler == signal.SIG_DFL:
            signal.raise_signal(got[0])


def exit_code(exc: BaseException) -> int:
    """The one convention of every command: 143 after SIGTERM, 130 after SIGINT (128 + signal)."""
    return 143 if isinstance(exc, Terminated) else 130


def install_sigterm() -> None:
    """SIGTERM (timeout, Slurm, Docker) raises ``Terminated`` in the main thread, like SIGINT does."""
    signal.signal(signal.SIGTERM, _raise_terminated)


# ---------------------------------------------------------------- lock


def lock_path(out: Path) -> Path:
    return out.with_name(out.name + LOCK_SUFFIX)


class Lock:
    def __init__(self, out: Path, what: str = "build"):
        self.path = lock_path(out)
        self.what = what  # the command, for the refusal: "build", "opgen eval", ...
        self.fd = -1

    def __enter__(self) -> Lock:
        import fcntl

        while True:
            try:
                self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            except OSError as exc:
                raise OutputError(f"{self.path}: cannot create the build lock ({exc.strerror})") from None
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(self.fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
                os.close(self.fd)
                self.fd = -1
                raise OutputError(f"{self.path.with_name(self.path.name.removesuffix(LOCK_SUFFIX))}: another "
                                  f"{self.what} (pid {holder}) is writing this directory (lock {self.path}); "
                                  f"wait for it or write elsewhere") from None
            if self._still_the_file():
                break
            # the holder we waited on removed the file as it let go: lock the one at the path now
            os.close(self.fd)
            self.fd = -1
        try:
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as exc:  # a full disk: the lock is held, only the holder's pid is not recorded
            if exc.errno != errno.ENOSPC:
                raise
        return self

    def _still_the_file(self) -> bool:
        """Whether the locked descriptor is the file at the path (a holder removes it on leaving)."""
        try:
            at_path = os.stat(self.path)
        except FileNotFoundError:
            return False
        mine = os.fstat(self.fd)
        return (mine.st_dev, mine.st_ino) == (at_path.st_dev, at_path.st_ino)

    def __exit__(self, *exc) -> None:
        if self.fd >= 0:
            # Removed while still locked, so no lock file is left beside DIR: a command that opened
            # it meanwhile finds, once it holds the lock, that the path is gone or another file, and
            # opens the path again (__enter__).
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            os.close(self.fd)
            self.fd = -1


# ---------------------------------------------------------------- leftovers, ownership, space


def siblings(out: Path, infix: str) -> list[Path]:
    parent = out.parent
    if not parent.is_dir():
        return []
    prefix = out.name + infix
    return sorted(p for p in parent.iterdir() if p.name.startswith(prefix) and p.is_dir() and not p.is_symlink())


def recover(out: Path, last_file: str = "manifest.json") -> list[str]:
    """Under the lock: finish or undo an interrupted swap, remove stale staging directories.
    ``last_file`` is the one a complete staging directory holds (written last)."""
    done = []
    new, old = siblings(out, NEW_INFIX), siblings(out, OLD_INFIX)
    if not out.exists():
        complete = [p for p in new if (p / last_file).is_file()]
        if complete:
            os.rename(complete[-1], out)
            done.append(f"moved the interrupted build's complete {complete[-1].name} into place")
        elif old:
            os.rename(old[-1], out)
            done.append(f"restored the previous build from {old[-1].name}")
    for p in siblings(out, NEW_INFIX) + siblings(out, OLD_INFIX):
        shutil.rmtree(p, ignore_errors=True)
        done.append(f"removed {p.name}")
    return done


def read_manifest(out: Path) -> dict | None:
    path = out / "manifest.json"
    try:
        man = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(man, dict) or "opgen_version" not in man or not isinstance(man.get("splits"), dict):
        return None
    return man


def listed_files(man: dict) -> set[str]:
    """The files a build's manifest lists: its splits' files, the manifest, the library file."""
    lib = man.get("library")
    own = {LIBRARY_FILE} if isinstance(lib, dict) and lib.get("file") == LIBRARY_FILE else set()
    return {f["path"] for s in man["splits"].values() for f in s.get("files", [])} | {"manifest.json"} | own


def check_owner(out: Path, force: bool) -> dict | None:
    """The previous build's manifest (None if DIR is missing or empty); refuses a foreign DIR unless ``force``."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise OutputError(f"{out}: not a directory")
    if not out.exists():
        return None
    try:
        names = sorted(p.name for p in out.iterdir())
    except OSError as exc:
        raise OutputError(f"{out}: cannot read the output directory ({exc.strerror})") from None
    if not names:
        return None
    man = read_manifest(out)
    if man is None:  # never replaced, not even with --force: it may be a project folder
        raise OutputError(f"{out}: holds {len(names)} entries ({_some(names)}) but no opgen manifest.json; a "
                          f"build replaces its whole output directory and never one opgen did not write; "
                          f"choose a new or empty folder (e.g. {out / 'opgen-out'})")
    if force:
        return man
    extra = sorted(set(names) - listed_files(man))
    if extra:
        raise OutputError(f"{out}: an opgen build, but it also holds files its manifest does not list "
                          f"({_some(extra)}); a build replaces its whole output directory, so those would be "
                          f"deleted (move them away, or pass --force to delete them with the old build)")
    return man


def _some(names: list[str]) -> str:
    return ", ".join(names[:3]) + (", …" if len(names) > 3 else "")


def check_foreign(out: Path, own: Callable[[str], bool], what: str) -> None:
    """DIR (if it exists) holds only entries ``what`` writes (``own(name)``); refuses it otherwise."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise OutputError(f"{out}: not a directory")
    if not out.exists():
        return
    try:
        names = sorted(p.name for p in out.iterdir())
    except OSError as exc:
        raise OutputError(f"{out}: cannot read the output directory ({exc.strerror})") from None
    foreign = [n for n in names if not own(n)]
    if foreign:
        raise OutputError(f"{out}: holds {len(foreign)} entries {what} does not write ({_some(foreign)}); "
                          f"{what} writes only into a new or empty folder or one it wrote itself, and never "
                          f"replaces another's files; choose another --out")


def check_writable(out: Path) -> None:
    """Before any work: DIR's parent can take the staging directory, and DIR can be swapped."""
    if os.path.ismount(out):
        raise OutputError(f"{out}: a mount point; opgen stages its output beside the folder and swaps it in, "
                          f"which a mount point cannot be; write into a folder inside it (e.g. {out / 'opgen-out'})")
    parent = out.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{parent}: cannot create the output's parent directory ({exc.strerror})") from None
    if not os.access(parent, os.W_OK | os.X_OK):
        try:
            ro = bool(os.statvfs(parent).f_flag & os.ST_RDONLY)
        except OSError:
            ro = False
        why = "Read-only file system" if ro else "not writable"
        raise OutputError(f"{parent}: {why}; opgen stages its output beside {out.name} and swaps it in; "
                          f"nothing was written")


def free_bytes(out: Path) -> int:
    st = os.statvfs(out.parent)
    return st.f_bavail * st.f_frsize


def check_space(out: Path, estimate: int) -> None:
    free = free_bytes(out)
    if free < estimate:
        raise OutputError(f"{out.parent}: {_mib(free)} free, the build needs about {_mib(estimate)} while it runs "
                          f"(staged shards and parquet files, estimated from sample rows); free space or build "
                          f"elsewhere")


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


# ---------------------------------------------------------------- staging and swap


def stage_path(out: Path) -> Path:
    return out.with_name(f"{out.name}{NEW_INFIX}{os.getpid()}")


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> bool:
    """Atomically exchange two paths (renameat2 RENAME_EXCHANGE); False where unsupported."""
    if os.environ.get("OPGEN_SWAP") == "rename":
        return False
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fn = _libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(a))


def swap(stage: Path, out: Path) -> None:
    """Make the complete build in ``stage`` the one at ``out``; an interruption leaves one or the other."""
    fault("before-swap")
    if not out.exists():
        os.rename(stage, out)
        return
    if _exchange(stage, out):
        fault("after-swap")
        shutil.rmtree(stage, ignore_errors=True)  # now the previous build
        return
    old = out.with_name(f"{out.name}{OLD_INFIX}{os.getpid()}")
    os.rename(out, old)
    fault("between-renames")
    os.rename(stage, out)
    fault("after-swap")
    shutil.rmtree(old, ignore_errors=True)


# ---------------------------------------------------------------- every command that writes


def absolute(out: Path) -> Path:
    out = Path(os.path.abspath(out))
    return out.resolve() if out.is_symlink() else out


@contextlib.contextmanager
def claim(out: Path, own: Callable[[str], bool], what: str) -> Iterator[Path]:
    """An append-only folder resumed in place (``opgen eval``): locked for the whole run, refused
    if it holds what ``what`` does not write. Yields the absolute DIR (created)."""
    out = absolute(out)
    check_writable(out)
    with Lock(out, what):
        check_foreign(out, own, what)
        made = not out.exists()
        try:
            out.mkdir(exist_ok=True)
        except OSError as exc:
            raise OutputError(f"{out}: cannot create the output directory ({exc.strerror})") from None
        try:
            yield out
        except BaseException:
            if made:  # a command that failed before writing anything leaves no empty folder behind
                with contextlib.suppress(OSError):
                    out.rmdir()
            raise


@contextlib.contextmanager
def committed(out: Path, own: Callable[[str], bool], what: str, last_file: str) -> Iterator[Path]:
    """A report written whole or not at all: yields an empty staging directory; when the block
    ends, the staging directory (which must hold ``last_file``) replaces DIR in one swap. Locked,
    recovered from an interrupted swap, refused if DIR holds what ``what`` does not write; a
    failure or a signal removes the staging directory and leaves DIR as it was."""
    out = absolute(out)
    check_writable(out)
    with Lock(out, what):
        recover(out, last_file)
        check_foreign(out, own, what)
        stage = stage_path(out)
        shutil.rmtree(stage, ignore_errors=True)
        try:
            stage.mkdir()
            yield stage
            if not (stage / last_file).is_file():
                raise OutputError(f"{stage}: {last_file} was not written; nothing committed")
            fsync_tree(stage)
            fault("staged")
        except BaseException:
            shutil.rmtree(stage, ignore_errors=True)
            raise
        swapped = False
        try:
            with signals_held():
                swap(stage, out)
                swapped = True
        except KeyboardInterrupt:
            if not swapped:
                shutil.rmtree(stage, ignore_errors=True)
                raise
            raise InterruptedAfterCommit() from None
        except Terminated:
            if not swapped:
                shutil.rmtree(stage, ignore_errors=True)
                raise
            raise TerminatedAfterCommit() from None
        except BaseException:
            shutil.rmtree(stage, ignore_errors=True)
            raise


def fsync_tree(path: Path) -> None:
    """Every file of a staged directory on disk before the swap makes it the real one."""
    for p in sorted(path.rglob("*")):
        if p.is_file() and not p.is_symlink():
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
