"""Operator libraries as values (opgen.ops.OperatorLibrary, opgen.library) and `opgen ops check`'s laws
(opgen.opscheck), on the study's library and on user libraries defined inside the tests (issue 25)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import user_libraries as U

from opgen import library, ops, opscheck, opwatch

# Six operators, every signature kind, one recursive (tests/user_libraries.py).
SIX_YAML = U.KINDS

BROKEN_MODULE = textwrap.dedent('''\
    import dataclasses

    from opgen import library, ops

    _base = library.build("broken", [
        {"id": "first", "gloss": "the first character", "split": "train",
         "source": "def first(s):\\n    return s[0]\\n"},
        {"id": "flaky", "gloss": "a counter's parity appended", "split": "train",
         "source": "COUNT = [0]\\n\\n\\ndef flaky(s):\\n    COUNT[0] += 1\\n    return s + str(COUNT[0] % 2)\\n"},
        {"id": "dbl", "gloss": "the string twice", "split": "heldout",
         "source": "def dbl(s):\\n    return s + s\\n"},
        {"id": "ok", "gloss": "the string", "split": "heldout", "source": "def ok(s):\\n    return s\\n"},
        {"id": "peek", "gloss": "reads a file", "split": "heldout",
         "source": "def peek(s):\\n    import os\\n    with open(os.devnull) as f:\\n        return s + f.read()\\n"},
    ])
    # dbl lies twice: its growth bound says it keeps the length, its cost bound that it never grows.
    _lies = {"dbl": dict(out_len=lambda n, p: n, cost=lambda n, p: (n, n + 1, 0)),
             "ok": dict(out_len=lambda n, p: n, cost=lambda n, p: (n, 1, 0))}
    BROKEN = ops.OperatorLibrary("broken", tuple(dataclasses.replace(op, **_lies.get(op.id, {}))
                                                 for op in _base.operators))
    NOT_A_LIBRARY = 3
    ''')


@pytest.fixture
def six(tmp_path) -> Path:
    path = tmp_path / "six.yaml"
    path.write_text(SIX_YAML)
    return path


@pytest.fixture
def broken_module(tmp_path, monkeypatch) -> str:
    (tmp_path / "broken_ops_lib.py").write_text(BROKEN_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("broken_ops_lib", None)
    return "broken_ops_lib:BROKEN"


# ------------------------------------------------------------------ the library as a value


def test_the_study_library_is_the_operators_in_order():
    assert ops.DEFAULT_LIBRARY is ops.STUDY
    assert ops.STUDY.operators is ops.OPERATORS
    assert ops.STUDY.ids == ops.ALL_IDS
    assert (ops.STUDY.train_ids, ops.STUDY.heldout_ids) == (ops.TRAIN_IDS, ops.HELDOUT_IDS)
    assert ops.STUDY.get("func_3") is ops.get("func_3")
    with pytest.raises(ops.UnknownOperator, match="unknown operator 'func_99'"):
        ops.STUDY.get("func_99")
    described = ops.STUDY.describe()
    assert described == {"name": "study", "digest": ops.STUDY.digest, "n_operators": len(ops.OPERATORS),
                         "train": list(ops.TRAIN_IDS), "heldout": list(ops.HELDOUT_IDS)}


def test_the_digest_is_content_only_and_independent_of_the_hash_seed(six):
    user = library.from_yaml(six)
    assert len(user.digest) == 64 and user.digest != ops.STUDY.digest
    renamed = ops.OperatorLibrary("other-name", user.operators)
    assert renamed.digest == user.digest
    changed = ops.OperatorLibrary("six", (dataclasses.replace(user.operators[0], gloss="x"),) + user.operators[1:])
    assert changed.digest != user.digest
    code = "from opgen import ops; print(ops.STUDY.digest)"
    seen = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout.strip() for seed in ("0", "1", "77")}
    assert seen == {ops.STUDY.digest}


def test_a_library_refuses_duplicate_ids_and_bad_splits():
    op = ops.get("func_3")
    with pytest.raises(ValueError, match="duplicate operator id 'func_3'"):
        ops.OperatorLibrary("dup", (op, op))
    with pytest.raises(ValueError, match="split 'test'"):
        ops.OperatorLibrary("bad", (dataclasses.replace(op, split="test"),))


def test_a_yaml_library_loads_compiled_into_one_namespace(six):
    user = library.load(str(six))
    assert user.name == "six" and user.ids == ("rev", "upper_first", "take", "wrap", "tag", "zip2")
    assert user.train_ids == ("rev", "take", "tag") and user.heldout_ids == ("upper_first", "wrap", "zip2")
    assert [op.kind for op in user.operators] == ["s", "s", "s,int", "s,str", "s,str", "s1,s2"]
    assert user.get("rev").fn("abc") == "cba" and user.get("zip2").fn("ab", "xyz") == "axbyz"
    assert user.get("upper_first").name == "capitalise" and user.get("rev").name == "rev"
    assert all(op.out_len is None and op.cost is None for op in user.operators)


def test_an_import_spec_names_a_library_object(broken_module):
    assert library.load(broken_module).ids == ("first", "flaky", "dbl", "ok", "peek")
    assert library.load("study") is ops.STUDY
    with pytest.raises(library.LibraryError, match="NOT_A_LIBRARY is a int, not an opgen.ops.OperatorLibrary"):
        library.load("broken_ops_lib:NOT_A_LIBRARY")
    with pytest.raises(library.LibraryError, match="has no attribute 'MISSING'"):
        library.load("broken_ops_lib:MISSING")
    with pytest.raises(library.LibraryError, match="cannot import 'no_such_module_here'"):
        library.load("no_such_module_here:X")


@pytest.mark.parametrize("edit, expected", [
    (lambda t: t.replace("id: take", "id: rev"), r"operator 2 \(rev\): field 'id': duplicate of operator 0"),
    (lambda t: t.replace("kind: int", "kind: float"), r"operator 2 \(take\): field 'params\[0\]'.kind: unknown "
                                                      r"parameter kind 'float'"),
    (lambda t: t.replace("return s[:n]", "return s[:n"), r"operator 2 \(take\): field 'source': does not compile"),
    (lambda t: t.replace("def take(s, n)", "def tak(s, n)"), r"operator 2 \(take\): field 'source': does not "
                                                             r"define a function named 'take'"),
    (lambda t: t.replace("split: heldout", "split: test", 1), r"operator 1 \(upper_first\): field 'split': 'test'"),
    (lambda t: t.replace("def take(s, n)", "def take(s)"), r"operator 2 \(take\): field 'source': .* does not take 2"),
    (lambda t: t.replace("  - id: tag\n", "  - id: tag\n    out_len: 3\n"), r"operator 4 \(tag\): unknown field"),
    (lambda t: t.replace("    gloss: reverse the string\n", ""), r"operator 0 \(rev\): field 'gloss' is missing"),
    (lambda t: t.replace("lo: 0, hi: 5", "lo: 6, hi: 5"), r"field 'params\[0\]'.lo: 6 is above hi"),
    (lambda t: "operators: 3\n", r"field 'operators'"),
    (lambda t: "operators: [\n", r"not valid YAML"),
])
def test_loader_errors_name_the_file_operator_and_field(six, edit, expected):
    six.write_text(edit(SIX_YAML))
    with pytest.raises(library.LibraryError, match=expected) as info:
        library.load(str(six))
    assert str(six) in str(info.value)


# ------------------------------------------------------------------ the laws


def test_the_study_library_keeps_every_law():
    report = opscheck.check(ops.STUDY, examples=8, seed=0)
    assert report.ok, report.render()
    assert len(report.results) == len(ops.OPERATORS) * len(opscheck.LAWS)
    by = {(r.op_id, r.law): r for r in report.results}
    # each bound is checked exactly where the study declares one
    assert {op for op, law in by if law == "out_len" and by[op, law].status == "held"} == \
        {op.id for op in ops.OPERATORS if op.out_len is not None}
    assert {op for op, law in by if law == "cost" and by[op, law].status == "held"} == \
        {op.id for op in ops.OPERATORS if op.cost is not None}


def test_a_user_library_keeps_every_law(six):
    report = opscheck.check(library.from_yaml(six), examples=10, seed=3)
    assert report.ok, report.render()
    assert {r.status for r in report.results if r.law in ("out_len", "cost")} == {"n/a"}


def test_a_broken_library_fails_naming_operator_law_and_shrunk_counterexample(broken_module):
    report = opscheck.check(library.load(broken_module), examples=30, seed=0)
    assert not report.ok
    broken = {(r.op_id, r.law): r for r in report.broken}
    assert broken["first", "total"].call == "first('')" and "IndexError" in broken["first", "total"].message
    assert ("flaky", "deterministic") in broken and ("flaky", "pure") in broken
    assert "COUNT" in broken["flaky", "pure"].message
    assert broken["dbl", "out_len"].call == "dbl('a')"
    assert "out_len says 1 characters, the output has 2" in broken["dbl", "out_len"].message
    assert broken["dbl", "cost"].call == "dbl('a')"
    assert not [key for key in broken if key[0] == "ok"]
    assert [key for key in broken if key[0] == "peek"] == [("peek", "pure")]
    assert "did I/O (audit events open)" in broken["peek", "pure"].message
    text = report.render()
    assert "BROKEN first total: raised IndexError" in text and "counterexample: first('')" in text
    assert "BROKEN dbl out_len" in text and text.endswith("FAILED")


def test_the_laws_catch_a_source_that_is_not_standalone_or_recurses_too_deep():
    a, b = library.compile_operators([
        {"id": "helper_user", "gloss": "g", "split": "train",
         "source": "def helper(s):\n    return s\n\n\ndef helper_user(s):\n    return helper(s)\n"},
        {"id": "borrows", "gloss": "g", "split": "train", "source": "def borrows(s):\n    return helper(s) + 'x'\n"},
    ])
    c, = library.compile_operators([
        {"id": "deep", "gloss": "g", "split": "train",
         "source": "def deep(s, k=0):\n    if k >= 100 * len(s):\n        return s\n"
                   "    return deep(s, k + 1)\n"}])
    c = dataclasses.replace(c, cost=lambda n, p: (n, 1, n + 1))
    report = opscheck.check(ops.OperatorLibrary("mixed", (a, b, c)), examples=20, seed=0)
    broken = {(r.op_id, r.law): r for r in report.broken}
    assert set(broken) == {("borrows", "standalone"), ("deep", "recursion"), ("deep", "cost")}, report.render()
    assert "NameError" in broken["borrows", "standalone"].message
    # 100 frames per character: 20 characters are the shortest input over the static grader's 2,000
    assert broken["deep", "recursion"].call == f"deep({'a' * 20!r})", broken["deep", "recursion"]
    assert "2001 of the operator's frames" in broken["deep", "recursion"].message
    assert broken["deep", "cost"].call == "deep('a')" and "recursion 101 deep" in broken["deep", "cost"].message


def test_a_check_is_deterministic_for_a_seed(broken_module):
    lib = library.load(broken_module)
    first = opscheck.check(lib, examples=10, seed=5).to_json()
    sys.modules.pop("broken_ops_lib", None)
    assert opscheck.check(library.load(broken_module), examples=10, seed=5).to_json() == first


# ------------------------------------------------------------------ the command


def test_cli_check_study_passes(runner, cli):
    result = runner.invoke(cli, ["ops", "check", "--examples", "3", "--seed", "1", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["ok"] and data["library"] == "study" and data["digest"] == ops.STUDY.digest
    assert data["counts"]["broken"] == 0 and data["examples"] == 3


def test_cli_check_bad_library_is_a_clear_error(runner, cli, tmp_path):
    (tmp_path / "bad.yaml").write_text("operators:\n"
                                       "  - {id: x, gloss: g, split: sideways, source: 'def x(s): return s'}\n")
    result = runner.invoke(cli, ["ops", "check", str(tmp_path / "bad.yaml")])
    assert result.exit_code == 2 and "field 'split'" in result.output and "bad.yaml" in result.output
    result = runner.invoke(cli, ["ops", "check", "--library", "nothing-like-a-library"])
    assert result.exit_code == 2 and "not a YAML file" in result.output
    assert runner.invoke(cli, ["ops", "check", "study", "--library", "other:x"]).exit_code == 2


def test_cli_end_to_end_yaml_and_module_libraries(six, tmp_path):
    (tmp_path / "broken_ops_lib.py").write_text(BROKEN_MODULE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    ok = subprocess.run([sys.executable, "-m", "opgen", "ops", "check", str(six), "--examples", "5"],
                        capture_output=True, text=True, env=env)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "library six" in ok.stdout and "0 broken" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "opgen", "ops", "check", "--library", "broken_ops_lib:BROKEN",
                          "--examples", "20", "--json"], capture_output=True, text=True, env=env)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "Traceback" not in bad.stderr
    data = json.loads(bad.stdout)
    rows = {(r["op"], r["law"]): r for r in data["results"] if r["status"] == "broken"}
    assert rows["first", "total"]["counterexample"] == [""] and rows["first", "total"]["call"] == "first('')"
    missing = subprocess.run([sys.executable, "-m", "opgen", "ops", "check", str(tmp_path / "nope.yaml")],
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "nope.yaml" in missing.stderr and "Traceback" not in missing.stderr


def test_a_failure_that_does_not_repeat_and_a_bound_that_raises_are_reported_not_crashes():
    wobble, plain = library.compile_operators([
        {"id": "wobble", "gloss": "g", "split": "train",
         "source": "N = [0]\n\n\ndef wobble(s):\n    N[0] += 1\n    if N[0] % 3 == 0:\n"
                   "        raise ValueError('every third call')\n    return s\n"},
        {"id": "plain", "gloss": "g", "split": "train", "source": "def plain(s):\n    return s\n"}])
    plain = dataclasses.replace(plain, cost=lambda n, p: (n, 1, 1 // 0))
    report = opscheck.check(ops.OperatorLibrary("odd", (wobble, plain)), examples=10, seed=0)
    broken = {(r.op_id, r.law): r for r in report.broken}
    assert "ValueError: every third call" in broken["wobble", "total"].message
    assert broken["wobble", "total"].counterexample is not None
    assert broken["plain", "cost"].message.startswith("checking it raised ZeroDivisionError")
    assert [key for key in broken if key[0] == "plain"] == [("plain", "cost")]


# ------------------------------------------------------------------ operators that misbehave (issue 32)

# what the terminates law says each of user_libraries.HOSTILE's operators did (not_a_str keeps it: total breaks)
STOPS = {"system_exit": "raised SystemExit: 3", "keyboard_interrupt": "raised KeyboardInterrupt",
         "os_exit": "called os._exit(3)", "loops": "ran past the per-call budget of 0.3 s"}


def _bad_input(call: str) -> str:
    assert call.startswith("bad('") and call.endswith("')"), call
    return call[5:-2]


@pytest.mark.parametrize("kind", [*STOPS, "not_a_str"])
def test_a_misbehaving_operator_breaks_a_law_naming_its_input_and_the_check_goes_on(tmp_path, kind):
    report = opscheck.check(library.load(str(U.write_hostile(tmp_path, kind))), examples=10, seed=0, budget_s=0.3)
    by = {(r.op_id, r.law): r for r in report.results}
    assert not report.ok
    law = "terminates" if kind in STOPS else "total"
    broken = by["bad", law]
    assert broken.status == "broken" and (STOPS.get(kind) or "returned int") in broken.message, report.render()
    assert len(_bad_input(broken.call)) > 5  # the input it misbehaves on
    assert all(r.status in ("held", "n/a") for r in report.results if r.op_id != "bad"), report.render()
    skipped = {r.law for r in report.results if r.status == "skipped"}
    if kind == "loops":  # each call of the others would wait out the budget
        assert skipped == {"standalone", "total", "deterministic", "pure", "recursion"}, report.render()
        assert "skipped bad standalone, total" in report.render()
    else:
        assert skipped == set() and by["bad", "terminates"].status == ("held" if kind == "not_a_str" else "broken")
        assert by["bad", "total"].status == "broken"


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["system_exit", "os_exit", "loops"])
def test_cli_check_reports_a_misbehaving_operator_instead_of_exiting_with_its_code(tmp_path, kind):
    path = U.write_hostile(tmp_path, kind)
    r = subprocess.run([sys.executable, "-m", "opgen", "ops", "check", str(path), "--examples", "5",
                        "--op-budget", "0.3"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"BROKEN bad terminates: {STOPS[kind]}" in r.stdout and "counterexample: bad('" in r.stdout, r.stdout
    assert "Traceback" not in r.stderr and r.stdout.rstrip().endswith("FAILED")


@pytest.mark.slow
def test_cli_check_ends_an_operator_that_swallows_what_stops_it(tmp_path):
    r = subprocess.run([sys.executable, "-m", "opgen", "ops", "check", str(U.write_hostile(tmp_path, "swallows")),
                        "--examples", "5", "--op-budget", "0.3"], capture_output=True, text=True, timeout=300)
    assert r.returncode == opwatch.EXIT_STUCK, r.stdout + r.stderr
    assert "operator 'bad': bad('" in r.stderr and "did not stop when interrupted" in r.stderr
