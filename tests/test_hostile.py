"""The hostile corpus (tests/hostile/, one program per kind): every kind scores 0 with its error class,
the scorer survives and grades the next response right, files outside the sandbox are untouched,
and the wall time per program stays bounded."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from hang_guard import ends
from test_grade import ra_answer, truth

from opgen.score import grade
from opgen.score.sandbox import Sandbox, WeakSandboxWarning

pytestmark = pytest.mark.slow  # every kind runs the real sandbox to its limits: seconds each

CORPUS = Path(__file__).with_name("hostile")
KINDS = sorted(p.stem for p in CORPUS.glob("*.py"))
TIMEOUT_S = 1.0


def load(kind: str, sentinel: Path) -> tuple[str, set[str]]:
    text = (CORPUS / f"{kind}.py").read_text()
    first = text.splitlines()[0]
    assert first.startswith("# expect: "), f"{kind}.py must start with '# expect: <error class> ...'"
    expected = set(first[len("# expect: "):].split())
    if text.splitlines()[1].startswith("# generate:"):
        # A response too large to keep as a file: the file's program() (trusted test code) builds it.
        namespace: dict = {}
        exec(compile(text, str(CORPUS / f"{kind}.py"), "exec"), namespace)
        return namespace["program"](), expected
    return text.replace("__SENTINEL__", str(sentinel)), expected


@pytest.fixture(scope="module", autouse=True)
def _grading_budget():
    # The kinds that stall the compiler end at the grading process's budget (batch.RESPONSE_CPU_S):
    # a shorter one here keeps each kind inside the wall-clock bound below.
    from opgen.score import batch as B

    old, B.RESPONSE_CPU_S = B.RESPONSE_CPU_S, 1.0
    yield
    B.RESPONSE_CPU_S = old


@pytest.fixture(scope="module")
def box():
    # Without the import allowlist (which refuses os, signal, ctypes...: most kinds would stop at
    # their import): each kind's class is that of the layers below it, which must hold on their
    # own. test_every_kind_scores_zero_at_full grades the corpus at full, allowlist included.
    with pytest.warns(WeakSandboxWarning), Sandbox(workers=2, timeout_s=TIMEOUT_S, imports="open",
                                                   allow_weak_sandbox=True) as b:
        yield b


@pytest.fixture(scope="module")
def full_box():
    with Sandbox(workers=2, timeout_s=TIMEOUT_S) as b:
        yield b


@pytest.fixture(scope="module")
def sentinel(tmp_path_factory):
    path = tmp_path_factory.mktemp("outside") / "precious.txt"
    path.write_text("do not touch")
    return path


def test_corpus_has_at_least_20_kinds():
    assert len(KINDS) >= 20, KINDS


GOLD = truth(("func_5(func_3(x), 'ab')", "hostile"))
# Kinds whose expected class relies on the uid drop or the chroot (the files, the network, the
# parent are out of reach); an unprivileged fallback sandbox ("rlimits") cannot promise those.
NEEDS_PRIVILEGE = {"write_outside", "delete_outside", "escape_by_setsid", "search_files_for_answer",
                   "subprocess_shell", "network", "read_parent_memory", "kill_parent", "kill_everything"}


@pytest.mark.parametrize("kind", KINDS)
def test_hostile_kind_scores_zero_with_its_class(box, sentinel, kind):
    if kind in NEEDS_PRIVILEGE and box.level == "rlimits":
        pytest.skip(f"{kind} needs the uid drop or the chroot; this sandbox has {box.level}")
    code, expected = load(kind, sentinel)
    before = (sentinel.read_text(), sentinel.stat().st_mtime_ns)
    # It ends (the worker bounds a call and a program's loading; how soon, against two timeouts:
    # benchmarks/bench_bounds.py), with its class.
    g = ends(grade, GOLD, f"```python\n{code}\n```", sandbox=box)
    assert g["score"] == 0.0 and g["acc"] == 0.0, g
    assert g["error"] in expected, (g["error"], g["tasks"])
    assert (sentinel.read_text(), sentinel.stat().st_mtime_ns) == before
    # The scorer is alive and still right on the next, honest response.
    assert grade(GOLD, ra_answer(GOLD), sandbox=box)["score"] == 1.0


# The modules the import allowlist refuses (a kind importing one stops there, with ``exception``).
REFUSED = ("os", "signal", "ctypes", "gc", "marshal", "subprocess", "socket", "_thread", "threading", "resource")


def expected_at_full(code: str, expected: set[str]) -> set[str]:
    imports = {m.group(1) for m in re.finditer(r"^\s*(?:import|from)\s+([\w.]+)", code, re.M)}
    return expected | {"exception"} if imports & set(REFUSED) else expected


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_scores_zero_at_full(full_box, sentinel, kind):
    code, expected = load(kind, sentinel)
    before = (sentinel.read_text(), sentinel.stat().st_mtime_ns)
    g = grade(GOLD, f"```python\n{code}\n```", sandbox=full_box)
    assert g["score"] == 0.0 and g["acc"] == 0.0, g
    assert g["error"] in expected_at_full(code, expected), (g["error"], g["tasks"])
    assert (sentinel.read_text(), sentinel.stat().st_mtime_ns) == before
    assert grade(GOLD, ra_answer(GOLD), sandbox=full_box)["score"] == 1.0


def test_detached_processes_do_not_outlive_the_request(box, sentinel):
    if box.level == "rlimits":
        pytest.skip("needs the PID namespace or the uid drop")
    code, _ = load("escape_by_setsid", sentinel)
    grade(GOLD, f"```python\n{code}\n```", sandbox=box)
    time.sleep(1.5)  # the escapee would write after one second
    assert sentinel.read_text() == "do not touch"


def _namespaces_allowed() -> bool:
    import shutil
    import subprocess

    tool = shutil.which("unshare")
    return bool(tool) and subprocess.run([tool, "--net", "--mount", "--pid", "--fork", "true"],
                                         capture_output=True).returncode == 0


def test_full_isolation_where_the_system_allows_it():
    if os.geteuid() != 0 or not _namespaces_allowed():
        pytest.skip("namespaces and the uid drop need root and a system that allows unshare(2)")
    with Sandbox(workers=1) as b:
        assert b.level == "full", b.isolation


@pytest.mark.parametrize("kind", ["infinite_loop", "memory_bomb", "gigantic_output", "write_outside", "os_exit",
                                  "fork_bomb", "close_all_fds", "always_equal_object"])
def test_without_namespaces_rlimits_still_hold(sentinel, kind):
    if kind == "write_outside" and os.geteuid() != 0:
        pytest.skip("without root the sentinel is the user's own file")
    code, expected = load(kind, sentinel)
    with Sandbox(workers=1, timeout_s=TIMEOUT_S, namespaces=False, allow_weak_sandbox=True, imports="open") as b:
        assert "chroot" not in b.level and "netns" not in b.level
        g = grade(GOLD, f"```python\n{code}\n```", sandbox=b)
        assert g["score"] == 0.0 and g["error"] in expected, g
        assert grade(GOLD, ra_answer(GOLD), sandbox=b)["score"] == 1.0
    assert sentinel.read_text() == "do not touch"


# ------------------------------------------------------------ responses aimed at the scorer's own parsing

DEEP = "(" * 100_000 + "x" + ")" * 100_000


PATHOLOGICAL = {
    "deep_recall": ra_answer(GOLD, {"func_3": f"def func_3(s):\n    return {DEEP}\n"}),  # parsed for the signature
    "deep_assemble": ra_answer(GOLD).replace("return func_5(func_3(x), 'ab')", f"return {DEEP}"),  # for structure
    "open_json_lists": '{"output": [' * 200_000,
    "deep_json": '{"a": ' * 200_000 + '"x"',
    "braces": "{" * 900_000,
    "open_fences": "```python\n" * 90_000,
    "many_recalls": "Recall func_3: sort\n```python\nx\n```\n" * 20_000,
    "too_long": "x" * 1_000_001,
}
LOOPING_RECALL = ra_answer(GOLD, {"func_5": "def func_5(s, pre):\n    while True:\n        pass\n"})


@pytest.mark.parametrize("response", list(PATHOLOGICAL.values()), ids=list(PATHOLOGICAL))
def test_pathological_responses_are_graded(box, response):
    g = ends(grade, GOLD, response, sandbox=box)  # how long: benchmarks/bench_bounds.py
    assert g["score"] == 0.0
    assert grade(GOLD, ra_answer(GOLD), sandbox=box)["score"] == 1.0


def test_a_looping_recall_is_a_timeout_and_a_wrong_body(box):
    # one timeout, not one per probe: benchmarks/bench_bounds.py measures it
    g = ends(grade, GOLD, LOOPING_RECALL, sandbox=box)
    assert g["error"] == "timeout"
    assert {r["op"]: r["verdict"] for r in g["recalls"]}["func_5"] == "wrong_body"


def _as_nobody(script: str, timeout: int = 240) -> subprocess.CompletedProcess:
    """Run ``script`` with the system python as nobody (uid 65534), opgen importable; skip where
    that is impossible here."""
    import shutil
    import tempfile

    setpriv, python = shutil.which("setpriv"), "/usr/bin/python3"
    if os.geteuid() != 0 or not setpriv or not os.path.exists(python):
        pytest.skip("needs root to switch to nobody, setpriv and /usr/bin/python3")
    # pytest's own tmp_path lives under a 0700 directory that nobody cannot enter.
    tmp_path = Path(tempfile.mkdtemp(prefix="opgen-nobody-"))
    path = tmp_path / "script.py"
    path.write_text(script)
    path.chmod(0o644)
    tmp_path.chmod(0o755)
    repo = Path(__file__).resolve().parents[1]
    try:
        proc = subprocess.run([setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", python, str(path)],
                              capture_output=True, text=True, timeout=timeout, cwd="/",
                              env={"PYTHONPATH": f"{repo}:{repo / 'tests'}", "HOME": "/tmp",
                                   "PATH": "/usr/bin:/bin"})
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)
    if proc.returncode != 0 and ("No module named" in proc.stderr or "Permission denied" in proc.stderr):
        pytest.skip(f"the system python cannot run opgen's sandbox as nobody: {proc.stderr[-300:]}")
    return proc


_THREE = ("    rs = b.run([Job('def f(x):\\n    return x[::-1]', 'f', ('ab',)),\n"
          "                Job('def f(x):\\n    while True: pass', 'f', ('ab',)),\n"
          "                Job('def f(x):\\n    return \"a\" * 10 ** 10', 'f', ('ab',))])\n")


def test_unprivileged_fallback_reports_rlimits_and_still_grades():
    """As an ordinary user with no namespaces (asked for: it is below full) the sandbox says so and
    still works; the seccomp filter, the zygote, the import allowlist and non-dumpable processes
    are all that is left of the jail."""
    proc = _as_nobody(
        "from opgen.score.sandbox import Job, Sandbox, SandboxError\n"
        "try:\n"
        "    Sandbox(workers=1, namespaces=False)\n"
        "except SandboxError as exc:\n"
        "    print('refused', 'without uid' in str(exc))\n"
        "with Sandbox(workers=1, timeout_s=1.0, namespaces=False, allow_weak_sandbox=True) as b:\n"
        + _THREE +
        "    print(b.level, [(r.status, r.value) for r in rs])\n")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == "refused True"
    level, _, results = lines[1].partition(" ")
    assert results == "[('ok', 'ba'), ('timeout', None), ('memory', None)]", lines
    # no namespace, no uid of its own: at most seccomp, the zygote and the import allowlist
    assert level == "rlimits" or set(level[len("partial("):-1].split("+")) <= {"seccomp", "zygote", "imports",
                                                                             "hiddenclasses"}, lines


def test_unprivileged_scorer_gets_full_isolation_from_a_user_namespace():
    if not _namespaces_allowed():
        pytest.skip("this system does not allow unshare(2)")
    proc = _as_nobody(
        "from opgen.score.sandbox import Job, Sandbox\n"
        "with Sandbox(workers=1, timeout_s=1.0) as b:\n"
        + _THREE +
        "    print(b.level, 'userns' in b.mechanisms, [(r.status, r.value) for r in rs])\n")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.strip()
    if out.startswith("partial"):
        pytest.skip(f"unprivileged user namespaces are not allowed here: {out}")
    assert out == "full True [('ok', 'ba'), ('timeout', None), ('memory', None)]"


def test_the_hostile_corpus_as_an_unprivileged_scorer():
    """The whole corpus, graded by a scorer running as nobody (full through a user namespace)."""
    if not _namespaces_allowed():
        pytest.skip("this system does not allow unshare(2)")
    import json

    # The generated kinds (a "# generate:" header) stall the grading processes, not the jail: they
    # are graded in test_the_hostile_corpus; here the file's text would be a response of its own.
    texts = {kind: (CORPUS / f"{kind}.py").read_text() for kind in KINDS}
    corpus = {kind: text for kind, text in texts.items() if not text.splitlines()[1].startswith("# generate:")}
    proc = _as_nobody(
        "import json, tempfile\n"
        "from pathlib import Path\n"
        "from opgen.score import grade\n"
        "from opgen.score.sandbox import Sandbox\n"
        f"CORPUS, GOLD, HONEST = {json.dumps(corpus)!r}, {json.dumps(GOLD)!r}, {ra_answer(GOLD)!r}\n"
        "CORPUS, GOLD = json.loads(CORPUS), json.loads(GOLD)\n"
        "d = Path(tempfile.mkdtemp()); s = d / 'precious.txt'; s.write_text('do not touch')\n"
        "out = {}\n"
        f"with Sandbox(workers=2, timeout_s={TIMEOUT_S}) as b:\n"
        "    out['level'] = b.level\n"
        "    for kind, text in CORPUS.items():\n"
        "        expected = text.splitlines()[0][len('# expect: '):].split()\n"
        "        code = text.replace('__SENTINEL__', str(s))\n"
        "        g = grade(GOLD, '```python\\n' + code + '\\n```', sandbox=b)\n"
        "        honest = grade(GOLD, HONEST, sandbox=b)['score']\n"
        "        out[kind] = [g['score'], g['error'], expected, honest]\n"
        "out['sentinel'] = s.read_text()\n"
        "print(json.dumps(out))\n", timeout=400)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if out["level"] != "full":
        pytest.skip(f"unprivileged user namespaces are not allowed here: {out['level']}")
    assert out.pop("sentinel") == "do not touch"
    out.pop("level")
    bad = {k: v for k, v in out.items()
           if not (v[0] == 0.0 and v[1] in expected_at_full(corpus[k], set(v[2])) and v[3] == 1.0)}
    assert not bad, bad
    assert len(out) == len(corpus) and len(corpus) >= 40


_READ_SCORER = """
import os
def main_solution(x):
    with open("/proc/PID/mem", "rb") as fh:
        fh.seek(ADDR)
        return fh.read(200).decode("latin-1")
