"""Decomposed inference: recall each needed operator in its own forward pass, then assemble.

For a program row, every operator the reference expressions use gets its own request: the row's
prompt with the assistant turn started as ``Recall func_N:``, stopped before the next recall or
the assemble block. The program is then put together mechanically from the recalled definitions
and the reference expression (``ground_truth.tasks[].expr``), written as a recall-then-assemble
answer, and graded like any other response. A model that composes badly but decomposes well
knows its operators and fails at retrieving them under the load of several definitions.
"""

from __future__ import annotations

import json
import re

from opgen import expr, formats
from opgen.errors import OpgenError
from opgen.infer.base import LENGTH, STOP, Generation, Request, Sampling
from opgen.infer.run import Plan, Row

# The answer written is the RA format's; a recall ends where the model would start its next block.
_RECALL_HEADER, _ASSEMBLE_HEADER = formats.answer_spec("ra").markers  # "Recall {op}:", "Assemble:"
RECALL_STOP = ("\n" + _RECALL_HEADER.split("{", 1)[0], "\n" + _ASSEMBLE_HEADER)

_CODE_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


class NotAProgramRow(ValueError, OpgenError):
    exit_code = 1


def tasks_of(ground_truth: str) -> list[dict]:
    gt = json.loads(ground_truth)
    if gt.get("mode", "program") != "program" or not gt.get("tasks"):
        raise NotAProgramRow("decomposed inference needs program rows with ground_truth.tasks")
    if gt.get("library") is not None:  # a user library's row: its tasks' ``ops`` name the operators
        return [{**t, "_library": True} for t in gt["tasks"]]
    return gt["tasks"]


def needed_ops(tasks: list[dict]) -> list[str]:
    """Operators in recall order: first appearance over the tasks' expressions, tasks in order (a
    user library's row: over its tasks' ground-truth ``ops``, which the expression parser, reading
    the study's operators, cannot find)."""
    seen: dict[str, None] = {}
    for task in tasks:
        found = task.get("ops", ()) if task.get("_library") else expr.ops_used(expr.parse(task["expr"]))
        for op in found:
            seen.setdefault(op, None)
    return list(seen)


def recall_prefix(op: str) -> str:
    return _RECALL_HEADER.format(op=op)


def definition_of(recall_text: str) -> str | None:
    """The first fenced code block of a recall, or None when the model wrote none."""
    m = _CODE_BLOCK.search(recall_text)
    return m.group(1).strip("\n") if m else None


def assemble(tasks: list[dict], recalls: list[tuple[str, str]]) -> str:
    """An RA answer from (op, recall text) pairs and the reference expressions.

    Recall blocks keep the model's own text (so diagnostics see what it recalled); the assemble
    block holds every definition found plus one entry point per task.
    """
    parts = []
    definitions = []
    for op, text in recalls:
        body = text.rstrip()
        parts.append(f"{recall_prefix(op)}{body}\n")
        code = definition_of(text)
        if code is not None:
            definitions.append(code)
    entries = [f"def {t.get('entry', 'main_solution')}(x):\n    return {t['expr']}" for t in tasks]
    program = "\n\n".join(definitions + entries)
    parts.append(f"{_ASSEMBLE_HEADER}\n```python\n{program}\n```")
    return "\n".join(parts)


def decomposed_plan(sampling: Sampling) -> Plan:
    if sampling.n != 1:
        raise ValueError("decomposed inference draws one sample per recall (n must be 1)")
    recall_sampling = Sampling(**{**sampling.to_dict(), "stop": tuple(sampling.stop) + RECALL_STOP})

    def requests(row: Row) -> list[Request]:
        ops = needed_ops(tasks_of(row.ground_truth))
        return [Request(f"{row.index}/{op}", row.messages, recall_prefix(op)) for op in ops]

    def record(row: Row, gens: list[Generation]) -> dict:
        tasks = tasks_of(row.ground_truth)
        ops = [g.key.split("/", 1)[1] for g in gens]
        recalls = [(op, g.responses[0]) for op, g in zip(ops, gens)]
        reasons = [g.finish_reasons[0] for g in gens]
        tokens = [g.completion_tokens[0] if g.completion_tokens else -1 for g in gens]
        return {
            "index": row.index,
            "prompt_sha256": row.sha,
            "response": assemble(tasks, recalls),
            "finish_reason": LENGTH if LENGTH in reasons else STOP,
            "prompt_tokens": sum(max(g.prompt_tokens, 0) for g in gens),
            "completion_tokens": sum(max(t, 0) for t in tokens),
            "recalls": [{"op": op, "response": text, "finish_reason": reason, "completion_tokens": tok}
                        for (op, text), reason, tok in zip(recalls, reasons, tokens)],
        }

    return Plan(requests, record, recall_sampling)


def applicable(rows: list[Row]) -> str | None:
    """None when every row can be decomposed, else why not (names the first offending row)."""
    for row in rows:
        try:
            needed_ops(tasks_of(row.ground_truth))
        except NotAProgramRow as exc:
            return f"row {row.index}: {exc}"
        except (ValueError, KeyError, TypeError, expr.ExprError) as exc:
            return f"row {row.index}: unreadable ground_truth.tasks ({exc})"
    return None
