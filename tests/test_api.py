"""The notebook API (opgen.api, re-exported as opgen.*): in-memory rows equal the file build's,
in-memory scores equal opgen score's, and generators defined in user code build through both."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import opgen
from opgen import expr as E
from opgen import ops, tokens
from opgen.generate import Generator, text
from opgen.tasks import Item, Task

HERE = Path(__file__).resolve().parent


class SortGen(Generator):
    """A user's generator, defined outside the package: func_3 (sort) of a random word."""

    NAME = "test-sort"
    VERSION = 1
    DEFAULTS = {"rows": 12, "input_len": [3, 8]}
    OPTIONS_SCHEMA = {"properties": {"rows": {"type": "integer", "minimum": 1},
                                     "input_len": {"type": "array", "items": {"type": "integer"}}}}

    def count(self) -> int:
        return self.options["rows"]

    def candidate(self, i: int, j: int) -> Item | None:
        lo, hi = self.options["input_len"]
        x = text(self.rng(i, j), lo, hi)
        op = ops.get("func_3")
        return Item((Task(E.Call(op.id, (E.Var(),), ()), x, op.fn(x)),))


def _recipe(generator: str) -> dict:
    return {"name": "user-gen", "seed": 5, "leakage": {"heldout_ops": None},
            "splits": {"sorted": {"generator": generator, "role": "train", "prompt_format": "shown",
                                  "options": {"rows": 12}}}}


def _file_rows(build: Path, split: str) -> list[dict]:
    man = json.loads((build / "manifest.json").read_text())
    return [r for f in man["splits"][split]["files"] for r in pq.read_table(build / f["path"]).to_pylist()]


def _opgen_build(runner, cli, *args: str) -> None:
    res = runner.invoke(cli, ["build", *args, "--workers", "1", "--no-progress"])
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize(("recipe", "split", "size", "seed"), [
    ("eval-suite", "heldout_trees_d1-8", 40, 3), ("probes", "probe_1b", 24, None),
    pytest.param("sft-eco", None, 20, 1, marks=pytest.mark.slow)])
def test_in_memory_rows_equal_the_built_files(runner, cli, tmp_path, recipe, split, size, seed):
    ds = opgen.create_dataset(recipe, split, size=size, seed=seed) if split else None
    if ds is None:
        name = opgen.load_recipe(recipe).splits[0].name
        ds = opgen.create_dataset(recipe, name, size=size, seed=seed)
    args = [recipe, "--out", str(tmp_path / "b"), "--only", ds.split, "--limit", str(size)]
    _opgen_build(runner, cli, *args, *(["--seed", str(seed)] if seed is not None else []))
    assert ds.to_pylist() == _file_rows(tmp_path / "b", ds.split)
    assert len(ds) == size and ds.manifest["rows"] == size


def test_build_splits_equals_a_whole_build(runner, cli, tmp_path):
    # Duplicates are judged across the whole build: all splits at once, as opgen build does.
    got = opgen.build_splits("eval-suite", size=8)
    _opgen_build(runner, cli, "eval-suite", "--out", str(tmp_path / "b"), "--limit", "8")
    man = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert list(got) == list(man["splits"])
    for name, ds in got.items():
        assert ds.to_pylist() == _file_rows(tmp_path / "b", name), name


def test_dataset_indexes_like_a_list():
    ds = opgen.create_dataset("eval-suite", "heldout_chains_d1-20", size=6, seed=2)
    rows = ds.to_pylist()
    assert list(ds) == rows and ds[0] == rows[0] and ds[-1] == rows[-1] and ds[1:5:2] == rows[1:5:2]
    assert ds.table.num_rows == 6 and "prompt" in ds.table.column_names
    with pytest.raises(IndexError, match="row 6 of a 6-row split"):
        ds[6]
    with pytest.raises(KeyError, match="no split 'nope'"):
        opgen.create_dataset("eval-suite", "nope")
    with pytest.raises(ValueError, match="name one"):
        opgen.create_dataset("eval-suite")
    with pytest.raises(ValueError, match="size must be a positive integer"):
        opgen.create_dataset("probes", "probe_1b", size=0)
    # A different seed is a different split; the same seed the same one.
    assert opgen.create_dataset("eval-suite", "heldout_chains_d1-20", size=6, seed=3).to_pylist() != rows
    assert opgen.create_dataset("eval-suite", "heldout_chains_d1-20", size=6, seed=2).to_pylist() == rows


