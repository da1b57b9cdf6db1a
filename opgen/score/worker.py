"""A sandbox worker: a warm process that forks one isolated child per request and runs model code there.

This file runs as a standalone script (``python -I -S worker.py ARGS``) and imports only the standard
library, so a worker starts in milliseconds and its children inherit nothing of the scorer: no
environment, no open files, no expected answers (the worker never receives them).

Isolation, strongest first, each step taken only when the system allows it (what was obtained is
reported back in the hello message, so the scorer can state the level in its outputs):

- a PID namespace whose init is this worker, so that after every request ``kill(-1)`` removes
  whatever the program forked, double-forked or daemonised;
- a network namespace (no interfaces but a down loopback) and a mount namespace with a private
  tmpfs that the worker ``chroot``s into: model code sees no file of the machine at all;
- per child: its own session and process group, when we are root a uid/gid of this worker's own
  (``UID_BASE`` + the host pid of the worker's first stage: unique among live workers, owner of no
  file), so that ``RLIMIT_NPROC`` binds, counts only this worker's children — a fork bomb in one
  worker cannot starve another scorer's children — and root-owned files are out of reach; rlimits on CPU, address
  space, file size, open files and processes; a private working directory; stdin/stdout/stderr on
  /dev/null; every inherited descriptor closed except the result pipe.

Protocol (worker <-> scorer, over stdin/stdout, trusted): 4-byte big-endian length + ``marshal``
payload. A request is ``(units, timeout_s)`` with ``units = [(code, [(entry, args), ...], fail_fast), ...]``
(``code``: the marshalled code the scorer compiled, which the worker unmarshals before forking, or
source text for the child to compile);
the reply is a list of ``(status, value, detail)``, one per call, in order.
Child -> worker (hostile): frames of 1 status byte + 4-byte sender pid + 4-byte length + UTF-8
payload, parsed defensively; frames from any pid but the child's are dropped, so a child can only
ever lie about its own result.
"""

from __future__ import annotations

import builtins
import marshal
import os
import re
import resource
import select
import signal
import struct
import sys
import time

# Modules model code commonly imports: loaded before the chroot, after which nothing can be read
# from disk (an import of anything else fails inside the sandbox, as it should).
# Each module makes every fork a little slower (more pages to map), so the list stays short.
PRELOAD = ("bisect", "collections", "functools", "heapq", "itertools", "math", "operator", "re", "string",
           "unicodedata")

# Model code shares this interpreter and may replace builtins (``builtins.len = ...``); module-level
# bindings are looked up before builtins, so the harness keeps the real ones.
len, isinstance, type, enumerate, range, max, str, bytes, memoryview, compile, exec = (
    len, isinstance, type, enumerate, range, max, str, bytes, memoryview, compile, exec)
_loads = marshal.loads  # likewise: a program may replace the module's attribute

STATUSES = ("loaded", "ok", "syntax", "missing_name", "arity", "exception", "timeout", "memory",
            "output_too_large", "killed", "not_a_string")
_CODE = {name: i for i, name in enumerate(STATUSES)}

# Children of a worker run as UID_BASE + the worker's host pid (pid_max is at most 2**22), a range
# no account uses: a shared uid such as nobody's would pool RLIMIT_NPROC across every sandbox.
UID_BASE = 2_000_000_000
CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x20000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE = 2, 4, 0x4000, 1 << 18

_ARITY = re.compile(r"positional argument|required (keyword-only )?argument|unexpected keyword argument|"
                    r"takes no arguments")


# ------------------------------------------------------------------ the child side (hostile code runs here)


def _send(fd: int, status: str, payload: str) -> None:
    data = payload.encode("utf-8", "surrogatepass")
    # The sender's pid: a process the program forked inherits this pipe, and its frames are ignored.
    frame = struct.pack(">BII", _CODE[status], os.getpid(), len(data)) + data
    view = memoryview(frame)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _classify(exc: BaseException) -> tuple[str, str]:
    name = type(exc).__name__
    try:
        text = f"{name}: {exc}"[:500]
    except BaseException:  # a hostile __str__
        text = name
    if isinstance(exc, MemoryError):
        return "memory", text
    if type(exc) is NameError:
        return "missing_name", text
    if isinstance(exc, TypeError) and _ARITY.search(text):
        return "arity", text
    return "exception", text


