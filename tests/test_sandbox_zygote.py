"""Attacks on what a child inherits (issue 22, item 2): the import allowlist, the clean zygote (no
earlier request's bytes anywhere in a child's memory), no counter carried from one request to the
next, signals only to itself, and the seccomp allowlist on x86-64 and aarch64.

Each attack succeeded on the sandbox before the zygote (main at 4d92aa4): the child imported
ctypes, gc, marshal, os and signal, found an earlier response's result in the memory it inherited
from the worker, saw pid numbers move with what the previous program forked, and reached the
worker with rt_sigqueueinfo."""

from __future__ import annotations

import os
import random
import re
import struct
from pathlib import Path

import pytest

from opgen.score.jail import base, bpf, imports
from opgen.score.sandbox import Job, Sandbox, WeakSandboxWarning

BLOCKED = ("ctypes", "_ctypes", "gc", "marshal", "os", "posix", "signal", "_signal", "resource", "select",
           "platform", "importlib", "_imp", "zipimport", "_frozen_importlib", "_frozen_importlib_external",
           "subprocess", "_posixsubprocess", "posixpath")


@pytest.fixture(scope="module")
def box():
    with Sandbox(workers=1, timeout_s=5.0) as b:
        yield b


@pytest.fixture(scope="module")
def open_box():
    # No import allowlist (ctypes, os import): what the zygote and the namespaces hold on their own.
    with pytest.warns(WeakSandboxWarning), Sandbox(workers=1, timeout_s=5.0, imports="open",
                                                   allow_weak_sandbox=True) as b:
        yield b


@pytest.fixture(scope="module")
def weak_box():
    # No namespaces, no chroot: the allowlist, the zygote and seccomp still hold.
    with pytest.warns(WeakSandboxWarning), Sandbox(workers=1, timeout_s=5.0, namespaces=False,
                                                   allow_weak_sandbox=True) as b:
        yield b


def run1(box: Sandbox, code: str, arg: str = "") -> tuple[str, str | None]:
    (r,) = box.run([Job(code, "f", (arg,))])
    return r.status, r.value


# ------------------------------------------------------------------ the import allowlist

# Every route to a module object a program has without the import statement's file lookup.
_ROUTES = '''
def f(x):
    name = x
    got = []
    def attempt(route, fn):
        try:
            m = fn()
        except BaseException:
            return
        if getattr(m, "__name__", None) == name or type(m).__name__ == "module":
            got.append(route)
    attempt("import", lambda: __import__(name))
    attempt("builtins", lambda: __builtins__["__import__"](name) if isinstance(__builtins__, dict)
            else __builtins__.__import__(name))
    attempt("sys.modules", lambda: __import__("sys").modules[name])
    attempt("importlib", lambda: __import__("importlib").import_module(name))
    attempt("_imp", lambda: __import__("_imp").create_builtin(type("S", (), {"name": name})()))
    attempt("loader", lambda: __import__("math").__loader__.create_module(__import__("math").__spec__))
    attempt("frozen", lambda: __import__("_frozen_importlib").import_module(name))
    return ",".join(got) or "blocked"
'''


@pytest.mark.parametrize("module", BLOCKED)
def test_no_listed_module_imports_by_any_route(box, weak_box, module):
    for b in (box, weak_box):
        assert b.isolation["imports"], b.isolation
        assert run1(b, _ROUTES, module) == ("ok", "blocked"), (b.level, module)


def test_the_allowed_modules_import(box):
    for module in imports.ALLOWED_IMPORTS:
        status, value = run1(box, "def f(x):\n    return __import__(x).__name__\n", module)
        assert (status, value) == ("ok", module.partition(".")[0] if "." in module else module)
    assert run1(box, "from collections.abc import Mapping\nfrom math import gcd\nimport sys\n"
                     "def f(x):\n    sys.setrecursionlimit(3000)\n    return str(gcd(12, 18))\n") == ("ok", "6")


