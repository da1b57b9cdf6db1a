"""verifiers without glue: an installable environment over opgen rows, graded by opgen's scorer.

Written against verifiers 0.4.0 (what installs from PyPI here), whose stack is ``verifiers.v1``: an
environment is a **taskset** (a module exporting a ``Taskset`` subclass in ``__all__``; the taskset
id is the module's name) whose tasks carry ``@vf.reward`` / ``@vf.metric`` methods (the rubric),
played by a **harness** (the single-turn chat program is verifiers' ``null`` harness)::

    from opgen.integrations.verifiers import load_environment
    env = load_environment(recipe="rl-r1", split="train", size=512)     # a verifiers SingleAgentEnv

    vf-eval opgen-verifiers --env.taskset.recipe rl-r1 --env.taskset.split train ...

``opgen-verifiers`` is the top-level module ``opgen_verifiers`` that opgen installs (verifiers'
loader imports a taskset id as a top-level module); it re-exports this module's classes.

The rubric: the reward ``opgen_score`` (weight 1) and the metric ``opgen_acc`` grade the trace's
last assistant message with :func:`opgen.integrations.common.grade_batch`, the grade ``opgen score``
gives the same row and response. :func:`grade_trace` is that function on verifiers' documented
call (``task`` the task's data, ``trace`` with ``assistant_messages``), usable without verifiers.
verifiers is imported only when a class here is first used (PEP 562 ``__getattr__``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import opgen
from opgen.integrations import common

# the classes are built on first use (__getattr__ below); verifiers' loader finds them in __all__
__all__ = [  # noqa: F822
    "OpgenEnv", "OpgenHarness", "OpgenTask", "OpgenTaskset", "grade_trace", "load_environment", "task_fields"]

#: The taskset id verifiers' loader resolves to the ``opgen_verifiers`` module.
TASKSET_ID = "opgen-verifiers"
_GRADE_KEY = "opgen_grade"
#: Where the multi-turn environment (``opgen-episodes``) leaves an episode's state on the trace's ``info``.
EPISODE_KEY = "opgen_episode"


def task_fields(row: Mapping, i: int = 0) -> dict:
    """One opgen row as the fields of an opgen task's data: ``prompt`` (the row's messages),
    ``id`` (its ``extra_info.row_id`` when it has one), ``ground_truth`` (JSON text),
    ``extra_info`` (the row's), ``data_source``."""
    view = common.task_view(row, f"row {i}")
    rid = view["extra_info"].get("row_id")
    return {"id": None if rid is None else str(rid), **view}


def _reply(trace: Any) -> str:
    """The last sampled assistant message's content, as it was sampled (not stripped)."""
    messages = list(getattr(trace, "assistant_messages", None) or [])
    if not messages:
        return ""
    last = messages[-1]
    content = last.get("content") if isinstance(last, Mapping) else getattr(last, "content", None)
    if isinstance(content, list):  # content parts
        content = [p if isinstance(p, Mapping) else getattr(p, "model_dump", lambda: {})() for p in content]
    return common.completion_text([{"role": "assistant", "content": content}], "trace.assistant_messages[-1]")


def grade_trace(task: Any, trace: Any, **settings: Any) -> dict:
    """The grade (``score``, ``acc``) of a trace's last assistant message for ``task`` (an opgen
    task's data: ``ground_truth``, ``extra_info``, ``data_source``); cached on ``trace.info`` when
    the trace has one, so the reward and the metric grade once."""
    info = getattr(trace, "info", None)
    if isinstance(info, dict) and isinstance(info.get(_GRADE_KEY), dict):
        return dict(info[_GRADE_KEY])
    if isinstance(info, dict) and isinstance(info.get(EPISODE_KEY), dict):  # a multi-turn episode's reward
        played = info[EPISODE_KEY]
        return {"score": float(played["reward"]), "acc": float(bool(played["scores"]) and played["scores"][-1] >= 1.0)}
    gt = getattr(task, "ground_truth", None)
    if not isinstance(gt, (str, dict)):
        raise common.AdapterError("verifiers task: no ground_truth (build tasks with opgen.integrations.verifiers)")
    extra = getattr(task, "extra_info", None) or {}
    grade = common.grade_batch([gt], [_reply(trace)], [dict(extra)], [str(getattr(task, "data_source", "") or "")],
                               **settings)[0]
    out = {"score": float(grade["score"]), "acc": float(grade["acc"])}
    if isinstance(info, dict):
        info[_GRADE_KEY] = out
    return out


def gold_scores_1(task: Any, **settings: Any) -> bool | None:
    """Whether ``task``'s gold answer grades 1.0 (None: a row with no opgen program to render)."""
    from opgen.notebook import gold_answer

    row = {"reward_model": {"ground_truth": getattr(task, "ground_truth", None)},
           "extra_info": dict(getattr(task, "extra_info", None) or {})}
    try:
        gold = gold_answer(row)
    except (ValueError, KeyError):
        return None
    trace = {"assistant_messages": [{"content": gold}]}
    return grade_trace(task, type("GoldTrace", (), trace)(), **settings)["score"] == 1.0


def _build() -> dict[str, Any]:
    import asyncio

    import verifiers.v1 as vf
    from verifiers.v1.harnesses.null import NullHarness

    class OpgenTaskConfig(vf.TaskConfig):
        """Scorer settings (``--env.taskset.task.*``): docs/scoring.md."""

        policy: str | None = None
        group: str | None = None
        mode: str | None = None
        namespace: str | None = None

    class OpgenData(vf.TaskData):
        ground_truth: str
        extra_info: dict = {}
        data_source: str = ""

    class OpgenTask(vf.Task[OpgenData, vf.State, OpgenTaskConfig]):
        def _settings(self) -> dict:
            cfg = self.config
            return {k: getattr(cfg, k) for k in common.SETTINGS if getattr(cfg, k, None) is not None}

        async def validate(self, runtime: Any) -> bool | None:
            """vf-validate's gold check: the row's gold answer (:func:`opgen.gold_answer`) scores 1.0;
            None for a row whose ground truth holds no opgen program (a native row)."""
            return await asyncio.to_thread(gold_scores_1, self.data, **self._settings())

        @vf.metric
        async def opgen_acc(self, task: Any, trace: Any) -> float:
            return (await asyncio.to_thread(grade_trace, task, trace, **self._settings()))["acc"]

        @vf.reward
        async def opgen_score(self, task: Any, trace: Any) -> float:
            return (await asyncio.to_thread(grade_trace, task, trace, **self._settings()))["score"]

    class OpgenTasksetConfig(vf.TasksetConfig):
        """Which rows (``--env.taskset.*``): ``opgen.create_dataset(recipe, split, size=, seed=)``."""

        task: OpgenTaskConfig = OpgenTaskConfig()
        recipe: str = "rl-r1"
        split: str | None = None
        size: int | None = None
        seed: int | None = None

    class OpgenTaskset(vf.Taskset[OpgenTask, OpgenTasksetConfig]):
        rows: list[dict] | None = None  # set by load_environment(rows=...)

        def load(self):
            from opgen.api import rows_list  # opgen.api loads the generators (85 ms): only when a taskset loads

            cfg = self.config
            rows = self.rows if self.rows is not None else rows_list(
                opgen.create_dataset(cfg.recipe, cfg.split, size=cfg.size, seed=cfg.seed))
            for i, row in enumerate(rows):
                yield OpgenTask(OpgenData(**task_fields(row, i)), cfg.task)

    class OpgenHarness(NullHarness):
        """verifiers' single-turn chat program, as this taskset's default harness."""

    class OpgenEpisodesEnvConfig(vf.EnvConfig):
        """The multi-turn environment's settings (``--env.*``): opgen.episode.EpisodeSettings."""

        agent: vf.AgentConfig = vf.AgentConfig()
        max_turns: int = 3
        discount: float = 0.5
        feedback: str = "returned"
        show_expected: bool = False
        feedback_chars: int = 1000

    class OpgenEpisodesEnv(vf.Env[OpgenEpisodesEnvConfig]):
        """Multi-turn episodes with execution feedback (opgen.episode) over an opgen taskset: the
        agent answers, a wrong answer gets the feedback as the next user turn, up to ``max_turns``;
        the trace's reward is the episode's (``discount ** (t - 1) * score_t``)."""

        async def run(self, task: Any, agents: Any) -> None:
            from opgen.episode import Episode, EpisodeSettings

            cfg = self.config
            settings = EpisodeSettings(cfg.max_turns, cfg.discount, cfg.feedback, cfg.show_expected,
                                       cfg.feedback_chars)
            data = task.data
            row = {"prompt": [{"role": "user", "content": data.prompt_text}],
                   "reward_model": {"ground_truth": data.ground_truth}, "extra_info": dict(data.extra_info)}
            episode = Episode(row, settings)
            async with agents.agent.interaction(task) as conversation:
                segment = await conversation.turn()
                while not segment.terminated:
                    out = await asyncio.to_thread(episode.step, segment.last_reply)
                    conversation.trace.info[EPISODE_KEY] = episode.state()
                    if out["done"]:
                        break
                    segment = await conversation.turn(out["feedback"])

    return {"OpgenTaskConfig": OpgenTaskConfig, "OpgenData": OpgenData, "OpgenTask": OpgenTask,
            "OpgenTasksetConfig": OpgenTasksetConfig, "OpgenTaskset": OpgenTaskset, "OpgenHarness": OpgenHarness,
            "OpgenEnv": vf.SingleAgentEnv, "OpgenEpisodesEnvConfig": OpgenEpisodesEnvConfig,
            "OpgenEpisodesEnv": OpgenEpisodesEnv}


_classes: dict[str, Any] = {}


def __getattr__(name: str) -> Any:
    if name in ("OpgenTaskConfig", "OpgenData", "OpgenTask", "OpgenTasksetConfig", "OpgenTaskset",
                "OpgenHarness", "OpgenEnv", "OpgenEpisodesEnvConfig", "OpgenEpisodesEnv"):
        if not _classes:
            _classes.update(_build())
        return _classes[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_environment(recipe: str = "rl-r1", split: str | None = None, *, size: int | None = None,
                     seed: int | None = None, rows: Any = None, **kw: Any) -> Any:
    """A verifiers environment (``SingleAgentEnv``) over ``opgen.create_dataset(recipe, split,
    size=, seed=)`` (or ``rows``: built rows, a ``Dataset`` or a list of dicts), with opgen's rubric.
    ``kw``: scorer settings (``policy``, ``group``, ``mode``, ``namespace``) and, under ``env=``,
    more of verifiers' environment config (a dict: ``agent``, ``timeout`` ...)."""
    try:
        import verifiers.v1 as vf
    except ImportError as exc:
        raise ImportError(f"opgen.integrations.verifiers needs verifiers (pip install 'verifiers>=0.4,<0.5'): "
                          f"{exc}") from None
    env_extra = dict(kw.pop("env", None) or {})
    task_kw = {k: kw.pop(k) for k in ("policy", "group", "mode", "namespace") if k in kw}
    if kw:
        raise TypeError(f"load_environment: unknown arguments {', '.join(sorted(kw))}")
    taskset = {"id": TASKSET_ID, "recipe": recipe, "split": split, "size": size, "seed": seed, "task": task_kw}
    config = vf.resolve_env_config({**env_extra, "taskset": taskset})
    env = vf.load_environment(config)
    if rows is not None:
        from opgen.api import rows_list  # as in OpgenTaskset.load

        env.taskset.rows = rows_list(rows)
    return env
