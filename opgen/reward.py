"""verl's reward entry point: ``compute_score`` for opgen rows (and native ``codeio-forward-*`` rows).

Plug into verl with ``custom_reward_function.path=<site-packages>/opgen/reward.py`` and
``custom_reward_function.name=compute_score`` (newer verl: ``reward.custom_reward_function.*``);
policies go through ``reward_kwargs`` (see docs/scoring.md). Model code runs in the process-wide
sandbox (:func:`opgen.score.sandbox.shared`), never in the trainer's process or thread.
"""

from __future__ import annotations

# The keys of every returned dict, in order: verl stacks them across samples, so a sample that
# failed early must still carry all of them (numbers, except ``error``).
KEYS = ("score", "acc", "format_ok", "error", "structure_ok", "n_tasks", "tasks_correct", "recall_expected",
        "recall_correct", "recall_chimera", "recall_arity", "recall_wrong_body", "recall_missing",
        "recall_duplicated", "recall_extra")


def compute_score(data_source: str, solution_str: str, ground_truth: str | dict, extra_info: dict | None = None,
                  policy: str = "output", group: str = "fraction", mode: str = "auto",
                  allow_weak_sandbox: bool | None = None, **kwargs: object) -> dict:
    """Score one sample. ``policy``: "output" (default) or "output_structure"; ``group``: "fraction"
    (default) or "all"; ``mode``: "auto" (default), "forward" or "program"; ``allow_weak_sandbox``:
    grade even below ``full`` isolation (default: ``OPGEN_ALLOW_WEAK_SANDBOX=1`` in the
    environment; otherwise a weak sandbox raises ``SandboxError`` naming what is unprotected).

    ``structure_ok`` is 1/0 for program rows and -1 where it does not apply (forward rows)."""
    from opgen.score.grade import grade
    from opgen.score.sandbox import shared

    extra = extra_info or {}
    g = grade(ground_truth, solution_str or "", policy=policy, group=group, mode=mode,
              # None: grade() starts the shared sandbox only for rows that run code.
              sandbox=None if allow_weak_sandbox is None else shared(allow_weak_sandbox=allow_weak_sandbox),
              answer_format=str(extra.get("answer_format", "") or ""),
              assistant_prefix=str(extra.get("assistant_prefix", "") or ""))
    rc = g["recall"]
    recall_wrong = rc["wrong_body"] + rc["no_definition"] + rc["syntax"]
    return {
        "score": float(g["score"]),
        "acc": float(g["acc"]),
        "format_ok": float(bool(g["format_ok"])),
        "error": g["error"],
        "structure_ok": -1.0 if g["structure_ok"] is None else float(bool(g["structure_ok"])),
        "n_tasks": float(g["n_tasks"]),
        "tasks_correct": float(g["tasks_correct"]),
        "recall_expected": float(rc["expected"]),
        "recall_correct": float(rc["correct"]),
        "recall_chimera": float(rc["chimera"]),
        "recall_arity": float(rc["arity"]),
        "recall_wrong_body": float(recall_wrong),
        "recall_missing": float(rc["missing"]),
        "recall_duplicated": float(rc["duplicated"]),
        "recall_extra": float(rc["extra"]),
    }