def test_annotations_from_typing_still_run(box, weak_box):
    # The real typing imports contextlib (and so os): the sandbox serves a stand-in, so an honest
    # answer that annotates grades as before and reaches nothing it could not reach without it.
    code = ("from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar, Union, cast\n"
            "import typing\n"
            "T = TypeVar('T')\n"
            "def f(x: str) -> Optional[str]:\n"
            "    parts: List[str] = [x, x[::-1]]\n"
            "    table: Dict[str, Tuple[int, ...]] = {x: (1,)}\n"
            "    pick: Callable[[List[str]], str] = lambda p: p[1]\n"
            "    hint: Union[int, str, None] = cast(Any, table)\n"
            "    return pick(parts) + str(typing.TYPE_CHECKING) + str(len(hint or ()))\n")
    for b in (box, weak_box):
        assert run1(b, code, "abc") == ("ok", "cbaFalse1")
    reach = ("import typing\n"
             "def f(x):\n"
             "    found = set()\n"
             "    for v in vars(typing).values():\n"
             "        for attr in ('__globals__', '__module__'):\n"
             "            g = getattr(v, attr, None)\n"
             "            if isinstance(g, dict):\n"
             "                found.update(k for k in g if k != '__builtins__')\n"
             "        for fn in vars(type(v)).values() if isinstance(v, type(typing.Any)) else ():\n"
             "            found.update(k for k in getattr(fn, '__globals__', {}) if k != '__builtins__')\n"
             "    return repr(sorted(found))\n")
    assert run1(box, reach) == ("ok", "[]")


# A walk from object over every subclass, and what their functions' globals and builtin methods'
# modules reach: the classic escape (``().__class__.__base__.__subclasses__()`` to ``os._wrap_close``'s
# globals, or to ctypes' classes, whose from_address reads any memory).
_WALK = '''
def f(x):
    seen, todo, reached = set(), [().__class__.__base__], set()
    while todo:
        cls = todo.pop()
        try:
            subs = type.__subclasses__(cls)
        except TypeError:
            continue
        for sub in subs:
            if id(sub) in seen:
                continue
            seen.add(id(sub))
            todo.append(sub)
            reached.add(str(getattr(sub, "__module__", "")))
            for value in list(vars(sub).values()):
                fn = getattr(value, "__func__", value)
                space = getattr(fn, "__globals__", None)
                if isinstance(space, dict):
                    for v in list(space.values()):
                        if type(v) is type(__builtins__) or type(v).__name__ == "module":
                            reached.add(getattr(v, "__name__", "?"))
                owner = getattr(fn, "__self__", None)
                if type(owner).__name__ == "module":
                    reached.add(getattr(owner, "__name__", "?"))
    return repr(sorted(reached))
'''


def test_no_subclass_walk_reaches_a_listed_module(box, weak_box):
    if not box.isolation["hiddenclasses"]:
        pytest.skip("this CPython keeps built-in types' subclass registries out of reach (3.12+)")
    for b in (box, weak_box):
        status, value = run1(b, _WALK)
        assert status == "ok", value
        reached = set(eval(value))  # our own test program's repr
        assert not reached & set(BLOCKED), sorted(reached & set(BLOCKED))
        assert "__main__" not in reached  # the worker's own classes (and their globals: os, marshal...)


def test_frames_reach_nothing_of_the_worker(box):
    # Up the stack from model code (tracebacks, sys._getframe): the harness and the module's top,
    # with their globals emptied.
    code = ('import sys\ndef f(x):\n    frame, names = sys._getframe(), set()\n    while frame is not None:\n'
            '        names |= {type(v).__name__ for v in list(frame.f_globals.values()) + '
            'list(frame.f_locals.values())}\n'
            '        names |= {getattr(v, "__name__", "") for v in list(frame.f_globals.values()) + '
            'list(frame.f_locals.values()) if type(v) is type(sys)}\n'
            '        frame = frame.f_back\n    return repr(sorted(names))\n')
    status, value = run1(box, code)
    assert status == "ok", value
    names = set(eval(value))  # our own test program's repr
    assert not names & set(BLOCKED), names & set(BLOCKED)
    assert not {n for n in names if "CFuncPtr" in n or n.startswith(("c_", "PyC", "CDLL", "Worker", "_Jail"))}, names


# ------------------------------------------------------------------ the clean zygote

# Request 1 returns a result built at run time (600 characters: an answer the size of a real one);
# request 2 defines no operator and searches the memory it inherited for it, through ctypes (each
# page written to a pipe: an unmapped one is EFAULT, not a crash). On the old worker it found
# request 1's result and returned it.
_RESULT = "def f(x):\n    return 'ZQ' + x[::-1] * 30 + 'QZ'\n"
_SEARCH = '''
import ctypes
def f(x):
    # A snapshot first (freed blocks are soon reused), into a buffer of its own.
    api = ctypes.pythonapi
    write, read, pipe = api.write, api.read, api.pipe
    fds = (ctypes.c_int * 2)()
    pipe(fds)
    span = 32 << 20
    snapshot = ctypes.create_string_buffer(2 * span)
    base = ctypes.addressof(snapshot)
    pattern = __import__("re").compile(rb"Z" + rb"Q([a-z]{20})[a-z]{580}Q" + rb"Z")
    found = set()
    for centre in (id(x) & ~4095, id(bytes(5000)) & ~4095):  # pymalloc's arenas, the C heap
        ctypes.memset(snapshot, 0, 2 * span)
        for i, addr in enumerate(range(centre - span, centre + span, 4096)):
            if write(fds[1], ctypes.c_void_p(addr), 4096) == 4096:
                read(fds[0], ctypes.c_void_p(base + i * 4096), 4096)
        found |= {m.group(1).decode() for m in pattern.finditer(snapshot.raw)}
    return ",".join(sorted(found)) or "nothing"
'''


