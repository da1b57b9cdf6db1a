"""The sandbox worker: a warm process that forks one isolated child per request (its script is
``__main__.py``; this module is what it runs).

Jail once, fork many: the worker sets its isolation up once, at start, by running the ordered
lists of :mod:`.steps` — stage one enters the namespaces and execs a lean interpreter, which sets up
the rest and forks the clean zygote — and every child forks from the zygote, applying only what is
per process. Each step is taken only where the system allows it; what was obtained is the hello's
report, so the scorer can state the level and refuse a weak one.

Protocol (worker <-> scorer, over stdin/stdout, trusted; :mod:`.wire`): the worker's first message
is a :class:`~.wire.Hello`; then one :class:`~.wire.Request` in, one reply out (a list of
``(status, value, detail)``, one per call, in order). Child -> worker (hostile): frames of
:data:`~.wire.FRAME_HEADER`, parsed defensively here (bounded reads, caps on values and details
applied here, not in the child; frames past the last call ignored; a malformed frame ends that
child with ``killed``); frames from any pid but the child's are dropped, so a child can only ever
lie about its own result. Standard library only.
"""

from __future__ import annotations

import builtins
import marshal
import os
import select
import signal
import sys
import time

from . import child, imports, pidns, rlimits, steps, uid_drop, wire
from .base import Jail
from .child import ChildRequest
from .wire import DETAIL_CAP, END_CODE, FRAME_HEADER, STATUSES, frame_cap
from .zygote import MESSAGE as ZYGOTE_MESSAGE

TYPE_CHECKING = False  # (no ``typing`` in the worker: it would cost every worker start)
if TYPE_CHECKING:
    pass


