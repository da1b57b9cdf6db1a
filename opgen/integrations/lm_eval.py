"""lm-eval (lm-evaluation-harness) without glue: task files per build, and the metric they call.

``opgen export lm-eval BUILD_DIR OUT_DIR`` writes, for every split of a build, one task YAML
(``opgen_<split>.yaml``: the split's parquet files, greedy ``generate_until``, the metrics
``score`` and ``acc``), a group file ``opgen.yaml`` listing them, and ``utils.py``, which imports
:func:`doc_to_text` and :func:`process_results` from here. Then::

    lm_eval --model hf --model_args pretrained=MODEL --include_path OUT_DIR --tasks opgen

``process_results`` grades one generation with opgen's scorer (the grade ``opgen score`` gives
the same row and response); lm-eval averages the per-document numbers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from opgen.integrations.common import completion_text, extra_info_of, grade_batch, ground_truth_of

__all__ = ["doc_to_text", "export", "process_results"]

UTILS = '''"""Written by `opgen export lm-eval`: lm-eval's hooks for opgen's tasks (opgen/integrations/lm_eval.py)."""

from opgen.integrations.lm_eval import doc_to_text, process_results  # noqa: F401
'''


def doc_to_text(doc: Mapping) -> str:
    """The row's user message (opgen prompts are one user turn); lm-eval's ``--apply_chat_template``
    wraps it in the model's template."""
    prompt = doc.get("prompt")
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], Mapping):
        return str(prompt[-1].get("content", ""))
    return str(prompt or "")


def process_results(doc: Mapping, results: Sequence[Any]) -> dict[str, float]:
    """``{"score", "acc"}`` of the first generation for this document."""
    text = completion_text(results[0] if results else "", "results[0]")
    g = grade_batch([ground_truth_of(doc)], [text], [extra_info_of(doc)])[0]
    return {"score": float(g["score"]), "acc": float(g["acc"])}


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
        "metric_list": [{"metric": m, "aggregation": "mean", "higher_is_better": True} for m in ("score", "acc")],
        "metadata": {"version": 1.0},
    }


def _yaml(obj: dict) -> str:
    import yaml

    text = yaml.safe_dump(obj, sort_keys=False, allow_unicode=True, width=1000)
    # lm-eval's own YAML tag for a Python function: written unquoted
    return text.replace("'!function utils.doc_to_text'", "!function utils.doc_to_text") \
        .replace("'!function utils.process_results'", "!function utils.process_results")


def export(build_dir: Path, out_dir: Path, *, max_gen_toks: int = 2048, group: str = "opgen") -> list[Path]:
    """Write the task files of a build (docs above); returns the paths written. Parquet paths are
    absolute, so the task folder may live anywhere. The build's operator library must be one the
    tasks' grader will find (opgen.library.library_of as compute_score_batch asks it: ``OPGEN_LIBRARY``,
    else by digest in the user's store): UnknownLibrary before anything is written, never tasks
    whose every answer would be refused."""
    from opgen.hub import hub_name, read_manifest
    from opgen.library import given, library_of, ref_of_manifest

    build_dir, out_dir = Path(build_dir).resolve(), Path(out_dir)
    manifest, _ = read_manifest(build_dir)
    where = build_dir / "manifest.json"
    library_of(ref_of_manifest(manifest, str(where)), given(None, env=True), f"{where}: ")
    out_dir.mkdir(parents=True, exist_ok=True)
    written, names = [], []
    for split, info in manifest["splits"].items():
        files = [str(build_dir / f["path"]) for f in info.get("files", [])]
        for f in files:
            if not Path(f).is_file():
                raise FileNotFoundError(f"{f}: listed in {build_dir / 'manifest.json'} but missing")
        name = f"{group}_{hub_name(split)}"
        names.append(name)
        path = out_dir / f"{name}.yaml"
        path.write_text(_yaml(_task(name, files, max_gen_toks)), encoding="utf-8")
        written.append(path)
    gpath = out_dir / f"{group}.yaml"
    gpath.write_text(_yaml({"group": group, "task": names,
                            "aggregate_metric_list": [{"metric": "score", "aggregation": "mean",
                                                       "weight_by_size": True}],
                            "metadata": {"version": 1.0, "opgen_manifest": json.dumps(
                                {"opgen_version": manifest.get("opgen_version")})}}), encoding="utf-8")
    (out_dir / "utils.py").write_text(UTILS, encoding="utf-8")
    return [*written, gpath, out_dir / "utils.py"]
