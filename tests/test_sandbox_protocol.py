"""The worker's side of the speed work: code unmarshalled before forking, load reports counted once
per unit, and the structure check's render shortcut agreeing with the full comparison."""

from __future__ import annotations

import random

import pytest

from opgen import expr as E
from opgen import ops
from opgen.score import diagnose as D
from opgen.score.sandbox import Job, Sandbox, Unit, WeakSandboxWarning


@pytest.fixture(scope="module")
def box():
    # The programs here forge frames with os.write: the layers below the import allowlist (which
    # refuses ``os``) must hold on their own.
    with pytest.warns(WeakSandboxWarning), Sandbox(workers=1, timeout_s=1.0, max_output=1000, imports="open",
                                                   allow_weak_sandbox=True) as b:
        yield b


def test_code_the_worker_cannot_unmarshal_fails_in_the_child_as_syntax(box):
    # Only the scorer's own marshal output reaches the worker; anything else still gets a verdict
    # (from the child), never a lost worker.
    (r,) = box.run_sent([(b"\xffnot marshal", [("f", ("a",))], False)])
    assert r.status == "syntax" and r.detail.startswith(("ValueError", "EOFError")), r
    (ok,) = box.run([Job("def f(x):\n    return x * 2\n", "f", ("ab",))])
    assert ok.value == "abab"


def test_first_call_that_hangs_after_loading_fails_alone(box):
    # The unit reported itself loaded, so the hang is the call's, not the unit's.
    code = "def f(x):\n    if x == 'hang':\n        while True: pass\n    return x.upper()\n"
    rs = box.run_units([Unit(code, (("f", ("hang",)), ("f", ("b",))))])
    assert [(r.status, r.value) for r in rs] == [("timeout", None), ("ok", "B")]


def test_slow_loading_and_slow_call_each_have_their_own_window(box):
    code = ("import time\ntime.sleep(0.6)\n"
            "def f(x):\n    time.sleep(0.6)\n    return x\n")
    (r,) = box.run_units([Unit(code, (("f", ("q",)),))])
    assert (r.status, r.value) == ("ok", "q")


_FORGER = '''
import os, struct, time

def f(x):
    # Keep announcing "unit 0 loaded" on every descriptor, as if to restart the wall clock.
    frame = struct.pack(">BII", 0, os.getpid(), 1) + b"0"
    for _ in range(40):
        for fd in range(3, 16):
            try:
                os.write(fd, frame)
            except OSError:
                pass
        time.sleep(0.1)
    return "outlived the wall clock"
'''


def test_repeated_load_reports_do_not_extend_the_wall_clock(box):
    # a wall clock restarted by each forged report would let the call run its 4 s and return;
    # how long the timeout took: benchmarks/bench_bounds.py
    (r,) = box.run([Job(_FORGER, "f", ("a",))])
    assert r.status == "timeout" and r.value is None, r


def _random_tree(rng: random.Random, depth: int) -> E.Expr:
    if depth == 0:
        return E.Var() if rng.random() < 0.8 else E.Lit(rng.choice(["a", "q'\"\\", ""]))
    op = rng.choice(ops.OPERATORS)
    params = tuple(rng.randint(p.lo, p.hi) if p.kind == "int" else
                   rng.choice(p.choices) if p.kind == "choice" else "ab" for p in op.params)
    kids = [_random_tree(rng, depth - 1) for _ in range(op.n_inputs)]
    return E.call(op.id, *kids, params=params)


def test_structure_shortcut_agrees_with_comparing_parsed_trees():
    rng = random.Random(7)
    for _ in range(300):
        tree = _random_tree(rng, rng.randint(1, 3))
        other = _random_tree(rng, rng.randint(1, 3))
        code = "def helper(s):\n    return s\n\n" + E.render_program(tree)
        text = E.render(tree)
        assert D.structure_matches(code, "main_solution", text)
        # The same tree written with other spacing: not the rendered text, still the same tree.
        assert D.structure_matches(code, "main_solution", " " + text.replace(", ", " ,  ") + " ")
        assert D.structure_matches(code, "main_solution", E.render(other)) == (other == tree)
    assert not D.structure_matches("def main_solution(x):\n    return x\n", "main_solution", "func_0(")


