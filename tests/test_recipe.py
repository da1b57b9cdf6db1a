"""Recipes are checked before any work starts; errors name the file, the path in it and the expectation."""

from __future__ import annotations

from pathlib import Path

import pytest

from opgen import recipe as R
from opgen.resources import resource_dir

GOOD = """\
name: tiny
seed: 3
defaults: {role: eval, kind: rl}
splits:
  t:
    generator: trees
    options: {ops: heldout, depths: [1, 2], per_depth: 4}
"""


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "r.yaml"
    path.write_text(text)
    return str(path)


def test_a_good_recipe_resolves_defaults(tmp_path):
    r = R.load(write(tmp_path, GOOD))
    (split,) = r.splits
    assert (split.name, split.role, split.prompt_format, split.answer_format, split.unique) == (
        "t", "eval", "closed_book", "ra", "task")
    assert split.options["p_binary"] == 0.2 and split.options["max_output_chars"] == 1000
    assert split.family == "t" and r.seed == 3 and len(split.digest) == 32


def test_digest_changes_with_seed_and_options_but_not_with_the_format(tmp_path):
    base = R.load(write(tmp_path, GOOD)).splits[0].digest
    assert R.load(write(tmp_path, GOOD), seed=4).splits[0].digest != base
    assert R.load(write(tmp_path, GOOD.replace("per_depth: 4", "per_depth: 5"))).splits[0].digest != base
    shown = GOOD.replace("generator: trees", "generator: trees\n    prompt_format: shown")
    assert R.load(write(tmp_path, shown)).splits[0].digest == base


@pytest.mark.parametrize("text, fragment", [
    (GOOD.replace("seed: 3", "seed: three"), "r.yaml: seed: 'three' is not of type 'integer'"),
    (GOOD.replace("name: tiny", "name: tiny\ncolour: red"), "r.yaml: (top level): Additional properties"),
    (GOOD.replace("depths: [1, 2]", "depths: [1, two]"), "r.yaml: splits.t.options.depths[1]: 'two' is not"),
    (GOOD.replace("generator: trees", "generator: forest"), "r.yaml: splits.t.generator: unknown generator 'forest'"),
    (GOOD.replace("defaults: {role: eval, kind: rl}", "defaults: {kind: rl}"), "r.yaml: splits.t: 'role' is required"),
    (GOOD.replace("defaults: {role: eval, kind: rl}", "defaults: {role: exam}"), "r.yaml: defaults.role: 'exam'"),
    (GOOD.replace("generator: trees", "generator: trees\n    prompt_format: forward\n    answer_format: ra"),
     "r.yaml: splits.t.answer_format: answer format 'ra' does not go with prompt format 'forward'"),
    (GOOD.replace("per_depth: 4", "per_depth: 4, p_leaf_x: 1.5"), "r.yaml: splits.t.options.p_leaf_x: 1.5"),
    (GOOD.replace("splits:", "splits: [\n"), "r.yaml: line "),
])
def test_errors_name_file_path_and_expectation(tmp_path, text, fragment):
    with pytest.raises(R.RecipeError) as info:
        R.load(write(tmp_path, text))
    assert fragment in str(info.value)


def test_every_bundled_recipe_resolves():
    names = sorted(p.stem for p in resource_dir("datasets").glob("*.yaml"))
    assert {"eval-suite", "native-stage1", "native-stage2"} <= set(names)
    for name in ("eval-suite", "native-stage1", "native-stage2"):
        recipe = R.load(name)
        assert recipe.path == f"datasets/{name}.yaml" and recipe.splits


def test_bad_recipe_on_the_command_line_exits_2_naming_the_file(runner, cli, tmp_path):
    path = write(tmp_path, GOOD.replace("per_depth: 4", "per_depth: -4"))
    result = runner.invoke(cli, ["build", path, "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert "r.yaml: splits.t.options.per_depth" in result.output
    assert not (tmp_path / "o").exists()


def test_unknown_recipe_name_exits_2(runner, cli, tmp_path):
    result = runner.invoke(cli, ["build", "no-such-recipe", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "no bundled recipe 'no-such-recipe'" in result.output
