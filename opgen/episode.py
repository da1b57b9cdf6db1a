"""Multi-turn episodes with execution feedback: the model answers, its program runs, and when it is
wrong the next turn shows it what happened; up to ``max_turns`` turns.

Each turn is graded as single-turn scoring grades a response (:func:`opgen.score.batch.grade`: the
grading processes and the sandbox of ``opgen score``, with ``GradeSettings(returned=True)`` so the
grade carries what each program returned). The feedback (``feedback``):

- ``none``: only that the answer is wrong;
- ``exception``: which call failed and how (the exception's class and message, a timeout, no code
  block ...), and for a wrong output only that it is wrong;
- ``returned`` (default): the same, and for a wrong output what the program returned.

A shown value or message is cut to ``feedback_chars`` characters, and it never holds an expected
output unless ``show_expected`` is set (then the expected output of each wrong call is shown too):
a text that contains one is withheld, and says so.

Reward rule: the episode ends at the first turn ``t`` (1-based) whose score is 1.0, or after
``max_turns`` turns; its reward is ``discount ** (t - 1) * score_t`` for that last turn ``t``, and
every turn before it gets 0. With the defaults (3 turns, discount 0.5) right at turn 1 is 1.0, at
turn 2 is 0.5, at turn 3 is 0.25, never right is 0.0 (a group row's fractional score at the last
turn is discounted the same way).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from opgen.errors import USAGE, OpgenError

FEEDBACK = ("none", "exception", "returned")
MAX_TURNS = 16


class EpisodeError(ValueError, OpgenError):
    """An episode setting or step that is not valid; the message names the field."""

    exit_code = USAGE


@dataclass(frozen=True)
class EpisodeSettings:
    """How an episode runs (module docstring)."""

    max_turns: int = 3
    discount: float = 0.5
    feedback: str = "returned"
    show_expected: bool = False
    feedback_chars: int = 1000

    def __post_init__(self) -> None:
        if isinstance(self.max_turns, bool) or not isinstance(self.max_turns, int) or \
                not 1 <= self.max_turns <= MAX_TURNS:
            raise EpisodeError(f"max_turns: an integer in [1, {MAX_TURNS}], not {self.max_turns!r}")
        if isinstance(self.discount, bool) or not isinstance(self.discount, (int, float)) or \
                not 0.0 <= self.discount <= 1.0:
            raise EpisodeError(f"discount: a number in [0, 1], not {self.discount!r}")
        if self.feedback not in FEEDBACK:
            raise EpisodeError(f"feedback: one of {', '.join(FEEDBACK)}, not {self.feedback!r}")
        if not isinstance(self.show_expected, bool):
            raise EpisodeError(f"show_expected: true or false, not {self.show_expected!r}")
        if isinstance(self.feedback_chars, bool) or not isinstance(self.feedback_chars, int) or \
                not 16 <= self.feedback_chars <= 100_000:
            raise EpisodeError(f"feedback_chars: an integer in [16, 100000], not {self.feedback_chars!r}")

    @classmethod
    def of(cls, raw: Any, where: str = "settings") -> EpisodeSettings:
        """The settings of a JSON object (unknown keys refused, each error naming ``where.key``)."""
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise EpisodeError(f"{where}: an object of {', '.join(cls.__dataclass_fields__)}")
        unknown = sorted(map(str, set(raw) - set(cls.__dataclass_fields__)))
        if unknown:
            raise EpisodeError(f"{where}: unknown keys {', '.join(unknown)} "
                               f"(known: {', '.join(cls.__dataclass_fields__)})")
        try:
            return cls(**dict(raw))
        except EpisodeError as exc:
            raise EpisodeError(f"{where}.{exc}") from None


def reward_of(turn: int, score: float, settings: EpisodeSettings) -> float:
    """The episode's reward when it ends at ``turn`` (1-based) with ``score`` (module docstring)."""
    return float(settings.discount ** (turn - 1) * score)


Grader = Callable[[Any, str, Mapping], dict]  # (ground_truth, response, extra_info) -> grade with "returned"


def sandbox_grader(allow_weak_sandbox: bool | None = None) -> Grader:
    """Single-turn scoring's grade of one response (:func:`opgen.score.batch.grade`), with what each
    program returned."""
    from opgen.score.batch import grade
    from opgen.score.judge import row_fields
    from opgen.score.sandbox import shared
    from opgen.score.settings import GradeSettings

    settings = GradeSettings(returned=True)

    def run(ground_truth: Any, response: str, extra_info: Mapping) -> dict:
        answer_format, prefix = row_fields(extra_info)
        box = shared(allow_weak_sandbox=allow_weak_sandbox)
        return grade(ground_truth, response, settings=settings, sandbox=box, answer_format=answer_format,
                     assistant_prefix=prefix)

    return run


