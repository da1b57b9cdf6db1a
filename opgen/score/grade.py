"""Grade one response against one row's ground truth: a score, an error class and the diagnostics.

The expected values stay here; the sandbox only ever receives the program and its inputs, and
the comparison (exact: case and whitespace included) happens in this process.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from opgen import formats as F
from opgen.errors import OpgenError
from opgen.score import diagnose as D
from opgen.score import parse as P
from opgen.score import static as S
from opgen.score.sandbox import Result, Sandbox, Unit
from opgen.score.settings import DEFAULT, GROUP_POLICIES, MODES, NAMESPACES, POLICIES, GradeSettings

__all__ = ["GROUP_POLICIES", "MODES", "NAMESPACES", "POLICIES", "GradeSettings"]  # re-exported (opgen.score.settings)
# Far beyond any generation budget (3,072 tokens is about 12,000 characters); longer text is not
# parsed at all: it is graded ``too_large`` (docs/scoring.md).
MAX_RESPONSE_CHARS = 1_000_000

# Error classes a graded response can end with ("" when it is correct).
ERRORS = ("", "no_answer", "wrong_output", "syntax", "missing_name", "missing_import", "arity", "exception",
          "timeout", "memory", "output_too_large", "killed", "not_a_string", "nesting", "too_large",
          "library_mismatch")


class GroundTruthError(ValueError, OpgenError):
    """A ground truth that is not the contract's JSON (names the missing or malformed field)."""

    exit_code = 1


def truth_library(gt: dict) -> dict | None:
    """The ground truth's ``library`` key ({"name", "digest", "spec"}), None for the study's rows."""
    value = gt.get("library")
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("digest"), str):
        raise GroundTruthError("ground_truth.library must be an object with 'name', 'digest' and 'spec'")
    return value


@dataclass(frozen=True)
class TaskTruth:
    entry: str
    expr: str
    input: str
    output: str
    ops: tuple[str, ...]
    depth: int


