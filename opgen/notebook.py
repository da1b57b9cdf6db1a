"""The notebook API's training-side additions (docs/api.md): one row's grade, its gold answer, the
bundled recipes, and weighted task mixing. Re-exported by :mod:`opgen.api` and :mod:`opgen`.

    opgen.score_answer(row, response)          # one grade dict, as `opgen score` grades that row
    opgen.gold_answer(row)                     # the gold answer of any program or forward row
    opgen.list_recipes()                       # [{"name", "description", "splits": [...]}, ...]
    opgen.mix_datasets([a, b], weights=[3, 1], size=64, seed=0)   # deterministic weighted mix
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opgen.library import OperatorLibrary
    from opgen.score.settings import GradeSettings

__all__ = ["gold_answer", "list_recipes", "mix_datasets", "score_answer"]


def score_answer(row: Mapping, response: str, *, mode: str = "auto", policy: str = "output",
                 group: str = "fraction", namespace: str = "strict", static: bool = True,
                 settings: GradeSettings | None = None, library: OperatorLibrary | str | None = None) -> dict:
    """Grade one ``response`` against one row (a parquet row dict, or any dict with
    ``reward_model.ground_truth``): the grade record ``opgen score`` writes for it (``score``,
    ``acc``, ``error``, ``format_ok``, recall diagnostics ...). Runs :func:`opgen.score_answers` on
    the one row, so it is that function's grade, exactly. ``settings``: the grading options as one
    :class:`opgen.score.settings.GradeSettings` instead of the loose keywords. ``library``: the
    row's operator library (default: the one it names, from the user's library store)."""
    from opgen.api import score_answers

    if not isinstance(row, Mapping):
        raise TypeError(f"row: a row is a dict (a parquet row), not {type(row).__name__}")
    if not isinstance(response, str):
        raise TypeError(f"response: a string, not {type(response).__name__}")
    from opgen.score.settings import GradeSettings

    record = GradeSettings.resolve(settings, mode=mode, policy=policy, group=group, namespace=namespace,
                                   static=static, library=library)
    result = score_answers([row], [response], settings=record, workers=1)
    return result.grades[0][0]


def gold_answer(row: Mapping, library: OperatorLibrary | str | None = None) -> str:
    """The gold answer of a row: an SFT row's own ``response``; for an RL or eval row, the answer its
    formats render for its ground truth (:func:`opgen.tokens.gold_answer_of_row`, the builder's own
    renderer, over the row's library: ``library``, else the one it names from the user's store), so
    RL rows carry their gold answer too. Raises ValueError for a row with none (a native benchmark
    row: its ground truth holds no program of opgen's), UnknownLibrary / LibraryMismatch (also
    ValueErrors) for a library that cannot be had."""
    from opgen.library import LibraryError
    from opgen.tokens import gold_answer_of_row

    if isinstance(row.get("response"), str):
        return str(row["response"])
    rm = row.get("reward_model")
    if not isinstance(rm, Mapping) and "ground_truth" in row:  # a flat view's row
        row = {**row, "reward_model": {"ground_truth": row["ground_truth"]}}
    try:
        gold = gold_answer_of_row(row, library)
    except LibraryError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"gold_answer: the row's ground truth cannot be rendered ({type(exc).__name__}: {exc})") \
            from None
    if gold is None:
        raise ValueError("gold_answer: the row has no opgen tasks and formats (a native benchmark row?)")
    return gold


def list_recipes() -> list[dict]:
    """The bundled recipes (``opgen build NAME``), sorted by name: ``name``, ``description``,
    ``splits`` (each ``{"name", "role", "kind", "generator", "prompt_format", "answer_format"}``)."""
    from opgen import recipe
    from opgen.resources import resource_dir

    out = []
    for path in sorted(resource_dir("datasets").glob("*.yaml")):
        rec = recipe.load(str(path))
        out.append({"name": rec.name, "description": " ".join(str(rec.raw.get("description", "")).split()),
                    "splits": [{"name": s.name, "role": s.role, "kind": s.kind, "generator": s.generator,
                                "prompt_format": s.prompt_format, "answer_format": s.answer_format}
                               for s in rec.splits]})
    return sorted(out, key=lambda r: r["name"])


def mix_datasets(datasets: Sequence[Any], weights: Sequence[float] | None = None, *, size: int | None = None,
                 seed: int = 0) -> list[dict]:
    """Rows of several datasets (opgen Datasets, pyarrow Tables or lists of row dicts) in one
    weighted, deterministic order: each position draws a source with probability proportional to
    its weight (``opgen.rng``, keyed by ``seed``), and takes that source's next row in its own order.

    ``size``: rows in the mix (default: until the first source with a positive weight runs out, so
    no row repeats); asking for more rows than a source can give raises ValueError. Every row gets
    ``extra_info.mix_source`` (the index of its source)."""
    from opgen import rng
    from opgen.api import rows_list

    sources = [rows_list(d) for d in datasets]
    if not sources:
        raise ValueError("mix_datasets: no datasets")
    w = [1.0] * len(sources) if weights is None else [float(x) for x in weights]
    if len(w) != len(sources):
        raise ValueError(f"mix_datasets: {len(w)} weights for {len(sources)} datasets")
    if any(not (x >= 0) or x == float("inf") for x in w) or sum(w) <= 0:
        raise ValueError(f"mix_datasets: weights must be finite, non-negative and not all zero, got {list(w)}")
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
        raise ValueError(f"mix_datasets: size must be a non-negative integer, got {size!r}")
    total = sum(w)
    cum = []
    acc = 0.0
    for x in w:
        acc += x / total
        cum.append(acc)
    last = max(i for i in range(len(w)) if w[i] > 0)  # where rounding leaves u above the last sum
    stream = rng.Rng("mix_datasets", seed, *(repr(x) for x in w))
    taken = [0] * len(sources)
    out: list[dict] = []
    while size is None or len(out) < size:
        u = stream.word() / 2.0**64
        j = next((i for i, c in enumerate(cum) if u < c and w[i] > 0), last)
        if taken[j] >= len(sources[j]):
            if size is None:
                break
            raise ValueError(f"mix_datasets: dataset {j} has {len(sources[j])} rows; a mix of {size} needs more")
        row = dict(sources[j][taken[j]])
        row["extra_info"] = {**dict(row.get("extra_info") or {}), "mix_source": j}
        out.append(row)
        taken[j] += 1
    return out