"""


def test_the_scorer_is_not_dumpable_where_children_keep_its_uid():
    """Under rlimits (no namespaces, not root) a child read the expected output from the scorer's
    memory through /proc; the scorer now makes itself non-dumpable."""
    proc = _as_nobody(
        "import os\n"
        "from opgen.score.sandbox import Job, Sandbox\n"
        "secret = 'expected-' + str(os.getpid()) + '-output'\n"
        f"code = {_READ_SCORER!r}.replace('PID', str(os.getpid())).replace('ADDR', str(id(secret)))\n"
        "with Sandbox(workers=1, timeout_s=2.0, namespaces=False, allow_weak_sandbox=True) as b:\n"
        "    (r,) = b.run([Job(code, 'main_solution', ('x',))])\n"
        "    print(r.status, secret in (r.value or ''), b.isolation.get('scorer_nondumpable'))\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["exception", "False", "True"], proc.stdout


def test_an_unprivileged_childs_changes_to_the_work_area_do_not_reach_the_next_response():
    """With a user namespace the child owns the work area's root (only one uid is mapped), so it
    can change it; the worker then replaces the tmpfs."""
    if not _namespaces_allowed():
        pytest.skip("this system does not allow unshare(2)")
    from test_sandbox_jail import _READ_ROOT, _TOUCH_ROOT

    proc = _as_nobody(
        "from opgen.score.sandbox import Job, Sandbox\n"
        f"touch, read = {_TOUCH_ROOT!r}, {_READ_ROOT!r}\n"
        "with Sandbox(workers=1, timeout_s=2.0) as b:\n"
        "    run = lambda code: b.run([Job(code, 'f', ('',))])[0]\n"
        "    before = run(read).value\n"
        "    touched = run(touch).value\n"
        "    print(b.level, touched, run(read).value == before)\n")
    assert proc.returncode == 0, proc.stderr
    level, touched, same = proc.stdout.split()
    if level != "full":
        pytest.skip(f"unprivileged user namespaces are not allowed here: {level}")
    assert touched != "none" and same == "True", proc.stdout
