"""Small reliability cases of issue 24: recipe numbers, prompt templates, bundled names, corrupt parquet."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

RECIPE = """name: small
splits:
  a:
    generator: trees
    role: eval
{extra}    options: {{ops: [func_3, func_1], depths: [1], rows: 10{opts}}}
"""


def _build(runner, cli, tmp_path: Path, text: str):
    (tmp_path / "r.yaml").write_text(text)
    return runner.invoke(cli, ["build", str(tmp_path / "r.yaml"), "--out", str(tmp_path / "o"), "--workers", "1",
                               "--no-progress"])


@pytest.mark.parametrize("value", [".nan", ".NaN", ".inf", "-.inf"])
def test_a_non_finite_probability_is_a_named_error(runner, cli, tmp_path, value):
    r = _build(runner, cli, tmp_path, RECIPE.format(extra="", opts=f", p_binary: {value}"))
    assert r.exit_code == 2, r.output
    assert "splits.a.options.p_binary" in r.output and "not a finite number" in r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
    assert not (tmp_path / "o").exists()


def test_a_non_finite_number_anywhere_is_refused_before_work(tmp_path):
    from opgen import recipe as R

    with pytest.raises(R.RecipeError, match=r"splits\.a\.options\.depths\[0\]: nan"):
        R.resolve({"name": "x", "splits": {"a": {"generator": "trees", "role": "eval",
                                                 "options": {"depths": [float("nan")]}}}}, "<x>")


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_a_prompt_template_that_is_a_device_is_refused_unread(runner, cli, tmp_path):
    r = _build(runner, cli, tmp_path, RECIPE.format(extra="    prompt_template: /dev/zero\n", opts=""))
    assert r.exit_code == 2 and "prompt_template: /dev/zero is not a regular file" in r.output


def test_a_prompt_template_over_the_cap_is_refused(runner, cli, tmp_path):
    from opgen import recipe as R

    big = tmp_path / "big.txt"
    with open(big, "wb") as f:
        f.truncate(R.MAX_TEMPLATE_BYTES + 1)  # sparse: nothing is written
    r = _build(runner, cli, tmp_path, RECIPE.format(extra=f"    prompt_template: {big}\n", opts=""))
    assert r.exit_code == 2 and "a prompt template is at most" in r.output
    (tmp_path / "folder").mkdir()
    r = _build(runner, cli, tmp_path, RECIPE.format(extra=f"    prompt_template: {tmp_path / 'folder'}\n", opts=""))
    assert r.exit_code == 2 and "is not a regular file" in r.output


@pytest.mark.slow
def test_a_bundled_recipe_given_by_its_path_from_elsewhere_suggests_its_name(tmp_path):
    r = subprocess.run([sys.executable, "-m", "opgen", "build", "datasets/probes.yaml", "--out", str(tmp_path / "o"),
                        "--limit", "2"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "give it as 'probes'" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "opgen", "build", "datasets/nope.yaml", "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2 and "no such recipe file" in r.stderr and "give it as" not in r.stderr


@pytest.fixture
def corrupt(tmp_path) -> tuple[Path, Path]:
    """A verl generation parquet whose footer reads but whose pages do not, and a data file it answers."""
    from click.testing import CliRunner
    from opgen.cli import cli

    r = CliRunner().invoke(cli, ["build", "native-stage1", "--only", "stage1_l1_test", "--limit", "20",
                                 "--out", str(tmp_path / "b"), "--workers", "1", "--no-progress"])
    assert r.exit_code == 0, r.output
    data = tmp_path / "b" / "stage1_l1_test.parquet"
    t = pq.read_table(data)
    t = t.append_column("responses", pa.array([["x"]] * t.num_rows))
    good = tmp_path / "gen.parquet"
    pq.write_table(t, good, row_group_size=5, compression="none")
    raw = bytearray(good.read_bytes())
    raw[len(raw) // 4: len(raw) // 2] = b"\xff" * (len(raw) // 2 - len(raw) // 4)
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(bytes(raw))
    assert pq.ParquetFile(bad).metadata.num_rows == t.num_rows  # the footer is intact
    return data, bad


@pytest.mark.slow
def test_replay_of_a_corrupt_generation_parquet_is_a_named_error(runner, cli, tmp_path, corrupt):
    data, bad = corrupt
    r = runner.invoke(cli, ["eval", "--backend", "replay", "--model", str(bad), "--data", str(data),
                            "--out", str(tmp_path / "e"), "--no-progress"])
    assert r.exit_code == 1, r.output
    assert f"{bad}: not a readable parquet file" in r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)


@pytest.mark.slow
def test_eval_of_a_corrupt_data_parquet_is_a_named_error(runner, cli, tmp_path, corrupt):
    _, bad = corrupt
    (tmp_path / "r.jsonl").write_text('{"index": 0, "response": "x"}\n')
    r = runner.invoke(cli, ["eval", "--backend", "replay", "--model", str(tmp_path / "r.jsonl"), "--data", str(bad),
                            "--out", str(tmp_path / "e"), "--no-progress"])
    assert r.exit_code == 2, r.output
    assert f"{bad}: not a readable parquet file" in r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