class Worker:
    """The serving worker's request loop, on the jail its steps set up."""

    def __init__(self, jail: Jail) -> None:
        self.jail = jail
        self.limits = jail.limits
        self.uid = jail.child_uid
        self.area = jail.area
        self.child_pid: int | None = None  # the current child's, as the zygote reports it
        self.in_fresh = False  # the current child is the init of a PID namespace of its own
        self.unsettled: str | None = None  # the work directory of a killed child not yet reported ended
        self.attach_zygote(*jail.zygote)

    def _frames(self, units: list, n_expected: int, timeout_s: float,  # noqa: C901
                out: list, loaded: set, budget_end: float, request: bytes) -> tuple[str, tuple | None]:
        """Read frames until ``n_expected`` results or the child ends; return why reading stopped
        and, where the child ended, the zygote's report of it (wait status, CPU ms).

        The request is written to the child as it reads it (never blocking: a child that stops
        reading cannot stall the worker). A unit's loading has ``timeout_s``, and so has each call
        from the previous result or load report on, but never past ``budget_end`` (the response's
        one budget). A load report counts once, for the unit whose call is due: repeated reports
        (the program holds the pipe) must not keep the wall clock from running out. The caps are
        applied here, on what the child wrote, whoever wrote it: a value over ``max_output``
        characters, a detail over ``DETAIL_CAP``; frames after the last expected one are never read;
        frames from any pid but the child's (as it sees itself) are dropped.
        """
        buf = b""
        max_output = self.limits["max_output"]
        limit = frame_cap(max_output)
        head = FRAME_HEADER.size
        rfd, zfd, wfd = self.res_r, self.status_r, self.req_w
        pending = memoryview(request)
        ended: tuple | None = None
        sender_pid = None
        deadline = min(time.monotonic() + timeout_s, budget_end)
        while len(out) < n_expected:
            if ended is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return ("budget" if deadline >= budget_end else "timeout"), None
                ready, writable, _ = select.select([rfd, zfd], [wfd] if pending else [], [], left)
                if not ready and not writable:
                    return ("budget" if deadline >= budget_end else "timeout"), None
                if writable:
                    try:
                        pending = pending[os.write(wfd, pending):]
                    except (BlockingIOError, BrokenPipeError):
                        pass
                if zfd in ready:
                    if self.child_pid is None:
                        self._child_report()
                    else:
                        ended = self._zygote_says(b"S")
                if rfd not in ready and ended is None:
                    continue
            try:
                chunk = os.read(rfd, 1 << 16)
            except BlockingIOError:  # nothing (more) to read
                if ended is not None:  # the child is gone and everything it wrote is read
                    return "eof", ended
                continue
            if not chunk:  # no writer left at all (the zygote is gone)
                return "eof", ended
            buf += chunk
            if sender_pid is None:
                if self.child_pid is None:
                    self._child_report()  # written by the zygote right after its fork
                sender_pid = 1 if self.in_fresh else self.child_pid
            while len(buf) >= head and len(out) < n_expected:
                code, sender, length = FRAME_HEADER.unpack_from(buf)
                if code == END_CODE and length == 0:
                    buf = buf[head:]
                    if sender == sender_pid:
                        return "eof", ended or (0, 0)  # it says nothing more comes: as if it exited 0
                    continue
                if code >= len(STATUSES) or length > limit:
                    out.append(("output_too_large" if code == 1 and length > limit else "killed", None,
                                "malformed result frame"))
                    return "bad", ended
                if len(buf) < head + length:
                    break
                payload, buf = buf[head:head + length], buf[head + length:]
                if sender != sender_pid:
                    continue
                status = STATUSES[code]
                if status == "loaded":
                    unit = str(self._unit_of(units, len(out))[0])
                    if unit not in loaded and payload == unit.encode():
                        loaded.add(unit)
                        deadline = min(time.monotonic() + timeout_s, budget_end)
                    continue
                try:
                    text = payload.decode("utf-8", "surrogatepass")
                except UnicodeDecodeError:
                    out.append(("killed", None, "malformed result payload"))
                    return "bad", ended
                if status == "ok":
                    if len(text) > max_output:
                        out.append(("output_too_large", None, f"{len(text)} characters > {max_output}"))
                    else:
                        out.append(("ok", text, ""))
                else:
                    out.append((status, None, text[:DETAIL_CAP]))
                deadline = min(time.monotonic() + timeout_s, budget_end)
            if len(buf) > limit + head:  # cannot happen with a well-formed frame
                out.append(("killed", None, "malformed result frame"))
                return "bad", ended
        return "done", ended

    def attach_zygote(self, pid: int, ctl_w: int, status_r: int, req_w: int, req_r: int, res_r: int) -> None:
        """The zygote's ends of the pipes (see zygote.py), then its ready report: what its steps got."""
        self.zygote_pid, self.ctl_w, self.status_r = pid, ctl_w, status_r
        self.req_w, self.req_r, self.res_r = req_w, req_r, res_r
        # Not req_r: its flags are those of the children's end too (one open pipe), which must block.
        for fd in (req_w, res_r):
            os.set_blocking(fd, False)
        in_force, reported = self._zygote_says(b"R")
        for i, (name, _) in enumerate(self.jail.in_zygote):
            if reported >> i & 1:
                self.jail.report[name] = bool(in_force >> i & 1)

    def close_zygote(self) -> None:
        """End the zygote and wait for it: its children's CPU time then counts in the worker's (and
        so in the scorer's ``RUSAGE_CHILDREN``), which a zygote left to the kernel would lose."""
        self._settle()
        os.close(self.ctl_w)
        try:
            os.waitpid(self.zygote_pid, 0)
        except ChildProcessError:
            pass

    def _child_report(self) -> None:
        self.child_pid, fresh = self._zygote_says(b"P")
        self.in_fresh = bool(fresh)

    def _zygote_says(self, kind: bytes) -> tuple[int, int]:
        data = wire.read_exact(self.status_r, ZYGOTE_MESSAGE.size)
        if data is None:
            raise SystemExit("the zygote is gone")  # the scorer replaces this worker
        got, a, b = ZYGOTE_MESSAGE.unpack(data)
        if got != kind and not (kind == b"P" and got == b"p"):
            raise SystemExit(f"the zygote sent {got!r}, expected {kind!r}")
        return (a, got == b"P") if kind == b"P" else (a, b)

    def _drain(self) -> None:
        # Every process of the request is dead: what is left in either pipe is stale.
        for fd in (self.res_r, self.req_r):
            while select.select([fd], [], [], 0)[0] and os.read(fd, 1 << 16):
                pass

    def _kill(self) -> None:
        """Kill the child (and, in its own PID namespace, with it everything it forked)."""
        if self.child_pid is None:
            self._child_report()
        pid = self.child_pid
        if pid is None or pid <= 1:  # _child_report sets a child's pid; never signal a group or all
            raise SystemExit(f"the zygote reported pid {pid}")
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass

    def _settle(self) -> None:
        """After a child was killed, before anything else: wait for the zygote's report of its end,
        then clean up. Deferred until after the reply to the scorer, which then need not wait."""
        if self.unsettled is None:
            return
        workdir, self.unsettled = self.unsettled, None
        self._zygote_says(b"S")
        self._reap()
        self._drain()
        self.area.clear(workdir)

    def _reap(self) -> None:
        """What the child left of processes, where it had no PID namespace of its own: with a uid
        of this worker's own, every process of it is killed; the worker, init of its PID namespace,
        reaps what was reparented to it."""
        if not self.in_fresh:
            if self.uid is not None:
                uid_drop.empty(self.uid)
            pidns.reap_orphans()

    def run(self, units: list, timeout_s: float, budget_s: float) -> list:
        total = sum(len(calls) for _, calls, _ in units)
        budget_end = time.monotonic() + budget_s
        out: list = []
        while len(out) < total:
            left = budget_end - time.monotonic()
            if left <= 0:
                out.extend([("timeout", None, f"response budget of {budget_s:g} s spent")] * (total - len(out)))
                break
            self._settle()  # the previous child's end (of this request or the one before)
            start = len(out)
            workdir = self.area.next()
            # CPU: the budget left, for all threads of the child (whole seconds, at least one).
            cpu_s = int(left) + 1
            # The child reads its request itself: the zygote never holds a request's bytes.
            request = wire.encode(ChildRequest(start, workdir, cpu_s, units).to_wire())
            self.child_pid = None  # the zygote reports it (read when first needed: no round trip here)
            wire.write_all(self.ctl_w, b"f")
            loaded: set = set()
            ended = None
            why = "bad"
            try:
                why, ended = self._frames(units, total, timeout_s, out, loaded, budget_end, request)
            finally:
                if ended is None:  # still running: killed now, its end awaited after the reply
                    self._kill()
                    self.unsettled = workdir
                else:
                    self._reap()
                    self._drain()
                    self.area.clear(workdir)
            wait_status, cpu_ms = ended if ended is not None else (0, 0)
            if why == "eof" and self.in_fresh and os.WIFSIGNALED(wait_status) and \
                    os.WTERMSIG(wait_status) == signal.SIGKILL and cpu_ms >= cpu_s * 1000:
                # The init of a PID namespace ignores SIGXCPU: its CPU limit ends it at the hard
                # limit, with SIGKILL (the worker had not killed it yet: it ended by itself).
                wait_status = signal.SIGXCPU
            if why in ("timeout", "eof", "budget") and len(out) < total:
                failure = self._ending(why, wait_status, timeout_s, budget_s)
                unit, unit_end = self._unit_of(units, len(out))
                # A unit that never finished loading fails as a whole, not once per call; so does
                # a fail-fast unit (probes of one definition) at its first timeout or crash.
                n_fail = 1 if str(unit) in loaded and not units[unit][2] else unit_end - len(out)
                out.extend([failure] * n_fail)
        return out

    @staticmethod
    def _unit_of(units: list, position: int) -> tuple[int, int]:
        end = 0
        for index, (_, calls, _) in enumerate(units):
            end += len(calls)
            if position < end:
                return index, end
        raise IndexError(position)

    @staticmethod
    def _ending(why: str, wait_status: int | None, timeout_s: float, budget_s: float) -> tuple:
        if why == "timeout":
            return ("timeout", None, f"no result within {timeout_s:g} s wall clock")
        if why == "budget":
            return ("timeout", None, f"response budget of {budget_s:g} s spent")
        if wait_status is not None and os.WIFSIGNALED(wait_status):
            sig = os.WTERMSIG(wait_status)
            if sig == signal.SIGXCPU:
                return ("timeout", None, "CPU time limit")
            name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
            return ("killed", None, f"killed by {name}")
        code = os.WEXITSTATUS(wait_status) if wait_status is not None and os.WIFEXITED(wait_status) else -1
        return ("killed", None, f"exited (code {code}) without a result")