@dataclass(frozen=True)
class Truth:
    mode: str  # "program" | "forward"
    tasks: tuple[TaskTruth, ...]  # empty for native benchmark rows
    native: bool = False
    ref_output: object = None  # native rows: the value to predict
    # The row's operator library (ground truth ``library``): its digest and spec, "" for the study's.
    library_digest: str = ""
    library_spec: str = ""

    @property
    def recall_order(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for t in self.tasks:
            for op in t.ops:
                seen.setdefault(op, None)
        return tuple(seen)


ROW_FIELDS = ("answer_format", "assistant_prefix")  # the extra_info fields of a row that grade() reads


def row_fields(extra_info: Mapping | None) -> tuple[str, str]:
    """``(answer_format, assistant_prefix)``: the ``extra_info`` fields of a row that :func:`grade`
    reads (:data:`ROW_FIELDS`); "" where absent."""
    extra = extra_info or {}
    return str(extra.get("answer_format", "") or ""), str(extra.get("assistant_prefix", "") or "")


# Ground truths parsed lately, by their text: the scorer checks a chunk's rows, then hands them
# to grade_many, and a row's samples follow one another, so each text is parsed once.
TRUTH_CACHE = 4096


def load_truth(ground_truth: dict | str) -> Truth:
    if isinstance(ground_truth, str):
        return _load_truth_text(ground_truth)
    return _truth_of(ground_truth)


@functools.lru_cache(maxsize=TRUTH_CACHE)
def _load_truth_text(text: str) -> Truth:
    try:
        gt = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise GroundTruthError(f"ground_truth is not JSON: {exc}") from None
    return _truth_of(gt)


def _truth_of(gt: object) -> Truth:
    if not isinstance(gt, dict):
        raise GroundTruthError(f"ground_truth must be a JSON object, got {type(gt).__name__}")
    if "tasks" not in gt:
        if "ref_output" not in gt:
            raise GroundTruthError("ground_truth has neither 'tasks' nor the native 'ref_output'")
        return Truth("forward", (), native=True, ref_output=gt["ref_output"])
    tasks = []
    for i, t in enumerate(gt["tasks"]):
        try:
            tasks.append(TaskTruth(str(t["entry"]), str(t["expr"]), t["input"], t["output"],
                                   tuple(t.get("ops", ())), int(t.get("depth", -1))))
        except (KeyError, TypeError) as exc:
            raise GroundTruthError(f"ground_truth.tasks[{i}] lacks or mistypes {exc}") from None
    if not tasks:
        raise GroundTruthError("ground_truth.tasks is empty")
    mode = gt.get("mode", "program")
    if mode not in ("program", "forward"):
        raise GroundTruthError(f"ground_truth.mode must be 'program' or 'forward', got {mode!r}")
    lib = truth_library(gt)
    if lib is None:
        return Truth(mode, tuple(tasks))
    return Truth(mode, tuple(tasks), library_digest=lib["digest"], library_spec=str(lib.get("spec") or ""))


def _canonical(value: object) -> str:
    # Type-exact equality for JSON values: 1 != 1.0 != True, "1" != 1.
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _empty(truth: Truth, mode: str) -> dict:
    n = max(len(truth.tasks), 1)
    return {"mode": mode, "score": 0.0, "acc": 0.0, "format_ok": False, "error": "no_answer", "detail": "",
            "structure_ok": None, "n_tasks": n, "tasks_correct": 0, "tasks": [], "recalls": [],
            "recall": D.RecallReport().counts()}


def _grade_forward(truth: Truth, response: str, group: str) -> dict:
    result = _empty(truth, "forward")
    # A JSON value nested deeper than the parser's limit is an error class of its own, decided the
    # same way whatever the caller's stack depth: text with many brackets is parsed on a thread of
    # its own (a fixed, shallow stack), where the decoder's recursion limit is always the same.
    if response.count("[") + response.count("{") >= P.MAX_JSON_DEPTH:
        got, too_deep = _fixed_stack().submit(P.parse_forward, response).result()
    else:
        got, too_deep = P.parse_forward(response)
    if too_deep:
        result["error"] = "nesting"
        result["detail"] = f"a JSON value nested deeper than {P.MAX_JSON_DEPTH} levels"
        return result
    if got is P.MISSING:
        return result
    result["format_ok"] = True
    if truth.native:
        expected: list = [truth.ref_output]
        values = [got]
    else:
        expected = [t.output for t in truth.tasks]
        # Groups answer with a list of outputs in task order; a single task with the bare value.
        values = [got] if len(expected) == 1 else (list(got) if isinstance(got, list) else [got])
    correct = [i < len(values) and _canonical(values[i]) == _canonical(e) for i, e in enumerate(expected)]
    entries = [t.entry for t in truth.tasks] or ["output"]
    result["tasks"] = [{"entry": e, "status": "ok", "correct": c, "detail": ""} for e, c in zip(entries, correct)]
    return _finish(result, correct, None, group, "output")


_fixed_stack_pool = None
_fixed_stack_lock = threading.Lock()


def _fixed_stack():
    global _fixed_stack_pool
    with _fixed_stack_lock:
        if _fixed_stack_pool is None:
            from concurrent.futures import ThreadPoolExecutor

            _fixed_stack_pool = ThreadPoolExecutor(1, thread_name_prefix="opgen-json")
        return _fixed_stack_pool


def _finish(result: dict, correct: list[bool], structure: list[bool] | None, group: str, policy: str) -> dict:
    rewarded = correct if policy == "output" or structure is None else [c and s for c, s in zip(correct, structure)]
    result["tasks_correct"] = sum(correct)
    result["acc"] = 1.0 if all(correct) else 0.0
    result["score"] = (sum(rewarded) / len(rewarded)) if group == "fraction" else float(all(rewarded))
    if all(correct):
        result["error"] = ""
    else:
        failed = next(t for t, c in zip(result["tasks"], correct) if not c)
        result["error"] = "wrong_output" if failed["status"] == "ok" else failed["status"]
    return result


def _native_status(r: Result, names: frozenset[str]) -> Result:
    # A NameError for a name the native module had imported (``gcd``): the program lacks an import
    # the native benchmark's text never shows, which is not the same failure as a wrong body.
    if r.status == "missing_name" and any(r.detail == f"NameError: name '{n}' is not defined" for n in names):
        return Result("missing_import", r.value, r.detail)
    return r


def _grade_program(truth: Truth, response: str, sandbox: Sandbox, settings: GradeSettings, answer_format: str,
                   assistant_prefix: str, structured: bool | None = None) -> dict:
    result = _empty(truth, "program")
    entries = tuple(t.entry for t in truth.tasks)
    library = settings.library  # None: the study's
    # Generated text never holds a teacher-forced prefix (probe 1b); the answer is prefix + text.
    # The prefix's recall blocks were given, not recalled: they are left out of the diagnostics.
    given: tuple[str, ...] = ()
    if assistant_prefix:
        if not response.startswith(assistant_prefix):
            response = assistant_prefix + response
        given = tuple(r.op for r in P.parse_program_answer(assistant_prefix, entries, library=library).recalls)
    answer = P.parse_program_answer(response, entries, library=library)
    own_recalls = answer.recalls[len(given):]
    expected = tuple(op for op in truth.recall_order if op not in given)
    namespace = settings.namespace
    report = D.recall_plan(own_recalls, expected, namespace, library) if settings.diagnose else D.RecallReport()
    checks = [c for c in report.checks if c.kinds]
    imports = D.native_imports(library) if namespace == "native" else ()
    # Recall probes run first, the program last: only the first check's probes ran in a child that
    # nothing else had touched, so only its verdict may be cached (see diagnose._VERDICTS).
    units = [u for c in checks for u in c.units()]
    if answer.code is not None:
        units.append(Unit(answer.code, tuple((t.entry, (t.input,)) for t in truth.tasks), imports=imports))
    # Programs of library code only get the sandbox's results without running (opgen/score/static.py),
    # and the program's tree from the same recognition.
    proved = None
    if settings.static and units:  # (the study's call as it always was: tests wrap S.evaluate)
        proved = S.evaluate(units, sandbox) if library is None else S.evaluate(units, sandbox, library)
    if proved is not None:
        results = proved.results
        tree = proved.trees[-1] if answer.code is not None else None
    else:
        # One parse of the whole program decides what runs (the sandbox's blocks) and what is
        # checked (the structure of the binding a call reaches).
        tree = D.parse_tree(answer.code)
        if answer.code is not None:
            units[-1] = dataclasses.replace(units[-1], tree=tree)
        results = sandbox.run_units(units) if units else []
    for k, check in enumerate(checks):
        n = sum(len(u.calls) for u in check.units())
        D.conclude(check, results[:n], cache=k == 0)
        results = results[n:]
    if answer.code is not None:
        main = results[:len(entries)]
        if namespace == "strict":
            main = [_native_status(r, D.native_names(library)) for r in main]
    else:
        main = [Result("no_answer", None, "no code block defines " + ", ".join(entries))] * len(entries)
    # A structured format (recall-then-assemble) is well formed only with its Assemble block; a row
    # without a format (native rows) is held to it when the answer shows the structure.
    ra_wanted = (answer.recalls or answer.has_assemble) if answer_format == "" else \
        F.answer_spec(answer_format).structured if structured is None else structured
    result["format_ok"] = answer.code is not None and (not ra_wanted or answer.source == "assemble")
    result["recalls"] = [{"op": c.op, "verdict": c.verdict, "chimera_of": c.chimera_of, "detail": c.detail}
                         for c in report.checks]
    result["recall"] = report.counts()
    result["missing"], result["duplicated"], result["extra"] = \
        list(report.missing), list(report.duplicated), list(report.extra)
    correct = [r.ok and r.value == t.output for r, t in zip(main, truth.tasks)]
    result["tasks"] = [{"entry": t.entry, "status": r.status, "correct": c, "detail": r.detail}
                       for t, r, c in zip(truth.tasks, main, correct)]
    if proved is not None and tree is not None:
        # The proved tree's library definitions are known not to rebind anything: only the rest
        # of the tree is walked (no scan of the text).
        structure = [D.structure_matches(answer.code, t.entry, t.expr, tree, proved.vouched(t.entry), library)
                     for t in truth.tasks]
    else:
        structure = [tree is not None and D.structure_matches(answer.code, t.entry, t.expr, tree, library=library)
                     for t in truth.tasks]
    result["structure_ok"] = all(structure)
    if answer.code is None:
        result["detail"] = "no code block defines " + ", ".join(entries)
        return result
    return _finish(result, correct, structure, settings.group, settings.policy)


def response_text(response: object) -> str:
    """The response as text: a ``str`` as it is, ``bytes`` decoded as UTF-8 (undecodable bytes are
    kept as lone surrogates, which no answer can contain); anything else is the caller's error."""
    if isinstance(response, str):
        return response
    if isinstance(response, (bytes, bytearray)):
        return bytes(response).decode("utf-8", "surrogateescape")
    raise TypeError(f"response must be a string, got {type(response).__name__}")


def failure(truth: Truth, mode: str, error: str, detail: str) -> dict:
    """The grade of a response that could not be graded further (``too_large``, a grading process
    that overran its budget: ``timeout``, or died: ``killed``): score 0 with that class."""
    effective = truth.mode if mode == "auto" or truth.native else mode
    result = _empty(truth, effective)
    result["error"], result["detail"] = error, detail
    return result


def too_large(truth: Truth, mode: str, response: str) -> dict | None:
    """The ``too_large`` grade of a response over :data:`MAX_RESPONSE_CHARS`, else None (a length
    check: nothing of the text is read)."""
    if len(response) <= MAX_RESPONSE_CHARS:
        return None
    return failure(truth, mode, "too_large", f"response of {len(response)} characters exceeds {MAX_RESPONSE_CHARS}")


def grade_in_process(ground_truth: dict | str, response: str | bytes, *, settings: GradeSettings = DEFAULT,
                     sandbox: Sandbox | None = None, answer_format: str = "", assistant_prefix: str = "",
                     format_structured: bool | None = None) -> dict:
    """:func:`grade` computed in this process, with the same ``settings``: what a grading process runs
    (opgen/score/batch.py), and the tests' reference. It parses, compiles and statically evaluates
    the response here, with no budget: never call it on model text in a process that must survive.
    ``format_structured``: the answer format's ``structured`` fact as the caller resolved it (a
    grading process does not know formats registered in the caller's process); None: looked up."""
    if not isinstance(settings, GradeSettings):
        raise TypeError(f"settings must be a GradeSettings, got {type(settings).__name__}")
    mode = settings.mode
    truth = load_truth(ground_truth)
    response = response_text(response)
    effective = truth.mode if mode == "auto" or truth.native else mode
    big = too_large(truth, mode, response)
    if big is not None:
        return big
    if truth.library_digest or settings.library is not None:
        from opgen.score import libs

        wrong = libs.mismatch(truth.library_digest, settings.library)  # type: ignore[arg-type]
        if wrong:
            return failure(truth, mode, "library_mismatch", wrong)
    if effective == "forward":
        return _grade_forward(truth, response, settings.group)
    if sandbox is None:
        from opgen.score.sandbox import shared

        sandbox = shared()
    return _grade_program(truth, response, sandbox, settings, answer_format, assistant_prefix, format_structured)