def _marker() -> str:
    rng = random.Random(22)
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(20))


def test_a_later_child_cannot_find_an_earlier_result_in_its_memory(open_box):
    secret = _marker()
    assert run1(open_box, _RESULT, secret) == ("ok", "ZQ" + secret[::-1] * 30 + "QZ")
    status, value = run1(open_box, _SEARCH, "q" * 20)
    assert status == "ok", value
    assert secret[::-1] not in (value or ""), "the second child read the first one's result"
    assert secret not in (value or "")
    # The search does find what is in its own memory (the test can fail).
    planted = _SEARCH.replace("def f(x):\n", "def f(x):\n    planted = 'ZQ' + 'k' * 600 + 'QZ'\n", 1)
    assert run1(open_box, planted, "q" * 20) == ("ok", "k" * 20)


def test_the_memory_relay_fails_at_full(box):
    secret = _marker()
    assert run1(box, _RESULT, secret)[0] == "ok"
    status, value = run1(box, _SEARCH, "q" * 20)
    assert status == "exception" and value is None  # ctypes does not import


# ------------------------------------------------------------------ no counters across requests

_FORK_MANY = '''
import os
def f(x):
    for _ in range(int(x)):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    return str(os.getpid())
'''


def test_pid_numbers_carry_nothing_to_the_next_request(open_box):
    if not open_box.isolation["freshpidns"]:
        pytest.skip("no PID namespace here")
    first = run1(open_box, _FORK_MANY, "0")
    moved = run1(open_box, _FORK_MANY, "300")
    after = run1(open_box, _FORK_MANY, "0")
    assert first == moved == after == ("ok", "1")  # each child is the init of a namespace of its own


_INODES = '''
import os
def f(x):
    for i in range(int(x)):
        open(f"t{i}", "w").close()
        os.unlink(f"t{i}")
    open("probe", "w").close()
    ino = os.stat("probe").st_ino, os.stat(".").st_ino
    os.unlink("probe")
    return repr(ino)
'''


def test_inode_numbers_carry_nothing_to_the_next_request(open_box):
    if not open_box.isolation["worktmpfs"]:
        pytest.skip("no work tmpfs here")
    quiet = run1(open_box, _INODES, "0")
    run1(open_box, _INODES, "200")  # moves the tmpfs's inode counter by 200
    after = run1(open_box, _INODES, "0")
    assert quiet[0] == "ok" and after == quiet, (quiet, after)


# ------------------------------------------------------------------ signals only to itself

_SIGNALS = '''
import ctypes, os
def f(x):
    table = dict(eval(x))
    libc = ctypes.CDLL(None, use_errno=True)
    me, other = os.getpid(), os.getppid() or 2
    info = (ctypes.c_int * 32)()
    calls = {
        "kill": (table["kill"], other, 0), "kill_group": (table["kill"], -other, 0),
        "kill_all": (table["kill"], -1, 0), "tkill": (table["tkill"], other, 0),
        "tgkill": (table["tgkill"], other, other, 0),
        "rt_sigqueueinfo": (table["rt_sigqueueinfo"], other, 0, ctypes.addressof(info)),
        "rt_tgsigqueueinfo": (table["rt_tgsigqueueinfo"], other, other, 0, ctypes.addressof(info)),
        "pidfd_open": (table["pidfd_open"], me, 0), "pidfd_open_other": (table["pidfd_open"], other, 0),
        "pidfd_send_signal": (table["pidfd_send_signal"], 3, 0, 0, 0),
    }
    out = {}
    for name, (nr, *args) in calls.items():
        ctypes.set_errno(0)
        rc = libc.syscall(nr, *[ctypes.c_long(a) for a in args])
        out[name] = "denied" if rc == -1 and ctypes.get_errno() == 1 else f"rc={rc} errno={ctypes.get_errno()}"
    out["kill_self"] = "ok" if libc.syscall(table["kill"], ctypes.c_long(me), ctypes.c_long(0)) == 0 else "fail"
    return repr(sorted(out.items()))
'''


