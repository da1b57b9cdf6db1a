"""What every adapter shares: a row's ground truth, a completion's text, and one batch of grades.

Grades come from :func:`opgen.reward.compute_score_batch` (the scorer's public batch entry point:
the same :func:`opgen.score.grade` (opgen.score.batch) that ``opgen score`` runs, in the same sandbox), so an
adapter's reward for a row and a response is ``opgen score``'s score for them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from opgen import truth
from opgen.choices import REWARD_OPTIONS
from opgen.errors import OpgenError

# What an adapter forwards to the scorer, and nothing else: a trainer's own keyword arguments
# (TRL passes trainer_state, completion_ids ...) never reach it. The grading options are
# opgen.choices.REWARD_OPTIONS (opgen.reward.reward_options()); ``settings`` is those as one
# opgen.score.settings.GradeSettings.
SETTINGS = (*REWARD_OPTIONS, "allow_weak_sandbox", "settings")


class AdapterError(ValueError, OpgenError):
    """A row or completion an adapter cannot grade; the message names the row and field."""

    exit_code = 1


def ground_truth_of(row: Mapping, where: str = "row") -> str | dict:
    """A row's ground truth: ``reward_model.ground_truth`` (opgen's parquet rows) or a flat
    ``ground_truth`` field (the adapters' dataset views)."""
    rm = row.get("reward_model")
    gt = rm.get("ground_truth") if isinstance(rm, Mapping) else None
    if gt is None:
        gt = row.get("ground_truth")
    if not isinstance(gt, (str, dict)):
        raise AdapterError(f"{where}: no ground truth (reward_model.ground_truth or ground_truth)")
    return gt


def extra_info_of(row: Mapping) -> dict:
    extra = row.get("extra_info")
    if isinstance(extra, str):  # a view that stores it as JSON text (verifiers' ``info``)
        extra = json.loads(extra) if extra else {}
    return dict(extra or {})


def task_view(row: Mapping, where: str = "row") -> dict:
    """What a trainer's task of one opgen row carries, in every adapter: ``prompt`` (the row's
    messages, role and content as text), ``ground_truth`` (JSON text), ``data_source``,
    ``extra_info`` (the row's). A row without them raises, naming ``where``."""
    gt = ground_truth_of(row, where)
    prompt = row.get("prompt")
    if not isinstance(prompt, list) or not prompt:
        raise AdapterError(f"{where}: prompt must be a non-empty list of messages")
    return {"prompt": [{"role": str(m["role"]), "content": str(m["content"])} for m in prompt],
            "ground_truth": gt if isinstance(gt, str) else json.dumps(gt, ensure_ascii=False),
            "data_source": str(row.get("data_source") or ""), "extra_info": extra_info_of(row)}


def completion_text(completion: Any, where: str = "completion") -> str:
    """A completion's text: a string as it is; a conversational completion (a list of messages)
    as the content of its assistant messages, joined (TRL and verifiers hand over a list holding
    one assistant message)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        completion = [completion]
    if isinstance(completion, Sequence):
        parts = []
        for k, m in enumerate(completion):
            if not isinstance(m, Mapping):
                raise AdapterError(f"{where}[{k}]: a message is a dict with role and content, not "
                                   f"{type(m).__name__}")
            if m.get("role", "assistant") != "assistant":
                continue
            content = m.get("content")
            if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
                content = "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
            if content is not None and not isinstance(content, str):
                raise AdapterError(f"{where}[{k}].content: a string, not {type(content).__name__}")
            parts.append(content or "")
        return "\n".join(parts)
    raise AdapterError(f"{where}: a string or a list of messages, not {type(completion).__name__}")


def settings_of(kwargs: Mapping) -> dict:
    return {k: kwargs[k] for k in SETTINGS if k in kwargs}


def grade_batch(ground_truths: Sequence[str | dict], texts: Sequence[str], extra_infos: Sequence[Mapping | None],
                data_sources: Sequence[str] | None = None, **settings: Any) -> list[dict]:
    """One grade dict (``score``, ``acc``) per sample, in order, as :func:`opgen.reward.compute_score`
    gives it (``settings``: policy, group, mode, namespace, static, library, allow_weak_sandbox, or
    ``settings=`` a GradeSettings for the grading ones), built into one GradeSettings here, before
    any grading. A row's library is found as compute_score finds it (opgen.library): never loaded
    from the row; one that cannot be had raises UnknownLibrary / LibraryMismatch."""
    from opgen.library import LibraryError
    from opgen.reward import compute_score_batch
    from opgen.score.settings import GradeSettings

    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise TypeError(f"unknown scorer settings: {', '.join(unknown)} (known: {', '.join(SETTINGS)})")
    sources = list(data_sources) if data_sources is not None else [""] * len(texts)
    for i, gt in enumerate(ground_truths):
        check_ground_truth(gt, f"ground_truth[{i}]")
    grading = {k: v for k, v in settings.items() if k not in ("allow_weak_sandbox", "settings")}
    try:
        record = GradeSettings.resolve(settings.get("settings"), **grading)
        weak = {k: settings[k] for k in ("allow_weak_sandbox",) if k in settings}
        return compute_score_batch(sources, list(texts), list(ground_truths), [dict(e or {}) for e in extra_infos],
                                   keys="minimal", settings=record, **weak)
    except LibraryError:  # a row's library neither given nor registered, or not the one given: named as it is
        raise
    except ValueError as exc:  # a malformed ground truth the shape check let through, a bad setting
        raise AdapterError(str(exc)) from None


def json_value(value: object, where: str) -> object:
    """``value`` parsed when it is a JSON string (AdapterError naming ``where`` when it is not JSON),
    else ``value`` itself."""
    if not isinstance(value, str):
        return value
    if truth.text_too_deep(value):
        raise AdapterError(f"{where}: JSON nested deeper than {truth.MAX_DEPTH} levels")
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        raise AdapterError(f"{where}: not JSON") from None


def check_ground_truth(gt: object, where: str) -> None:
    """The contract's outer shape (docs/contracts.md): a JSON object with ``tasks`` or the native
    ``ref_output``; the scorer checks the rest."""
    try:
        obj = truth.read(gt, where)
    except truth.GroundTruthError as exc:
        raise AdapterError(str(exc)) from None
    if not (isinstance(obj.get("tasks"), list) or "ref_output" in obj):
        raise AdapterError(f"{where}: not an opgen ground truth (a JSON object with 'tasks' or 'ref_output')")
