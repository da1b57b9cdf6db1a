"""What the tests of `opgen eval` share: reading the JSON lines a run wrote, and the inputs of the
vLLM runs (the tiny model of tests/tiny_model.py and two small data files)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tiny_model as tm


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def vllm_inputs(tmp_path_factory: pytest.TempPathFactory, name: str) -> tuple[Path, Path, Path, Path]:
    """(model, work, trees, prefixed): vllm and transformers (skipped without them), the tiny model
    (built once a session), and a fresh folder ``name`` holding a plain data file and one with
    assistant prefixes."""
    tm.require("vllm")
    tm.require("transformers")
    model = tm.build(tmp_path_factory.getbasetemp() / "tiny-model")
    work = tmp_path_factory.mktemp(name)
    return model, work, tm.write_trees(work / "trees.parquet"), tm.write_prefixed(work / "prefixed.parquet")
