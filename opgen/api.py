"""A researcher's API: build a recipe's split in memory, score responses in memory, add generators.

The notebook counterpart of ``opgen build`` and ``opgen score`` (docs/api.md)::

    import opgen
    ds = opgen.create_dataset("eval-suite", "heldout_trees_d1-8", size=64, seed=3)
    ds[0]["prompt"], len(ds), ds.table            # rows as dicts, or one pyarrow.Table
    result = opgen.score_answers(ds, responses)   # one grade per row + the summary opgen score writes

Rows are the file build's rows: :func:`create_dataset` runs the same builder (every phase,
duplicate redraws and the leakage check included) into a temporary directory and reads the
parquet back, so ``create_dataset(r, s, size=n, seed=k)`` equals the rows of
``opgen build r --only s --limit n --seed k``. ``size`` is that ``--limit``: the first ``size``
rows of the split, never more than the split has (``create_dataset`` then warns, :class:`FewerRows`,
saying how many came back).
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opgen.generate import Generator, register_generator

if TYPE_CHECKING:
    from opgen.library import OperatorLibrary
    from opgen.score.settings import GradeSettings

# Generator is re-exported for user generators: subclass it, register it, name it in a recipe.
__all__ = ["Dataset", "FewerRows", "Generator", "Scores", "build_splits", "create_dataset", "load_recipe",
           "register_generator", "rows_list", "score_answers"]


def _count(name: str, value: Any, least: int, cli: str) -> None:
    """An integer argument the CLI takes as ``cli`` (click.IntRange(min=least)); bool is not one."""
    import numbers

    what = "a positive integer" if least == 1 else "a non-negative integer" if least == 0 else f"an integer >= {least}"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be {what} (as {cli}), got {value!r}")
    if value < least:
        raise ValueError(f"{name} must be {what} (as {cli}), got {value!r}")


def _check_build_args(size: int | None, seed: int | None, workers: int) -> None:
    if size is not None:
        _count("size", size, 1, "opgen build --limit")
    if seed is not None:
        _count("seed", seed, 0, "opgen build --seed")
    _count("workers", workers, 1, "opgen build --workers")


def load_recipe(recipe: Any, seed: int | None = None, library: OperatorLibrary | str | None = None):
    """A bundled recipe's name, a YAML path, a recipe dict (the YAML's content) or a
    :class:`opgen.recipe.Recipe` -> a resolved Recipe (``seed`` overrides the recipe's; ``library``,
    an :class:`opgen.ops.OperatorLibrary` or a spec, replaces its ``library:``). A YAML file's own
    ``library:`` is loaded (the user's file names the user's library); a dict's is not: a dict
    naming a library needs ``library=`` (a dict may come from anywhere, a request among them)."""
    from opgen import recipe as R
    from opgen.library import given

    if seed is not None:
        _count("seed", seed, 0, "opgen build --seed")
        seed = int(seed)

    if isinstance(recipe, R.Recipe):
        if seed is None and library is None:
            return recipe
        return R.resolve(recipe.raw, recipe.path, recipe.sha256, seed,
                         library=recipe.library if library is None else given(library))
    if isinstance(recipe, Mapping):
        import hashlib
        import json

        data = dict(recipe)
        sha = hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()
        return R.resolve(data, f"<recipe {data.get('name', '?')}>", sha, seed, library=given(library))
    if isinstance(recipe, (str, Path)):
        return R.load(str(recipe), seed, library)
    raise TypeError(f"a recipe is a name, a path, a dict or an opgen.recipe.Recipe, not {type(recipe).__name__}")


@dataclass
class Dataset:
    """One split's rows: ``ds[i]`` (a dict, the parquet row), ``ds[a:b]`` (a list), ``len(ds)``,
    iteration, ``ds.table`` (the pyarrow.Table), ``ds.manifest`` (the split's manifest entry)."""

    split: str
    table: Any  # pyarrow.Table
    manifest: dict

    def __len__(self) -> int:
        return self.table.num_rows

    def __getitem__(self, index: int | slice) -> dict | list[dict]:
        if isinstance(index, slice):
            return self.table.take(list(range(len(self))[index])).to_pylist()
        import operator

        n = len(self)
        if isinstance(index, bool):
            raise TypeError("index with an int or a slice, not bool")
        try:
            index = operator.index(index)  # ints, numpy integers
        except TypeError:
            raise TypeError(f"index with an int or a slice, not {type(index).__name__}") from None
        if not -n <= index < n:
            raise IndexError(f"row {index} of a {n}-row split {self.split!r}")
        return self.table.slice(index % n, 1).to_pylist()[0]

    def __iter__(self) -> Iterator[dict]:
        for batch in self.table.to_batches():
            yield from batch.to_pylist()

    def to_pylist(self) -> list[dict]:
        return self.table.to_pylist()

    def __repr__(self) -> str:
        return f"Dataset(split={self.split!r}, rows={len(self)}, kind={self.manifest.get('kind')!r})"


def build_splits(recipe: Any, splits: Sequence[str] | None = None, *, size: int | None = None,
                 seed: int | None = None, workers: int = 1,
                 library: OperatorLibrary | str | None = None) -> dict[str, Dataset]:
    """Every split of ``recipe`` (or only ``splits``: names, or one name), built as ``opgen build``
    builds them, in memory.

    ``size``: at most this many rows per split (``--limit``); ``seed``: overrides the recipe's
    (``--seed``); ``workers``: build processes (rows are identical for any number); ``library``: an
    :class:`opgen.ops.OperatorLibrary` or a spec (``--library``). Each is checked
    as the CLI checks it (a TypeError or ValueError naming the argument)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from opgen import build

    _check_build_args(size, seed, workers)
    if isinstance(splits, str):
        splits = [splits]
    if splits is not None:
        if isinstance(splits, Mapping) or not isinstance(splits, Iterable):
            raise TypeError(f"splits must be a split name or a list of split names, got {type(splits).__name__} "
                            f"{splits!r:.80}")
        splits = list(splits)
        if not all(isinstance(s, str) for s in splits):
            raise TypeError(f"splits must be split names (strings), got {splits!r:.120}")
    loaded = load_recipe(recipe, seed, library)
    # The build goes into a folder inside the temporary one: its lock file (beside the output
    # folder) is then removed with it, never left in the system's temp directory.
    with tempfile.TemporaryDirectory(prefix="opgen-api-") as tmp:
        where = Path(tmp) / "build"
        man = build.build([loaded], where, workers=int(workers), only=tuple(splits or ()),
                          limit=None if size is None else int(size), seed=None if seed is None else int(seed))
        out = {}
        for name, section in man["splits"].items():
            tables = [pq.read_table(where / f["path"]) for f in section["files"]]
            table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
            out[name] = Dataset(name, table.combine_chunks(), section)
    return out


def create_dataset(recipe: Any, split: str | None = None, *, size: int | None = None, seed: int | None = None,
                   workers: int = 1, library: OperatorLibrary | str | None = None) -> Dataset:
    """One split of ``recipe`` in memory (``split`` may be omitted for a one-split recipe).

    A split is built alone (``--only``), as ``opgen build --only``: its duplicate checks run against
    itself, not against the recipe's other splits. ``library``: as :func:`build_splits`'."""
    _check_build_args(size, seed, workers)
    if split is not None and not isinstance(split, str):
        raise TypeError(f"split must be a split name (a string), got {split!r}")
    loaded = load_recipe(recipe, seed, library)
    names = [s.name for s in loaded.splits]
    if split is None:
        if len(names) != 1:
            raise ValueError(f"recipe {loaded.name!r} has {len(names)} splits; name one: {', '.join(names)}")
        split = names[0]
    if split not in names:
        raise KeyError(f"recipe {loaded.name!r} has no split {split!r} (splits: {', '.join(names)})")
    ds = build_splits(loaded, [split], size=size, seed=seed, workers=workers)[split]
    if size is not None and len(ds) < size:
        warnings.warn(FewerRows(f"create_dataset: size={size:,} asked, but split {split!r} of recipe {loaded.name!r} "
                                f"has {len(ds):,} rows: {len(ds):,} came back"), stacklevel=2)
    return ds


class FewerRows(UserWarning):
    """:func:`create_dataset` was asked for more rows than the split has: the split's rows came back
    (``size`` is ``opgen build --limit``: at most that many), and this warning says how many."""


@dataclass
class Scores:
    """``grades``: one list per row (one grade dict per response, in order; empty for a row without
    a response); ``records``: every grade as one flat record (the lines of ``scores.jsonl``);
    ``summary``: what ``opgen score`` writes to ``summary.json``."""

    grades: list[list[dict]]
    records: list[dict]
    summary: dict

    @property
    def scores(self) -> list[float | None]:
        """The mean score of each row's responses (None for a row without a response)."""
        return [sum(g["score"] for g in gs) / len(gs) if gs else None for gs in self.grades]


def rows_list(rows: Any) -> list[dict]:
    """A :class:`Dataset`, a pyarrow.Table, a datasets.Dataset or a list of row dicts -> a list of
    dicts (TypeError naming the first row that is not a dict)."""
    if hasattr(rows, "to_pylist"):  # opgen.Dataset, pyarrow.Table
        return list(rows.to_pylist())
    if hasattr(rows, "to_list") and hasattr(rows, "features"):  # datasets.Dataset
        return list(rows.to_list())
    out = list(rows)
    for i, r in enumerate(out):
        if not isinstance(r, Mapping):
            raise TypeError(f"row {i}: a row is a dict (a parquet row), not {type(r).__name__}")
    return [dict(r) for r in out]


def _rows_of(rows: Any):
    from opgen.score.inputs import Row

    out = []
    for i, row in enumerate(rows_list(rows)):
        gt = (row.get("reward_model") or {}).get("ground_truth")
        if not isinstance(gt, str):
            raise ValueError(f"row {i}: reward_model.ground_truth is missing or not a string")
        out.append(Row(i, gt, row.get("data_source") or "", dict(row.get("extra_info") or {})))
    return out


def _samples(i: int, got: Any) -> list[str] | None:
    """``responses[i]`` as its samples: None, a string, a non-empty list of strings, or a record as
    a line of ``opgen score``'s responses file (``{"response": str}`` or ``{"responses": [str, ...]}``,
    with an optional ``index`` that must be ``i``)."""
    if got is None:
        return None
    if isinstance(got, str):
        return [got]
    if isinstance(got, Mapping):
        if "index" in got and got["index"] != i:
            raise ValueError(f"responses[{i}]: index {got['index']!r} in a record at position {i} (responses are "
                             "given in row order; drop 'index' or make it the position)")
        if "responses" in got and "response" in got:  # which one was meant? never one of them silently
            raise ValueError(f"responses[{i}]: both 'response' and 'responses' in one record; give one of them")
        if "responses" in got:
            many = got["responses"]
            if isinstance(many, (list, tuple)) and many and all(isinstance(s, str) for s in many):
                return list(many)
            raise TypeError(f"responses[{i}]: 'responses' must be a non-empty list of strings, got {many!r:.80}")
        if isinstance(got.get("response"), str):
            return [got["response"]]
        raise TypeError(f"responses[{i}]: a record needs 'response' (a string) or 'responses' (a list of strings), "
                        f"got keys {sorted(map(str, got))}" if "response" not in got else
                        f"responses[{i}]: 'response' must be a string, got {type(got['response']).__name__}")
    if isinstance(got, (list, tuple)) and got and all(isinstance(s, str) for s in got):
        return list(got)
    raise TypeError(f"responses[{i}]: a string, a non-empty list of strings, a {{'response': ...}} record or None, "
                    f"got {type(got).__name__} {got!r:.80}")


def _check_score_args(workers: int, timeout_s: float) -> None:
    import math
    import numbers

    _count("workers", workers, 1, "opgen score --workers")
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, numbers.Real):
        raise TypeError(f"timeout_s must be a number of seconds >= {MIN_TIMEOUT_S} (as opgen score --timeout), "
                        f"got {timeout_s!r}")
    if not math.isfinite(timeout_s) or timeout_s < MIN_TIMEOUT_S:
        raise ValueError(f"timeout_s must be a number of seconds >= {MIN_TIMEOUT_S} (as opgen score --timeout), "
                         f"got {timeout_s!r}")


