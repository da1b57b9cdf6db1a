"""opgen.score.batch: the grading processes give exactly grade_in_process()'s grades, and fail safe."""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from bench_score import mixed_rows, typical_rows

from opgen.score import batch as B
from opgen.score import grade
from opgen.score.judge import grade_in_process
from opgen.score.sandbox import Sandbox
from opgen.score.settings import GradeSettings


@pytest.fixture(scope="module")
def box():
    with Sandbox(workers=2, timeout_s=1.0) as b:
        yield b
    B.close_pool()


def _items(n: int, seed: int = 3) -> list[B.Item]:
    rows = mixed_rows(typical_rows(n, seed=seed), timeouts=0.0, seed=seed)
    items = [B.Item(gt, answer) for gt, answer in rows]
    rng = random.Random(seed)
    # forward rows and rows without an answer go through the pool too
    for k in range(0, n, 17):
        gt = dict(items[k].ground_truth, mode="forward")
        out = gt["tasks"][0]["output"]
        items[k] = B.Item(gt, rng.choice([f'{{"output": {out!r}}}'.replace("'", '"'), "no idea", ""]))
    return items


def _want(items, box, **options):
    return [grade_in_process(i.ground_truth, i.response, sandbox=box, settings=GradeSettings(**options))
            for i in items]


def test_the_pool_grades_as_grade_does(box):
    items = _items(300)
    want = _want(items, box)
    assert B.grade_many(items, sandbox=box, processes=2) == want
    assert [grade(i.ground_truth, i.response, sandbox=box) for i in items[:40]] == want[:40]
    # and with other options, passed through to the processes
    want = _want(items, box, policy="output_structure", group="all")
    assert B.grade_many(items, sandbox=box, processes=2,
                        settings=GradeSettings(policy="output_structure", group="all")) == want


def test_static_off_and_one_process_grade_the_same(box):
    items = _items(100)
    want = _want(items, box)
    assert B.grade_many(items, sandbox=box, processes=1) == want
    off = GradeSettings(static=False)
    assert B.grade_many(items, sandbox=box, processes=2, settings=off) == _want(items, box, static=False)


def test_no_grading_in_this_process(box, monkeypatch):
    """The trusted side never parses or compiles a response: ast.parse, compile and the static
    evaluation refuse here, and every grade still comes back (from the grading processes)."""
    import ast
    import builtins

    from opgen.score import static as S

    items = _items(80)
    want = _want(items, box)

    def refuse(*args, **kwargs):
        raise AssertionError("model text parsed in the trusted process")

    monkeypatch.setattr(ast, "parse", refuse)
    monkeypatch.setattr(builtins, "compile", refuse)
    monkeypatch.setattr(S, "evaluate", refuse)
    assert B.grade_many(items, sandbox=box, processes=2) == want
    assert [grade(i.ground_truth, i.response, sandbox=box) for i in items[:5]] == want[:5]


def test_a_grading_process_that_dies_costs_only_time(box):
    items = _items(200)
    want = _want(items, box)
    B.grade_many(items[:10], sandbox=box, processes=2)
    pool = B._grading_pool(2)
    for g in list(pool.graders):
        g.proc.kill()
        g.proc.wait()
    got = B.grade_many(items, sandbox=box, processes=2)
    # a process found dead is replaced (on main: the response it was given first graded 'killed')
    retried = [k for k, g in enumerate(got) if g.pop("retries", 0)]
    assert len(retried) <= 2 and got == want, retried
    assert all(g.proc.poll() is None for g in pool.graders)  # replaced
    assert B.grade_many(items, sandbox=box, processes=2) == want


def test_the_grade_crosses_the_wire_compact_and_comes_back_equal(box):
    """Grading processes reply with the grade's compact form (its values, no keys); the scorer's
    dict is the grade, key order included (the report writes it as it is)."""
    import json
    import marshal

    from opgen.score import judge

    items = _items(120)
    for g in _want(items, box) + [judge.failure(judge.load_truth(items[0].ground_truth), "auto", "killed", "x")]:
        compact = judge.grade_to_wire(g)
        assert type(compact) is tuple, g
        back = judge.grade_from_wire(marshal.loads(marshal.dumps(compact)))
        assert json.dumps(back) == json.dumps(g)
        assert len(marshal.dumps(compact)) < 0.6 * len(marshal.dumps(g))
    odd = {"mode": "program", "score": 1.0}  # another shape goes as the dict it is
    assert judge.grade_to_wire(odd) is odd and judge.grade_from_wire(odd) is odd


def test_errors_are_raised_as_grade_raises_them(box):
    items = _items(100)
    items[40] = B.Item({"tasks": []}, "x")
    with pytest.raises(ValueError, match="tasks is empty"):
        B.grade_many(items, sandbox=box, processes=2)


def test_process_count_from_the_environment(monkeypatch):
    monkeypatch.setenv("OPGEN_GRADE_PROCESSES", "3")
    assert B.default_processes() == 3
    monkeypatch.setenv("OPGEN_GRADE_PROCESSES", "many")
    with pytest.raises(ValueError, match="OPGEN_GRADE_PROCESSES"):
        B.default_processes()
    monkeypatch.setenv("OPGEN_GRADE_PROCESSES", "0")  # nothing is graded in the trusted process
    with pytest.raises(ValueError, match=">= 1"):
        B.default_processes()
    monkeypatch.delenv("OPGEN_GRADE_PROCESSES")
    assert B.default_processes() == min(8, os.cpu_count() or 1)