def _signal_results(b: Sandbox) -> dict:
    import platform

    table = bpf.SYSCALLS[platform.machine()]
    status, value = run1(b, _SIGNALS, repr(sorted(table.items())))
    assert status == "ok", value
    return dict(eval(value))  # our own test program's repr


def test_signals_reach_nothing_but_the_program_itself(open_box):
    got = _signal_results(open_box)
    assert got.pop("kill_self") == "ok"
    assert got == {k: "denied" for k in got}, got


def test_signals_are_denied_without_namespaces_too():
    with pytest.warns(WeakSandboxWarning), Sandbox(workers=1, timeout_s=5.0, namespaces=False, imports="open",
                                                   allow_weak_sandbox=True) as b:
        if not b.isolation["seccomp"]:
            pytest.skip("no seccomp here")
        got = _signal_results(b)
    assert got.pop("kill_self") == "ok"
    assert got == {k: "denied" for k in got}, got


_NOBODY = r'''
import sys, warnings
sys.path.insert(0, {root!r})
from opgen.score.sandbox import Job, Sandbox
from opgen.score.jail import bpf
import platform
warnings.simplefilter("ignore")
codes = {codes!r}
out = {{}}
with Sandbox(workers=1, timeout_s=5.0) as b:
    out["level"] = b.level
    out["imports"] = [b.run([Job(codes["routes"], "f", (m,))])[0].value for m in ("ctypes", "os", "gc", "signal")]
with Sandbox(workers=1, timeout_s=5.0, imports="open", allow_weak_sandbox=True) as b:
    table = repr(sorted(bpf.SYSCALLS[platform.machine()].items()))
    out["signals"] = b.run([Job(codes["signals"], "f", (table,))])[0].value
    b.run([Job(codes["result"], "f", ("abcdefghijklmnopqrst",))])
    out["search"] = b.run([Job(codes["search"], "f", ("q" * 20,))])[0].value
    out["pids"] = [b.run([Job(codes["fork"], "f", (n,))])[0].value for n in ("0", "200", "0")]
print(repr(out))
'''


