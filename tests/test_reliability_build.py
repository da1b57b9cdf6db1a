"""A build's output directory under concurrency, signals, interrupted swaps and reuse (issue 13, items 1-4, 8);
dead workers and hostile operators (issue 32, item 4).

Faults are injected at named points (OPGEN_FAULT, test-only; opgen/faults.py), never by timing. A
subprocess that could hang has a generous ``timeout=``, so a regression fails instead of hanging.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import user_libraries as U

from opgen import opwatch, outdir
from opgen import validate as V

OPGEN = [sys.executable, "-m", "opgen"]

SHARDED = ("name: sharded\nsplits:\n  s:\n    generator: trees\n    role: eval\n    shard_rows: 500\n"
           "    options: {ops: all, depths: [2], rows: 12000}\n")


def _run(args, env=None, **kw):
    return subprocess.run(OPGEN + args, capture_output=True, text=True, env={**os.environ, **(env or {})}, **kw)


def _pids_with(mark: str) -> list[int]:
    """Processes whose environment carries ``mark`` (the build and its forked workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if mark.encode() in env and state != "Z":
            found.append(int(entry.name))
    return found


def _wait_gone(mark: str, seconds: float = 30.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := _pids_with(mark)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _state(out: Path) -> tuple[int, set[str]]:
    """(seed, file names) of a complete build; fails on anything else."""
    man = json.loads((out / "manifest.json").read_text())
    assert V.check_manifest(out) == []
    assert {p.name for p in out.iterdir()} == outdir.listed_files(man)
    return man["seed"], {p.name for p in out.iterdir()}


def _leftovers(tmp_path: Path, name: str = "o") -> list[str]:
    return sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(name + ".opgen-")
                  and not p.name.endswith(outdir.LOCK_SUFFIX))


# ---------------------------------------------------------------- 1. concurrency


def test_a_second_build_into_a_locked_directory_refuses_naming_the_holder(tmp_path):
    out = tmp_path / "o"
    with outdir.Lock(out):
        r = _run(["build", "native-stage1", "--out", str(out), "--limit", "50", "--workers", "1"])
    assert r.returncode == 1, r.stderr
    assert f"pid {os.getpid()}" in r.stderr and "another build" in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()


@pytest.mark.slow
def test_two_racing_builds_one_refuses_and_the_other_is_consistent(tmp_path):
    out = tmp_path / "o"
    first = subprocess.Popen(OPGEN + ["build", "native-stage1", "--out", str(out), "--limit", "60", "--workers", "1"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "OPGEN_FAULT": "before-swap:STOP"})
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # it stops itself, holding the lock, with its build staged
            if Path(f"/proc/{first.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T":
                break
            time.sleep(0.05)
        second = _run(["build", "native-stage1", "--out", str(out), "--limit", "60", "--seed", "5",
                       "--workers", "1"])
        assert second.returncode == 1 and f"pid {first.pid}" in second.stderr
    finally:
        os.kill(first.pid, signal.SIGCONT)
    _, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    seed, _ = _state(out)
    assert seed == 0 and _leftovers(tmp_path) == []


# ---------------------------------------------------------------- 2. signals and workers


@pytest.mark.parametrize("sig, code", [pytest.param("KILL", -9, marks=pytest.mark.slow),
                                       pytest.param("TERM", 143, marks=pytest.mark.slow), ("INT", 130)])
def test_a_signalled_build_leaves_no_workers_and_the_previous_build(tmp_path, sig, code):
    recipe = tmp_path / "sharded.yaml"
    recipe.write_text(SHARDED)
    out = tmp_path / "o"
    ok = _run(["build", str(recipe), "--out", str(out), "--limit", "600", "--workers", "1"])
    assert ok.returncode == 0, ok.stderr
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    mark = f"OPGEN_TEST_MARK={uuid.uuid4().hex}"
    key, value = mark.split("=")
    r = _run(["build", str(recipe), "--out", str(out), "--seed", "3", "--workers", "2"],
             env={"OPGEN_FAULT": f"produced:{sig}", key: value}, timeout=300)
    assert r.returncode == code, r.stderr
    assert _wait_gone(mark) == []  # no worker outlives the build, even after SIGKILL
    assert "Traceback" not in r.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    if sig == "KILL":  # nothing could clean up: the staging directory is left, and the next build removes it
        assert _leftovers(tmp_path)
        assert _run(["build", str(recipe), "--out", str(out), "--limit", "600", "--workers", "1"]).returncode == 0
    assert _leftovers(tmp_path) == []


# ---------------------------------------------------------------- 3. interrupted swaps


@pytest.mark.parametrize("swap, point", [pytest.param("exchange", "before-swap", marks=pytest.mark.slow),
                                         pytest.param("exchange", "after-swap", marks=pytest.mark.slow),
                                         pytest.param("rename", "before-swap", marks=pytest.mark.slow),
                                         pytest.param("rename", "between-renames", marks=pytest.mark.slow),
                                         ("rename", "after-swap")])
def test_a_kill_during_the_swap_leaves_the_old_or_the_new_build(tmp_path, swap, point):
    out = tmp_path / "o"
    args = ["build", "native-stage1", "--out", str(out), "--limit", "40", "--workers", "1"]
    assert _run(args).returncode == 0
    env = {"OPGEN_FAULT": f"{point}:KILL", **({"OPGEN_SWAP": "rename"} if swap == "rename" else {})}
    r = _run(args + ["--seed", "9"], env=env)
    assert r.returncode == -9
    if point == "between-renames":  # the one window of the two-rename swap: the next build finishes it
        assert not out.exists()
        outdir.recover(out)
    seed, _ = _state(out)
    assert seed == (0 if point == "before-swap" else 9)
    assert _run(args).returncode == 0  # and the next build cleans whatever was left
    assert _state(out)[0] == 0 and _leftovers(tmp_path) == []


# ---------------------------------------------------------------- 4. reuse, foreign directories, --only


@pytest.mark.slow
def test_a_reused_directory_holds_only_the_new_build(runner, cli, tmp_path):
    out = tmp_path / "o"
    assert runner.invoke(cli, ["build", "eval-suite", "--out", str(out), "--limit", "5"]).exit_code == 0
    r = runner.invoke(cli, ["build", "native-stage1", "--out", str(out), "--limit", "5"])
    assert r.exit_code == 0, r.output
    _state(out)
    assert sorted(p.name for p in out.glob("*.parquet")) == ["stage1_l1_test.parquet", "stage1_l1_train.parquet"]


def test_a_foreign_directory_is_refused_even_when_forced(runner, cli, tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    for extra in ([], ["--force"]):  # --force replaces only opgen's own outputs (issue #24)
        r = runner.invoke(cli, ["build", "native-stage1", "--out", str(out), "--limit", "5", *extra])
        assert r.exit_code == 1 and "notes.txt" in r.output and "pass --force" not in r.output, r.output
        assert [p.name for p in out.iterdir()] == ["notes.txt"]


@pytest.mark.slow
def test_a_build_holding_unlisted_files_is_replaced_only_when_forced(runner, cli, tmp_path):
    out = tmp_path / "o"
    assert runner.invoke(cli, ["build", "native-stage1", "--out", str(out), "--limit", "5"]).exit_code == 0
    (out / "notes.txt").write_text("mine")
    r = runner.invoke(cli, ["build", "native-stage1", "--out", str(out), "--limit", "5"])
    assert r.exit_code == 1 and "notes.txt" in r.output and "--force" in r.output
    assert (out / "notes.txt").exists()
    r = runner.invoke(cli, ["build", "native-stage1", "--out", str(out), "--limit", "5", "--force"])
    assert r.exit_code == 0, r.output
    _state(out)


@pytest.mark.slow
def test_only_updates_the_manifest_in_place(runner, cli, tmp_path):
    out = tmp_path / "o"
    full = ["build", "native-stage2", "--out", str(out), "--limit", "30", "--workers", "1"]
    assert runner.invoke(cli, full).exit_code == 0
    before = json.loads((out / "manifest.json").read_text())
    r = runner.invoke(cli, full + ["--only", "stage2_l1_train"])
    assert r.exit_code == 0, r.output
    after = json.loads((out / "manifest.json").read_text())
    assert list(after["splits"]) == list(before["splits"])  # push publishes all four configs still
    for name in before["splits"]:
        if name != "stage2_l1_train":
            assert after["splits"][name] == before["splits"][name]
    assert after["splits"]["stage2_l1_train"]["built_with"] == ["stage2_l1_train"]
    assert {tuple(p) for p in after["leakage"]["unchecked_pairs"]} == {("stage2_l18_test", "stage2_l1_train")}
    _state(out)
    assert runner.invoke(cli, ["validate", str(out)]).exit_code == 0
    # another recipe's build is not updated in place
    r = runner.invoke(cli, ["build", "native-stage1", "--out", str(out), "--limit", "30", "--only", "stage1_l1_test"])
    assert r.exit_code == 2 and "--force" in r.output
    assert json.loads((out / "manifest.json").read_text()) == after


@pytest.mark.slow
def test_validate_flags_files_the_manifest_does_not_list(runner, cli, tmp_path):
    out = tmp_path / "o"
    assert runner.invoke(cli, ["build", "native-stage1", "--out", str(out), "--limit", "20"]).exit_code == 0
    (out / "old_split.parquet").write_bytes((out / "stage1_l1_test.parquet").read_bytes())
    r = runner.invoke(cli, ["validate", str(out)])
    assert r.exit_code == 1 and "old_split.parquet: not listed" in r.output


def test_a_failed_build_creates_no_output_directory(runner, cli, tmp_path):
    (tmp_path / "r.yaml").write_text("name: r\nsplits:\n  s:\n    generator: trees\n    role: eval\n"
                                     "    unique: program\n"
                                     "    options: {ops: [func_3], depths: [1], rows: 40, max_attempts: 50}\n")
    out = tmp_path / "o"
    r = runner.invoke(cli, ["build", str(tmp_path / "r.yaml"), "--out", str(out)])
    assert r.exit_code != 0
    assert not out.exists() and _leftovers(tmp_path) == []


@pytest.mark.parametrize("swap, point, sig, code", [("rename", "between-renames", "TERM", 143),
                                                    ("exchange", "before-swap", "INT", 130)])
def test_sigint_or_sigterm_during_the_swap_is_taken_after_it(tmp_path, swap, point, sig, code):
    out = tmp_path / "o"
    args = ["build", "native-stage1", "--out", str(out), "--limit", "40", "--workers", "1"]
    assert _run(args).returncode == 0
    env = {"OPGEN_FAULT": f"{point}:{sig}", **({"OPGEN_SWAP": "rename"} if swap == "rename" else {})}
    r = _run(args + ["--seed", "9"], env=env)
    assert r.returncode == code and "holds this build" in r.stderr, r.stderr
    assert _state(out)[0] == 9 and _leftovers(tmp_path) == []


# ---------------------------------------------------------------- 5. dead workers, hostile operators (issue 32)

HOSTILE_RECIPE = ("name: hostile-build\nsplits:\n  s:\n    generator: trees\n    role: train\n    shard_rows: 500\n"
                  "    options: {ops: train, depths: [1, 2], rows: 2000}\n")

# what the error says each kind of tests/user_libraries.py's HOSTILE operators did
DID = {"system_exit": "raised SystemExit: 3", "keyboard_interrupt": "raised KeyboardInterrupt",
       "os_exit": "called os._exit(3)", "not_a_str": "returned int", "loops": "ran past the per-call budget of 0.5 s"}


@pytest.fixture
def previous(runner, cli, tmp_path):
    """An earlier build in tmp_path/o, and its files' bytes: what a failed or stopped build must leave."""
    out = tmp_path / "o"
    r = runner.invoke(cli, ["build", "native-stage1", "--out", str(out), "--limit", "20", "--workers", "1"])
    assert r.exit_code == 0, r.output
    return out, _files(out)


def _files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in out.iterdir()}


def _hostile_build(tmp_path: Path, kind: str) -> list[str]:
    recipe = tmp_path / "hostile.yaml"
    recipe.write_text(HOSTILE_RECIPE)
    return ["build", str(recipe), "--library", str(U.write_hostile(tmp_path, kind)), "--out", str(tmp_path / "o"),
            "--op-budget", "0.5", "--no-progress"]


def _named(text: str, kind: str) -> None:
    """The error names the operator, the input it misbehaved on (over five characters, as HOSTILE says),
    what it did, the split and the row, and is no traceback."""
    assert "Traceback" not in text, text
    assert "operator 'bad' of library 'hostile': bad('" in text and DID[kind] in text, text
    assert "hostile.yaml: splits.s: row " in text, text
    shown = text.split("bad('", 1)[1].split("')", 1)[0]
    assert len(shown) > 5 and shown.isalpha(), text
    if kind == "not_a_str":
        assert f"returned int {len(shown)}," in text, text


@pytest.mark.parametrize("kind", [k if k != "loops" else pytest.param(k, marks=pytest.mark.slow) for k in DID])
def test_a_hostile_operator_stops_a_one_worker_build_naming_itself_and_its_input(runner, cli, tmp_path, kind,
                                                                                 previous):
    out, before = previous
    r = runner.invoke(cli, [*_hostile_build(tmp_path, kind), "--workers", "1"])
    assert r.exit_code == 1, r.output
    _named(r.output, kind)
    assert _files(out) == before and _leftovers(tmp_path) == []


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(DID))
def test_a_hostile_operator_in_a_worker_stops_the_build_naming_itself_and_its_input(tmp_path, kind, previous):
    out, before = previous
    mark = f"OPGEN_TEST_MARK={uuid.uuid4().hex}"
    key, value = mark.split("=")
    r = _run([*_hostile_build(tmp_path, kind), "--workers", "2"], env={key: value}, timeout=300)
    assert r.returncode == 1, r.stderr
    _named(r.stderr, kind)
    assert _files(out) == before and _leftovers(tmp_path) == []
    assert _wait_gone(mark) == []


@pytest.mark.slow
@pytest.mark.parametrize("workers, code", [(1, opwatch.EXIT_STUCK), (2, 1)])
def test_an_operator_that_swallows_what_stops_it_ends_its_process_naming_itself(tmp_path, workers, code, previous):
    out, before = previous
    r = _run([*_hostile_build(tmp_path, "swallows"), "--workers", str(workers)], timeout=300)
    assert r.returncode == code, r.stderr
    assert "operator 'bad': bad('" in r.stderr and "did not stop when interrupted" in r.stderr, r.stderr
    if workers == 2:
        assert "its worker process ended itself" in r.stderr and "producing shard" in r.stderr, r.stderr
    assert _files(out) == before  # a process that ended itself leaves its staging folder to the next build


@pytest.mark.slow
def test_a_worker_killed_once_is_replaced_and_the_files_are_unchanged(tmp_path):
    recipe = tmp_path / "sharded.yaml"
    recipe.write_text(SHARDED)
    args = ["build", str(recipe), "--limit", "2000", "--workers", "2", "--no-progress"]
    assert _run([*args, "--out", str(tmp_path / "clean")], timeout=300).returncode == 0
    r = _run([*args, "--out", str(tmp_path / "killed")], env={"OPGEN_FAULT": "shard-worker:KILL"}, timeout=300)
    assert r.returncode == 0, r.stderr
    assert _files(tmp_path / "killed") == _files(tmp_path / "clean")


@pytest.mark.slow
def test_a_worker_that_always_dies_fails_the_build_naming_the_shard(tmp_path, previous):
    out, before = previous
    recipe = tmp_path / "sharded.yaml"
    recipe.write_text(SHARDED)
    mark = f"OPGEN_TEST_MARK={uuid.uuid4().hex}"
    key, value = mark.split("=")
    r = _run(["build", str(recipe), "--out", str(out), "--limit", "1000", "--workers", "2", "--no-progress"],
             env={"OPGEN_FAULT": "shard-worker-always:KILL", key: value}, timeout=300)
    assert r.returncode == 1, r.stderr
    assert "sharded.yaml: splits.s: producing shard " in r.stderr and "(rows " in r.stderr, r.stderr
    assert "its worker process died (killed by SIGKILL" in r.stderr and "and so did the fresh one" in r.stderr
    assert "left its output directory as it was" in r.stderr and "Traceback" not in r.stderr
    assert _files(out) == before and _leftovers(tmp_path) == []
    assert _wait_gone(mark) == []


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _busy_tree(pid: int, workers: int) -> bool:
    """The build has its workers and is burning CPU (inside the looping operator)."""
    try:
        kids = [int(k) for k in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        return len(kids) >= (workers if workers > 1 else 0) and \
            sum(_cpu_seconds(p) for p in [pid, *kids]) >= 2.0 + (0.5 if workers > 1 else 0)
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("sig, workers, code", [("TERM", 1, 143), ("TERM", 2, 143), ("INT", 2, 130)])
def test_a_signal_to_the_process_group_ends_a_build_stuck_in_an_operator(tmp_path, previous, sig, workers, code):
    """What timeout and Slurm send: the whole group, the build's workers included, gets the signal."""
    out, before = previous
    mark = f"OPGEN_TEST_MARK={uuid.uuid4().hex}"
    key, value = mark.split("=")
    args = _hostile_build(tmp_path, "loops")
    args[args.index("--op-budget") + 1] = "3600"  # only the signal can end it
    proc = subprocess.Popen([*OPGEN, *args, "--workers", str(workers)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, key: value})
    try:
        deadline = time.monotonic() + 240
        while not _busy_tree(proc.pid, workers) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()
        os.killpg(proc.pid, getattr(signal, "SIG" + sig))
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == code, err
    assert "is as it was before this build" in err and "Traceback" not in err, err
    assert _files(out) == before and _leftovers(tmp_path) == []
    assert _wait_gone(mark) == []
