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
    ("eval-suite", "heldout_trees_d1-8", 40, 3), ("probes", "probe_1b", 24, None), ("sft-eco", None, 20, 1)])
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
