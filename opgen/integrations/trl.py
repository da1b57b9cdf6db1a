"""TRL without glue: a reward function for ``GRPOTrainer`` and dataset views for GRPO and SFT.

    from trl import GRPOConfig, GRPOTrainer, SFTTrainer
    from opgen.integrations import trl as otrl

    rows = opgen.create_dataset("rl-r1", "train", size=512)
    GRPOTrainer(model, reward_funcs=otrl.reward, train_dataset=otrl.grpo_dataset(rows), args=GRPOConfig(...))
    SFTTrainer(model, train_dataset=otrl.sft_dataset(opgen.create_dataset("sft-eco", "train")), ...)

TRL calls a reward function as ``f(prompts=..., completions=..., completion_ids=..., **columns)``,
where ``columns`` are the dataset's other columns as lists (one entry per completion) plus its own
``trainer_state``/``log_extra``/... . :func:`reward` reads each completion's ground truth from the
``ground_truth`` column (the views' flat column) or ``reward_model`` (opgen's parquet rows as they
are), and the row's ``extra_info`` (answer format, teacher-forced prefix); plain and conversational
completions both work. Its numbers are ``opgen score``'s scores for the same rows and responses.
TRL is imported by none of this: the views are ``datasets.Dataset`` objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opgen.integrations import common

__all__ = ["grpo_dataset", "make_reward", "reward", "sft_dataset"]


def make_reward(**settings: Any):
    """A TRL reward function with scorer settings fixed (``policy``, ``group``, ``mode``,
    ``namespace``, ``static``, ``allow_weak_sandbox``, or ``settings=`` a GradeSettings); its
    ``__name__`` is what TRL logs it as."""
    unknown = sorted(set(settings) - set(common.SETTINGS))
    if unknown:
        raise TypeError(f"make_reward: unknown settings {', '.join(unknown)} (known: {', '.join(common.SETTINGS)})")

    def opgen_reward(prompts: Sequence[Any] | None = None, completions: Sequence[Any] | None = None,
                     **kwargs: Any) -> list[float]:
        if completions is None:
            raise common.AdapterError("opgen reward: no completions")
        n = len(completions)
        truths, extras = _column_truths(kwargs, n)
        texts = [common.completion_text(c, f"completions[{i}]") for i, c in enumerate(completions)]
        sources = kwargs.get("data_source")
        grades = common.grade_batch(truths, texts, extras, list(sources) if sources is not None else None,
                                    **settings)
        return [float(g["score"]) for g in grades]

    opgen_reward.__name__ = "opgen_reward"
    opgen_reward.__qualname__ = "opgen_reward"
    return opgen_reward


def _column_truths(kwargs: dict, n: int) -> tuple[list, list[dict]]:
    """Per-completion ground truths and extra_info from TRL's column keywords."""
    if "ground_truth" in kwargs:
        truths = list(kwargs["ground_truth"])
    elif "reward_model" in kwargs:
        truths = [common.ground_truth_of({"reward_model": rm}, f"reward_model[{i}]")
                  for i, rm in enumerate(kwargs["reward_model"])]
    else:
        raise common.AdapterError("opgen reward: the dataset has neither a 'ground_truth' nor a 'reward_model' column "
                                  "(build it with opgen.integrations.trl.grpo_dataset, or keep opgen's columns)")
    extras_col = kwargs.get("extra_info")
    extras = [common.extra_info_of({"extra_info": e}) for e in extras_col] if extras_col is not None else [{}] * n
    if len(truths) != n or len(extras) != n:
        raise common.AdapterError(f"opgen reward: {n} completions but {len(truths)} ground truths and {len(extras)} "
                                  "extra_info entries")
    for i, t in enumerate(truths):
        if not isinstance(t, (str, dict)):
            raise common.AdapterError(f"opgen reward: ground_truth[{i}] is {type(t).__name__}, not a JSON string")
    return truths, extras


#: The reward function with the scorer's defaults (output policy, fraction groups).
reward = make_reward()


def grpo_dataset(rows: Any):
    """A ``datasets.Dataset`` for ``GRPOTrainer``: ``prompt`` (the row's conversational prompt),
    ``ground_truth`` (the JSON text the reward reads), ``data_source``, ``extra_info`` (the row's,
    unchanged), ``gold_answer`` (every program and forward row's gold answer: :func:`opgen.gold_answer`)."""
    from opgen.api import rows_list  # opgen.api loads the generators: 85 ms this module's import need not pay
    from opgen.notebook import gold_answer

    datasets = _datasets()

    out = []
    for i, row in enumerate(rows_list(rows)):
        view = common.task_view(row, f"row {i}")
        try:
            view["gold_answer"] = gold_answer(row)
        except (ValueError, KeyError):
            view["gold_answer"] = ""  # a native row: its ground truth holds no program of opgen's
        out.append(view)
    return datasets.Dataset.from_list(out)


def sft_dataset(rows: Any):
    """A ``datasets.Dataset`` in TRL's conversational prompt-completion form for ``SFTTrainer``:
    ``prompt`` (the user turn) and ``completion`` (one assistant turn: the gold answer), so the loss
    covers the answer only. SFT rows give their own gold turn; RL and eval rows their rendered gold
    answer (:func:`opgen.gold_answer`); a row with none raises, naming it."""
    from opgen.api import rows_list  # opgen.api loads the generators: 85 ms this module's import need not pay
    from opgen.notebook import gold_answer

    datasets = _datasets()

    out = []
    for i, row in enumerate(rows_list(rows)):
        messages = row.get("messages")
        if isinstance(messages, list) and messages and messages[-1].get("role") == "assistant":
            prompt = [{"role": str(m["role"]), "content": str(m["content"])} for m in messages[:-1]]
            answer = str(messages[-1]["content"])
        else:
            prompt = [{"role": str(m["role"]), "content": str(m["content"])} for m in (row.get("prompt") or [])]
            try:
                answer = gold_answer(row)
            except (ValueError, KeyError) as exc:
                raise common.AdapterError(f"row {i}: no gold answer for an SFT completion ({exc})") from None
        if not prompt:
            raise common.AdapterError(f"row {i}: no prompt messages")
        out.append({"prompt": prompt, "completion": [{"role": "assistant", "content": answer}]})
    return datasets.Dataset.from_list(out)


def _datasets() -> Any:
    # imported by name: the repository's own datasets/ folder (the bundled recipes) would shadow it
    # for a type checker run from the checkout
    import importlib

    return importlib.import_module("datasets")