def serve(worker: Worker, rfd: int, wfd: int, pid: int) -> None:
    """The request loop: the hello, then one reply per request until the scorer closes the pipe."""
    wire.send(wfd, wire.Hello(worker.jail.report, pid).to_wire())
    while True:
        try:
            request = wire.Request.from_wire(wire.receive(rfd))
        except EOFError:
            return
        wire.send(wfd, worker.run(request.units, request.timeout_s, request.budget_s))
        worker._settle()  # while the scorer reads the reply


# ------------------------------------------------------------------ the stages


def enter_stage(jail: Jail, argv: list[str]) -> None:
    """Stage one: enter the namespaces (steps.ENTER), then exec a lean interpreter to serve in them
    (namespaces, mounts and descriptors survive ``execv``), told which it got."""
    got = [name for name, step in steps.named(steps.ENTER) if step(jail)]
    n = len(wire.LIMIT_ARGS)
    os.execv(sys.executable, [sys.executable, "-I", "-S", argv[0], *argv[1:n + 2], jail.root_dir, "serve",
                              ",".join(got) or "-", str(jail.uid)])


# Representative model code. The first compile in a process initialises the parser and grows the
# allocator's arenas; done once here, every forked child inherits that state instead of paying
# for it (about 2 ms of CPU per child on the project's machines, more than the fork itself).
_WARM_UP = '''
def func_a(s, n=2):
    """Doc."""
    from math import gcd
    out = []
    for i, ch in enumerate(s):
        if ch.isalpha() and gcd(i + 3, 2) == 1:
            out.append(ch.upper())
        elif ch in 'aeiou':
            continue
        else:
            out.append(f"{ch}{i}")
    while n > 0:
        n -= 1
    return ''.join(sorted(out)) + s[::-1] * 2 + str(len(s) % 7)

def func_b(s1, s2):
    try:
        return s1[0] + s2[0] + func_b(s1[1:], s2[1:]) if s1 and s2 else s1 + s2
    except (IndexError, KeyError) as exc:
        raise ValueError(str(exc)) from None

class Helper:
    def __init__(self, s):
        self.s = {k: v for k, v in zip(s, range(len(s)))}

def main_solution(x):
    return func_b(func_a(x, 3), (x + 'abc').upper()) + str(len(Helper(x).s)) + ''.join(c for c in x if c != ' ')
'''