# ------------------------------------------------------------ frames written by the child itself

_OWN_FRAMES = '''
import os, struct
def frame(code, payload):
    data = payload.encode()
    return struct.pack(">BII", code, os.getpid(), len(data)) + data
def f(x):
    data = FRAMES
    for fd in range(3, 64):  # the result pipe is the child's only descriptor above 2
        try:
            os.write(fd, data)
        except OSError:
            pass
    os._exit(0)
'''


def _forger(frames: str) -> str:
    return _OWN_FRAMES.replace("FRAMES", frames)


@pytest.mark.parametrize("frames,status", [
    # an "ok" value over max_output (1,000 here) but under any byte limit for a frame: the old
    # worker took it, the cap lived in the child's own code
    ("frame(1, 'a' * 3_000)", "output_too_large"),
    ("frame(5, 'e' * 3_000)", "exception"),  # a detail far over any the worker writes
])
def test_caps_hold_for_frames_the_child_writes_itself(box, frames, status):
    (r,) = box.run([Job(_forger(frames), "f", ("a",))])
    assert r.status == status, r
    assert r.value is None or len(r.value) <= 1000
    assert len(r.detail) <= 1000


@pytest.mark.parametrize("frames,outcome", [
    # a result, then another and a load report past the last call (the old worker died reading
    # them): the first result is the call's
    ("frame(1, 'one') + frame(1, 'extra') + frame(0, '0')", ("ok", "one")),
    ("struct.pack('>BII', 77, os.getpid(), 3) + b'bad'", ("killed", None)),  # a status that does not exist
    ("struct.pack('>BII', 1, os.getpid(), 2 ** 31) + b'x'", ("output_too_large", None)),  # a length far past any cap
    ("frame(1, '')[:5]", ("killed", None)),  # a truncated header
])
def test_extra_or_malformed_frames_do_not_kill_the_worker(box, frames, outcome):
    (r,) = box.run([Job(_forger(frames), "f", ("a",))])
    assert (r.status, r.value) == outcome and "worker lost" not in r.detail, r
    (ok,) = box.run([Job("def f(x):\n    return x * 2\n", "f", ("ab",))])
    assert ok.value == "abab"


@pytest.mark.parametrize("reply,status", [
    ([("ok", "a" * 5000, "")], "output_too_large"),  # past max_output (1,000 here)
    ([("exception", None, "e" * 5000)], "exception"),
    ([("ok", 3, "")], "killed"),  # not a string
    ([("forged", None, "")], "killed"),  # no such status
    ([("ok", "a", ""), ("ok", "b", "")], "killed"),  # more results than calls
    ({"not": "a list"}, "killed"),
])
def test_the_scorer_checks_the_workers_reply_too(reply, status, monkeypatch):
    """The caps hold on the trusted side even if a worker's reply is not what it should be."""
    from opgen.score import sandbox as S

    with Sandbox(workers=1, timeout_s=1.0, max_output=1000) as b:
        real = S._Worker.receive  # every worker's reply, the retry's included
        monkeypatch.setattr(S._Worker, "receive", lambda *a, **k: (real(*a, **k), reply)[1])
        ran = b.run_request([("def f(x):\n    return x\n", [("f", ("a",))], False)])
        (r,) = ran.results
        assert r.status == status, r
        assert (r.value is None or len(r.value) <= 1000) and len(r.detail) <= S.DETAIL_CAP
        if status == "killed":  # a reply that fails the checks is a lost worker: replaced, the request retried
            assert "worker lost" in r.detail and "again" in r.detail and ran.retries == 1
        monkeypatch.undo()
        assert b.run([Job("def f(x):\n    return x * 2\n", "f", ("ab",))])[0].value == "abab"
