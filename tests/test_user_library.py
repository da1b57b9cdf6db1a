"""A user's own operator library through the build (issue 25): recipes naming ``library:``."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import user_libraries as U
from click.testing import CliRunner
from opgen.cli import cli as main

from opgen import build as B
from opgen import ops
from opgen import recipe as R

LIBRARY = U.SIX

RECIPE = textwrap.dedent("""\
    name: mine
    seed: 3
    library: six.yaml
    splits:
      train_trees:
        generator: trees
        role: train
        options: {ops: train, depths: [1, 2, 3], per_depth: 20}
      train_atomic:
        generator: atomic
        role: train
        options: {ops: train, per_op: 5}
      heldout_chains:
        generator: chains
        role: eval
        options: {ops: heldout, depths: [1, 2], per_depth: 10}
      heldout_atomic:
        generator: atomic
        role: eval
        kind: sft
        prompt_format: shown
        options: {ops: [rot, drop_vowels], per_op: 5}
    """)


@pytest.fixture
def recipe_file(tmp_path: Path) -> Path:
    (tmp_path / "six.yaml").write_text(LIBRARY)
    path = tmp_path / "mine.yaml"
    path.write_text(RECIPE)
    return path


def _gts(out: Path, split: str) -> list[dict]:
    table = pq.read_table(out / f"{split}.parquet")
    return [json.loads(r["ground_truth"]) for r in table.column("reward_model").to_pylist()]


def test_a_user_library_builds_validates_and_cards(recipe_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    runner = CliRunner()
    result = runner.invoke(main, ["build", str(recipe_file), "--out", str(out), "--no-progress", "--workers", "1"])
    assert result.exit_code == 0, result.output
    man = json.loads((out / "manifest.json").read_text())
    lib = R.load(str(recipe_file)).library
    assert man["library"]["name"] == "six" and man["library"]["digest"] == lib.digest
    assert man["library"]["file"] == "library.yaml" and "spec" not in man["library"]
    assert man["library"]["train"] == ["rev", "dup", "up", "mix"]
    for split in ("train_trees", "train_atomic", "heldout_chains", "heldout_atomic"):
        rows = _gts(out, split)
        assert rows and all(g["library"] == {"name": "six", "digest": lib.digest} for g in rows)
        used = {o for g in rows for o in g["ops"]}
        assert used <= set(lib.ids)
    assert {o for g in _gts(out, "heldout_chains") for o in g["ops"]} <= {"rot", "drop_vowels"}
    # the train trees compose the train operators, binary ``mix`` among them
    assert {o for g in _gts(out, "train_trees") for o in g["ops"]} == {"rev", "dup", "up", "mix"}
    # the shown sources are the library's
    prompt = pq.read_table(out / "heldout_atomic.parquet").column("prompt").to_pylist()[0][-1]["content"]
    assert "def rot(s, n):" in prompt or "def drop_vowels(s):" in prompt
    # the gold recall-then-assemble answers recall the library's operators
    response = pq.read_table(out / "heldout_atomic.parquet").column("response").to_pylist()
    assert any(r.startswith("Recall rot: rotate left by n") for r in response)
    assert man["splits"]["train_atomic"]["counts"]["op"] == {"rev": 5, "dup": 5, "up": 5, "mix": 5}

    result = runner.invoke(main, ["validate", str(out)])
    assert result.exit_code == 0, result.output

    tree = tmp_path / "tree"
    result = runner.invoke(main, ["push", str(out), "--repo-id", "org/six", "--dry-run", str(tree)])
    assert result.exit_code == 0, result.output
    readme = (tree / "README.md").read_text()
    for op in lib.operators:  # the card's operator table is the user's library
        line = next(ln for ln in readme.splitlines() if ln.startswith(f"| `{op.id}` |"))
        assert [c.strip() for c in line.strip("|").split("|")][2:] == [str(op.arity), op.split, op.gloss]
    assert "`func_0`" not in readme and "6 string operators (library `six`" in readme


def test_the_study_rows_name_no_library(tmp_path: Path) -> None:
    import pickle

    recipe = R.load("eval-suite")
    assert recipe.library is ops.STUDY and B.library_tag(recipe) == ""
    # a recipe sent to a Ray worker carries the study's library by reference, not a copy
    assert pickle.loads(pickle.dumps(recipe)).library is ops.STUDY


def test_a_user_library_pickles_from_yaml_and_from_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user library must cross to Ray workers (a recipe is pickled): plain pickle, by value, its
    operators rebuilt from their sources, the digest and every result the same; a study operator
    inside it arrives as the receiving process's own."""
    import pickle
    import subprocess

    from opgen import library as L

    spec = U.write_six_module(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop(spec.split(":")[0], None)
    for lib in (L.load(str(tmp_path / "six.yaml")), L.load(spec)):
        back = pickle.loads(pickle.dumps(lib))
        assert back.name == lib.name and back.digest == lib.digest and back.ids == lib.ids
        for op, got in zip(lib.operators, back.operators):
            args = ("hello", "abc") if op.n_inputs == 2 else ("hello", *(p.lo for p in op.params))
            assert got.fn(*args) == op.fn(*args) and got.cost is op.cost and got.params == op.params
    assert pickle.loads(pickle.dumps(L.load(spec))).get("rev").cost(5, None) == (23, 36, 0)
    mixed = ops.OperatorLibrary("mixed", (ops.get("func_3"),) + L.load(str(tmp_path / "six.yaml")).operators)
    assert pickle.loads(pickle.dumps(mixed)).operators[0] is ops.get("func_3")
    # a fresh process (a Ray worker's situation) unpickles the YAML library without the file
    recipe = R.load(str(_six_recipe(tmp_path)))
    blob = pickle.dumps(recipe)
    code = ("import pickle, sys; r = pickle.loads(sys.stdin.buffer.read()); lib = r.library; "
            "print(lib.digest, lib.get('rot').fn('abcdef', 2))")
    (tmp_path / "six.yaml").unlink()
    done = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True, cwd="/", timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split() == [recipe.library.digest, "cdefab"]


def _six_recipe(folder: Path) -> Path:
    path = folder / "six-recipe.yaml"
    path.write_text("name: r\nlibrary: six.yaml\nsplits:\n  a:\n    generator: atomic\n    role: train\n"
                    "    options: {per_op: 1}\n")
    return path


def test_study_plus_one_operator_as_a_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "more_ops.py").write_text(textwrap.dedent("""\
        from opgen import library, ops

        EXTRA = library.compile_operators([{"id": "func_25", "gloss": "double every character",
            "split": "train", "source": "def func_25(s):\\n    return ''.join(c + c for c in s)\\n"}])
        LIB = ops.OperatorLibrary("study-plus", ops.STUDY.operators + EXTRA)
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("more_ops", None)
    path = tmp_path / "r.yaml"
    path.write_text("name: plus\nlibrary: more_ops:LIB\nsplits:\n  atoms:\n    generator: atomic\n    role: train\n"
                    "    options: {ops: [func_25, func_3], per_op: 4}\n")
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["build", str(path), "--out", str(out), "--no-progress", "--workers", "1"])
    assert result.exit_code == 0, result.output
    man = json.loads((out / "manifest.json").read_text())
    assert man["library"]["n_operators"] == len(ops.STUDY) + 1 and "spec" not in man["library"]
    gts = _gts(out, "atoms")
    assert {o for g in gts for o in g["ops"]} == {"func_3", "func_25"}
    assert all(g["library"]["name"] == "study-plus" for g in gts)
    assert man["splits"]["atoms"]["counts"]["op"] == {"func_3": 4, "func_25": 4}


def test_two_libraries_in_one_build_is_a_named_error(recipe_file: Path, tmp_path: Path) -> None:
    other = tmp_path / "study.yaml"
    other.write_text("name: s\nsplits:\n  a:\n    generator: atomic\n    role: train\n    options: {per_op: 1}\n")
    result = CliRunner().invoke(main, ["build", str(recipe_file), str(other), "--out", str(tmp_path / "o"),
                                       "--no-progress"])
    assert result.exit_code != 0 and "one build uses one operator library" in result.output
    assert "Traceback" not in result.output


def test_an_unknown_operator_names_the_library_ids(recipe_file: Path) -> None:
    data = recipe_file.read_text().replace("ops: [rot, drop_vowels]", "ops: [rot, func_3]")
    recipe_file.write_text(data)
    with pytest.raises(R.RecipeError) as err:
        B.plan_build([R.load(str(recipe_file))])
    assert "func_3" in str(err.value) and "library 'six'" in str(err.value) and "rev" in str(err.value)


def test_library_flag_overrides_for_every_generator(recipe_file: Path, tmp_path: Path) -> None:
    assert R.load("eval-suite", library="study").library is ops.STUDY
    cell = tmp_path / "cell.yaml"
    cell.write_text("name: c\nsplits:\n  s:\n    generator: sft_cell\n    role: train\n    kind: sft\n"
                    "    options: {atomic: {pool: a, per_op: 2}}\n")
    six = R.load(str(cell), library=str(recipe_file.parent / "six.yaml"))
    (plan,) = B.plan_build([six])
    assert len(plan.gen.atomic) == 2 * len(six.library)
    assert {t.program.op for t in plan.gen.atomic} == set(six.library.ids)
    # the eval suite names operator sets (train, heldout), which --library resolves against its library
    plans = B.plan_build([R.load("eval-suite", library=str(recipe_file.parent / "six.yaml"))])
    assert {op.id for op in plans[0].gen.plain + plans[0].gen.param} == {"rot", "drop_vowels"}
    with pytest.raises(R.RecipeError, match="--library nope.yaml"):
        R.load("eval-suite", library="nope.yaml")


def test_the_api_takes_library(recipe_file: Path) -> None:
    import opgen
    from opgen import library as L

    lib = L.load(str(recipe_file.parent / "six.yaml"))
    recipe = {"name": "api", "splits": {"a": {"generator": "atomic", "role": "train", "options": {"per_op": 2}}}}
    ds = opgen.create_dataset(recipe, "a", library=lib)
    gts = [json.loads(row["reward_model"]["ground_truth"]) for row in ds]
    assert len(gts) == 2 * len(lib) and {o for g in gts for o in g["ops"]} == set(lib.ids)
    assert all(g["library"]["digest"] == lib.digest for g in gts)
    study = opgen.create_dataset(recipe, "a", size=3)
    assert all("library" not in json.loads(row["reward_model"]["ground_truth"]) for row in study)


def test_a_user_library_build_is_graded_by_opgen_score_with_that_library(recipe_file: Path, tmp_path: Path) -> None:
    """The two halves meet: rows `opgen build` wrote from a recipe's `library:` grade their own gold
    answers 1.0 through `opgen score --library`, and a study answer 0."""
    from opgen import library as L
    from opgen import notebook

    lib = L.load(str(tmp_path / "six.yaml"))
    out = tmp_path / "out"
    runner = CliRunner()
    result = runner.invoke(main, ["build", str(recipe_file), "--out", str(out), "--no-progress", "--workers", "1"])
    assert result.exit_code == 0, result.output
    for split in ("heldout_atomic", "train_trees"):
        rows = pq.read_table(out / f"{split}.parquet").to_pylist()
        golds = [notebook.gold_answer(r, lib) for r in rows]
        answers = golds[:-1] + ["```python\ndef main_solution(x):\n    return x[::-1]\n```"]
        responses = tmp_path / f"{split}.jsonl"
        responses.write_text("".join(json.dumps({"index": i, "response": a}) + "\n" for i, a in enumerate(answers)))
        report = tmp_path / f"report-{split}"
        result = runner.invoke(main, ["score", "--data", str(out / f"{split}.parquet"), "--responses", str(responses),
                                      "--out", str(report), "--no-plots", "--workers", "1", "--library",
                                      str(tmp_path / "six.yaml")])
        assert result.exit_code == 0, result.output
        scores = [json.loads(x)["score"] for x in (report / "scores.jsonl").read_text().splitlines()]
        assert scores[:-1] == [1.0] * (len(rows) - 1), split
        # the last answer reverses its input: right for none of these rows but by chance
        assert len(scores) == len(rows)
