"""`opgen eval --backend replay` on verl's generation parquet (main_generation_server's output).

verl writes the data rows back in order with a ``responses`` column (n strings per row). These
tests build that file with pyarrow and run everywhere; tests/test_verl_managers.py writes it with
pandas exactly as verl does (verl group).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tiny_model as tm
from test_eval_replay import GOOD, _eval, _wrong_answer


@pytest.fixture
def trees(tmp_path: Path) -> Path:
    return tm.write_trees(tmp_path / "trees.parquet")


def _verl_generations(data: Path, out: Path, responses: list[list[str]]) -> Path:
    table = pq.read_table(data)
    table = table.append_column("responses", pa.array(responses, type=pa.list_(pa.string())))
    pq.write_table(table, out)
    return out


def _answers(n_samples: int = 1) -> list[list[str]]:
    return [[tm.ra_answer(e) if i in GOOD else _wrong_answer(e)] * n_samples for i, (e, _x) in enumerate(tm.TREES)]


def test_replay_grades_verls_generation_parquet(runner, cli, tmp_path, trees):
    gen = _verl_generations(trees, tmp_path / "verl_gen.parquet", _answers(2))
    res = _eval(runner, cli, "--model", str(gen), "--data", str(trees), "--out", str(tmp_path / "out"), "--n", "2")
    assert res.exit_code == 0, res.output
    scores = [json.loads(line) for line in (tmp_path / "out" / "verl_gen" / "trees" / "scores.jsonl").open()]
    assert len(scores) == 2 * len(tm.TREES)
    for rec in scores:
        assert rec["acc"] == (1.0 if rec["index"] in GOOD else 0.0), rec
    lines = [json.loads(line) for line in (tmp_path / "out" / "verl_gen" / "trees_generations.jsonl").open()]
    assert {r for line in lines for r in line["finish_reasons"]} == {"unknown"}  # verl records none


def test_a_generation_file_from_other_rows_is_refused_naming_the_row(runner, cli, tmp_path, trees):
    table = pq.read_table(trees)
    swapped = table.take([1, 0] + list(range(2, table.num_rows)))  # verl's rows in another order
    other = tmp_path / "other.parquet"
    pq.write_table(swapped, other)
    gen = _verl_generations(other, tmp_path / "gen.parquet", _answers())
    res = _eval(runner, cli, "--model", str(gen), "--data", str(trees), "--out", str(tmp_path / "out"))
    assert res.exit_code != 0
    assert "row 0 was generated for a different prompt" in res.output


def test_a_parquet_without_responses_is_refused(runner, cli, tmp_path, trees):
    res = _eval(runner, cli, "--model", str(trees), "--data", str(trees), "--out", str(tmp_path / "out"))
    assert res.exit_code != 0 and "no 'responses' column" in res.output and "Traceback" not in res.output


def test_directory_source_finds_data_generations_parquet(runner, cli, tmp_path, trees):
    folder = tmp_path / "gens"
    folder.mkdir()
    _verl_generations(trees, folder / "trees_generations.parquet", _answers())
    res = _eval(runner, cli, "--model", str(folder), "--data", str(trees), "--out", str(tmp_path / "out"))
    assert res.exit_code == 0, res.output
    assert f"accuracy {len(GOOD) / len(tm.TREES):.3f}" in res.output
