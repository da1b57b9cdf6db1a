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

from opgen import formats
from opgen.library import STUDY, Ref, ref_of_truth
from opgen.score import diagnose, static
from opgen.score import parse as P
from opgen.score.sandbox import Result, Sandbox, Unit, shared
from opgen.score.settings import DEFAULT, GROUP_POLICIES, MODES, NAMESPACES, POLICIES, GradeSettings
from opgen.truth import GroundTruthError, parse

# re-exported: the grading options (opgen.score.settings) and the ground truth's error (opgen.truth)
__all__ = ["GROUP_POLICIES", "MODES", "NAMESPACES", "POLICIES", "GradeSettings", "GroundTruthError"]
# Far beyond any generation budget (3,072 tokens is about 12,000 characters); longer text is not
# parsed at all: it is graded ``too_large`` (docs/scoring.md).
MAX_RESPONSE_CHARS = 1_000_000

# Error classes a graded response can end with ("" when it is correct).
ERRORS = ("", "no_answer", "wrong_output", "syntax", "missing_name", "missing_import", "arity", "exception",
          "timeout", "memory", "output_too_large", "killed", "not_a_string", "nesting", "too_large",
          "library_mismatch")


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
    # The library the ground truth names (its ``library``: name and digest); None: it names none (the study's).
    library: Ref | None = None

    @property
    def recall_order(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(op for t in self.tasks for op in t.ops))


ROW_FIELDS = ("answer_format", "assistant_prefix")  # the extra_info fields of a row that grade() reads


def row_fields(extra_info: Mapping | None) -> tuple[str, str]:
    """``(answer_format, assistant_prefix)``: the ``extra_info`` fields of a row that :func:`grade`
    reads (:data:`ROW_FIELDS`); "" where absent."""
    extra = extra_info or {}
    return str(extra.get("answer_format", "") or ""), str(extra.get("assistant_prefix", "") or "")


# Ground truths parsed lately, by their text: the scorer checks a chunk's rows, then hands them
# to grade_many, and a row's samples follow one another, so each text is parsed once.
TRUTH_CACHE = 4096


def load_truth(ground_truth: object) -> Truth:
    """The ground truth as the scorer reads it (opgen.truth: JSON nested at most ``MAX_DEPTH`` deep,
    every field of its type); anything else is a :class:`GroundTruthError` naming the field. A text
    read lately is not parsed again (:data:`TRUTH_CACHE`; a ``Truth`` is immutable)."""
    if isinstance(ground_truth, str):
        return _load_truth_text(ground_truth)
    return _truth_of(ground_truth)


@functools.lru_cache(maxsize=TRUTH_CACHE)
def _load_truth_text(text: str) -> Truth:
    return _truth_of(text)


def _truth_of(ground_truth: object) -> Truth:
    gt = parse(ground_truth)
    library = ref_of_truth(gt)
    if "tasks" not in gt:
        return Truth("forward", (), native=True, ref_output=gt["ref_output"], library=library)
    tasks = tuple(TaskTruth(t["entry"], t["expr"], t["input"], t["output"], tuple(t.get("ops", ())),
                            t.get("depth", -1)) for t in gt["tasks"])
    return Truth(gt.get("mode", "program"), tasks, library=library)


def _canonical(value: object) -> str:
    # Type-exact equality for JSON values: 1 != 1.0 != True, "1" != 1.
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _empty(truth: Truth, mode: str) -> dict:
    n = max(len(truth.tasks), 1)
    return {"mode": mode, "score": 0.0, "acc": 0.0, "format_ok": False, "error": "no_answer", "detail": "",
            "structure_ok": None, "n_tasks": n, "tasks_correct": 0, "tasks": [], "recalls": [],
            "recall": diagnose.RecallReport().counts()}


# The grade's shape, key by key in order (the report writes grades in this order): every grade has
# GRADE_KEYS (a forward grade, a failure: _empty's); a program grade adds missing, duplicated, extra.
# Its tasks are {entry, status, correct, detail}, its recalls {op, verdict, chimera_of, detail}.
GRADE_KEYS = ("mode", "score", "acc", "format_ok", "error", "detail", "structure_ok", "n_tasks", "tasks_correct",
              "tasks", "recalls", "recall")
PROGRAM_KEYS = (*GRADE_KEYS, "missing", "duplicated", "extra")
COUNT_KEYS = tuple(diagnose.RecallReport().counts())
_SHAPES = {GRADE_KEYS: 0, PROGRAM_KEYS: 1}


def grade_to_wire(g: dict) -> tuple | dict:
    """A grade as a grading process sends it: ``(shape, values...)`` in key order, its tasks and
    recalls as tuples of values, its recall counts as a tuple (under half the dict's marshalled
    bytes: no key strings); a grade of another shape as the dict itself. :func:`grade_from_wire`
    gives back an equal dict, key order included (tests/test_batch.py ties the two)."""
    shape = _SHAPES.get(tuple(g))
    if shape is None or any(len(t) != 4 for t in g["tasks"]):  # tasks with ``returned`` (settings.returned)
        return g
    out = (shape, g["mode"], g["score"], g["acc"], g["format_ok"], g["error"], g["detail"], g["structure_ok"],
           g["n_tasks"], g["tasks_correct"],
           tuple([(t["entry"], t["status"], t["correct"], t["detail"]) for t in g["tasks"]]),
           tuple([(r["op"], r["verdict"], r["chimera_of"], r["detail"]) for r in g["recalls"]]),
           tuple(g["recall"].values()))
    return out + (g["missing"], g["duplicated"], g["extra"]) if shape else out


