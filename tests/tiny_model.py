"""A tiny chat model built on the spot (nothing downloaded): for the vLLM and transformers tests.

A byte-level BPE tokenizer trained on a few hundred lines of operator sources and prompts, with a
ChatML template, and a Qwen2ForCausalLM with random weights (head_dim 64: the CPU attention kernels
of vLLM refuse smaller heads). Its answers are noise; the tests check the code path, not the model.

    python tests/tiny_model.py OUT_DIR
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB_SIZE = 330


def training_lines() -> list[str]:
    """A few hundred lines that look like what the model will be shown: sources, prompts, answers."""
    from opgen import ops

    lines: list[str] = []
    for op in ops.OPERATORS:
        lines.append(f"Recall {op.id}: {op.gloss}")
        lines.extend(op.source.splitlines())
        lines.append(f"def main_solution(x):\n    return {op.id}(x)")
    words = ["Write", "a", "program", "that", "uses", "the", "library", "and", "returns", "the", "output",
             "Assemble:", "```python", "```", "input", "string", "characters"]
    for i in range(120):
        lines.append(" ".join(words[(i + j) % len(words)] for j in range(8)))
    return lines


def build(out: Path) -> Path:
    """Write tokenizer + model into ``out`` (idempotent: an existing complete build is kept)."""
    out = Path(out)
    if (out / "config.json").is_file() and (out / "tokenizer.json").is_file() and (out / "model.safetensors").is_file():
        return out
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(training_lines(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=None, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", unk_token=None)
    fast.chat_template = CHAT_TEMPLATE

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(fast), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=64, max_position_embeddings=8192,
        tie_word_embeddings=True, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
        bos_token_id=None, torch_dtype="float32",
    )
    model = Qwen2ForCausalLM(config).to(torch.float32)
    # built beside the target and renamed, so an interrupted build is never taken for a model
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    fast.save_pretrained(tmp)
    model.save_pretrained(tmp, safe_serialization=True)
    shutil.rmtree(out, ignore_errors=True)
    tmp.replace(out)
    return out



# ---------------------------------------------------------------- contract rows for the eval tests
# The builder writes these in production; the tests make their own few rows per docs/contracts.md
# so that `opgen eval` is tested on exactly the columns it reads.


def ra_answer(expression: str) -> str:
    """The gold recall-then-assemble answer of a single-task program row."""
    from opgen import expr, ops

    used = expr.ops_used(expr.parse(expression))
    blocks = [f"Recall {op}: {ops.get(op).gloss}\n```python\n{ops.get(op).source}```\n" for op in used]
    sources = "\n".join(ops.get(op).source for op in used)
    program = f"{sources}\ndef main_solution(x):\n    return {expression}"
    return "\n".join(blocks) + f"\nAssemble:\n```python\n{program}\n```"


def program_row(index: int, expression: str, x: str, *, split: str = "test", assistant_prefix: str = "") -> dict:
    import json

    from opgen import expr, ops

    tree = expr.parse(expression)
    used = list(expr.ops_used(tree))
    output = expr.evaluate(tree, x)
    ref_code = "\n".join(ops.get(op).source for op in used) + f"\ndef main_solution(x):\n    return {expression}\n"
    gt = {"mode": "program",
          "tasks": [{"entry": "main_solution", "expr": expression, "input": x, "output": output,
                     "ops": used, "depth": expr.depth(tree)}],
          "ops": [op for op in ops.ALL_IDS if op in used],
          "ref_code": ref_code, "ref_input": {"x": x}, "ref_output": output, "funcname": "main_solution"}
    prompt = (f"Using the library functions, write main_solution(x) returning {expression}.\n"
              f"For x = {x!r} it must return {output!r}.")
    return {
        "data_source": "opgen/test_trees",
        "prompt": [{"role": "user", "content": prompt}],
        "ability": "code",
        "reward_model": {"style": "rule", "ground_truth": json.dumps(gt)},
        "extra_info": {
            "index": index, "split": split, "family": "trees", "depth": expr.depth(tree),
            "k": len(used), "ops": used, "structure": expr.structure(tree), "prompt_format": "plain",
            "answer_format": "ra", "mode": "program", "condition": "", "n_tasks": 1,
            "assistant_prefix": assistant_prefix, "opgen_version": "test", "recipe": "test",
            "row_id": f"{index:016x}", "target_op": "", "tail_chars": -1, "tail_calls": -1,
            "unchanged_calls": 0, "output_is_input": int(output == x),
            "call_ops": [t.op for t in expr.tail_distances(tree)],
            "call_chars": [t.chars for t in expr.tail_distances(tree)],
            "call_tails": [t.call_tails for t in expr.tail_distances(tree)], "prompt_template": "",
        },
    }


def row_schema():
    """The RL row schema written from docs/contracts.md (one copy, shared with the verl suite)."""
    from verl_helpers import contract_schema

    return contract_schema("rl")


def write_rows(path: Path, rows: list[dict]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    pq.write_table(pa.Table.from_pylist(rows, schema=row_schema()), path)
    return path


TREES = [("func_3(x)", "banana"), ("func_1(func_3(x), 2)", "abc"), ("func_3(func_1(x, 2))", "hello"),
         ("func_1(x, 3)", "xy"), ("func_3(func_3(x))", "zebra"), ("func_1(func_1(x, 2), 2)", "q")]


def write_trees(path: Path, n: int = len(TREES), split: str = "test") -> Path:
    """A small program data file: n rows cycling through TREES."""
    return write_rows(path, [program_row(i, *TREES[i % len(TREES)], split=split) for i in range(n)])


def write_prefixed(path: Path, n: int = 3) -> Path:
    """Rows with a teacher-forced assistant prefix (probe 1b shape): the model continues the answer."""
    rows = []
    for i in range(n):
        e, x = TREES[i % len(TREES)]
        gold = ra_answer(e)
        rows.append(program_row(i, e, x, split="probe_1b", assistant_prefix=gold[: gold.index("```python")]))
    return write_rows(path, rows)


def require(module: str):
    """Import a heavy package, or skip the test without it; with OPGEN_REQUIRE_HEAVY=1 (CI's heavy
    venv) a missing package fails the test instead, so a broken install cannot pass as skips."""
    import importlib
    import os

    import pytest

    if os.environ.get("OPGEN_REQUIRE_HEAVY") == "1":
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f"needs {module} (scripts/setup-vllm-cpu.sh builds that venv)")

if __name__ == "__main__":
    print(build(Path(sys.argv[1] if len(sys.argv) > 1 else "tiny-model")))
