"""OpenRLHF's remote reward model protocol (``--remote_rm_url``), served by ``opgen serve`` at ``/reward``.

OpenRLHF POSTs ``{"query": [...], "prompts": [...], "labels": [...]}`` (one entry per sample:
the decoded prompt + response, the decoded prompt, and the dataset's ``--label_key`` column) and
reads ``rewards`` from the JSON reply (newer versions also ``scores`` and ``extra_logs``). Each
sample's response is its query with the prompt removed from the front (the whole query when the
prompt is not its prefix). A label is a row's ground truth (the JSON text of
``reward_model.ground_truth``), or :func:`label` of the row: that JSON object with the row's
``extra_info`` (answer format, teacher-forced prefix), which the grade of some rows needs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from opgen.integrations.common import AdapterError, extra_info_of, grade_batch, ground_truth_of, json_value

__all__ = ["label", "rewards"]


def label(row: Mapping) -> str:
    """The ``--label_key`` value for one opgen row: JSON ``{"ground_truth", "extra_info"}``."""
    gt = ground_truth_of(row)
    extra = extra_info_of(row)
    keep = {k: extra[k] for k in ("answer_format", "assistant_prefix") if extra.get(k)}
    return json.dumps({"ground_truth": gt, "extra_info": keep}, ensure_ascii=False)


def _parse_label(value: Any, i: int) -> tuple[str | dict, dict]:
    if not isinstance(value, (str, dict)):
        raise AdapterError(f"labels[{i}]: a JSON string, not {type(value).__name__}")
    obj = json_value(value, f"labels[{i}]")
    if isinstance(obj, dict) and "ground_truth" in obj:
        extra = obj.get("extra_info") or {}
        if not isinstance(extra, dict):
            raise AdapterError(f"labels[{i}].extra_info: an object, not {type(extra).__name__}")
        return obj["ground_truth"], extra
    return value, {}  # the ground truth itself


def responses_of(query: Sequence[Any], prompts: Sequence[Any] | None) -> list[str]:
    out = []
    for i, q in enumerate(query):
        if not isinstance(q, str):
            raise AdapterError(f"query[{i}]: a string, not {type(q).__name__}")
        p = prompts[i] if prompts is not None else ""
        if not isinstance(p, str):
            raise AdapterError(f"prompts[{i}]: a string, not {type(p).__name__}")
        out.append(q[len(p):] if p and q.startswith(p) else q)
    return out


def rewards(payload: Mapping, **settings: Any) -> dict:
    """The reply to one OpenRLHF request: ``{"rewards", "scores", "extra_logs": {"acc"}}``."""
    if not isinstance(payload, Mapping):
        raise AdapterError("the request body must be a JSON object")
    query, prompts, labels = payload.get("query"), payload.get("prompts"), payload.get("labels")
    if not isinstance(query, list):
        raise AdapterError("query: a list of strings (prompt + response) is required")
    if prompts is not None and (not isinstance(prompts, list) or len(prompts) != len(query)):
        raise AdapterError(f"prompts: a list as long as query ({len(query)})")
    if not isinstance(labels, list) or len(labels) != len(query):
        raise AdapterError(f"labels: a list as long as query ({len(query)}), one ground truth per sample "
                           "(--label_key)")
    parsed = [_parse_label(v, i) for i, v in enumerate(labels)]
    for i, (gt, _) in enumerate(parsed):
        if not isinstance(gt, (str, dict)):
            raise AdapterError(f"labels[{i}].ground_truth: a JSON string or object")
    texts = responses_of(query, prompts)
    grades = grade_batch([gt for gt, _ in parsed], texts, [e for _, e in parsed], **settings)
    scores = [float(g["score"]) for g in grades]
    return {"rewards": scores, "scores": scores, "extra_logs": {"acc": [float(g["acc"]) for g in grades]}}
