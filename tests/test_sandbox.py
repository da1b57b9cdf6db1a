"""The Sandbox API of docs/contracts.md: statuses, order, isolation, threads, batching of one response."""

from __future__ import annotations

import threading
import warnings

import pytest

from opgen.score.sandbox import STATUSES, Job, Sandbox, SandboxError, Unit, WeakSandboxWarning, isolation_level


@pytest.fixture(scope="module")
def box():
    with Sandbox(workers=2, timeout_s=1.0, max_output=1000) as b:
        yield b


@pytest.fixture(scope="module")
def open_box():
    # Without the import allowlist (``os`` imports): the layers below it must hold on their own.
    with pytest.warns(WeakSandboxWarning), Sandbox(workers=1, timeout_s=1.0, max_output=1000, imports="open",
                                                   allow_weak_sandbox=True) as b:
        yield b


def job(body: str, *args: object, entry: str = "main_solution") -> Job:
    return Job(code=f"def {entry}(x):\n    {body}\n", entry=entry, args=args or ("abc",))


@pytest.mark.parametrize("code,status", [
    ("return x[::-1]", "ok"),
    ("return x +", "syntax"),
    ("return func_3(x)", "missing_name"),
    ("return int(x)", "exception"),
    ("return 3", "not_a_string"),
    ("return x * 10000", "output_too_large"),
    ("return 'a' * 10 ** 11", "memory"),
    ("while True: pass", "timeout"),
    ("import os; os._exit(3)", "exception"),  # os is not on the import allowlist
])
def test_status_classes(box, code, status):
    (r,) = box.run([job(code)])
    assert r.status == status, r
    assert r.status in STATUSES
    assert (r.value == "cba") if status == "ok" else r.value is None


def test_a_child_that_exits_is_killed(open_box):
    (r,) = open_box.run([job("import os; os._exit(3)")])
    assert r.status == "killed" and r.detail == "exited (code 3) without a result", r


def test_arity_class_and_missing_entry(box):
    r1, r2, r3 = box.run([Job("def func_24(s):\n    return s\n", "func_24", ("ab", 2)),
                          Job("def f(s, n):\n    return s\n", "f", ("ab",)),
                          Job("x = 1\n", "main_solution", ("ab",))])
    assert (r1.status, r2.status, r3.status) == ("arity", "arity", "missing_name")


def test_results_keep_job_order(box):
    jobs = [job(f"return x + {i!r}") for i in map(str, range(40))]
    assert [r.value for r in box.run(jobs)] == [f"abc{i}" for i in range(40)]


def test_no_state_carries_between_jobs(box):
    a, b = box.run([Job("import builtins\nbuiltins.leak = 'secret'\ndef f(x):\n    return x\n", "f", ("a",)),
                    Job("def f(x):\n    return leak\n", "f", ("a",))])
    assert a.status == "ok" and b.status == "missing_name"


def test_unit_batches_calls_and_survives_a_timeout(box):
    code = "def f(x):\n    if x == 'hang':\n        while True: pass\n    return x.upper()\n"
    rs = box.run_units([Unit(code, (("f", ("a",)), ("f", ("hang",)), ("f", ("b",)))),
                        Unit("def g(x):\n    return x * 2\n", (("g", ("z",)),))])
    assert [(r.status, r.value) for r in rs] == [("ok", "A"), ("timeout", None), ("ok", "B"), ("ok", "zz")]


def test_unit_that_never_loads_fails_as_a_whole_once(box):
    rs = box.run_units([Unit("while True: pass\n", (("f", ("a",)), ("f", ("b",)), ("f", ("c",))))])
    assert [r.status for r in rs] == ["timeout"] * 3


def test_unit_with_syntax_error_fails_every_call(box):
    rs = box.run_units([Unit("def f(:\n", (("f", ("a",)), ("f", ("b",))))])
    assert [r.status for r in rs] == ["syntax", "syntax"]


def test_child_sees_no_inherited_descriptors_environment_or_files(open_box):
    box = open_box
    code = ("import os\ndef is_open(fd):\n    try:\n        os.fstat(fd)\n        return True\n"
            "    except OSError:\n        return False\n"
            "def f(x):\n    fds = [fd for fd in range(1024) if is_open(fd)]\n"
            "    return repr((os.getuid(), sorted(os.environ), os.listdir('/'), os.getcwd() != '/', fds))\n")
    (r,) = box.run([Job(code, "f", ("",))])
    assert r.ok, r
    uid, env, root, private_cwd, fds = eval(r.value)  # our own test program's repr
    if box.isolation["uid_drop"]:
        assert uid in box.uids and uid >= 2_000_000_000
    assert env == ["LANG", "PATH"]
    if box.isolation["chroot"]:
        assert root == ["work"]
    assert private_cwd
    # stdio on /dev/null, the request pipe (its own request, read) and the result pipe, nothing else
    assert fds[:3] == [0, 1, 2] and len(fds) == 5