def test_score_answers_equals_opgen_score(runner, cli, tmp_path):
    ds = opgen.create_dataset("eval-suite", "heldout_trees_d1-8", size=10, seed=1)
    gold = [tokens.gold_answer_of_row(r) for r in ds]
    responses = [g if i % 3 else "no answer" for i, g in enumerate(gold)]
    responses[4] = None  # a row without a response
    result = opgen.score_answers(ds, responses)
    assert [len(g) for g in result.grades] == [0 if i == 4 else 1 for i in range(10)]
    assert result.scores == [None if i == 4 else (1.0 if i % 3 else 0.0) for i in range(10)]
    data = tmp_path / "d.parquet"
    pq.write_table(ds.table, data)
    lines = [json.dumps({"index": i, "response": r}) for i, r in enumerate(responses) if r is not None]
    (tmp_path / "r.jsonl").write_text("\n".join(lines) + "\n")
    res = runner.invoke(cli, ["score", "--data", str(data), "--responses", str(tmp_path / "r.jsonl"),
                                 "--out", str(tmp_path / "s"), "--no-plots"])
    assert res.exit_code == 0, res.output
    on_disk = json.loads((tmp_path / "s" / "summary.json").read_text())
    for key in ("data_path", "responses_path", "plots"):
        on_disk.pop(key, None)
    assert result.summary == on_disk
    assert result.records == [json.loads(x) for x in (tmp_path / "s" / "scores.jsonl").read_text().splitlines()]
    # Rows as a list of dicts or a pyarrow.Table grade the same; a two-sample row gives two grades.
    again = opgen.score_answers(ds.to_pylist(), [[gold[0], "x"]] + [None] * 9)
    assert [g["score"] for g in again.grades[0]] == [1.0, 0.0]
    with pytest.raises(ValueError, match="3 responses for 10 rows"):
        opgen.score_answers(ds.table, ["a", "b", "c"])


def test_a_registered_user_generator_builds_in_memory():
    opgen.register_generator(SortGen)
    opgen.register_generator(SortGen)  # the same class again: a no-op
    ds = opgen.create_dataset(_recipe("test-sort"), size=5)
    assert len(ds) == 5
    for row in ds:
        gt = json.loads(row["reward_model"]["ground_truth"])
        assert gt["tasks"][0]["output"] == "".join(sorted(gt["tasks"][0]["input"]))
    with pytest.raises(ValueError, match="already registered"):
        opgen.register_generator(type("Other", (Generator,), {"NAME": "test-sort"}))
    with pytest.raises(ValueError, match="already registered"):
        opgen.register_generator(type("Fake", (Generator,), {"NAME": "trees"}))
    with pytest.raises(TypeError, match="subclass"):
        opgen.register_generator(dict)


