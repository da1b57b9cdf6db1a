"""The wire format of ``opgen/score``: one framing for every message between its processes.

Every message between opgen's own processes — the scorer and its grading processes
(opgen/score/batch.py), the scorer and a sandbox worker, a worker and the child it hands a request —
is one frame: an 8-byte big-endian length (:data:`HEADER`), then a ``marshal`` payload of plain
values (no pickle: nothing a message holds can run code where it is read). Both ends import this
module; the worker reads it as ``jail.wire`` (it runs as a script, without opgen), the scorer as
``opgen.score.jail.wire``. tests/test_sandbox_wire.py encodes on one end and decodes on the other.

The messages are typed records with ``to_wire``/``from_wire`` (as ``GradeSettings`` is): here the
sandbox's (:class:`Hello`, :class:`Request`; a reply is a list of ``(status, value, detail)``, one
per call), in batch.py the grading processes' (tasks, limits, outcomes).

A child's frames to its worker are the one other layout (:data:`FRAME_HEADER`): the child runs
model code, so what it writes is hostile and parsed defensively by the worker, byte by byte.

Standard library only (see the package's docstring).
"""

from __future__ import annotations

import marshal
import os
import struct

TYPE_CHECKING = False  # (no ``typing`` in the worker: it would cost every worker start)
if TYPE_CHECKING:
    from typing import Any

# ------------------------------------------------------------------ the framing (every message)

HEADER = struct.Struct(">Q")


def encode(obj: Any) -> bytes:
    """One message: the header, then ``obj`` marshalled."""
    data = marshal.dumps(obj)
    return HEADER.pack(len(data)) + data


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def send(fd: int, obj: Any) -> None:
    """Write one message on a blocking descriptor."""
    write_all(fd, encode(obj))


def read_exact(fd: int, n: int) -> bytes | None:
    """``n`` bytes from a blocking descriptor; None when it ends first."""
    parts = []
    while n:
        chunk = os.read(fd, n)
        if not chunk:
            return None
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def receive(fd: int) -> Any:
    """The next message from a blocking descriptor; ``EOFError`` when it ends first."""
    head = read_exact(fd, HEADER.size)
    body = read_exact(fd, HEADER.unpack(head)[0]) if head is not None else None
    if body is None:
        raise EOFError("the stream ended")
    return marshal.loads(body)


class Reader:
    """Messages from a descriptor read as bytes arrive (the scorer's end, which waits with
    ``select`` and a deadline): :meth:`feed` what was read, :meth:`take` each whole message."""

    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes) -> None:
        self.buf += data

    def size(self) -> int | None:
        """The length of the next message, once its header is here."""
        return HEADER.unpack_from(self.buf)[0] if len(self.buf) >= HEADER.size else None

    def take(self) -> tuple[bool, Any]:
        """``(True, payload)`` for a whole message (removed from the buffer), else ``(False, None)``.
        A payload that does not unmarshal raises ``ValueError``."""
        n = self.size()
        if n is None or len(self.buf) < HEADER.size + n:
            return False, None
        data = bytes(self.buf[HEADER.size:HEADER.size + n])
        del self.buf[:HEADER.size + n]
        try:
            return True, marshal.loads(data)
        except (EOFError, TypeError, ValueError) as exc:
            raise ValueError(f"a malformed message: {exc}") from None


# ------------------------------------------------------------------ scorer <-> sandbox worker (trusted)


class Hello:
    """A worker's first message: the isolation it got (the mechanisms in force, by name, and their
    facts: uid, limits...) and its process id on the host (the serving worker, inside its namespaces)."""

    __slots__ = ("isolation", "pid")
    TAG = "hello"

    def __init__(self, isolation: dict, pid: int) -> None:
        self.isolation, self.pid = isolation, pid

    def to_wire(self) -> tuple:
        return (self.TAG, self.isolation, self.pid)

    @classmethod
    def from_wire(cls, wire: object) -> Hello:
        if not (type(wire) is tuple and len(wire) == 3 and wire[0] == cls.TAG and type(wire[1]) is dict
                and type(wire[2]) is int):
            raise ValueError(f"not a worker's hello: {str(wire)[:200]}")
        return cls(wire[1], wire[2])