def test_usable_from_many_threads(box):
    out: dict[int, str | None] = {}

    def worker(i: int) -> None:
        out[i] = box.run([job(f"return x + '{i}'")])[0].value

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == {i: f"abc{i}" for i in range(16)}


FULL = ("pidns", "netns", "ipcns", "utsns", "mountns", "chroot", "worktmpfs", "seccomp", "zygote", "freshpidns",
        "imports")


def test_isolation_level_names():
    assert isolation_level({k: True for k in ("uid_drop", *FULL)}) == "full"
    # An unprivileged scorer: a user namespace (children keep its uid, every capability dropped).
    assert isolation_level({k: True for k in ("userns", *FULL)}) == "full"
    # The mechanisms of the old "full" are no longer enough.
    assert isolation_level({k: True for k in ("uid_drop", "pidns", "netns", "mountns", "chroot")}) == \
        "partial(uid_drop+pidns+netns+mountns+chroot)"
    for k in FULL:
        assert isolation_level({j: True for j in ("uid_drop", *FULL) if j != k}).startswith("partial("), k
    assert isolation_level({k: True for k in FULL}).startswith("partial(")  # neither uid drop nor userns
    assert isolation_level({"uid_drop": True}) == "partial(uid_drop)"
    assert isolation_level({}) == "rlimits"
    assert isolation_level({"nondumpable": True}) == "rlimits"


def test_the_level_says_which_mechanisms_are_in_force(box):
    from opgen.score.sandbox import MECHANISMS

    assert box.mechanisms == tuple(k for k in MECHANISMS if box.isolation.get(k))
    assert box.level == isolation_level(box.isolation)
    if box.level == "full":
        assert set(FULL) <= set(box.mechanisms) and box.risks == ()


def test_weak_isolation_is_refused_unless_asked_for(monkeypatch):
    from opgen.score.sandbox import WeakSandboxWarning

    monkeypatch.delenv("OPGEN_ALLOW_WEAK_SANDBOX", raising=False)
    with pytest.raises(SandboxError) as info:
        Sandbox(workers=1, namespaces=False)
    text = str(info.value)
    assert "below 'full'" in text and "--allow-weak-sandbox" in text and "OPGEN_ALLOW_WEAK_SANDBOX=1" in text
    assert "without netns: model code has the machine's network" in text
    assert "opgen's own operators" in text  # no chroot: the library is importable
    # Asked for: by the argument, or by the environment (verl's reward workers); it warns.
    with pytest.warns(WeakSandboxWarning, match="unprotected"):
        with Sandbox(workers=1, namespaces=False, allow_weak_sandbox=True) as b:
            assert b.level != "full" and "netns" in b.risks
            assert b.run([job("return x")])[0].value == "abc"
    monkeypatch.setenv("OPGEN_ALLOW_WEAK_SANDBOX", "1")
    with pytest.warns(WeakSandboxWarning):
        Sandbox(workers=1, namespaces=False).close()
    with pytest.raises(SandboxError):  # the argument wins over the environment
        Sandbox(workers=1, namespaces=False, allow_weak_sandbox=False)


