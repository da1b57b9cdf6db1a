"""lm-eval (lm-evaluation-harness) without glue: task files per build, and the metric they call.

``opgen export lm-eval BUILD_DIR OUT_DIR`` writes, for every split of a build, one task YAML
(``opgen_<split>.yaml``: the split's parquet files, greedy ``generate_until``, the metrics
``score``, ``acc`` and ``acc_non_degenerate``), a group file ``opgen.yaml`` listing them, and
``utils.py``, which imports :func:`doc_to_text`, :func:`process_results` and :func:`non_degenerate`
from here. Then::

    lm_eval --model hf --model_args pretrained=MODEL --include_path OUT_DIR --tasks opgen

``process_results`` grades one generation with opgen's scorer (the grade ``opgen score`` gives
the same row and response); lm-eval averages ``score`` and ``acc`` over the documents.
``acc_non_degenerate`` is accuracy over the rows where no operator call returns its argument
unchanged and the output is not the input (``opgen score``'s ``non_degenerate``): there ``return x``
can never be right, so a degenerate program scores 0 on it, where ``acc`` gives it the share of
degenerate rows (17-21% at depth 1). Its per-document value is ``[acc, counted]`` and
:func:`non_degenerate` is its aggregation (None for a task without such a row).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from opgen.integrations.common import completion_text, extra_info_of, grade_batch, ground_truth_of

__all__ = ["doc_to_text", "export", "non_degenerate", "process_results"]

UTILS = '''"""Written by `opgen export lm-eval`: lm-eval's hooks for opgen's tasks (opgen/integrations/lm_eval.py)."""

from opgen.integrations.lm_eval import doc_to_text, non_degenerate, process_results  # noqa: F401
'''
# lm-eval's YAML tag for a Python function of utils.py (written unquoted)
HOOKS = ("doc_to_text", "process_results", "non_degenerate")


def doc_to_text(doc: Mapping) -> str:
    """The row's user message (opgen prompts are one user turn); lm-eval's ``--apply_chat_template``
    wraps it in the model's template."""
    prompt = doc.get("prompt")
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], Mapping):
        return str(prompt[-1].get("content", ""))
    return str(prompt or "")


def process_results(doc: Mapping, results: Sequence[Any]) -> dict[str, Any]:
    """``{"score", "acc", "acc_non_degenerate"}`` of the first generation for this document; the
    last is ``[acc, counted]``, counted when the row is not degenerate (:func:`non_degenerate`)."""
    from opgen.score.metrics import row_measures  # the scorer's own definition (131 ms: when grading)

    text = completion_text(results[0] if results else "", "results[0]")
    extra = extra_info_of(doc)
    g = grade_batch([ground_truth_of(doc)], [text], [extra])[0]
    counted = row_measures(extra)["degenerate"] is False  # unknown (an older build's row): not counted
    return {"score": float(g["score"]), "acc": float(g["acc"]), "acc_non_degenerate": [float(g["acc"]), counted]}


def non_degenerate(items: Sequence[Sequence[Any]]) -> float | None:
    """lm-eval's aggregation of ``acc_non_degenerate``: the mean accuracy over counted rows (rows where
    ``return x`` cannot be right); None when a task has none (an empty mean is no 0%)."""
    kept = [float(acc) for acc, counted in items if counted]
    return sum(kept) / len(kept) if kept else None


def _task(name: str, files: list[str], max_gen_toks: int) -> dict:
    return {
        "task": name,
        "dataset_path": "parquet",
        "dataset_kwargs": {"data_files": {"test": files}},
        "test_split": "test",
        "output_type": "generate_until",
        "doc_to_text": "!function utils.doc_to_text",
        "doc_to_target": "",
        "process_results": "!function utils.process_results",
        "generation_kwargs": {"until": [], "do_sample": False, "max_gen_toks": max_gen_toks},
        "metric_list": [{"metric": m, "aggregation": "mean", "higher_is_better": True} for m in ("score", "acc")]
        + [{"metric": "acc_non_degenerate", "aggregation": "!function utils.non_degenerate", "higher_is_better": True}],
        "metadata": {"version": 1.0},
    }


def _yaml(obj: dict) -> str:
    import yaml

    text = yaml.safe_dump(obj, sort_keys=False, allow_unicode=True, width=1000)
    for hook in HOOKS:  # lm-eval's own YAML tag for a Python function: written unquoted
        text = text.replace(f"'!function utils.{hook}'", f"!function utils.{hook}")
    return text


def export(build_dir: Path, out_dir: Path, *, max_gen_toks: int = 2048, group: str = "opgen") -> list[Path]:
    """Write the task files of a build (docs above); returns the paths written. Parquet paths are
    absolute, so the task folder may live anywhere. The build's operator library must be one the
    tasks' grader will find (opgen.library.library_of as compute_score_batch asks it: ``OPGEN_LIBRARY``,
    else by digest in the user's store): UnknownLibrary before anything is written, never tasks
    whose every answer would be refused.

    ``out_dir`` is written as every command writes (opgen.outdir.committed): checked (writable, not
    a mount point, holding nothing but an earlier export's files) and locked before the build is
    read, the files staged beside it and swapped in whole; an OutputError names what is wrong."""
    from opgen import outdir
    from opgen.hub import hub_name, read_manifest
    from opgen.library import given, library_of, ref_of_manifest

    def own(name: str) -> bool:  # what an export writes: the group's YAML files and utils.py
        return name == "utils.py" or name.endswith(".yaml")

    build_dir = Path(build_dir).resolve()
    where = build_dir / "manifest.json"
    written, names = [], []
    with outdir.committed(Path(out_dir), own, "opgen export lm-eval", "utils.py") as stage:
        manifest, _ = read_manifest(build_dir)
        library_of(ref_of_manifest(manifest, str(where)), given(None, env=True), f"{where}: ")
        for split, info in manifest["splits"].items():
            files = [str(build_dir / f["path"]) for f in info.get("files", [])]
            for f in files:
                if not Path(f).is_file():
                    raise FileNotFoundError(f"{f}: listed in {build_dir / 'manifest.json'} but missing")
            name = f"{group}_{hub_name(split)}"
            names.append(name)
            (stage / f"{name}.yaml").write_text(_yaml(_task(name, files, max_gen_toks)), encoding="utf-8")
            written.append(f"{name}.yaml")
        (stage / f"{group}.yaml").write_text(_yaml({
            "group": group, "task": names,
            "aggregate_metric_list": [{"metric": "score", "aggregation": "mean", "weight_by_size": True}],
            "metadata": {"version": 1.0,
                         "opgen_manifest": json.dumps({"opgen_version": manifest.get("opgen_version")})}}),
            encoding="utf-8")
        (stage / "utils.py").write_text(UTILS, encoding="utf-8")  # last: a staged export is complete with it
    final = outdir.absolute(Path(out_dir))
    return [final / n for n in (*written, f"{group}.yaml", "utils.py")]