MIN_TIMEOUT_S = 0.05  # opgen score --timeout's floor: below it no program, gold ones included, finishes


def score_answers(rows: Any, responses: Sequence[Any], *, mode: str = "auto",
                  policy: str = "output", group: str = "fraction", workers: int = 2,
                  timeout_s: float = 2.0, namespace: str = "strict", static: bool = True,
                  settings: GradeSettings | None = None, library: OperatorLibrary | str | None = None) -> Scores:
    """Grade ``responses[i]`` against row ``i`` of ``rows`` (a :class:`Dataset`, a pyarrow.Table or a
    list of row dicts), in opgen's sandbox, exactly as ``opgen score`` grades a file (same grades,
    same summary). ``responses[i]`` is a string, a list of samples, a record as a line of the
    responses file (``{"response": ...}`` or ``{"responses": [...]}``), or None for no response;
    anything else, and any option ``opgen score`` would refuse, raises naming it. ``settings``: the
    grading options (mode, policy, group, namespace, static) as one
    :class:`opgen.score.settings.GradeSettings` instead of the loose keywords. ``library``: the
    operator library the rows were built from (an ``OperatorLibrary`` or a spec); by default the one
    the rows name, from the user's library store. A row naming another one, or one neither given nor
    registered, raises :class:`opgen.library.LibraryMismatch` / :class:`opgen.library.UnknownLibrary`
    before any grading."""
    from opgen.score.inputs import check_truths
    from opgen.score.report import Report, graded, settings_fields
    from opgen.score.sandbox import Sandbox
    from opgen.score.settings import GradeSettings

    record = GradeSettings.resolve(settings, mode=mode, policy=policy, group=group, namespace=namespace,
                                   static=static, library=library)
    _check_score_args(workers, timeout_s)
    if rows is None:
        raise TypeError("rows must be an opgen Dataset, a pyarrow.Table or a list of row dicts, got None")
    if isinstance(responses, (str, bytes, Mapping)) or not isinstance(responses, Sequence):
        raise TypeError(f"responses must be a list with one entry per row, got {type(responses).__name__}")
    data = _rows_of(rows)
    if len(responses) != len(data):
        raise ValueError(f"{len(responses)} responses for {len(data)} rows (give None for a row without one)")
    if not data:
        raise ValueError("responses is empty (and so are rows): there is nothing to score")
    answers: dict[int, list[str]] = {}
    for i, got in enumerate(responses):
        samples = _samples(i, got)
        if samples is not None:
            answers[i] = samples
    if not answers:
        raise ValueError(f"responses holds no response (all {len(data)} entries are None): there is nothing to "
                         f"score, and an accuracy over no response is not 0")
    # with the rows' library; a ScoreInputError (a ValueError) names the row
    record = check_truths("", ((i, data[i].ground_truth) for i in sorted(answers)), record)
    report = Report(record)
    grades: list[list[dict]] = [[] for _ in data]
    records: list[dict] = []
    with Sandbox(workers=int(workers), timeout_s=float(timeout_s)) as box:
        for row, got in graded(((data[i], answers[i]) for i in sorted(answers)), box, data=Path("rows"),
                               settings=record):
            recs = report.records(row, got)
            grades[row.position] = recs
            records += recs
        level = box.level
    summary = report.summary.result(len(data), len(answers))
    summary.update(settings_fields(record, level))
    return Scores(grades, records, summary)