def _run_calls(fd: int, units: list, start: int, max_output: int) -> None:  # noqa: C901
    """Run calls from flat position ``start`` on, sending one frame per call (and one per loaded unit)."""
    position = 0
    for unit_index, (code, calls, _fail_fast) in enumerate(units):
        if position + len(calls) <= start:
            position += len(calls)
            continue
        namespace: dict = {"__name__": "__main__", "__builtins__": builtins}
        try:
            # The scorer compiles (where the compiler's memory is already paged in) and the worker
            # unmarshals before forking (see Worker.run): one code object, or its top-level blocks
            # to run in order. Source text only when compiling there hit a limit; bytes only when
            # the worker could not unmarshal them (this child then fails as it would have).
            kind = type(code)
            compiled = (compile(code, "<answer>", "exec") if kind is str
                        else _loads(code) if kind is bytes else code)
        except BaseException as exc:  # SyntaxError, ValueError (null bytes), RecursionError, MemoryError
            status, detail = _classify(exc)
            if isinstance(exc, (SyntaxError, ValueError)):
                status = "syntax"
            for _ in range(max(start - position, 0), len(calls)):
                _send(fd, status, detail)
            position += len(calls)
            continue
        try:
            if type(compiled) is tuple:
                for block in compiled:
                    exec(block, namespace)
            else:
                exec(compiled, namespace)
        except BaseException as exc:
            status, detail = _classify(exc)
            for _ in range(max(start - position, 0), len(calls)):
                _send(fd, status, "while defining: " + detail)
            position += len(calls)
            continue
        _send(fd, "loaded", str(unit_index))
        for i, (entry, args) in enumerate(calls):
            if position + i < start:
                continue
            fn = namespace.get(entry)
            if fn is None:
                _send(fd, "missing_name", f"{entry} is not defined")
                continue
            try:
                value = fn(*args)
            except BaseException as exc:
                _send(fd, *_classify(exc))
                continue
            if not isinstance(value, str):
                _send(fd, "not_a_string", f"returned {type(value).__name__}")
                continue
            # str methods through the base class: a subclass may lie in __len__ or encode().
            if str.__len__(value) > max_output:
                _send(fd, "output_too_large", f"{str.__len__(value)} characters > {max_output}")
                continue
            _send(fd, "ok", str.__str__(value))
        position += len(calls)


def _child(wfd: int, workdir: str, units: list, start: int, cpu_s: int, rlimits: tuple, max_output: int,
           uid: int | None) -> None:
    # Every step here pays page faults for what it touches (the dominant cost of a child): what
    # the worker could do once for all children (descriptors 0-2 on /dev/null, the file-size and
    # core limits, SIGXFSZ ignored) it did, and inherited it is.
    try:
        os.setsid()
        os.closerange(3, wfd)
        os.closerange(wfd + 1, 1 << 16)
        os.chdir(workdir)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
        for res, value in rlimits:  # address space, open files, processes
            resource.setrlimit(res, value)
        if uid is not None:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        sys.setrecursionlimit(20_000)  # the library's recursive operators recurse once per character
        _run_calls(wfd, units, start, max_output)
    finally:
        os._exit(0)


# ------------------------------------------------------------------ the worker side (trusted)


