"""`opgen eval --backend hf` (transformers generate) end to end on CPU with a tiny model built here.

Loading this model takes seconds, so unlike the vLLM suite these tests may run the CLI more than
once: a real interruption (--limit) followed by --resume.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tiny_model as tm

pytestmark = pytest.mark.hf

MAX_NEW = 12


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    tm.require("torch")
    tm.require("transformers")
    return tm.build(tmp_path_factory.getbasetemp() / "tiny-model")


def _eval(model: Path, out: Path, *data: Path, extra: tuple[str, ...] = ()):
    from click.testing import CliRunner
    from opgen.cli import cli

    args = ["eval", "--backend", "hf", "--model", str(model), "--out", str(out), "--max-new-tokens", str(MAX_NEW),
            "--dtype", "float32", "--hf-batch-size", "4", "--batch-size", "2", "--no-score", "--quiet", *extra]
    for d in data:
        args += ["--data", str(d)]
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def test_generates_greedily_with_token_counts_and_finish_reasons(model, tmp_path):
    trees = tm.write_trees(tmp_path / "trees.parquet")
    res = _eval(model, tmp_path / "out", trees)
    assert res.exit_code == 0, res.output
    lines = _lines(tmp_path / "out" / "tiny-model" / "trees_generations.jsonl")
    assert [r["index"] for r in lines] == list(range(len(tm.TREES)))
    for rec in lines:
        assert rec["prompt_tokens"] > 10
        assert 1 <= rec["completion_tokens"] <= MAX_NEW
        assert (rec["finish_reason"] == "length") == (rec["completion_tokens"] == MAX_NEW)
    metrics = json.loads((tmp_path / "out" / "tiny-model" / "metrics.json").read_text())
    assert metrics["data"]["trees"]["generation"]["truncated_rows"] == sum(
        r["finish_reason"] == "length" for r in lines)
    # greedy: a second run writes the same bytes
    res = _eval(model, tmp_path / "again", trees)
    assert res.exit_code == 0, res.output
    assert (tmp_path / "again" / "tiny-model" / "trees_generations.jsonl").read_bytes() == \
        (tmp_path / "out" / "tiny-model" / "trees_generations.jsonl").read_bytes()


def test_resume_after_interruption_generates_only_missing_rows(model, tmp_path):
    trees = tm.write_trees(tmp_path / "trees.parquet")
    out = tmp_path / "out"
    assert _eval(model, out, trees, extra=("--limit", "3")).exit_code == 0
    gen = out / "tiny-model" / "trees_generations.jsonl"
    first = gen.read_bytes()
    res = _eval(model, out, trees, extra=("--resume",))
    assert res.exit_code == 0, res.output
    assert gen.read_bytes().startswith(first)
    run = json.loads((out / "tiny-model" / "metrics.json").read_text())["data"]["trees"]["run"]
    assert (run["skipped"], run["generated"]) == (3, len(tm.TREES) - 3)
    # and the result equals an uninterrupted run
    assert _eval(model, tmp_path / "fresh", trees).exit_code == 0
    assert (tmp_path / "fresh" / "tiny-model" / "trees_generations.jsonl").read_bytes() == gen.read_bytes()


def test_assistant_prefix_is_continued(model, tmp_path):
    from transformers import AutoTokenizer

    from opgen.infer.run import read_rows

    prefixed = tm.write_prefixed(tmp_path / "prefixed.parquet")
    res = _eval(model, tmp_path / "out", prefixed)
    assert res.exit_code == 0, res.output
    tok = AutoTokenizer.from_pretrained(str(model))
    lines = _lines(tmp_path / "out" / "tiny-model" / "prefixed_generations.jsonl")
    for row, rec in zip(read_rows(prefixed), lines):
        conv = [{"role": r, "content": c} for r, c in row.messages] + [
            {"role": "assistant", "content": row.assistant_prefix}]
        text = tok.apply_chat_template(conv, tokenize=False, continue_final_message=True)
        assert text.endswith(row.assistant_prefix) and not text.endswith("<|im_end|>\n")
        assert rec["prompt_tokens"] == len(tok(text, add_special_tokens=False)["input_ids"])


def test_decomposed_and_sampling_options(model, tmp_path):
    trees = tm.write_trees(tmp_path / "trees.parquet", n=3)
    res = _eval(model, tmp_path / "out", trees, extra=("--decomposed",))
    assert res.exit_code == 0, res.output
    lines = _lines(tmp_path / "out" / "tiny-model" / "trees_decomposed_generations.jsonl")
    assert [len(r["recalls"]) for r in lines] == [1, 2, 2]
    res = _eval(model, tmp_path / "sampled", trees,
                extra=("--n", "2", "--temperature", "1.0", "--top-p", "0.9", "--seed", "7"))
    assert res.exit_code == 0, res.output
    lines = _lines(tmp_path / "sampled" / "tiny-model" / "trees_generations.jsonl")
    assert all(len(r["responses"]) == 2 and len(r["finish_reasons"]) == 2 for r in lines)


def test_not_a_model_directory_is_a_clear_failure(model, tmp_path):
    trees = tm.write_trees(tmp_path / "trees.parquet", n=1)
    empty = tmp_path / "empty"
    empty.mkdir()
    res = _eval(empty, tmp_path / "out", trees)
    assert res.exit_code == 1 and "no config.json" in res.output


def test_prompt_longer_than_the_context_is_a_clear_failure(model, tmp_path):
    trees = tm.write_trees(tmp_path / "trees.parquet", n=1)
    res = _eval(model, tmp_path / "out", trees, extra=("--max-model-len", "16"))
    assert res.exit_code == 1 and "max model length is 16" in res.output


def test_chat_template_kwargs_reach_the_template_and_the_token_counts(model, tmp_path):
    """A template that renders a system turn only when told to: the variable must reach
    apply_chat_template (the prompt, and so prompt_tokens, grow by that turn)."""
    import shutil

    hinted = tmp_path / "hinted-model"
    shutil.copytree(model, hinted)
    (hinted / "chat_template.jinja").write_text(
        "{% if system_hint %}{{ '<|im_start|>system\\n' + system_hint + '<|im_end|>\\n' }}{% endif %}"
        + tm.CHAT_TEMPLATE)
    trees = tm.write_trees(tmp_path / "trees.parquet", n=2)
    res = _eval(hinted, tmp_path / "plain", trees)
    assert res.exit_code == 0, res.output
    res = _eval(hinted, tmp_path / "hint", trees, extra=("--chat-template-kwarg", "system_hint=Write programs"))
    assert res.exit_code == 0, res.output
    plain = _lines(tmp_path / "plain" / "hinted-model" / "trees_generations.jsonl")
    hint = _lines(tmp_path / "hint" / "hinted-model" / "trees_generations.jsonl")
    assert all(h["prompt_tokens"] > p["prompt_tokens"] + 3 for h, p in zip(hint, plain))
    settings = json.loads((tmp_path / "hint" / "hinted-model" / "trees_generations.settings.json").read_text())
    assert settings["chat_template_kwargs"] == {"system_hint": "Write programs"}