def test_workers_are_handed_out_first_come_first_served():
    """With 7 threads on 2 workers, 2 threads made ~3,750 calls and 5 made one (a plain queue lets
    the thread that returns a worker take it straight back)."""
    import time

    counts = [0] * 7
    stop = threading.Event()
    with Sandbox(workers=2, timeout_s=2.0) as b:
        def loop(i: int) -> None:
            while not stop.is_set():
                b.run([job("return x")])
                counts[i] += 1

        threads = [threading.Thread(target=loop, args=(i,)) for i in range(7)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while sum(counts) < 700 and time.monotonic() < deadline:
            time.sleep(0.05)
        stop.set()
        for t in threads:
            t.join()
    # Roughly equal shares (each waits its turn behind the others); generous for a loaded machine.
    assert min(counts) >= max(counts) / 3, counts


def test_closed_sandbox_refuses_and_bad_workers():
    b = Sandbox(workers=1)
    b.close()
    with pytest.raises(SandboxError):
        b.run([job("return x")])
    with pytest.raises(ValueError):
        Sandbox(workers=0)


def test_a_lost_worker_is_replaced_and_its_request_retried():
    import os
    import signal

    with Sandbox(workers=1, timeout_s=1.0) as b:
        # The hello names the serving worker's pid on the host (inside its namespaces).
        pid = b._all[0].pid
        assert pid > 1 and pid != os.getpid()
        os.kill(pid, signal.SIGKILL)
        ran = b.run_request([("def f(x):\n    return x\n", [("f", ("abc",))], False)])
        assert (ran.results[0].value, ran.retries) == ("abc", 1)  # a dead worker is not the request's fault
        assert b.run([job("return x")])[0].value == "abc"


def test_fail_fast_unit_stops_at_the_first_timeout(box):
    import time

    code = "def f(x):\n    while True: pass\n"
    t0 = time.monotonic()
    rs = box.run_units([Unit(code, tuple(("f", (str(i),)) for i in range(20)), fail_fast=True),
                        Unit("def g(x):\n    return x\n", (("g", ("ok",)),))])
    assert [r.status for r in rs] == ["timeout"] * 20 + ["ok"]
    assert time.monotonic() - t0 < 3 * box.timeout_s


def test_code_that_does_not_compile_is_answered_as_the_grading_processes_answer_it(box, monkeypatch):
    # Sandbox.run_units compiles nothing of the text in this process (the child does); a syntax
    # error gets the text compile_units (the grading processes' compilation) gives without a child.
    import builtins

    from opgen.score.sandbox import compile_units

    units = [Unit("def f(x) return x\n", (("f", ("a",)), ("f", ("b",)))),
             Unit("def g(x):\n    return x + '!'\n", (("g", ("a",)),)),
             Unit("a = '\0'\n", (("h", ()),))]
    sent = []
    real = box._request
    monkeypatch.setattr(box, "_request", lambda request, n: sent.append(request.units) or real(request, n))

    def refuse(*args, **kwargs):
        raise AssertionError("model text compiled in the trusted process")

    monkeypatch.setattr(builtins, "compile", refuse)
    rs = box.run_units(units)
    monkeypatch.undo()
    assert [r.status for r in rs] == ["syntax", "syntax", "ok", "syntax"]
    assert rs[0].detail.startswith("SyntaxError") and rs[2].value == "a!"
    assert len(sent) == 1 and all(isinstance(code, str) for code, _, _ in sent[0])
    failed, compiled = compile_units(units)
    assert failed == {0: rs[0], 2: rs[3]} and len(compiled) == 1 and isinstance(compiled[0][0], bytes)


def test_compiled_here_runs_as_compiled_there(box, capfd):
    # Postponed annotations (as the worker always compiled them); the model's compile-time
    # warnings neither reach the scorer's stderr nor become errors under `-W error`.
    code = ("def main_solution(x: Undefined) -> str:\n"
            "    assert x is not 'zz'\n"
            "    return str(main_solution.__annotations__['x']) + '\\d'\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (r,) = box.run([Job(code, "main_solution", ("q",))])
    assert r.status == "ok" and r.value == "Undefined\\d"
    assert "Warning" not in capfd.readouterr().err


def test_code_the_scorer_cannot_compile_for_its_own_limits_goes_to_the_child(box, monkeypatch):
    import opgen.score.sandbox as S

    def too_deep(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded during compilation")

    sent = []
    real = box._request
    monkeypatch.setattr(S, "compile", too_deep, raising=False)
    monkeypatch.setattr(box, "_request", lambda request, n: sent.append(request.units) or real(request, n))
    (r,) = box.run([Job("def main_solution(x):\n    return x * 2\n", "main_solution", ("ab",))])
    assert r.status == "ok" and r.value == "abab"
    assert isinstance(sent[0][0][0], str)


_BLOCKS = '''def a():
    return 'x y!'

def b():
    return 'x y!'

def c():
    return -0.0

def line():
    import sys
    return sys._getframe().f_lineno

def main_solution(x):
    import math
    return f"{a() is b()} {math.copysign(1, c())} {line()} {main_solution.__code__.co_firstlineno}"
'''


def test_programs_compiled_by_blocks_run_as_compiled_whole(box, monkeypatch):
    import opgen.score.sandbox as S

    # What compiling the whole text gives, in this process: constants shared across functions,
    # -0.0 kept apart from 0.0, line numbers of the whole text.
    whole: dict = {}
    exec(compile(_BLOCKS, "<answer>", "exec"), whole)
    expected = whole["main_solution"]("q")
    assert expected == "True -1.0 12 14"
    assert S._compile_chunks(_BLOCKS) is not None
    (r,) = box.run([Job(_BLOCKS, "main_solution", ("q",))])
    assert r.value == expected
    # The same blocks cached, then met again lower in another program: lines still the program's.
    shifted = "PAD = 1\n\n\n" + _BLOCKS
    (r,) = box.run([Job(shifted, "main_solution", ("q",))])
    assert r.value == "True -1.0 15 17"


@pytest.mark.parametrize("code", [
    # a column-0 "def" inside a string: the first block does not compile alone
    'def main_solution(x):\n    return """\ndef f():\n""" + x\n',
    # module-level compound statements and annotations: compiled whole
    'if True:\n    y: int = 3\ndef main_solution(x):\n    return x + str(y) + str(__annotations__)\n',
    'from __future__ import annotations\ndef main_solution(x: int) -> str:\n    return x + "!"\n',
    # a decorator stays with its function
    'def dec(f):\n    return lambda x: f(x) * 2\n@dec\ndef main_solution(x):\n    return x\n',
])
def test_programs_that_must_compile_whole_still_run(box, code):
    whole: dict = {}
    exec(compile(code, "<answer>", "exec"), whole)
    (r,) = box.run([Job(code, "main_solution", ("ab",))])
    assert r.status == "ok" and r.value == whole["main_solution"]("ab"), r


def test_a_block_error_is_the_whole_programs_error(box):
    code = "def f(x):\n    return x\ndef main_solution(x)\n    return f(x)\n"
    (r,) = box.run([Job(code, "main_solution", ("a",))])
    try:
        compile(code, "<answer>", "exec")
    except SyntaxError as exc:
        assert r.status == "syntax" and r.detail == f"SyntaxError: {exc}"[:500]


def test_each_worker_runs_its_children_under_a_uid_of_its_own():
    """A shared uid (nobody's) would pool RLIMIT_NPROC across sandboxes: one scorer's fork bomb
    would make another scorer's children fail to start threads."""
    code = "import os\ndef f(x):\n    return str(os.getuid())\n"
    with Sandbox(workers=2, timeout_s=2.0, imports="open", allow_weak_sandbox=True) as a, \
            Sandbox(workers=1, timeout_s=2.0, imports="open", allow_weak_sandbox=True) as b:
        if not a.isolation["uid_drop"]:
            pytest.skip("not root: children keep the scorer's uid")
        seen_a = {int(r.value) for r in a.run([Job(code, "f", ("",)) for _ in range(8)])}
        (rb,) = b.run([Job(code, "f", ("",))])
        assert seen_a <= set(a.uids) and int(rb.value) == b.uids[0]
        assert len(set(a.uids + b.uids)) == 3


def test_compute_score_takes_the_weak_flag(monkeypatch):
    import functools
    import json

    from test_grade import ra_answer, truth

    import opgen.score.sandbox as S
    from opgen.reward import compute_score, compute_score_batch, compute_score_float

    monkeypatch.delenv("OPGEN_ALLOW_WEAK_SANDBOX", raising=False)
    monkeypatch.setattr(S, "Sandbox", functools.partial(S.Sandbox, namespaces=False))
    monkeypatch.setattr(S, "_shared", None)
    gt = truth(("func_5(func_3(x), 'ab')", "weak"))
    try:
        with pytest.raises(SandboxError, match="below 'full'"):
            compute_score("d", ra_answer(gt), json.dumps(gt), allow_weak_sandbox=False)
        assert compute_score("d", ra_answer(gt), json.dumps(gt), allow_weak_sandbox=True)["score"] == 1.0
        # once allowed, not allowed for later calls that did not ask (the weak sandbox is running)
        with pytest.raises(SandboxError, match="below 'full'"):
            compute_score("d", ra_answer(gt), json.dumps(gt))
        with pytest.raises(SandboxError, match="below 'full'"):
            compute_score("d", ra_answer(gt), json.dumps(gt), allow_weak_sandbox=False)
        # a string is not a boolean: "false" must never read as true
        for flag in ("false", "true", 0, 1):
            with pytest.raises(ValueError, match="allow_weak_sandbox"):
                compute_score("d", ra_answer(gt), json.dumps(gt), allow_weak_sandbox=flag)
        with pytest.raises(ValueError, match="allow_weak_sandbox"):
            compute_score_batch(["d"], [ra_answer(gt)], [json.dumps(gt)], allow_weak_sandbox="false")
        with pytest.raises(ValueError, match="allow_weak_sandbox"):
            compute_score_float("d", ra_answer(gt), json.dumps(gt), allow_weak_sandbox="false")
    finally:
        if S._shared is not None:
            S._shared.close()


def test_a_child_recurses_to_the_limit_ops_check_checks_operators_under(box):
    # one home: jail.child.CHILD_RECURSION_LIMIT, which the child sets and opgen.opscheck reads
    from opgen import opscheck
    from opgen.score.jail.child import CHILD_RECURSION_LIMIT

    assert opscheck.call_recursion_limit() == CHILD_RECURSION_LIMIT
    code = "def d(n):\n    return 'x' if n == 0 else d(n - 1)\n\ndef main_solution(x):\n    return d(int(x))\n"
    under, over = box.run([Job(code, "main_solution", (str(CHILD_RECURSION_LIMIT - 100),)),
                           Job(code, "main_solution", (str(CHILD_RECURSION_LIMIT),))])
    assert under.status == "ok" and over.status == "exception" and "RecursionError" in over.detail, (under, over)