class Request:
    """One response's programs for one child: ``units`` (``(code, [(entry, args), ...], fail_fast)``
    each: ``code`` the marshalled code the scorer compiled, source text for the child to compile, or
    ``[prelude code, source text]``), each call's wall-clock limit ``timeout_s`` and one budget for
    all of them, ``budget_s``. The reply is one ``(status, value, detail)`` per call, in order."""

    __slots__ = ("units", "timeout_s", "budget_s")

    def __init__(self, units: list, timeout_s: float, budget_s: float) -> None:
        self.units, self.timeout_s, self.budget_s = units, timeout_s, budget_s

    def to_wire(self) -> tuple:
        return (self.units, self.timeout_s, self.budget_s)

    @classmethod
    def from_wire(cls, wire: tuple) -> Request:
        units, timeout_s, budget_s = wire
        return cls(units, float(timeout_s), float(budget_s))

    def calls(self) -> int:
        return sum(len(calls) for _, calls, _ in self.units)


def reply_cap(n_calls: int, max_output: int) -> int:
    """The largest reply (in bytes) the scorer reads: ``n_calls`` triples of capped strings."""
    return n_calls * (max_output * 4 + 4 * DETAIL_CAP + 64) + 1024


# The worker's argv after the script's path: these limits, in this order, then the namespaces flag
# (:func:`worker_args`) and the root directory (the scorer appends it per worker).
LIMIT_ARGS = ("as_bytes", "fsize_bytes", "nofile", "nproc", "max_output", "work_bytes", "work_inodes")


def worker_args(limits: dict, namespaces: bool, imports: str = "allowlist") -> list[str]:
    """The worker's argv after its path, but for ROOT_DIR: the limits, then ``1``/``0``
    (namespaces), with ``:open`` when imports are not locked (tests of the layers below the import
    allowlist)."""
    if imports not in ("allowlist", "open"):
        raise ValueError(f"imports must be 'allowlist' or 'open', got {imports!r}")
    flag = ("1" if namespaces else "0") + (":open" if imports == "open" else "")
    return [str(limits[name]) for name in LIMIT_ARGS] + [flag]


def read_args(argv: list[str]) -> tuple[dict, bool, bool, str, list[str]]:
    """:func:`worker_args` plus ROOT_DIR back: (limits, namespaces, imports locked, root dir, the rest)."""
    n = len(LIMIT_ARGS)
    limits = {name: int(value) for name, value in zip(LIMIT_ARGS, argv[:n])}
    flag = argv[n]
    return limits, flag.split(":")[0] == "1", not flag.endswith(":open"), argv[n + 1], argv[n + 2:]


# ------------------------------------------------------------------ child -> worker (hostile)

# One frame = status code (1 byte), sender pid (4), payload length (4), big-endian, then the UTF-8
# payload. Code 0 ("loaded") reports a unit loaded; END_CODE with no payload says nothing more
# comes; the others are the results a reply carries (RESULTS).
FRAME_HEADER = struct.Struct(">BII")
STATUSES = ("loaded", "ok", "syntax", "missing_name", "arity", "exception", "timeout", "memory",
            "output_too_large", "killed", "not_a_string")
RESULTS = STATUSES[1:]
CODES = {name: i for i, name in enumerate(STATUSES)}
END_CODE = 255
# A detail longer than this is cut by the worker (the child's own cap is CHILD_DETAIL_CAP, plus a
# prefix such as "while defining: ").
DETAIL_CAP = 600
CHILD_DETAIL_CAP = 500


def encode_frame(status: str, pid: int, payload: str) -> bytes:
    """One child -> worker frame."""
    data = payload.encode("utf-8", "surrogatepass")
    return FRAME_HEADER.pack(CODES[status], pid, len(data)) + data


def frame_cap(max_output: int) -> int:
    """The largest frame payload the worker reads: an ``ok`` value of ``max_output`` characters
    (4 UTF-8 bytes each at most) or a detail; a longer frame is malformed."""
    return max_output * 4 + 64


def detail_of(exc: BaseException) -> str:
    """The detail text of an exception, as the child reports it (the scorer writes the same)."""
    name = type(exc).__name__
    try:
        return f"{name}: {exc}"[:CHILD_DETAIL_CAP]
    except BaseException:  # a hostile __str__
        return name