def test_the_attacks_fail_for_an_unprivileged_scorer():
    from test_hostile import _as_nobody

    script = _NOBODY.format(root=str(Path(__file__).resolve().parents[1]),
                            codes={"routes": _ROUTES, "signals": _SIGNALS, "result": _RESULT, "search": _SEARCH,
                                   "fork": _FORK_MANY})
    proc = _as_nobody(script, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = eval(proc.stdout.strip().splitlines()[-1])  # our own script's repr
    if out["level"] != "full":
        pytest.skip(f"no user namespace here: {out['level']}")
    assert out["imports"] == ["blocked"] * 4
    signals = dict(eval(out["signals"]))
    assert signals.pop("kill_self") == "ok" and set(signals.values()) == {"denied"}, signals
    assert "tsrqponmlkjihgfedcba" not in out["search"]
    assert out["pids"] == ["1", "1", "1"]


# ------------------------------------------------------------------ the seccomp allowlist

def _unistd(path: str) -> dict[str, int]:
    out = {}
    for line in Path(path).read_text().splitlines():
        m = re.match(r"#define __NR(?:3264)?_(\w+)\s+(\d+)\s*$", line)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


@pytest.mark.parametrize("machine,header", [("x86_64", "/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
                                            ("aarch64", "/usr/include/asm-generic/unistd.h")])
def test_the_syscall_tables_are_the_kernels(machine, header):
    if not os.path.exists(header):
        pytest.skip(f"no {header} (linux-libc-dev) here")
    kernel = _unistd(header)
    kernel.setdefault("newfstatat", kernel.get("fstatat", -1))  # the generic table's name for it
    for name, nr in bpf.SYSCALLS[machine].items():
        assert kernel.get(name) == nr, (machine, name, nr, kernel.get(name))
    # every call the filters name is in the table where the architecture has it
    named = set(bpf.ALLOWED_SYSCALLS) | set(bpf.WORKER_ONLY) | set(bpf.CHILD_DENIED) | set(bpf.CHILD_SIGNALS)
    assert {n for n in named if n in kernel} <= set(bpf.SYSCALLS[machine])


def _run_bpf(program: bytes, nr: int, arch: int, args: tuple[int, ...] = ()) -> int:
    """A classic-BPF interpreter for the few instructions the filters use, over seccomp_data."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *(list(args) + [0] * 6)[:6])
    ins = [struct.unpack("=HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]
    pc, acc = 0, 0
    for _ in range(10_000):
        code, jt, jf, k = ins[pc]
        if code == 0x20:  # ld w abs
            acc = struct.unpack_from("<I", data, k)[0]
            pc += 1
        elif code in (0x15, 0x35, 0x45):  # jeq, jge, jset
            hit = acc == k if code == 0x15 else acc >= k if code == 0x35 else bool(acc & k)
            pc += 1 + (jt if hit else jf)
        elif code == 0x05:  # ja
            pc += 1 + k
        elif code == 0x06:
            return k
        else:
            raise AssertionError(f"unexpected instruction {code:#x}")
    raise AssertionError("no return")


ALLOW, KILL, EPERM, ENOSYS = 0x7FFF0000, 0x80000000, 0x00050001, 0x00050026


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_shared_filter_is_an_allowlist(machine):
    table, arch = bpf.SYSCALLS[machine], bpf.AUDIT_ARCH[machine]
    prog = bpf.seccomp_program(machine, allow_mount=True)
    strict = bpf.seccomp_program(machine)
    assert prog is not None and strict is not None
    other = bpf.AUDIT_ARCH["aarch64" if machine == "x86_64" else "x86_64"]
    assert _run_bpf(prog, table["read"], other) == KILL  # another ABI's numbers: killed
    assert _run_bpf(prog, table["read"], 0x40000003) == KILL  # i386
    if machine == "x86_64":
        assert _run_bpf(prog, 0x40000000 | 0, arch) == KILL  # the x32 ABI
    for name in bpf.ALLOWED_SYSCALLS:
        if name in table:
            assert _run_bpf(prog, table[name], arch) == ALLOW, name
    for name in ("execve", "socket", "ptrace", "chroot", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open",
                 "pidfd_send_signal"):
        assert _run_bpf(prog, table[name], arch) == EPERM, name
    for nr in range(0, 600):  # anything not on the list, including calls added to kernels later
        if nr not in {table[n] for n in (*bpf.ALLOWED_SYSCALLS, *bpf.WORKER_ONLY, "clone", "clone3", "unshare",
                                         "setns") if n in table}:
            assert _run_bpf(prog, nr, arch) == EPERM, nr
    for name in bpf.WORKER_ONLY:
        assert _run_bpf(prog, table[name], arch) == ALLOW and _run_bpf(strict, table[name], arch) == EPERM
    assert _run_bpf(prog, table["clone3"], arch) == ENOSYS
    assert _run_bpf(prog, table["clone"], arch, (17,)) == ALLOW  # fork() (SIGCHLD)
    assert _run_bpf(prog, table["clone"], arch, (0x3D0F00,)) == ALLOW  # a thread
    for flag in (0x00020000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000, 0x02000000):
        assert _run_bpf(prog, table["clone"], arch, (flag | 17,)) == EPERM, hex(flag)
        if flag != base.CLONE_NEWPID:
            assert _run_bpf(prog, table["unshare"], arch, (flag,)) == EPERM, hex(flag)
            assert _run_bpf(prog, table["setns"], arch, (3, flag)) == EPERM, hex(flag)
    assert _run_bpf(prog, table["unshare"], arch, (base.CLONE_NEWPID,)) == ALLOW  # the zygote's fresh namespace
    assert _run_bpf(prog, table["unshare"], arch, (base.CLONE_NEWPID | base.CLONE_NEWUSER,)) == EPERM
    assert _run_bpf(prog, table["setns"], arch, (3, base.CLONE_NEWPID)) == ALLOW


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_child_filter_allows_signals_to_itself_only(machine):
    table, arch = bpf.SYSCALLS[machine], bpf.AUDIT_ARCH[machine]
    prog = bpf.child_seccomp_program(machine, 1)
    assert prog is not None
    for name in bpf.CHILD_SIGNALS:
        assert _run_bpf(prog, table[name], arch, (1, 9)) == ALLOW, name
        assert _run_bpf(prog, table[name], arch, (0, 9)) == ALLOW, name  # its own process group
        for target in (2, 4242, (1 << 32) - 1, (1 << 32) - 2):  # others, kill(-1), kill(-2)
            assert _run_bpf(prog, table[name], arch, (target, 9)) == EPERM, (name, target)
    for name in bpf.CHILD_DENIED:
        assert _run_bpf(prog, table[name], arch, (1, 0)) == EPERM, name
    assert _run_bpf(prog, table["read"], arch) == ALLOW  # the shared filter decides the rest
    assert _run_bpf(prog, table["read"], 0x40000003) == KILL
    assert bpf.seccomp_program("riscv64") is None and bpf.child_seccomp_program("riscv64", 1) is None