def _warm_up() -> None:
    import gc

    for _ in range(3):
        namespace: dict = {"__name__": "__main__", "__builtins__": builtins}
        exec(marshal.loads(marshal.dumps(compile(_WARM_UP, "<warm-up>", "exec"))), namespace)
        namespace["main_solution"]("Hello World 123")
    gc.collect()
    # Objects alive now are never collected in a child, so its collections don't write to (and
    # copy) the pages that hold them.
    gc.freeze()


def _host_pid() -> int:
    """This process's pid on the host (the scorer's namespace), read while /proc is there; -1 when
    it cannot be known (inside a PID namespace ``os.getpid()`` is 1, not a pid anyone may signal)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("NSpid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return os.getpid() if os.getpid() > 1 else -1


def serve_stage(jail: Jail) -> None:
    """The serving worker: load what children need, set up the jail (steps.IN_WORKER, the zygote
    last), then serve requests until the scorer closes the pipe."""
    imports.preload()
    _warm_up()
    # Requests and replies move on private descriptors; 0/1 go to /dev/null so nothing the worker
    # or a child prints can corrupt the protocol.
    rfd, wfd = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    for target in (0, 1, 2):  # inherited by every child
        os.dup2(devnull, target)
    jail.channel = (rfd, wfd)
    rlimits.measure(jail)  # before ctypes: RLIMIT_AS is relative to the worker's size
    pid = _host_pid()
    jail.report = {m.name: m.name in jail.entered for m in steps.MECHANISMS}
    jail.in_zygote, jail.in_child = steps.named(steps.IN_ZYGOTE), steps.IN_CHILD
    for name, step in steps.named(steps.IN_WORKER):
        try:
            result = step(jail)
        except ImportError:  # no ctypes in this Python: the mechanism is not in force
            result = False
        if result is not None:
            jail.report[name] = bool(result)
    worker = Worker(jail)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        serve(worker, rfd, wfd, pid)
        worker.close_zygote()
    finally:
        jail.area.remove()
    os._exit(0)


def main(argv: list[str]) -> None:
    """argv: SCRIPT AS_BYTES FSIZE NOFILE NPROC MAX_OUTPUT WORK_BYTES WORK_INODES NAMESPACES(0|1[:open])
    ROOT_DIR [serve FLAGS UID] (wire.worker_args, then the root directory; stage one adds the rest)."""
    limits, namespaces, lock, root_dir, rest = wire.read_args(argv[1:])
    if rest[:1] == ["serve"]:
        entered = frozenset(rest[1].split(",")) - {"-"}
        serve_stage(Jail(limits, root_dir, int(rest[2]), entered=entered, lock_imports=lock))
    elif namespaces:
        enter_stage(Jail(limits, root_dir, uid_drop.UID_BASE + os.getpid(), lock_imports=lock), argv)
    else:
        serve_stage(Jail(limits, root_dir, uid_drop.UID_BASE + os.getpid(), lock_imports=lock))


def start_child(start: list) -> None:
    """A child of the zygote, its stack unwound to the script's top: see child.py."""
    child.main(start)