def grade_from_wire(wire: tuple | dict) -> dict:
    """The grade dict of :func:`grade_to_wire`'s value (a dict is passed through)."""
    if type(wire) is dict:
        return wire
    w = wire
    g = {"mode": w[1], "score": w[2], "acc": w[3], "format_ok": w[4], "error": w[5], "detail": w[6],
         "structure_ok": w[7], "n_tasks": w[8], "tasks_correct": w[9],
         "tasks": [{"entry": a, "status": b, "correct": c, "detail": d} for a, b, c, d in w[10]],
         "recalls": [{"op": a, "verdict": b, "chimera_of": c, "detail": d} for a, b, c, d in w[11]],
         "recall": dict(zip(COUNT_KEYS, w[12]))}
    if w[0]:
        g["missing"], g["duplicated"], g["extra"] = w[13], w[14], w[15]
    return g


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
    library = settings.library
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
    report = diagnose.recall_plan(own_recalls, expected, namespace,
                                  library) if settings.diagnose else diagnose.RecallReport()
    checks = [c for c in report.checks if c.kinds]
    imports = diagnose.native_imports(library) if namespace == "native" else ()
    # Recall probes run first, the program last: only the first check's probes ran in a child that
    # nothing else had touched, so only its verdict may be cached (see diagnose._VERDICTS).
    units = [u for c in checks for u in c.units()]
    if answer.code is not None:
        units.append(Unit(answer.code, tuple((t.entry, (t.input,)) for t in truth.tasks), imports=imports))
    # Programs of library code only get the sandbox's results without running (opgen/score/static.py),
    # and the program's tree from the same recognition.
    proved = None
    if settings.static and units:
        proved = static.evaluate(units, sandbox, library)
    if proved is not None:
        results = proved.results
        tree = proved.trees[-1] if answer.code is not None else None
    else:
        # One parse of the whole program decides what runs (the sandbox's blocks) and what is
        # checked (the structure of the binding a call reaches).
        tree = diagnose.parse_tree(answer.code)
        if answer.code is not None:
            units[-1] = dataclasses.replace(units[-1], tree=tree)
        results = sandbox.run_units(units) if units else []
    for k, check in enumerate(checks):
        n = sum(len(u.calls) for u in check.units())
        diagnose.conclude(check, results[:n], cache=k == 0)
        results = results[n:]
    if answer.code is not None:
        main = results[:len(entries)]
        if namespace == "strict":
            main = [_native_status(r, diagnose.native_names(library)) for r in main]
    else:
        main = [Result("no_answer", None, "no code block defines " + ", ".join(entries))] * len(entries)
    # A structured format (recall-then-assemble) is well formed only with its Assemble block; a row
    # without a format (native rows) is held to it when the answer shows the structure.
    ra_wanted = (answer.recalls or answer.has_assemble) if answer_format == "" else \
        formats.answer_spec(answer_format).structured if structured is None else structured
    result["format_ok"] = answer.code is not None and (not ra_wanted or answer.source == "assemble")
    result["recalls"] = [{"op": c.op, "verdict": c.verdict, "chimera_of": c.chimera_of, "detail": c.detail}
                         for c in report.checks]
    result["recall"] = report.counts()
    result["missing"], result["duplicated"], result["extra"] = \
        list(report.missing), list(report.duplicated), list(report.extra)
    correct = [r.ok and r.value == t.output for r, t in zip(main, truth.tasks)]
    result["tasks"] = [{"entry": t.entry, "status": r.status, "correct": c, "detail": r.detail}
                       for t, r, c in zip(truth.tasks, main, correct)]
    if settings.returned:  # execution feedback (opgen.episode): what each program returned
        for entry, r in zip(result["tasks"], main):
            entry["returned"] = r.value if r.ok else None
    if proved is not None and tree is not None:
        # The proved tree's library definitions are known not to rebind anything: only the rest
        # of the tree is walked (no scan of the text).
        structure = [diagnose.structure_matches(answer.code, t.entry, t.expr, tree, proved.vouched(t.entry), library)
                     for t in truth.tasks]
    else:
        structure = [tree is not None and diagnose.structure_matches(answer.code, t.entry, t.expr, tree,
                                                                     library=library)
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
    named = truth.library.digest if truth.library is not None else STUDY.digest
    if named != settings.library.digest:  # a record built by hand: the entry points resolve rows first
        return failure(truth, mode, "library_mismatch",
                       f"the row's ground truth names library digest {named[:12]}, graded against library "
                       f"{settings.library.name!r} (digest {settings.library.digest[:12]})")
    if effective == "forward":
        return _grade_forward(truth, response, settings.group)
    if sandbox is None:
        sandbox = shared()
    return _grade_program(truth, response, sandbox, settings, answer_format, assistant_prefix, format_structured)
