"""Shared pieces of the verl compatibility suite: a tiny local tokenizer and contract rows.

Nothing may be downloaded on the project's machines, so the suite trains its own tokenizer: a
byte-level BPE (any text encodes, so no prompt can fail to tokenize) behind a Qwen2.5-style ChatML
chat template with a default system turn. The default system turn matters: verl's multi-turn SFT
dataset strips it from every turn after the first, a path a template without one never reaches.
"""

from __future__ import annotations

import json
from pathlib import Path

# Qwen2.5's template shape, trimmed of tool calls: a default system turn when the conversation
# has none, ChatML turns, and the assistant generation header.
CHATML_TEMPLATE = (
    "{%- if messages[0]['role'] != 'system' %}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def _corpus() -> list[str]:
    # Text shaped like opgen's prompts and answers, so merges are realistic and token counts
    # are well below character counts (a byte-per-token tokenizer would hide off-by-one errors
    # only in the same way a real one does, but makes every prompt enormous).
    from opgen import ops

    lines: list[str] = []
    for op in ops.OPERATORS:
        lines.append(f"Recall {op.id}: {op.gloss}")
        lines.extend(op.source.splitlines())
    lines += [
        "Write a Python function main_solution(x) that returns the result of the program below.",
        "Assemble:",
        "```python",
        "def main_solution(x):",
        "    return func_3(func_1(x, 2))",
        "```",
        '```json\n{"output": "aabbcc"}\n```',
        "You are given the following string operators. Predict the output for the input.",
    ]
    return lines * 4


def build_tokenizer(folder: Path) -> Path:
    """Train the tiny tokenizer and save it as a transformers tokenizer folder; returns ``folder``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(_corpus(), trainer=trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
    )
    tok.chat_template = CHATML_TEMPLATE
    tok.save_pretrained(str(folder))
    return folder


# Rows written straight from docs/contracts.md, independent of opgen's builder: they pin the
# contract itself against verl, so a builder change that still meets the contract cannot break
# verl, and a contract change that would is caught here.


def contract_schema(kind: str):
    import pyarrow as pa

    msg = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
    extra = pa.struct([
        ("index", pa.int64()), ("split", pa.string()), ("family", pa.string()), ("depth", pa.int64()),
        ("k", pa.int64()), ("ops", pa.list_(pa.string())), ("structure", pa.string()),
        ("prompt_format", pa.string()), ("answer_format", pa.string()), ("mode", pa.string()),
        ("condition", pa.string()), ("n_tasks", pa.int64()), ("assistant_prefix", pa.string()),
        ("opgen_version", pa.string()), ("recipe", pa.string()), ("row_id", pa.string()),
        ("target_op", pa.string()), ("tail_chars", pa.int64()), ("tail_calls", pa.int64()),
        ("unchanged_calls", pa.int64()), ("output_is_input", pa.int64()), ("call_ops", pa.list_(pa.string())),
        ("call_chars", pa.list_(pa.int64())), ("call_tails", pa.list_(pa.int64())), ("prompt_template", pa.string()),
    ])
    fields = [
        ("data_source", pa.string()), ("prompt", msg), ("ability", pa.string()),
        ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
        ("extra_info", extra),
    ]
    if kind == "sft":
        fields += [("messages", msg), ("response", pa.string()), ("prompt_text", pa.string())]
    return pa.schema(fields)


def contract_rows(split: str, kind: str, n: int, *, mode: str = "program") -> list[dict]:
    """``n`` rows of one split built by hand from the contract; program rows by default."""
    from opgen import ops

    rows = []
    train = [ops.get(i) for i in ops.TRAIN_IDS]
    for i in range(n):
        op = train[i % len(train)]
        x = "abc" * (1 + i % 5)
        params = tuple(_sample_param(p) for p in op.params)
        out = op.fn(*((x,) * op.n_inputs + params))
        call = f"{op.id}({', '.join(['x'] * op.n_inputs + [repr(a) for a in params])})"
        ref_code = f"{op.source.rstrip()}\n\ndef main_solution(x):\n    return {call}\n"
        if mode == "program":
            prompt = (f"Here is an operator:\n```python\n{op.source.rstrip()}\n```\n"
                      f"Write main_solution(x) computing {call}. " + "pad " * (i % 7))
            answer = f"Assemble:\n```python\n{ref_code}```"
        else:
            prompt = f"Predict the output of main_solution({x!r}).\n```python\n{ref_code}```"
            answer = f'```json\n{json.dumps({"output": out})}\n```'
        gt = {"mode": mode, "tasks": [{"entry": "main_solution", "expr": call, "input": x, "output": out,
                                       "ops": [op.id], "depth": 1}],
              "ops": [op.id], "ref_code": ref_code, "ref_input": {"x": x}, "ref_output": out,
              "funcname": "main_solution"}
        row = {
            "data_source": f"opgen/{split}", "prompt": [{"role": "user", "content": prompt}],
            "ability": "code" if mode == "program" else "code_io",
            "reward_model": {"style": "rule", "ground_truth": json.dumps(gt)},
            "extra_info": {"index": i, "split": split, "family": split, "depth": 1, "k": 1, "ops": [op.id],
                           "structure": "atomic",
                           "prompt_format": "shown" if mode == "program" else "forward",
                           "answer_format": "ra" if mode == "program" else "json_output",
                           "mode": mode, "condition": "", "n_tasks": 1, "assistant_prefix": "",
                           "opgen_version": "test", "recipe": "contract", "row_id": f"{i:016x}",
                           "target_op": "", "tail_chars": -1, "tail_calls": -1, "unchanged_calls": 0,
                           "output_is_input": int(out == x), "call_ops": [], "call_chars": [], "call_tails": [],
                           "prompt_template": ""},
        }
        if kind == "sft":
            row["messages"] = row["prompt"] + [{"role": "assistant", "content": answer}]
            row["response"] = answer
            row["prompt_text"] = prompt
        rows.append(row)
    return rows


def _sample_param(p):
    if p.kind == "int":
        return p.lo
    if p.kind == "choice":
        return p.choices[0]
    return "ab"[: max(p.lo, 1)]


def write_contract_file(path: Path, split: str, kind: str, n: int, *, mode: str = "program") -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(contract_rows(split, kind, n, mode=mode), schema=contract_schema(kind))
    pq.write_table(table, path)
    return path


def wrong_answer(gt: dict) -> str:
    """A well-formed response whose every value differs from the gold one."""
    if gt.get("mode") == "forward":
        out = gt["tasks"][0]["output"] if gt.get("tasks") else gt["ref_output"]
        return f'```json\n{json.dumps({"output": out + "#wrong"})}\n```'
    entries = "\n\n".join(f"def {t['entry']}(x):\n    return x + '#wrong'" for t in gt["tasks"])
    return f"```python\n{entries}\n```"


def build_model_dir(folder: Path, tokenizer_dir: Path) -> Path:
    """A model folder verl's config classes accept: the tiny tokenizer plus a one-layer Qwen2
    ``config.json`` (no weights: config validation reads the architecture, never the tensors)."""
    import shutil

    from transformers import Qwen2Config

    shutil.copytree(tokenizer_dir, folder, dirs_exist_ok=True)
    Qwen2Config(vocab_size=600, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                num_key_value_heads=1, architectures=["Qwen2ForCausalLM"]).save_pretrained(folder)
    return folder
