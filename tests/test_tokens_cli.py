"""`opgen build --tokenizer` and `opgen stats --tokenizer`: token lengths in the manifest and on screen.

Needs transformers + tokenizers (the heavy venvs); the tokenizer is trained here, nothing is downloaded.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tiny_model as tm
import verl_helpers as vh
from click.testing import CliRunner
from opgen.cli import cli

pytestmark = pytest.mark.hf

RECIPE = """
name: tok-test
seed: 3
max_prompt_length: {limit}
splits:
  trees:
    generator: trees
    role: eval
    family: heldout_trees
    options: {{ops: heldout, depths: [1, 2], per_depth: 6}}
  atoms:
    generator: atomic
    role: train
    kind: sft
    prompt_format: closed_book
    answer_format: ra
    options: {{ops: train, per_op: 1}}
"""


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Path:
    tm.require("transformers")
    tm.require("tokenizers")
    return vh.build_tokenizer(tmp_path_factory.mktemp("tok") / "tiny-tokenizer")


def _build(tmp_path: Path, tokenizer: Path, limit: int):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE.format(limit=limit))
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["build", str(recipe), "--out", str(out), "--workers", "1",
                                      "--tokenizer", str(tokenizer)])
    return result, out


def test_build_records_token_lengths_and_recommendations(tmp_path, tokenizer):
    from opgen import tokens as T

    result, out = _build(tmp_path, tokenizer, limit=100_000)
    assert result.exit_code == 0, result.output
    man = json.loads((out / "manifest.json").read_text())
    report = man["tokens"]
    assert set(report["splits"]) == {"trees", "atoms"}
    tok = T.load_tokenizer(tokenizer)
    # The manifest's numbers are the lengths measured independently from the files.
    for name, split in man["splits"].items():
        lengths = T.measure_files([out / f["path"] for f in split["files"]], tok, kind=split["kind"])
        assert report["splits"][name]["prompt_tokens"]["max"] == max(lengths.prompt)
        assert report["splits"][name]["rows"] == split["rows"]
    assert report["recommended"]["data.max_prompt_length"] >= max(
        s["prompt_tokens"]["max"] for s in report["splits"].values())
    assert report["recommended"]["data.max_response_length"] > 0
    assert report["warnings"] == []
    assert "recommended data.max_prompt_length" in result.output


def test_build_warns_when_the_recipes_max_prompt_length_would_truncate(tmp_path, tokenizer):
    result, out = _build(tmp_path, tokenizer, limit=8)
    assert result.exit_code == 0, result.output
    warnings = json.loads((out / "manifest.json").read_text())["tokens"]["warnings"]
    assert warnings and all("max_prompt_length=8" in w for w in warnings)
    assert "warning: split" in result.output


def test_stats_reports_tokens_for_build_dirs_and_loose_files(tmp_path, tokenizer):
    _, out = _build(tmp_path, tokenizer, limit=100_000)
    runner = CliRunner()
    res = runner.invoke(cli, ["stats", str(out), "--tokenizer", str(tokenizer), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert set(data["tokens"][str(out)]["splits"]) == {"trees", "atoms"}
    one = sorted(out.glob("trees*.parquet"))[0]
    res = runner.invoke(cli, ["stats", str(one), "--tokenizer", str(tokenizer), "--max-prompt-length", "4"])
    assert res.exit_code == 0, res.output
    assert "WARNING" in res.output and "median" in res.output


def test_stats_max_prompt_length_needs_a_tokenizer(tmp_path):
    res = CliRunner().invoke(cli, ["stats", str(tmp_path), "--max-prompt-length", "4"])
    assert res.exit_code == 2


def test_build_refuses_a_folder_that_is_not_a_tokenizer_before_building(tmp_path):
    tm.require("transformers")
    bogus = tmp_path / "not-a-tokenizer"
    bogus.mkdir()
    res = CliRunner().invoke(cli, ["build", "--out", str(tmp_path / "out"), "--tokenizer", str(bogus)])
    assert res.exit_code == 2, res.output
    assert "--tokenizer" in res.output and not (tmp_path / "out").exists()
