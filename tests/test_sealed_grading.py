"""Grading processes and sandbox workers are sealed from their caller (issue 31, item 4) and a dead
one is not the answer's fault (issue 32, item 4).

The working directory and the environment a trainer or ``opgen score`` runs in are untrusted: a
module file there, or a ``PYTHON*`` variable, must not reach the processes that compute grades. Each
attack goes through ``grade()``, ``compute_score`` and ``opgen score``; a sentinel file proves that
nothing ran. A grading process or sandbox worker killed from outside (as the OOM killer does) costs
a retry, never an innocent answer's grade.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_grade import ra_answer, truth

from opgen import ops
from opgen.reward import compute_score
from opgen.score import batch as B
from opgen.score import grade
from opgen.score.sandbox import Sandbox
from opgen.score.settings import GradeSettings

GOLD = truth(("func_5(func_3(x), 'ab')", "hostile"))
OUTPUT = GOLD["tasks"][0]["output"]
# Module names a grading process imports after its start (a file of that name on its path would be
# run) or that name opgen itself; sitecustomize/usercustomize run at start from any path entry.
HOSTILE_MODULES = ("ast", "json", "marshal", "opgen", "sitecustomize", "usercustomize", "typing", "dataclasses")


def _definitions() -> str:
    return "".join(ops.get(op).source + "\n" for op in ("func_3", "func_5"))


# Programs whose grade plain CPython computes as 0.0 and an optimising interpreter (-O) as 1.0.
OPTIMISED = {
    "debug_flag": "def main_solution(x):\n    if __debug__:\n        return 'not this'\n"
                  "    return func_5(func_3(x), 'ab')\n",
    "assert": "def main_solution(x):\n    assert False, 'asserts run'\n    return func_5(func_3(x), 'ab')\n",
}


def _optimised(kind: str) -> str:
    return "```python\n" + _definitions() + OPTIMISED[kind] + "```"


def _hostile_dir(path: Path, sentinels: Path) -> Path:
    """A folder holding a module file for each of HOSTILE_MODULES; importing one writes its sentinel."""
    path.mkdir(parents=True, exist_ok=True)
    for name in HOSTILE_MODULES:
        (path / f"{name}.py").write_text(f"open({str(sentinels / name)!r}, 'w').close()\n")
    return path


def _user_base(path: Path, sentinels: Path) -> Path:
    """A PYTHONUSERBASE whose site-packages holds a .pth line that runs code at start."""
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    site = path / "lib" / version / "site-packages"
    site.mkdir(parents=True)
    (site / "evil.pth").write_text(f"import os; open({str(sentinels / 'userbase')!r}, 'w').close()\n")
    return path


@pytest.fixture
def attack(tmp_path):
    """(hostile working directory, sentinel folder, the environment variables of each attack)."""
    sentinels = tmp_path / "sentinels"
    sentinels.mkdir()
    cwd = _hostile_dir(tmp_path / "cwd", sentinels)
    on_path = _hostile_dir(tmp_path / "on-path", sentinels)
    startup = tmp_path / "startup.py"
    startup.write_text(f"open({str(sentinels / 'startup')!r}, 'w').close()\n")
    variables = {
        "PYTHONPATH": str(on_path),
        "PYTHONSTARTUP": str(startup),
        "PYTHONUSERBASE": str(_user_base(tmp_path / "userbase", sentinels)),
        "PYTHONHOME": str(on_path),
        "PYTHONINSPECT": "1",
        "PYTHONOPTIMIZE": "2",
        "PYTHONWARNINGS": "error",
        "PYTHONDEVMODE": "1",
        "PYTHONMALLOC": "debug",
    }
    return cwd, sentinels, variables


@pytest.fixture(scope="module")
def box():
    with Sandbox(workers=1, timeout_s=2.0) as b:
        yield b


@pytest.fixture
def fresh_pool():
    """Grading processes started by the test itself (they start with the caller's state of the moment)."""
    B.close_pool()
    yield
    B.close_pool()


def _answers() -> list[tuple[str, float]]:
    """(response, the grade plain CPython gives it)."""
    return [(ra_answer(GOLD), 1.0), (_optimised("debug_flag"), 0.0), (_optimised("assert"), 0.0)]


def _grades_in_process(entry: str, box: Sandbox) -> list[float]:
    if entry == "grade":
        return [grade(GOLD, text, sandbox=box)["score"] for text, _ in _answers()]
    return [compute_score("opgen", text, GOLD)["score"] for text, _ in _answers()]


@pytest.mark.parametrize("entry", ["grade", "compute_score"])
def test_the_working_directory_and_environment_do_not_reach_grading(entry, attack, box, fresh_pool, monkeypatch):
    """On main: the ast.py in the working directory ran in the grading process (and the PYTHON*
    variables reached it: PYTHONPATH's modules ran, PYTHONOPTIMIZE made __debug__ false and
    dropped asserts, PYTHONWARNINGS=error or PYTHONHOME stopped it from starting)."""
    cwd, sentinels, variables = attack
    monkeypatch.chdir(cwd)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert _grades_in_process(entry, box) == [want for _, want in _answers()]
    assert sorted(p.name for p in sentinels.iterdir()) == []


@pytest.mark.parametrize("variable", ["PYTHONOPTIMIZE", "PYTHONWARNINGS", "PYTHONPATH", "PYTHONHOME",
                                      "PYTHONUSERBASE"])
def test_each_variable_alone(variable, attack, box, fresh_pool, monkeypatch):
    _, sentinels, variables = attack
    monkeypatch.setenv(variable, variables[variable])
    assert _grades_in_process("grade", box) == [want for _, want in _answers()]
    assert sorted(p.name for p in sentinels.iterdir()) == []


def _score_files(tmp_path: Path) -> tuple[Path, Path]:
    data, responses = tmp_path / "d.parquet", tmp_path / "r.jsonl"
    answers = _answers()
    pq.write_table(pa.Table.from_pylist([{"data_source": "opgen/test", "reward_model": {
        "style": "rule", "ground_truth": json.dumps(GOLD)}, "extra_info": {"split": "t"}} for _ in answers]), data)
    responses.write_text("".join(json.dumps({"index": i, "response": text}) + "\n"
                                 for i, (text, _) in enumerate(answers)))
    return data, responses


@pytest.mark.slow
def test_opgen_score_is_sealed_from_its_working_directory_and_environment(tmp_path, attack):
    """The command itself starts as a console script would (-I: its own path is clean); what it
    starts must be as clean whatever its caller's directory and variables."""
    cwd, sentinels, variables = attack
    data, responses = _score_files(tmp_path)
    out = tmp_path / "out"
    env = {**os.environ, **{k: v for k, v in variables.items() if k != "PYTHONINSPECT"}}
    proc = subprocess.run([sys.executable, "-I", "-m", "opgen", "score", "--data", str(data), "--responses",
                           str(responses), "--out", str(out), "--no-plots", "--no-progress"],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    scores = [json.loads(line)["score"] for line in (out / "scores.jsonl").read_text().splitlines()]
    assert scores == [want for _, want in _answers()]
    assert sorted(p.name for p in sentinels.iterdir()) == []


def test_model_code_is_compiled_without_optimisation_whatever_the_compiling_process_runs_under():
    """compile_units (what a grading process runs, and grade_in_process, the tests' reference) keeps
    asserts and __debug__ in a process started with -O."""
    script = ("import marshal\n"
              "from opgen.score.sandbox import Unit, compile_units\n"
              "code = 'def f(x):\\n    assert __debug__ and False, 1\\n    return x\\n'\n"
              "_, sent = compile_units([Unit(code, (('f', ('a',)),))])\n"
              "space = {}\n"
              "exec(marshal.loads(sent[0][0]), space)\n"
              "try:\n"
              "    print(space['f']('a'))\n"
              "except AssertionError:\n"
              "    print('assert kept')\n")
    proc = subprocess.run([sys.executable, "-OO", "-c", script], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "assert kept"


# ------------------------------------------------------------ a process that cannot start says why


def _start_error(box, monkeypatch, tmp_path: Path, script: str) -> str:
    """The error of a grade whose grading process is the shell ``script`` instead of the interpreter."""
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\n" + script)
    fake.chmod(0o755)
    monkeypatch.setattr(B.sys, "executable", str(fake))
    with pytest.raises(B.GradingError) as err:
        grade(GOLD, ra_answer(GOLD), sandbox=box)
    return str(err.value)


def test_a_grading_process_that_cannot_start_says_why(box, fresh_pool, monkeypatch, tmp_path):
    """On main: 'did not start within 120 s' whatever happened, with its stderr thrown away."""
    text = _start_error(box, monkeypatch, tmp_path,
                        "echo 'Fatal: the interpreter cannot load opgen here' >&2\nexit 3\n")
    assert "exit code 3" in text and "Fatal: the interpreter cannot load opgen here" in text, text
    assert "within" not in text


def test_a_grading_process_killed_before_it_is_ready_is_reported_as_killed(box, fresh_pool, monkeypatch, tmp_path):
    text = _start_error(box, monkeypatch, tmp_path, "echo starting >&2\nkill -KILL $$\n")
    assert "SIGKILL" in text and "before it was ready" in text and "within" not in text, text


# ------------------------------------------------------------ a dead grader is not the answer's fault


def _without_retries(grades: list[dict]) -> list[dict]:
    return [{k: v for k, v in g.items() if k != "retries"} for g in grades]


def test_a_grading_process_killed_while_grading_is_retried_not_blamed(box, fresh_pool, monkeypatch):
    """On main the response in hand was graded 'killed' (a gold answer scored 0)."""
    answers = [ra_answer(GOLD)] * 6
    want = [grade(GOLD, a, sandbox=box) for a in answers]
    B.close_pool()
    monkeypatch.setenv("OPGEN_FAULT", "grading-sent-1:KILL")  # the first chunk's process, once it has it
    got = B.grade_many([B.Item(GOLD, a) for a in answers], sandbox=box, processes=1)
    assert [g["score"] for g in got] == [1.0] * 6
    assert sum(g.get("retries", 0) for g in got) == 1
    assert _without_retries(got) == want


def test_an_answer_that_kills_its_grading_process_twice_is_killed(box, fresh_pool, monkeypatch):
    monkeypatch.setenv("OPGEN_FAULT", "grading-sent:KILL")  # every process, every time
    (g,) = B.grade_many([B.Item(GOLD, ra_answer(GOLD))], sandbox=box, processes=1)
    assert (g["score"], g["error"], g["retries"]) == (0.0, "killed", 1)
    assert "again" in g["detail"], g["detail"]


def test_a_sandbox_worker_killed_while_running_is_retried_not_blamed(fresh_pool, monkeypatch):
    program = "def main_solution(x):\n    y = x\n    return func_5(func_3(y), 'ab')\n"
    answer = "```python\n" + _definitions() + program + "```"
    with Sandbox(workers=1, timeout_s=2.0) as b:
        monkeypatch.setenv("OPGEN_FAULT", "sandbox-sent-1:KILL")
        got = B.grade_many([B.Item(GOLD, answer)] * 3, sandbox=b, processes=1, settings=GradeSettings(static=False))
        assert [g["score"] for g in got] == [1.0] * 3
        assert sum(g.get("retries", 0) for g in got) == 1
        monkeypatch.setenv("OPGEN_FAULT", "sandbox-sent:KILL")
        (g,) = B.grade_many([B.Item(GOLD, answer)], sandbox=b, processes=1, settings=GradeSettings(static=False))
        assert (g["score"], g["error"], g.get("retries")) == (0.0, "killed", 1), g


@pytest.mark.slow
def test_opgen_score_gives_gold_answers_one_with_a_grader_killed_mid_run(tmp_path):
    data, responses = tmp_path / "d.parquet", tmp_path / "r.jsonl"
    pq.write_table(pa.Table.from_pylist([{"data_source": "opgen/test", "reward_model": {
        "style": "rule", "ground_truth": json.dumps(GOLD)}, "extra_info": {"split": "t"}}] * 40), data)
    responses.write_text("".join(json.dumps({"index": i, "response": ra_answer(GOLD)}) + "\n" for i in range(40)))
    for fault in ("grading-sent-1:KILL", "sandbox-sent-1:KILL"):
        out = tmp_path / fault.split(":")[0]
        proc = subprocess.run([sys.executable, "-m", "opgen", "score", "--data", str(data), "--responses",
                               str(responses), "--out", str(out), "--no-plots", "--no-progress", "--no-static"],
                              env={**os.environ, "OPGEN_FAULT": fault}, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        summary = json.loads((out / "summary.json").read_text())
        assert summary["overall"]["acc"] == 1.0 and summary["errors"] == {"": 40}, summary["errors"]
        assert summary["retries"] == 1, fault


@pytest.mark.slow
@pytest.mark.parametrize("fault,want", [("grading-sent-1:KILL", 1.0), ("grading-sent:KILL", 0.0)],
                         ids=["killed-once", "killed-every-time"])
def test_opgen_serve_grades_through_the_same_retries(fault, want):
    """/score grades through grade_many: a grading process killed once costs a retry (gold stays
    1.0); one killed every time scores 0 ('killed': which shows the kill reached the server's grading)."""
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    from test_serve import _free_port, get, post

    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "opgen", "serve", "--port", str(port)],
                            env={**os.environ, "OPGEN_FAULT": fault}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):  # bounded: the server's start (its sandbox) takes seconds
            try:
                get(url + "/health")
                break
            except OSError:
                assert proc.poll() is None, "opgen serve exited"
                time.sleep(0.2)
        items = [{"ground_truth": GOLD, "response": ra_answer(GOLD), "extra_info": {}}] * 4
        status, body = post(url + "/score", {"items": items})
        assert status == 200, body
        assert body["scores"] == [want] * 4
    finally:
        proc.terminate()
        proc.wait(timeout=60)
