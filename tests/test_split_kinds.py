"""Split kinds are registered objects (opgen.splits.kinds): one file and one registry entry per kind.

Ties the files of opgen/splits/kinds/ to the registry, checks that every registered kind answers
every step, and that an unknown kind is refused naming the known ones (in the API and a recipe).
"""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

from opgen import recipe as R
from opgen.splits import kinds as K
from opgen.splits.kinds import base


def test_every_kind_file_defines_one_registered_kind():
    files = sorted(m.name for m in pkgutil.iter_modules(K.__path__) if m.name != "base")
    defined = {}
    for name in files:
        module = __import__(f"opgen.splits.kinds.{name}", fromlist=["KIND"])
        kind = getattr(module, "KIND", None)
        assert isinstance(kind, base.SplitKind), f"opgen/splits/kinds/{name}.py defines no KIND"
        defined[kind.name] = kind
    assert defined == K.KINDS  # a kind file not in the registry, or a registry entry without its file


@pytest.mark.parametrize("name", list(K.KINDS))
def test_a_kind_is_a_frozen_object_with_a_schema_and_every_step(name):
    kind = K.KINDS[name]
    with pytest.raises(AttributeError):
        kind.name = "other"  # type: ignore[misc]
    schema = kind.schema()
    assert schema["properties"]["kind"] and set(kind.required) <= set(schema["properties"])
    for step in ("resolve", "check"):  # the two a kind must write itself
        assert getattr(type(kind), step) is not getattr(base.SplitKind, step), f"{name} has no {step}"
    assert kind.summary


def test_an_unknown_kind_is_refused_naming_the_known_kinds(tmp_path: Path):
    known = ", ".join(K.KINDS)
    with pytest.raises(K.SplitError, match=rf"r\.yaml: split\.kind: 'lexical' is not a split kind \(known: {known}\)"):
        K.resolve({"kind": "lexical"}, "r.yaml", 0)
    with pytest.raises(K.SplitError, match=r"split\.kind: 'lexical' is not a split kind"):
        K.resolve("lexical", "r.yaml", 0)
    with pytest.raises(K.SplitError, match=r"split\.kind: None is not a split kind"):
        K.resolve({"pairs": []}, "r.yaml", 0)
    with pytest.raises(R.RecipeError, match=rf"split\.kind: 'lexical' is not a split kind \(known: {known}\)"):
        R.resolve({"name": "r", "split": {"kind": "lexical"},
                   "splits": {"t": {"generator": "trees", "role": "train"}}}, "r.yaml")
    recipe = tmp_path / "lex.yaml"
    recipe.write_text("name: lex\nsplit: {kind: lexical}\nsplits:\n  train: {generator: trees, role: train}\n")
    r = subprocess.run([sys.executable, "-m", "opgen", "build", str(recipe), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert f"split.kind: 'lexical' is not a split kind (known: {known})" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "o").exists()


def test_the_split_generator_is_registered_by_its_kind_not_found_in_a_folder():
    from opgen import generate as G

    assert "mcd_side" in G.registry() and G.get("mcd_side").__module__ == "opgen.splits.generator"
    assert not (Path(G.__file__).parent / "splits.py").exists()
    assert sorted(G.BUNDLED) == sorted(m.name for m in pkgutil.iter_modules(G.__path__) if m.name != "measure")


SELF_PAIR = """\
name: selfpair
seed: 1
split: {kind: systematicity, pairs: [[func_3, func_3]]RULE}
defaults: {generator: chains, kind: rl, prompt_format: closed_book, answer_format: ra, unique: task}
splits:
  train: {role: train, options: {ops: train, depths: [2, 3], per_depth: 200}}
  test: {role: eval, options: {ops: [func_3, func_9, func_15, func_17], depths: DEPTHS, per_depth: 10}}
"""


@pytest.mark.parametrize(("rule", "depths", "at"), [("", "[2, 3, 4]", "row 0 (depth 2)"),
                                                    (", rule: adjacent", "[3, 4]", "row 0 (depth 3)")])
def test_an_impossible_pair_is_refused_before_any_row_is_built(tmp_path: Path, rule: str, depths: str, at: str):
    """[func_3, func_3] on chains that never repeat an operator back to back: no depth-2 row can hold it
    on one path, no row at all under the adjacent rule; refused naming the split, the row and why."""
    recipe = tmp_path / "self.yaml"
    recipe.write_text(SELF_PAIR.replace("RULE", rule).replace("DEPTHS", depths))
    r = subprocess.run([sys.executable, "-m", "opgen", "build", str(recipe), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert f"splits.test: no candidate of {at} of this eval split (chains)" in r.stderr
    assert "pairs [func_3, func_3]" in r.stderr and "a pair of an operator with itself (func_3)" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "o").exists()
    # the same pair where the split can compose it: built, and the certificate lists it as tested
    recipe.write_text(SELF_PAIR.replace("RULE", "").replace("DEPTHS", "[3, 4]"))
    r = subprocess.run([sys.executable, "-m", "opgen", "build", str(recipe), "--out", str(tmp_path / "ok")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    import json

    cert = json.loads((tmp_path / "ok" / "manifest.json").read_text())["split_certificates"]["selfpair"]
    assert cert["heldout_tested"] == ["func_3(..func_3)"] and cert["heldout_untested"] == []