class Worker:
    def __init__(self, limits: dict, root_dir: str, isolation: dict):
        self.limits = limits
        self.isolation = isolation
        self.uid = isolation["uid"] if isolation["uid_drop"] else None
        self.workroot = "/work" if isolation["chroot"] else os.path.join(root_dir, "work")
        os.makedirs(self.workroot, mode=0o711, exist_ok=True)
        self.serial = 0
        # Limits that cannot hinder the worker are set on it once and inherited by every child.
        # RLIMIT_NPROC stays per child: it counts every process of the user, and without root the
        # worker's own forks would fail on a busy account.
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits["fsize_bytes"],) * 2)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-large write raises OSError instead of killing
        self.rlimits = ((resource.RLIMIT_AS, (limits["as_bytes"],) * 2),
                        (resource.RLIMIT_NOFILE, (limits["nofile"],) * 2),
                        (resource.RLIMIT_NPROC, (limits["nproc"],) * 2))

    def _frames(self, rfd: int, pid: int, units: list, n_expected: int, timeout_s: float, out: list,
                loaded: set) -> str:
        """Read frames until ``n_expected`` results or the child ends; return why reading stopped.

        A unit's loading has ``timeout_s``, and so has each call from the previous result or load
        report on. A load report counts once, for the unit whose call is due: repeated reports
        (the program holds the pipe) must not keep the wall clock from running out.
        """
        buf = b""
        limit = self.limits["max_output"] * 4 + 64
        deadline = time.monotonic() + timeout_s
        while len(out) < n_expected:
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout"
            ready, _, _ = select.select([rfd], [], [], left)
            if not ready:
                return "timeout"
            chunk = os.read(rfd, 1 << 16)
            if not chunk:
                return "eof"
            buf += chunk
            while len(buf) >= 9:
                code, sender, length = struct.unpack(">BII", buf[:9])
                if code >= len(STATUSES) or length > limit:
                    out.append(("output_too_large" if length > limit else "killed", None,
                                "malformed result frame"))
                    return "bad"
                if len(buf) < 9 + length:
                    break
                payload, buf = buf[9:9 + length], buf[9 + length:]
                if sender != pid:
                    continue
                status = STATUSES[code]
                if status == "loaded":
                    unit = str(self._unit_of(units, len(out))[0])
                    if unit not in loaded and payload == unit.encode():
                        loaded.add(unit)
                        deadline = time.monotonic() + timeout_s
                    continue
                try:
                    text = payload.decode("utf-8", "surrogatepass")
                except UnicodeDecodeError:
                    out.append(("killed", None, "malformed result payload"))
                    return "bad"
                out.append((status, text, "") if status == "ok" else (status, None, text))
                deadline = time.monotonic() + timeout_s
        return "done"

    def _reap(self, pid: int) -> int | None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        status = None
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        if os.getpid() == 1:  # init of our own PID namespace: nothing the program spawned survives
            try:
                os.kill(-1, signal.SIGKILL)
            except OSError:
                pass
        give_up = time.monotonic() + 2.0
        while True:
            try:
                reaped, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if reaped == 0:
                if os.getpid() != 1 or time.monotonic() > give_up:
                    break
                time.sleep(0.0005)  # killed processes take a moment to become reapable
        return status

    def run(self, units: list, timeout_s: float) -> list:
        total = sum(len(calls) for _, calls, _ in units)
        # Unmarshalled here, once, not in each child: a child creating the code objects writes to
        # ~65 copy-on-write pages of the heap (~0.25 ms); here they land on pages the worker
        # writes to anyway, and a child only reads them (and touches their reference counts).
        units = [(_unmarshalled(code), calls, fail_fast) for code, calls, fail_fast in units]
        out: list = []
        while len(out) < total:
            start = len(out)
            self.serial += 1
            workdir = os.path.join(self.workroot, str(self.serial))
            os.mkdir(workdir, 0o700)
            if self.uid is not None:
                os.chown(workdir, self.uid, self.uid)
            cpu_s = int(timeout_s * (total - start + len(units))) + 1
            rfd, wfd = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(rfd)
                _child(wfd, workdir, units, start, cpu_s, self.rlimits, self.limits["max_output"], self.uid)
            os.close(wfd)
            loaded: set = set()
            try:
                why = self._frames(rfd, pid, units, total, timeout_s, out, loaded)
            finally:
                os.close(rfd)
                wait_status = self._reap(pid)
                try:
                    os.rmdir(workdir)
                except OSError:
                    _rmtree(workdir)
            if why in ("timeout", "eof") and len(out) < total:
                failure = self._ending(why, wait_status, timeout_s)
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
    def _ending(why: str, wait_status: int | None, timeout_s: float) -> tuple:
        if why == "timeout":
            return ("timeout", None, f"no result within {timeout_s:g} s wall clock")
        if wait_status is not None and os.WIFSIGNALED(wait_status):
            sig = os.WTERMSIG(wait_status)
            if sig == signal.SIGXCPU:
                return ("timeout", None, "CPU time limit")
            name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
            return ("killed", None, f"killed by {name}")
        code = os.WEXITSTATUS(wait_status) if wait_status is not None and os.WIFEXITED(wait_status) else -1
        return ("killed", None, f"exited (code {code}) without a result")


def _unmarshalled(code: object) -> object:
    # The scorer's own marshal output (trusted, like the rest of the request); left as it is when
    # it will not load, so that the child reports the failure as it always did.
    if type(code) is not bytes:
        return code
    try:
        return _loads(code)
    except Exception:
        return code


