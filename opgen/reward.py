"""verl's reward entry points: ``compute_score`` for opgen rows (and native ``codeio-forward-*`` rows).

Plug into verl with ``custom_reward_function.path=<site-packages>/opgen/reward.py`` and
``custom_reward_function.name=<entry point>`` (newer verl: ``reward.custom_reward_function.*``);
policies go through ``reward_kwargs`` (see docs/scoring.md). Model text is parsed, compiled and
statically evaluated only in grading processes (:mod:`opgen.score.batch`) and model code runs only
in the process-wide sandbox (:func:`opgen.score.sandbox.shared`): never in the trainer's process.
Every entry point returns a grade for any text; a setting that is not valid (``static="false"``,
``allow_weak_sandbox="false"``) raises ValueError.

One entry point per way verl calls a reward function (docs/verl.md, "Reward managers"):

- ``compute_score``: one sample -> dict (verl 0.9 reward loop ``naive``/``dapo``; verl <= 0.7 ``naive``);
- ``compute_score_async``: the same as a coroutine (verl 0.9's reward loop awaits it);
- ``compute_score_batch``: keyword lists -> list of dicts (verl <= 0.7 ``batch`` manager), graded
  concurrently over the whole sandbox pool;
- ``compute_score_float``: one sample -> float, never raising (verl <= 0.7 ``prime`` manager, which
  zeroes the whole batch on any exception, and ``verl.trainer.main_eval``, which averages returns).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opgen.library import OperatorLibrary
    from opgen.score.settings import GradeSettings

# The keys of every returned dict, in order: verl stacks them across samples, so a sample that
# failed early must still carry all of them (numbers, except ``error``).
KEYS = ("score", "acc", "format_ok", "error", "structure_ok", "n_tasks", "tasks_correct", "recall_expected",
        "recall_correct", "recall_chimera", "recall_arity", "recall_wrong_body", "recall_missing",
        "recall_duplicated", "recall_extra", "recall_missing_import")
# ``keys="minimal"``: what a multi-sample validation needs. verl bootstraps best@N/worst@N for every
# numeric key per prompt, so each extra key costs as much of verl's metric time as ``score`` itself.
MINIMAL_KEYS = ("score", "acc")
KEY_POLICIES = {"full": KEYS, "minimal": MINIMAL_KEYS}


def compute_score(data_source: str, solution_str: str, ground_truth: str | dict, extra_info: dict | None = None,
                  policy: str = "output", group: str = "fraction", mode: str = "auto", namespace: str = "strict",
                  keys: str = "full", static: bool = True, allow_weak_sandbox: bool | None = None,
                  settings: GradeSettings | None = None, library: OperatorLibrary | str | None = None,
                  **kwargs: Any) -> dict:
    """Score one sample. ``policy``: "output" (default) or "output_structure"; ``group``: "fraction"
    (default) or "all"; ``mode``: "auto" (default), "forward" or "program"; ``namespace``: "strict"
    (default: programs run on their own) or "native" (with the native module's imports, ``gcd``);
    ``keys``: "full" (default, :data:`KEYS`) or "minimal" (:data:`MINIMAL_KEYS`, for validation with
    n > 1 samples); ``static``: False runs every program in the sandbox (by default programs of
    library code only are evaluated without running them, with the same grades);
    ``allow_weak_sandbox``: grade even below ``full`` isolation (default: ``OPGEN_ALLOW_WEAK_SANDBOX=1``
    in the environment; otherwise a weak sandbox raises ``SandboxError`` naming what is unprotected);
    ``settings``: policy, group, mode, namespace and static as one
    :class:`opgen.score.settings.GradeSettings` instead (then leave those keywords alone).
    ``library``: the operator library the rows were built from (an ``OperatorLibrary`` or a spec:
    the user's own file or module); by default ``OPGEN_LIBRARY``, else the library the ground truth
    names by its digest, found in the user's library store (``opgen ops add``; every build
    registers its library). Nothing the row names is ever loaded: a row whose library is neither
    given nor registered raises :class:`opgen.library.UnknownLibrary` (saying how to provide it), a
    row of another library than the one given :class:`opgen.library.LibraryMismatch`.

    ``structure_ok`` is 1/0 for program rows and -1 where it does not apply (forward rows): verl
    stacks every sample's keys as the first sample's, so no key may be absent (docs/verl.md)."""
    from opgen.score.batch import grade
    from opgen.score.judge import row_fields
    from opgen.score.sandbox import shared
    from opgen.score.settings import GradeSettings

    record = GradeSettings.resolve(settings, policy=policy, group=group, mode=mode, namespace=namespace,
                                   static=static, library=library)
    _check_weak(allow_weak_sandbox)
    wanted = _key_set(keys)
    record = _row_record(record, ground_truth)
    answer_format, assistant_prefix = row_fields(extra_info)
    g = grade(ground_truth, solution_str or "", settings=record,
              # None: grade() starts the shared sandbox only for rows that run code.
              sandbox=None if allow_weak_sandbox is None else shared(allow_weak_sandbox=allow_weak_sandbox),
              answer_format=answer_format, assistant_prefix=assistant_prefix)
    return _reward(g, wanted)


def _row_record(record: GradeSettings, ground_truth: object, where: str = "") -> GradeSettings:
    """``record`` with the row's library (GradeSettings.for_row; ``OPGEN_LIBRARY`` counts as given)."""
    return record.for_row(ground_truth, where, env=True)


def _check_weak(flag: object) -> None:
    if flag is not None and not isinstance(flag, bool):  # "false" must not allow weak grading
        raise ValueError(f"allow_weak_sandbox must be true, false or null, got {flag!r}")


def _reward(g: dict, wanted: tuple[str, ...]) -> dict:
    """A grade as the dict verl gets (the ``wanted`` keys of :data:`KEYS`)."""
    rc = g["recall"]
    recall_wrong = rc["wrong_body"] + rc["no_definition"] + rc["syntax"]
    return _select(wanted, {
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
        "recall_missing_import": float(rc["missing_import"]),
    })

def _key_set(keys: str) -> tuple[str, ...]:
    try:
        return KEY_POLICIES[keys]
    except (KeyError, TypeError):
        raise ValueError(f"keys must be one of {', '.join(KEY_POLICIES)}, got {keys!r}") from None


def reward_options() -> tuple[str, ...]:
    """The grading options a reward entry point reads from its keywords (verl's ``reward_kwargs``):
    all of GradeSettings's but ``diagnose`` (a reward always carries the recall diagnostics):
    opgen.choices.REWARD_OPTIONS."""
    from opgen.choices import REWARD_OPTIONS

    return REWARD_OPTIONS


def _check_settings(kwargs: dict) -> GradeSettings:
    """The grading record of an entry point's keywords (a wrong one raises ValueError naming it)."""
    from opgen.score.settings import GradeSettings

    _key_set(kwargs.get("keys", "full"))
    options = {k: kwargs[k] for k in reward_options() if k in kwargs}
    record = GradeSettings.resolve(kwargs.get("settings"), **options)
    _check_weak(kwargs.get("allow_weak_sandbox"))
    return record


def _select(wanted: tuple[str, ...], full: dict) -> dict:
    return full if wanted is KEYS else {k: full[k] for k in wanted}


async def compute_score_async(data_source: str, solution_str: str, ground_truth: str | dict,
                              extra_info: dict | None = None, **kwargs: Any) -> dict:
    """:func:`compute_score` as a coroutine: verl 0.9's reward loop awaits a coroutine function in
    its own event loop instead of handing it to the loop's default thread pool. The grading (the
    sandbox round trips) runs in a worker thread, so the event loop is never blocked."""
    import asyncio

    return await asyncio.to_thread(compute_score, data_source, solution_str, ground_truth, extra_info, **kwargs)


def compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos=None, **kwargs: Any) -> list[dict]:
    """Score a batch (verl <= 0.7's ``batch`` reward manager calls this with keyword lists); one dict
    per sample, in order, equal to :func:`compute_score`'s. Every sample is graded on the grading
    processes (:mod:`opgen.score.batch`, ``OPGEN_GRADE_PROCESSES``), each under its own budget, and
    the programs that must run go to the sandbox two per worker at a time, so the whole pool
    (``OPGEN_SANDBOX_WORKERS``) is busy; ``kwargs`` are :func:`compute_score`'s."""
    from opgen.score.batch import Item, grade_many
    from opgen.score.sandbox import shared

    sources, texts, truths = list(data_sources), list(solution_strs), list(ground_truths)
    extras = [None] * len(sources) if extra_infos is None else list(extra_infos)
    if not len(sources) == len(texts) == len(truths) == len(extras):
        raise ValueError(f"compute_score_batch: {len(sources)} data_sources, {len(texts)} solution_strs, "
                         f"{len(truths)} ground_truths and {len(extras)} extra_infos (must be equal)")
    record = _check_settings(kwargs)  # a wrong setting fails once, before any grading
    if not sources:
        return []

    # Each row with its library, every one resolved (and its ground truth read) before any grading.
    records = [_row_record(record, truths[i], f"ground_truths[{i}]: ") for i in range(len(sources))]
    allow = kwargs.get("allow_weak_sandbox")
    items = [Item.of_row(truths[i], texts[i] or "", extras[i]) for i in range(len(sources))]
    wanted = _key_set(str(kwargs.get("keys", "full")))
    # The sandbox only when a row may run a program (forward rows never do).
    mode = record.mode
    needs_box = mode == "program" or any(not _is_forward(t, mode) for t in truths)
    box = shared(allow_weak_sandbox=allow) if needs_box else None
    # one grade_many per library, in order
    groups: dict[str, tuple[GradeSettings, list[int]]] = {}
    for i, rec in enumerate(records):
        groups.setdefault(rec.library.digest, (rec, []))[1].append(i)
    out: list[dict | None] = [None] * len(items)
    for rec, idx in groups.values():
        graded = grade_many([items[i] for i in idx], sandbox=box, settings=rec,
                            answered=lambda i, g: _reward(g, wanted))
        for i, g in zip(idx, graded):
            out[i] = g
    return out  # type: ignore[return-value]