def test_a_recipe_names_a_user_generator_by_import_path_for_opgen_build(tmp_path):
    recipe = tmp_path / "user.yaml"
    import yaml

    recipe.write_text(yaml.safe_dump(_recipe("test_api:SortGen")))
    env = {**os.environ, "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    code = "import sys; from opgen.cli import main; sys.argv = ['opgen'] + sys.argv[1:]; main()"
    res = subprocess.run([sys.executable, "-c", code, "build", str(recipe), "--out", str(tmp_path / "b"),
                          "--workers", "2", "--no-progress"], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    built = _file_rows(tmp_path / "b", "sorted")
    assert len(built) == 12
    assert opgen.create_dataset(_recipe("test_api:SortGen")).to_pylist() == built


def test_a_missing_user_generator_is_a_clear_recipe_error(runner, cli, tmp_path):
    import yaml

    for name, message in (("no_such_module_xyz:Gen", "cannot import 'no_such_module_xyz'"),
                          ("test_api:Nope", "has no 'Nope'"), ("json:JSONDecoder", "not a subclass")):
        recipe = tmp_path / "bad.yaml"
        recipe.write_text(yaml.safe_dump(_recipe(name)))
        res = runner.invoke(cli, ["build", str(recipe), "--out", str(tmp_path / "b")])
        assert res.exit_code == 2, res.output
        assert "splits.sorted.generator" in res.output and message in res.output
        assert "Traceback" not in res.output


def test_import_opgen_stays_light():
    code = ("import sys, opgen; assert callable(opgen.create_dataset); "
            "print(sorted(m for m in ('pyarrow', 'numpy', 'opgen.api', 'opgen.build') if m in sys.modules))")
    light = ("import sys, opgen; print(sorted(m for m in ('pyarrow', 'numpy', 'opgen.api', 'opgen.build') "
             "if m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", light], capture_output=True, text=True, check=True).stdout \
        .strip() == "[]"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "opgen.api" in out  # first use loads it


# ---- the notebook API validates its arguments like the CLI (issue 24, item 6) ----------------

@pytest.fixture(scope="module")
def small_ds():
    return opgen.create_dataset("eval-suite", "heldout_trees_d1-8", size=4, seed=1)


def test_score_answers_takes_response_records_as_the_responses_file_does(small_ds):
    gold = [tokens.gold_answer_of_row(r) for r in small_ds]
    as_strings = opgen.score_answers(small_ds, gold)
    as_records = opgen.score_answers(small_ds, [{"response": g} for g in gold])
    assert as_strings.scores == as_records.scores == [1.0] * 4
    as_lists = opgen.score_answers(small_ds, [{"responses": [g, "x"]} for g in gold])
    assert as_lists.scores == [0.5] * 4
    indexed = opgen.score_answers(small_ds, [{"index": i, "response": g} for i, g in enumerate(gold)])
    assert indexed.scores == [1.0] * 4


@pytest.mark.parametrize("bad, message", [
    ({"text": "x"}, r"responses\[1\]: .*'response'"),
    ({"response": 3}, r"responses\[1\]: .*'response'"),
    ({"responses": []}, r"responses\[1\]: .*'responses'"),
    ({"index": 0, "response": "x"}, r"responses\[1\]: index 0"),
    (3, r"responses\[1\]: a string"),
    ([], r"responses\[1\]: a string"),
    (["x", 2], r"responses\[1\]: a string"),
    (b"x", r"responses\[1\]: a string"),
])
def test_score_answers_refuses_other_shapes_by_position(small_ds, bad, message):
    responses: list = ["a", bad, "c", "d"]
    with pytest.raises((TypeError, ValueError), match=message):
        opgen.score_answers(small_ds, responses)


def test_score_answers_refuses_a_bare_string_for_the_responses(small_ds):
    with pytest.raises(TypeError, match="one entry per row"):
        opgen.score_answers(small_ds, "abcd")


@pytest.mark.parametrize("kw, name", [
    ({"timeout_s": 0}, "timeout_s"), ({"timeout_s": -1}, "timeout_s"), ({"timeout_s": "2"}, "timeout_s"),
    ({"timeout_s": float("nan")}, "timeout_s"), ({"workers": 0}, "workers"), ({"workers": 1.5}, "workers"),
    ({"mode": "fwd"}, "mode"), ({"policy": "x"}, "policy"), ({"group": "x"}, "group"),
    ({"namespace": "x"}, "namespace"), ({"static": "no"}, "static"),
])
def test_score_answers_refuses_what_opgen_score_refuses(small_ds, kw, name):
    with pytest.raises((TypeError, ValueError), match=name):
        opgen.score_answers(small_ds, ["a"] * 4, **kw)


@pytest.mark.parametrize("kw, name", [
    ({"seed": -1}, "seed"), ({"seed": "a"}, "seed"), ({"seed": True}, "seed"), ({"seed": 1.5}, "seed"),
    ({"workers": 0}, "workers"), ({"workers": "2"}, "workers"), ({"size": 0}, "size"), ({"size": "3"}, "size"),
])
def test_create_dataset_refuses_what_opgen_build_refuses(kw, name):
    with pytest.raises((TypeError, ValueError), match=name):
        opgen.create_dataset("eval-suite", "heldout_trees_d1-8", **{"size": 4, **kw})
    with pytest.raises((TypeError, ValueError), match=name):
        opgen.build_splits("eval-suite", ["heldout_trees_d1-8"], **{"size": 4, **kw})
    if "seed" in kw:
        with pytest.raises((TypeError, ValueError), match="seed"):
            opgen.load_recipe("eval-suite", kw["seed"])


def test_build_splits_takes_one_split_name_as_a_string():
    got = opgen.build_splits("eval-suite", "heldout_trees_d1-8", size=3)
    assert list(got) == ["heldout_trees_d1-8"]
    with pytest.raises(TypeError, match="splits"):
        opgen.build_splits("eval-suite", [3], size=3)


def test_api_calls_leave_nothing_in_the_temp_directory(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    code = ("import opgen, opgen.tokens as t\n"
            "ds = opgen.create_dataset('eval-suite', 'heldout_trees_d1-8', size=3, seed=1)\n"
            "opgen.build_splits('eval-suite', ['heldout_chains_d1-20'], size=2)\n"
            "r = opgen.score_answers(ds, [t.gold_answer_of_row(x) for x in ds])\n"
            "assert r.scores == [1.0] * 3, r.scores\n")
    env = {**os.environ, "TMPDIR": str(tmp), "OPGEN_GRADE_PROCESSES": "1"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in tmp.iterdir()) == []