def _read_exact(fd: int, n: int) -> bytes | None:
    parts = []
    while n:
        chunk = os.read(fd, n)
        if not chunk:
            return None
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def _send_msg(fd: int, obj: object) -> None:
    data = marshal.dumps(obj)
    view = memoryview(struct.pack(">I", len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _serve(worker: Worker, rfd: int, wfd: int) -> None:
    _send_msg(wfd, ("hello", worker.isolation))
    while True:
        head = _read_exact(rfd, 4)
        if head is None:
            return
        body = _read_exact(rfd, struct.unpack(">I", head)[0])
        if body is None:
            return
        units, timeout_s = marshal.loads(body)
        _send_msg(wfd, worker.run(units, timeout_s))


def _rmtree(path: str) -> None:
    for parent, dirs, files in os.walk(path, topdown=False):
        for name in files:
            try:
                os.unlink(os.path.join(parent, name))
            except OSError:
                pass
        for name in dirs:
            try:
                os.rmdir(os.path.join(parent, name))
            except OSError:
                pass
    try:
        os.rmdir(path)
    except OSError:
        pass


def _setup_namespaces(root_dir: str, uid: int) -> None:
    """Stage one: enter namespaces (needs ctypes), then exec a lean interpreter to serve in them.

    ctypes and its libraries would make every later fork slower, and they are needed only here, so
    the serving stage is a fresh image: namespaces, mounts and descriptors survive ``execv``.
    """
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    def unshare(flags: int) -> bool:
        return libc.unshare(ctypes.c_int(flags)) == 0

    def mount(source: bytes | None, target: bytes, fstype: bytes | None, flags: int, data: bytes | None) -> bool:
        return libc.mount(source, target, fstype, ctypes.c_ulong(flags), data) == 0

    got = {"pidns": False, "netns": False, "mountns": False}
    if unshare(CLONE_NEWPID):
        pid = os.fork()
        if pid:  # stays outside only to wait, then remove the root directory (empty on this side)
            os.close(0)
            os.close(1)
            _, status = os.waitpid(pid, 0)
            _rmtree(root_dir)
            os._exit(0)
        got["pidns"] = os.getpid() == 1
    got["netns"] = unshare(CLONE_NEWNET)
    if unshare(CLONE_NEWNS) and mount(None, b"/", None, MS_REC | MS_PRIVATE, None):
        got["mountns"] = mount(b"tmpfs", root_dir.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"size=256m,mode=0755")
    flags = ",".join(k for k, v in got.items() if v) or "-"
    os.execv(sys.executable,
             [sys.executable, "-I", "-S", __file__, *sys.argv[1:7], root_dir, "serve", flags, str(uid)])


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


def _serve_stage(limits: dict, root_dir: str, flags: str, uid: int) -> None:
    for name in PRELOAD:
        __import__(name)
    _warm_up()
    # Requests and replies move on private descriptors; 0/1 go to /dev/null so nothing the worker
    # or a child prints can corrupt the protocol.
    rfd, wfd = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    for target in (0, 1, 2):  # inherited by every child
        os.dup2(devnull, target)
    # RLIMIT_AS is set relative to the worker's own size, known only before /proc disappears.
    with open("/proc/self/statm") as fh:
        vm_bytes = int(fh.read().split()[0]) * resource.getpagesize()
    limits["as_bytes"] += vm_bytes + (64 << 20)
    got = set(flags.split(","))
    root = os.geteuid() == 0
    isolation = {"uid_drop": root, "uid": uid if root else os.geteuid(), "pidns": "pidns" in got and os.getpid() == 1,
                 "netns": "netns" in got, "mountns": "mountns" in got, "chroot": False}
    if os.geteuid() == 0 and flags != "off":
        try:
            os.chroot(root_dir)
            os.chdir("/")
            isolation["chroot"] = True
        except OSError:
            pass
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        _serve(Worker(limits, root_dir, isolation), rfd, wfd)
    finally:
        if not isolation["mountns"]:
            _rmtree("/work" if isolation["chroot"] else os.path.join(root_dir, "work"))
    os._exit(0)


def main() -> None:
    """argv: AS_BYTES FSIZE NOFILE NPROC MAX_OUTPUT NAMESPACES(0|1) ROOT_DIR [serve FLAGS UID]."""
    limits = {"as_bytes": int(sys.argv[1]), "fsize_bytes": int(sys.argv[2]), "nofile": int(sys.argv[3]),
              "nproc": int(sys.argv[4]), "max_output": int(sys.argv[5])}
    want_ns, root_dir = sys.argv[6] == "1", sys.argv[7]
    if len(sys.argv) > 10 and sys.argv[8] == "serve":
        _serve_stage(limits, root_dir, sys.argv[9], int(sys.argv[10]))
    elif want_ns:
        _setup_namespaces(root_dir, UID_BASE + os.getpid())
    else:
        _serve_stage(limits, root_dir, "off", UID_BASE + os.getpid())


if __name__ == "__main__":
    main()