def _is_forward(ground_truth: object, mode: str) -> bool:
    from opgen.score.judge import load_truth

    truth = load_truth(ground_truth)  # type: ignore[arg-type]
    return truth.native or (mode == "forward" or (mode == "auto" and truth.mode == "forward"))


def compute_score_float(data_source: str, solution_str: str, ground_truth: str | dict,
                        extra_info: dict | None = None, **kwargs: Any) -> float:
    """The reward as a float, for callers that take a number: verl <= 0.7's ``prime`` manager (calls
    ``f(data_source, solution, ground_truth, extra_info)`` in its process pool and sets the whole
    batch to 0 on any exception) and ``verl.trainer.main_eval`` (``f(data_source, response,
    ground_truth)``, averaged with ``np.mean``).

    A sample that cannot be graded (a malformed ground truth, a sandbox that cannot start) scores
    0.0 alone, with one line on stderr naming it, instead of zeroing its batch. A wrong setting
    (``policy``, ``group``, ``mode``, ``keys``) is no sample's fault and raises ValueError; so is a
    row's library that is neither given nor registered (``UnknownLibrary``) or not the one given
    (``LibraryMismatch``): the whole run's configuration, never a reward of 0."""
    from opgen.library import LibraryError

    _check_settings(kwargs)
    try:
        return float(compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)["score"])
    except LibraryError:
        raise
    except Exception as exc:  # one sample's failure must not reach its batch
        import sys

        print(f"opgen.reward.compute_score_float: {data_source}: scored 0.0: {type(exc).__name__}: {exc}",
              file=sys.stderr, flush=True)
        return 0.0
