"""Grading rows of a user operator library (issue 25): a 6-operator library (tests/user_libraries.py), rows built
by hand with the ground truth's ``library`` key, graded through ``opgen score --library``,
``opgen.score.grade(library=)``, ``compute_score`` (the row's own library) and the static path."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest
import user_libraries as U

from opgen import library as L
from opgen.ops import OperatorLibrary

YAML = U.TOY

# The same operators with a cost bound each (tests/user_libraries.py): a module:obj library.
MODULE = U.costed_module("toy.yaml", "toy", "(2 * n + 2, 4 * n + 16, 0)")

# (expression, its operators in first-appearance order) over x = "abcXyz"
EXPRS = [("rev(shift(x, 2))", ["rev", "shift"]), ("dup(evens(x))", ["dup", "evens"]),
         ("swapc(tail(x, 1))", ["swapc", "tail"])]
X = "abcXyz"


@pytest.fixture
def lib_files(tmp_path, monkeypatch):
    (tmp_path / "toy.yaml").write_text(YAML)
    (tmp_path / "toy_lib_mod.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("toy_lib_mod", None)
    return tmp_path


def _value(lib: OperatorLibrary, expression: str) -> str:
    ns = {op.id: op.fn for op in lib.operators}
    return eval(expression, {"__builtins__": {}}, {**ns, "x": X})  # the test's own expression


def _truth(lib: OperatorLibrary, spec: str, expression: str, used: list[str]) -> dict:
    return {"mode": "program", "library": {"name": lib.name, "digest": lib.digest, "spec": spec},
            "tasks": [{"entry": "main_solution", "expr": expression, "input": X, "output": _value(lib, expression),
                       "ops": used, "depth": 2}]}


def _answer(lib: OperatorLibrary, expression: str, used: list[str], body: str | None = None,
            recall_as: dict[str, str] | None = None) -> str:
    recall_as = recall_as or {}
    parts = []
    for op_id in used:
        src = recall_as.get(op_id, lib.get(op_id).source)
        parts.append(f"Recall {op_id}: {lib.get(op_id).gloss}\n```python\n{src}```\n")
    defs = "\n".join(lib.get(o).source for o in used)
    parts.append(f"Assemble:\n```python\n{defs}\ndef main_solution(x):\n    return {body or expression}\n```\n")
    return "\n".join(parts)


def _row(i: int, truth: dict, used: list[str], split: str) -> dict:
    return {"data_source": "opgen/user_trees", "prompt": [{"role": "user", "content": "write main_solution"}],
            "ability": "code", "reward_model": {"style": "rule", "ground_truth": json.dumps(truth)},
            "extra_info": {"index": i, "split": split, "family": "trees", "depth": 2, "k": len(used), "ops": used,
                           "answer_format": "ra", "mode": "program", "assistant_prefix": ""}}


def _write(tmp_path: Path, rows: list[dict], answers: list[str]) -> tuple[Path, Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist(rows), data)
    responses = tmp_path / "responses.jsonl"
    responses.write_text("".join(json.dumps({"index": i, "response": a}) + "\n" for i, a in enumerate(answers)))
    return data, responses


def test_gold_and_wrong_answers_through_opgen_score_library(lib_files, cli, runner, monkeypatch):
    spec = str(lib_files / "toy.yaml")
    lib = L.load(spec)
    assert len(lib) == 6 and lib.heldout_ids == ("shift", "swapc")
    rows, answers = [], []
    for e, used in EXPRS:
        rows.append(_row(len(rows), _truth(lib, spec, e, used), used, "test"))
        answers.append(_answer(lib, e, used))
    e, used = EXPRS[0]
    rows.append(_row(len(rows), _truth(lib, spec, e, used), used, "test"))
    answers.append(_answer(lib, e, used, body="shift(rev(x), 2)+'!'"))  # a wrong program
    data, responses = _write(lib_files, rows, answers)
    out = lib_files / "report"
    res = runner.invoke(cli, ["score", "--data", str(data), "--responses", str(responses), "--out", str(out),
                              "--workers", "1", "--library", spec, "--no-plots"])
    assert res.exit_code == 0, res.output
    recs = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    assert [r["score"] for r in recs] == [1.0, 1.0, 1.0, 0.0]
    assert recs[3]["error"] == "wrong_output"
    assert all(r["structure_ok"] for r in recs[:3]) and recs[3]["structure_ok"] is False
    assert all(c["verdict"] == "correct" for r in recs for c in r["recalls"])
    # roles come from the library's split: shift and swapc are held out
    assert [r["scope"] for r in recs] == ["ood", "id", "ood", "ood"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["library"] == {"name": "toy", "digest": lib.digest}

    # Without --library, and not registered, the rows are refused before any grading, naming the
    # first row (exit 2); the spec the rows still carry (rows of opgen before issue 31) is never loaded.
    monkeypatch.setenv("OPGEN_HOME", str(lib_files / "empty-store"))
    res = runner.invoke(cli, ["score", "--data", str(data), "--responses", str(responses), "--out",
                              str(lib_files / "r2"), "--workers", "1", "--no-plots"])
    assert res.exit_code == 2, res.output
    assert "row 0" in res.output and "opgen ops add" in res.output and lib.digest[:12] in res.output
    assert not (lib_files / "r2").exists()


def test_a_study_recall_is_diagnosed_and_a_wrong_body_is_wrong(lib_files):
    from opgen import ops
    from opgen.score import grade

    spec = str(lib_files / "toy.yaml")
    lib = L.load(spec)
    e, used = EXPRS[1]
    gt = _truth(lib, spec, e, used)
    # recalling the study's func_2 where the library's dup is needed: an extra recall, dup missing
    answer = (f"Recall func_2: {ops.get('func_2').gloss}\n```python\n{ops.get('func_2').source}```\n"
              f"Recall evens: keep\n```python\n{lib.get('evens').source}```\n"
              f"Assemble:\n```python\n{ops.get('func_2').source}\n{lib.get('evens').source}\n"
              f"def main_solution(x):\n    return func_2(evens(x))\n```\n")
    g = grade(gt, answer, library=lib, answer_format="ra")
    assert g["score"] == 0.0 and g["error"] == "wrong_output"
    assert g["missing"] == ["dup"] and g["extra"] == ["func_2"] and g["structure_ok"] is False
    # a recall of dup with a body that behaves as evens: a chimera of the library's own operator
    g = grade(gt, _answer(lib, e, used, recall_as={"dup": "def dup(s):\n    return s[::2]\n"}), library=lib,
              answer_format="ra")
    assert g["score"] == 1.0
    assert g["recalls"][0] == {"op": "dup", "verdict": "chimera", "chimera_of": "evens", "detail": "behaves as evens"}


def test_static_path_with_costs_and_sandbox_without(lib_files):
    from opgen.score.judge import grade_in_process
    from opgen.score.settings import GradeSettings

    class NoSandbox:  # the static path's limits; running anything is this test's failure
        timeout_s, memory_mb, max_output = 2.0, 512, 100_000

        def run_units(self, units):
            raise AssertionError("the sandbox was asked")

    spec = str(lib_files / "toy.yaml")
    yaml_lib = L.load(spec)
    mod_lib = L.load("toy_lib_mod:LIB")
    assert mod_lib.digest == yaml_lib.digest and all(op.cost for op in mod_lib.operators)
    for e, used in EXPRS:
        gt = _truth(mod_lib, "toy_lib_mod:LIB", e, used)
        g = grade_in_process(gt, _answer(mod_lib, e, used), settings=GradeSettings(library=mod_lib),
                             sandbox=NoSandbox(), answer_format="ra")  # type: ignore[arg-type]
        assert g["score"] == 1.0 and g["structure_ok"], g
    # A YAML library has no costs: the static path declines and the program must run.
    e, used = EXPRS[0]
    with pytest.raises(AssertionError, match="the sandbox was asked"):
        grade_in_process(_truth(yaml_lib, spec, e, used), _answer(yaml_lib, e, used),
                         settings=GradeSettings(library=yaml_lib), sandbox=NoSandbox(),  # type: ignore[arg-type]
                         answer_format="ra")


def test_module_library_through_opgen_score(lib_files, cli, runner):
    lib = L.load("toy_lib_mod:LIB")
    rows, answers = [], []
    for e, used in EXPRS:
        rows.append(_row(len(rows), _truth(lib, "toy_lib_mod:LIB", e, used), used, "test"))
        answers.append(_answer(lib, e, used))
    data, responses = _write(lib_files, rows, answers)
    res = runner.invoke(cli, ["score", "--data", str(data), "--responses", str(responses), "--out",
                              str(lib_files / "m"), "--workers", "1", "--library", "toy_lib_mod:LIB", "--no-plots"])
    assert res.exit_code == 0, res.output
    recs = [json.loads(line) for line in (lib_files / "m" / "scores.jsonl").read_text().splitlines()]
    assert [r["score"] for r in recs] == [1.0, 1.0, 1.0]


def test_a_row_library_is_found_by_digest_never_loaded_from_its_spec(lib_files, monkeypatch):
    from opgen import reward, score_answers
    from opgen.score import grade

    monkeypatch.setenv("OPGEN_HOME", str(lib_files / "store"))
    spec = str(lib_files / "toy.yaml")
    lib = L.load(spec)
    e, used = EXPRS[2]
    gt = _truth(lib, spec, e, used)  # a row of opgen before issue 31: it names its spec, which is never loaded
    gold = _answer(lib, e, used)
    # not given, not registered: the named error, never a grade of 0
    with pytest.raises(L.UnknownLibrary, match="opgen ops add"):
        reward.compute_score("opgen/user_trees", gold, json.dumps(gt), {"answer_format": "ra"})
    # registered (opgen ops add, or the build): found by its digest
    L.store.add(lib)
    r = reward.compute_score("opgen/user_trees", gold, json.dumps(gt), {"answer_format": "ra"})
    assert r["score"] == 1.0 and r["error"] == ""
    batch = reward.compute_score_batch(["d", "d"], [gold, "nothing"], [json.dumps(gt)] * 2,
                                       [{"answer_format": "ra"}] * 2)
    assert [b["score"] for b in batch] == [1.0, 0.0]
    assert grade(gt, gold, answer_format="ra")["score"] == 1.0
    # a ground truth whose digest is no registered library's: the named error
    other = {**gt, "library": {**gt["library"], "digest": "0" * 64}}
    with pytest.raises(L.UnknownLibrary):
        reward.compute_score("opgen/user_trees", gold, json.dumps(other), {"answer_format": "ra"})
    # a user library given for a study row, and another library given for the user's row: the mismatch error
    study_gt = {"mode": "program", "tasks": [{"entry": "main_solution", "expr": "func_2(x)", "input": "ab",
                                              "output": "ab", "ops": ["func_2"], "depth": 1}]}
    with pytest.raises(L.LibraryMismatch):
        grade(study_gt, gold, library=spec)
    (lib_files / "six.yaml").write_text(U.SIX)
    with pytest.raises(L.LibraryMismatch, match="row 0"):
        score_answers([_row(0, gt, used, "test")], [gold], library=str(lib_files / "six.yaml"))
    # a record built by hand for another library (the low-level path): the grade's error class
    from opgen.score.judge import grade_in_process
    from opgen.score.settings import GradeSettings

    g = grade_in_process(study_gt, gold, settings=GradeSettings(library=lib))
    assert g["error"] == "library_mismatch" and "toy" in g["detail"]


def test_the_library_wire_form_rebuilds_the_library():
    from opgen.library.wire import from_wire
    from opgen.score.settings import GradeSettings, SettingsError

    lib = L.build("wire-toy", [{"id": "rev2", "gloss": "reverse", "split": "train",
                                "source": "def rev2(s):\n    return s[::-1]\n"},
                               {"id": "pick", "gloss": "pick", "split": "heldout",
                                "params": [{"name": "c", "kind": "choice", "choices": ["a", "b"]}],
                                "source": "def pick(s, c):\n    return s + c\n"}])
    wire = GradeSettings(library=lib).to_wire()
    assert "library" not in GradeSettings().to_wire()
    import marshal

    wire = marshal.loads(marshal.dumps(wire))  # plain values only
    assert wire["library"]["digest"] == lib.digest
    assert GradeSettings.from_wire(wire).library.digest == lib.digest
    bad = {**wire, "library": {**wire["library"], "digest": "f" * 64}}
    with pytest.raises(L.LibraryError, match="digest"):
        from_wire(bad["library"])
    assert GradeSettings.resolve(library="study").library is L.STUDY
    with pytest.raises(SettingsError, match="OperatorLibrary"):
        dataclasses.replace(GradeSettings(), library="study")


@pytest.mark.slow  # a sandbox, and the grader loads matplotlib (~3 s)
def test_the_sweeps_grader_grades_a_registered_librarys_rows_with_it(lib_files, monkeypatch):
    """The sweep's grader (chunk by chunk, `opgen eval --executor ray`) finds the rows' library as
    `opgen score` does, without --library: its report names it; a chunk of another library is refused."""
    from opgen.distributed.driver import Grader
    from opgen.score.inputs import Row
    from opgen.score.settings import GradeSettings

    monkeypatch.setenv("OPGEN_HOME", str(lib_files / "store"))
    spec = str(lib_files / "toy.yaml")
    lib = L.load(spec)
    L.store.add(lib)
    rows = [_row(i, _truth(lib, spec, e, used), used, "test") for i, (e, used) in enumerate(EXPRS)]
    data, responses = _write(lib_files, rows, [_answer(lib, e, used) for e, used in EXPRS])
    scored = {i: Row(i, r["reward_model"]["ground_truth"], r["data_source"], r["extra_info"])
              for i, r in enumerate(rows)}
    lines = responses.read_text().splitlines(keepends=True)
    grader = Grader(1, GradeSettings(), plots=False)
    try:
        for i in (2, 0, 1):  # chunks of one row, in any order
            grader.grade("p", str(data), len(rows), {i: scored[i]}, lines[i], str(responses))
        summary, _ = grader.finish("p", 3, str(data), len(rows), str(responses), str(lib_files / "out"))
        assert summary["library"] == {"name": "toy", "digest": lib.digest}
        assert summary["overall"]["acc"] == 1.0
        recs = [json.loads(line) for line in (lib_files / "out" / "scores.jsonl").read_text().splitlines()]
        assert [r["index"] for r in recs] == [0, 1, 2] and [r["scope"] for r in recs] == ["ood", "id", "ood"]
        # a study row in a later chunk of the same pass: one file, one library
        study = Row(3, json.dumps({"mode": "program", "tasks": [{"entry": "main_solution", "expr": "func_3(x)",
                                                                 "input": "ab", "output": "ba", "ops": ["func_3"],
                                                                 "depth": 1}]}), "", {})
        grader.grade("q", str(data), 4, {0: scored[0]}, lines[0], str(responses))
        with pytest.raises(L.LibraryMismatch, match="another than the chunks before it"):
            grader.grade("q", str(data), 4, {3: study}, '{"index": 3, "response": "x"}\n', str(responses))
    finally:
        grader.close()
