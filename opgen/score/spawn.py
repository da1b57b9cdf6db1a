"""Start opgen's helper processes — grading processes and sandbox workers — sealed from their caller.

The caller's working directory and environment are untrusted (docs/scoring.md, "What runs where"):
a module file in the directory a trainer runs from, or a ``PYTHON*`` variable (``PYTHONPATH``,
``PYTHONOPTIMIZE``, ``PYTHONWARNINGS``, ``PYTHONHOME``, ``PYTHONSTARTUP``...), must not reach the
processes that compute grades. So each starts with ``python -I`` (no current or script directory on
``sys.path``, no user site, every ``PYTHON*`` variable ignored), an explicit minimal environment
(:data:`SEALED_ENV`), ``/`` as its working directory and no inherited descriptor but its pipes.

Until it is ready (its first message on stdout) its stderr is collected here: a process that cannot
start fails at once with what it said and how it ended (its exit code, or the signal that killed it),
never a wait for a timeout; one killed by a signal before it was ready (as the OOM killer does) is
started once more.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import time

from opgen.errors import OpgenError
from opgen.score.jail import wire

# What a helper process gets of an environment: nothing of the caller's.
SEALED_ENV = {"LANG": "C.UTF-8", "PATH": "/usr/bin:/bin"}
# The end of a failed start's stderr kept for its message.
STDERR_TAIL = 2000


class StartFailed(RuntimeError, OpgenError):
    """A helper process ended, or said nothing, before it was ready (the message says how); its
    callers raise their own error with it (``SandboxError``, ``GradingError``)."""

    exit_code = 1

    def __init__(self, message: str, signalled: bool):
        super().__init__(message)
        self.signalled = signalled


def how_it_ended(code: int | None) -> str:
    """``exit code N``, ``SIGKILL`` (a signal's name), or ``still running``."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


class Helper:
    """One helper process of opgen's own: its stdin and stdout carry wire messages (jail/wire.py)."""

    def __init__(self, argv: list[str], what: str):
        self.what = what
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     close_fds=True, cwd="/", env=dict(SEALED_ENV))
        stdin, stdout = self.proc.stdin, self.proc.stdout
        assert stdin is not None and stdout is not None  # both are pipes (PIPE above)
        self.wfd, self.rfd = stdin.fileno(), stdout.fileno()
        self.reader = wire.Reader()

    def ready(self, timeout_s: float) -> object:
        """The process's first message, within ``timeout_s`` seconds; its stderr is read meanwhile
        (then closed: a ready process writes nothing there). :class:`StartFailed` when it ends or
        says something malformed first, or says nothing in time."""
        assert self.proc.stderr is not None
        err_fd = self.proc.stderr.fileno()
        said = bytearray()
        watched = [self.rfd, err_fd]
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                try:
                    got, payload = self.reader.take()
                except ValueError:
                    raise self._failed("sent a malformed first message", said) from None
                if got:
                    return payload
                left = deadline - time.monotonic()
                if left <= 0:
                    raise self._failed(f"did not become ready within {timeout_s:g} s", said)
                for fd in select.select(watched, [], [], left)[0]:
                    data = os.read(fd, 1 << 16)
                    if fd == err_fd:
                        if data:
                            said += data
                            del said[:-STDERR_TAIL]
                        else:
                            watched.remove(err_fd)
                    elif data:
                        self.reader.feed(data)
                    else:  # stdout closed: it ended (or is ending) before it was ready
                        raise self._ended(said, err_fd in watched)
        finally:
            with contextlib.suppress(OSError):
                self.proc.stderr.close()

    def _ended(self, said: bytearray, reading: bool) -> StartFailed:
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        if reading and self.proc.stderr is not None:  # what it wrote last (the pipe ends when it does)
            err_fd = self.proc.stderr.fileno()
            while select.select([err_fd], [], [], 0.2)[0]:
                data = os.read(err_fd, 1 << 16)
                if not data:
                    break
                said += data
                del said[:-STDERR_TAIL]
        code = self.proc.returncode
        killed = code is not None and code < 0
        what = f"was killed by {how_it_ended(code)}" if killed else f"exited ({how_it_ended(code)})"
        return self._failed(f"{what} before it was ready", said, signalled=killed)

    def _failed(self, what: str, said: bytearray, signalled: bool = False) -> StartFailed:
        self.kill()
        text = bytes(said).decode("utf-8", "replace").strip()
        return StartFailed(f"{self.what} {what}" + (f"; it said:\n{text}" if text else "; it said nothing"),
                           signalled)

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()


def start(argv: list[str], what: str, timeout_s: float) -> tuple[Helper, object]:
    """A helper started sealed and its first message. One killed by a signal before it was ready is
    started once more; :class:`StartFailed` (or ``OSError`` from the start itself) otherwise."""
    for attempt in (1, 2):
        helper = Helper(argv, what)
        try:
            return helper, helper.ready(timeout_s)
        except StartFailed as failed:
            if not failed.signalled or attempt == 2:
                raise
    raise AssertionError("unreachable")