def expected_outputs(ground_truth: Any) -> list[str]:
    """The expected outputs a ground truth holds (what feedback must not show)."""
    gt = json.loads(ground_truth) if isinstance(ground_truth, str) else ground_truth
    if not isinstance(gt, Mapping):
        return []
    outs = [t.get("output") for t in gt.get("tasks") or [] if isinstance(t, Mapping)]
    if "ref_output" in gt:
        outs.append(gt["ref_output"])
    return [o if isinstance(o, str) else json.dumps(o) for o in outs if o is not None]


def _shown(text: str, expected: list[str], settings: EpisodeSettings) -> str:
    cut = settings.feedback_chars
    shown = text if len(text) <= cut else text[:cut] + f"... ({len(text) - cut} more characters)"
    if not settings.show_expected and any(e and e in text for e in expected):
        return "(withheld: it contains an expected output)"
    return shown


def feedback_text(grade: Mapping, ground_truth: Any, settings: EpisodeSettings) -> str:
    """What the next turn tells the model about a wrong answer (module docstring)."""
    expected = expected_outputs(ground_truth)
    lines = []
    tasks = list(grade.get("tasks") or [])
    inputs = _inputs(ground_truth)
    if settings.feedback == "none" or not tasks:
        if grade.get("error") == "no_answer" and settings.feedback != "none":
            lines.append(_shown(str(grade.get("detail") or "no answer found"), expected, settings))
        else:
            lines.append("Your answer is not correct.")
    else:
        for k, t in enumerate(tasks):
            if t.get("correct"):
                continue
            call = f"{t.get('entry', 'main_solution')}({inputs[k]!r})" if k < len(inputs) else str(t.get("entry"))
            status = str(t.get("status"))
            if status == "ok":
                got = t.get("returned")
                if settings.feedback == "returned" and isinstance(got, str):
                    lines.append(f"{call} returned {_shown(repr(got), expected, settings)}, which is not the "
                                 "expected output.")
                else:
                    lines.append(f"{call} did not return the expected output.")
            else:
                detail = _shown(str(t.get("detail") or ""), expected, settings)
                lines.append(f"{call} failed ({status})" + (f": {detail}" if detail else "."))
            if settings.show_expected and k < len(expected):
                lines.append(f"The expected output of {call} is {expected[k]!r}.")
        if not lines:  # every output right, the score short of 1: the structure the policy requires
            lines.append("Every output is right, but the program does not compose the operators as the task "
                         "asks.")
    return "\n".join(lines)


def _inputs(ground_truth: Any) -> list[str]:
    gt = json.loads(ground_truth) if isinstance(ground_truth, str) else ground_truth
    if not isinstance(gt, Mapping):
        return []
    return [str(t.get("input")) for t in gt.get("tasks") or [] if isinstance(t, Mapping)]


RETRY = "Fix your answer and give it again, in the same format as before."


@dataclass
class Episode:
    """One episode over one row (its ``prompt``, ``reward_model.ground_truth``, ``extra_info``)."""

    row: Mapping
    settings: EpisodeSettings = field(default_factory=EpisodeSettings)
    grader: Grader | None = None
    turn: int = 0
    done: bool = False
    reward: float = 0.0
    scores: list[float] = field(default_factory=list)
    messages: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        from opgen.integrations.common import check_ground_truth, ground_truth_of

        prompt = self.row.get("prompt")
        if not isinstance(prompt, list) or not prompt or not all(isinstance(m, Mapping) for m in prompt):
            raise EpisodeError("row.prompt: a non-empty list of messages")
        self.ground_truth = ground_truth_of(self.row, "row")
        check_ground_truth(self.ground_truth, "row.ground_truth")
        self.extra_info = dict(self.row.get("extra_info") or {})
        self.messages = [{"role": str(m.get("role")), "content": str(m.get("content"))} for m in prompt]

    def step(self, response: str) -> dict:
        """Grade one turn's response; returns ``{turn, score, reward, done, feedback, error}``
        (``feedback``: the next user turn when the episode goes on, else None)."""
        if self.done:
            raise EpisodeError("the episode is over: reset it")
        if not isinstance(response, str):
            raise EpisodeError(f"response: a string, not {type(response).__name__}")
        grader = self.grader or sandbox_grader()
        g = grader(self.ground_truth, response, self.extra_info)
        self.turn += 1
        score = float(g["score"])
        self.scores.append(score)
        self.messages.append({"role": "assistant", "content": response})
        feedback = None
        if score >= 1.0 or self.turn >= self.settings.max_turns:
            self.done = True
            self.reward = reward_of(self.turn, score, self.settings)
        else:
            feedback = feedback_text(g, self.ground_truth, self.settings) + "\n" + RETRY
            self.messages.append({"role": "user", "content": feedback})
        return {"turn": self.turn, "score": score, "reward": self.reward if self.done else 0.0, "done": self.done,
                "feedback": feedback, "error": str(g.get("error", ""))}

    def state(self) -> dict:
        return {"turn": self.turn, "done": self.done, "reward": self.reward, "scores": list(self.scores),
                "max_turns": self.settings.max_turns, "settings": asdict(self.settings)}
