"""Recipes that looked valid and crashed: integers as 2.0, duplicate keys, other encodings (issue 13, item 5)."""

from __future__ import annotations

import pytest

BASE = "name: r\nsplits:\n  s:\n    generator: {gen}\n    role: eval\n{extra}    options: {{{opts}}}\n"


@pytest.mark.parametrize("gen, opts, extra, field", [
    ("trees", "ops: all, depths: [2], per_depth: 2.0", "", "per_depth"),
    ("trees", "ops: all, depths: [2], rows: 20.0", "", "rows"),
    ("trees", "ops: all, depths: [2.0], rows: 20", "", "depths[0]"),
    ("trees", "ops: all, depths: [2], rows: 20", "    shard_rows: 10.0\n", "shard_rows"),
    ("atomic", "ops: [func_3], rows: 20, input_len: [5.0, 8]", "", "input_len"),
    ("atomic", "ops: [func_3], per_op: 3.0", "", "per_op"),
])
def test_an_integer_written_as_a_float_is_a_named_error(runner, cli, tmp_path, gen, opts, extra, field):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(BASE.format(gen=gen, opts=opts, extra=extra))
    out = tmp_path / "o"
    r = runner.invoke(cli, ["build", str(recipe), "--out", str(out)])
    assert r.exit_code == 2, r.output
    assert field.split("[")[0] in r.output and "integer" in r.output and "Traceback" not in r.output
    assert not out.exists() and not list(tmp_path.glob("o.opgen-*"))


def test_a_duplicate_key_is_refused_with_its_line(runner, cli, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: r\nsplits:\n  s:\n    generator: trees\n    role: eval\n"
                      "    options: {ops: all, depths: [2], rows: 20}\n    role: train\n")
    r = runner.invoke(cli, ["build", str(recipe), "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "duplicate key 'role'" in r.output and "line 7" in r.output


@pytest.mark.parametrize("data, words", [
    ("name: r\n".encode("utf-16"), "UTF-16"),
    (b"name: r\n# caf\xe9\nsplits: {}\n", "line 2: byte 0xe9 is not UTF-8"),
])
def test_a_recipe_in_another_encoding_is_a_named_error(runner, cli, tmp_path, data, words):
    recipe = tmp_path / "r.yaml"
    recipe.write_bytes(data)
    r = runner.invoke(cli, ["build", str(recipe), "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and words in r.output and "Traceback" not in r.output


@pytest.mark.slow
def test_the_exhausted_uniqueness_advice_fits_the_split(runner, cli, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: r\nsplits:\n  s:\n    generator: trees\n    role: eval\n    unique: task\n"
                      "    options: {ops: [func_3], depths: [1], input_len: [1, 1], rows: 200, max_attempts: 20}\n")
    r = runner.invoke(cli, ["build", str(recipe), "--out", str(tmp_path / "o")])
    assert r.exit_code == 1 and "repeat earlier rows" in r.output, r.output
    assert "set unique: task" not in r.output and "unique: none" in r.output