def test_compute_score_batch_equals_compute_score_on_a_large_batch(monkeypatch):
    from opgen.reward import compute_score, compute_score_batch

    items = _items(150, seed=9)
    sources = ["opgen"] * len(items)
    texts = [i.response for i in items]
    truths = [i.ground_truth for i in items]
    for keys in ("full", "minimal"):
        want = [compute_score(s, t, g, None, keys=keys) for s, t, g in zip(sources, texts, truths)]
        assert compute_score_batch(sources, texts, truths, keys=keys) == want


def test_chunks_are_bounded_in_items_and_characters(monkeypatch):
    monkeypatch.setattr(B, "CHUNK_CHARS", 100)
    items = [B.Item({}, "x" * n) for n in (10, 60, 50, 5, 200, 1, 1, 1)]
    assert B._chunks(items, 3) == [(0, 2), (2, 4), (4, 5), (5, 8)]
    assert B._chunks([], 3) == []


@pytest.mark.slow
def test_a_grading_process_that_hangs_is_replaced(box, monkeypatch):
    items = _items(100)
    want = _want(items, box)
    B.grade_many(items[:10], sandbox=box, processes=2)
    pool = B._grading_pool(2)
    for g in list(pool.graders):
        os.kill(g.proc.pid, 19)  # SIGSTOP: alive, and silent
    monkeypatch.setattr(B, "RESPONSE_WALL_S", 1.0)
    got = B.grade_many(items, sandbox=box, processes=2)
    # each stopped process costs the one response it was given: 'timeout', the rest as before
    bad = [k for k, (a, b) in enumerate(zip(got, want)) if a != b]
    assert len(bad) <= 2 and all(got[k]["error"] == "timeout" for k in bad), bad
    monkeypatch.undo()
    assert B.grade_many(items, sandbox=box, processes=2) == want


@pytest.mark.slow
def test_opgen_score_writes_the_same_bytes_with_and_without_grading_processes(tmp_path):
    """End to end through the CLI: a file of 96 responses (a batch for the pool) graded with
    OPGEN_GRADE_PROCESSES=1 and =2 gives byte-identical artifacts."""
    import json
    import subprocess

    import pyarrow.parquet as pq
    from test_score_cli import RECIPE, gold, wrong

    (tmp_path / "r.yaml").write_text(RECIPE)
    subprocess.run([sys.executable, "-m", "opgen", "build", str(tmp_path / "r.yaml"), "--out", str(tmp_path / "b"),
                    "--workers", "1"], check=True, capture_output=True)
    data = tmp_path / "b" / "heldout_trees.parquet"
    rows = pq.read_table(data).to_pylist()
    rpath = tmp_path / "r.jsonl"
    rpath.write_text("".join(json.dumps({"index": i, "responses": [gold(r), wrong(r, gold(r)), "nothing"] * 2}) + "\n"
                             for i, r in enumerate(rows)))
    outs = []
    for n, flag in (("1", []), ("1", ["--grade-processes", "2"]), ("2", [])):
        out = tmp_path / f"o{len(outs)}"
        proc = subprocess.run([sys.executable, "-m", "opgen", "score", "--data", str(data), "--responses", str(rpath),
                               "--out", str(out), *flag], capture_output=True, text=True,
                              env={**os.environ, "OPGEN_GRADE_PROCESSES": n})
        assert proc.returncode == 0, proc.stderr
        outs.append(out)
    bad = subprocess.run([sys.executable, "-m", "opgen", "score", "--data", str(data), "--responses", str(rpath),
                          "--out", str(tmp_path / "bad"), "--grade-processes", "0"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--grade-processes" in bad.stderr and "Traceback" not in bad.stderr
    for name in ("scores.jsonl", "summary.json", "summary.csv"):
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes() == (outs[2] / name).read_bytes(), name
    scores = [json.loads(line)["score"] for line in (outs[1] / "scores.jsonl").read_text().splitlines()]
    assert scores.count(1.0) == 2 * len(rows)


def test_an_interpreter_that_cannot_grade_is_a_clear_error(box, monkeypatch):
    items = _items(20)
    B.close_pool()
    monkeypatch.setattr(B.sys, "executable", "/bin/false")
    with pytest.raises(B.GradingError, match="grading process"):
        B.grade_many(items, sandbox=box, processes=2)
    monkeypatch.undo()
    B.close_pool()
    assert B.grade_many(items, sandbox=box, processes=2) == _want(items, box)


def test_a_program_that_does_not_compile_is_answered_without_the_sandbox(box):
    items = _items(200)
    broken = [k for k, i in enumerate(items) if "def main_solution(x)\n" in i.response]
    assert broken
    answered: list[int] = []
    got = B.grade_many(items, sandbox=box, processes=2, answered=lambda i, g: answered.append(i) or g)
    assert set(broken) <= set(answered)
    assert all(got[k]["tasks"][0]["status"] == "syntax" for k in broken)
    assert got == _want(items, box)


def test_ground_truths_from_a_dataframe_go_as_json(box):
    import numpy as np

    items = _items(6)
    with_numpy = [B.Item({k: (np.array(v, dtype=object) if k == "tasks" else v) for k, v in i.ground_truth.items()},
                         i.response) for i in items]
    assert B.grade_many(with_numpy, sandbox=box, processes=1) == _want(items, box)
