"""Prompt and gold-answer templates: the text a model sees and the answer SFT teaches.

Prompt formats (:data:`PROMPTS`): ``shown`` (the used operators' sources, then main_solution and
the input), ``closed_book`` (main_solution and the input only: definitions must be recalled),
``forward`` (the whole program and the input; predict the output), ``closed_book_forward``
(main_solution and the input only; predict the output — the native stage 2). A recipe may give a
prompt template of its own (placeholders ``{program}``, ``{input}``, ``{input_repr}``,
``{call}``) that replaces the format's wording. Answer formats: ``ra``
(recall-then-assemble), ``prose_code`` (prose, then one code block), ``json_output`` (forward
rows). docs/formats.md shows each with an example; docs/contracts.md fixes what the scorer parses.

Operator texts are cached once per operator (and per operator tuple), because a build renders
the same few sources hundreds of thousands of times.
"""

from __future__ import annotations

import functools
import json
import re
import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Union

from opgen import expr as E
from opgen.errors import OpgenError
from opgen.ops import STUDY, OperatorLibrary
from opgen.tasks import Item


@dataclass(frozen=True)
class PromptFormat:
    """What a prompt format is: every renderer reads these facts, never the format's name, so a
    new format is one entry of :data:`PROMPTS` and an unknown name raises."""

    name: str
    mode: str  # "program": write the program; "forward": predict its output
    shows_sources: bool  # the used operators' definitions are in the prompt
    answers: tuple[str, ...]  # answer formats that go with it, the default first


PROMPTS: dict[str, PromptFormat] = {p.name: p for p in (
    PromptFormat("shown", "program", True, ("ra", "prose_code")),
    PromptFormat("closed_book", "program", False, ("ra", "prose_code")),
    PromptFormat("forward", "forward", True, ("json_output",)),
    PromptFormat("closed_book_forward", "forward", False, ("json_output",)),
)}
PROMPT_FORMATS = tuple(PROMPTS)
DEFAULT_ANSWER = {p.name: p.answers[0] for p in PROMPTS.values()}
# placeholders a user's prompt template may hold (docs/formats.md, "Prompt templates")
TEMPLATE_FIELDS = ("program", "input", "input_repr", "call")

try:  # the C encoder writes exactly what json.dumps(..., ensure_ascii=False) writes for a str
    from json.encoder import c_encode_basestring as _jstr  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - pure-Python fallback, same output
    from json.encoder import py_encode_basestring as _jstr
if _jstr is None:  # pragma: no cover
    from json.encoder import py_encode_basestring as _jstr


class FormatError(ValueError, OpgenError):
    exit_code = 1


def prompt_spec(prompt_format: str) -> PromptFormat:
    spec = PROMPTS.get(prompt_format)
    if spec is None:
        raise FormatError(f"unknown prompt format {prompt_format!r} (known: {', '.join(PROMPT_FORMATS)})")
    return spec


def mode_of(prompt_format: str) -> str:
    """``program`` or ``forward``; an unknown format raises."""
    return prompt_spec(prompt_format).mode


def placeholder_problem(template: str, known: tuple[str, ...]) -> str | None:
    """Why ``template`` is not a ``str.format`` template whose placeholders are bare names among
    ``known`` (None when it is one): a prompt template's check, and a recipe's ``data_source``."""
    braces = ", ".join("{" + f + "}" for f in known)
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        return f"not a template ({exc}); placeholders: {braces}; write a literal brace as {{{{ or }}}}"
    for _, name, spec, conversion in parsed:
        if name is not None and (name not in known or spec or conversion):
            shown = name + ("!" + conversion if conversion else "") + (":" + spec if spec else "")
            return f"unknown placeholder {{{shown}}} (known: {braces}; write a literal brace as {{{{ or }}}})"
    return None


def check_template(template: str) -> str | None:
    """Why ``template`` is not a prompt template (None when it is one)."""
    problem = placeholder_problem(template, TEMPLATE_FIELDS)
    if problem is None and not any(name == "program" for _, name, _, _ in string.Formatter().parse(template)):
        return "the template has no {program} placeholder"
    return problem


def check_pair(prompt_format: str, answer_format: str) -> None:
    if prompt_format not in COMPATIBLE:
        raise FormatError(f"unknown prompt format {prompt_format!r} (known: {', '.join(PROMPT_FORMATS)})")
    answer_spec(answer_format)  # an unknown answer format raises, naming the known ones
    if answer_format not in COMPATIBLE[prompt_format]:
        raise FormatError(f"answer format {answer_format!r} does not go with prompt format {prompt_format!r} "
                          f"(use {' or '.join(COMPATIBLE[prompt_format])})")


# ---------------------------------------------------------------- cached operator texts


# The recall-then-assemble structure's markers (the ``ra`` format's): a recall block's header is
# RECALL_HEADER.format(op=...) then the gloss; the program follows a line ASSEMBLE_HEADER.
# opgen/score/parse.py reads them leniently; decomposed inference stops and prefixes with them.
RECALL_HEADER = "Recall {op}:"
ASSEMBLE_HEADER = "Assemble:"


# Every function below that shows an operator takes the rows' operator library (``lib``, the
# study's by default), and so do the answer formats' gold and check functions: a build, validate
# and the scorer render and check a user library's rows with its own sources and glosses.


@functools.lru_cache(maxsize=4096)
def recall_block(op_id: str, lib: OperatorLibrary = STUDY) -> str:
    op = lib.get(op_id)
    return f"{RECALL_HEADER.format(op=op.id)} {op.gloss}\n```python\n{op.source}```\n"


@functools.lru_cache(maxsize=65536)
def sources(op_ids: tuple[str, ...], lib: OperatorLibrary = STUDY) -> str:
    """The operators' shown sources, separated by one blank line (each ends in a newline)."""
    get = lib.get
    return "\n".join(get(op_id).source for op_id in op_ids)


@functools.lru_cache(maxsize=65536)
def _ops_json(op_ids: tuple[str, ...]) -> str:
    return "[" + ", ".join(f'"{o}"' for o in op_ids) + "]"


@functools.lru_cache(maxsize=65536)
def _recall_all(op_ids: tuple[str, ...], lib: OperatorLibrary = STUDY) -> str:
    return "\n".join(recall_block(o, lib) for o in op_ids)


def code_body(op_ids: tuple[str, ...], programs: list[str], lib: OperatorLibrary = STUDY) -> str:
    """Sources, a blank line, then the entry points (blank-line separated): the Assemble block's body."""
    progs = "\n\n".join(programs)
    return sources(op_ids, lib) + "\n" + progs if op_ids else progs


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


# ---------------------------------------------------------------- one row's texts


@dataclass
class Prepared:
    """Per-row facts computed once and shared by prompt, answer and ground truth."""

    exprs: list[str]
    programs: list[str]
    entries: tuple[str, ...]
    task_ops: list[tuple[str, ...]]
    recall: tuple[str, ...]
    ops_sorted: tuple[str, ...]
    depths: list[int]


_Var, _Lit, _Call, _Concat, _Method = E.Var, E.Lit, E.Call, E.Concat, E.Method


def scan(e: Any, seen: dict[str, None]) -> tuple[str, int]:
    """``(render(e), depth(e))`` of an :data:`opgen.expr.Expr` in one pass, adding operators to
    ``seen`` in pre-order.

    The same text and numbers as ``expr.render`` / ``expr.depth`` / ``expr.ops_used`` (tested),
    at a third of the cost: rendering is most of a row's time. ``e`` is typed ``Any`` because the
    nodes are told apart by their exact type (``t is _Var``), which mypy cannot narrow through.
    """
    t = type(e)
    if t is _Var:
        return e.name, 0
    if t is _Lit:
        return repr(e.value), 0
    if t is _Call:
        seen.setdefault(e.op, None)
        if len(e.args) == 1 and not e.params:
            inner, d = scan(e.args[0], seen)
            return f"{e.op}({inner})", d + 1
        parts = []
        d = 0
        for a in e.args:
            text, da = scan(a, seen)
            parts.append(text)
            if da > d:
                d = da
        for p in e.params:
            parts.append(repr(p))
        return f"{e.op}({', '.join(parts)})", d + 1
    if t is _Concat:
        left, dl = scan(e.left, seen)
        right, dr = scan(e.right, seen)
        return f"({left} + {right})", max(dl, dr) + 1
    if t is _Method:
        inner, d = scan(e.expr, seen)
        return f"({inner}).{e.name}()", d + 1
    return E.render(e), E.depth(e)  # pragma: no cover - the union is closed


def prepare(item: Item, lib: OperatorLibrary = STUDY) -> Prepared:
    entries = item.entries()
    exprs, programs, task_ops, depths = [], [], [], []
    seen: dict[str, None] = {}
    for task, entry in zip(item.tasks, entries):
        mine: dict[str, None] = {}
        text, d = scan(task.program, mine)
        exprs.append(text)
        programs.append(f"def {entry}(x):\n    return {text}")
        used = tuple(mine)
        task_ops.append(used)
        if not seen:
            seen = dict(mine)
        else:
            for o in used:
                seen.setdefault(o, None)
        depths.append(d)
    recall = tuple(seen)
    order = lib.position
    ops_sorted = recall if len(recall) < 2 else tuple(sorted(recall, key=order.__getitem__))
    return Prepared(exprs, programs, entries, task_ops, recall, ops_sorted, depths)


_RA_INSTRUCTION = (
    "Write a complete program that runs on its own. First recall each library function it calls, in order of "
    f"first appearance: a line `{RECALL_HEADER.format(op='func_N')} <what it does>` followed by its definition in "
    f"a ```python block. Then write a line `{ASSEMBLE_HEADER}` followed by one ```python block holding every "
    "recalled definition and {entries}."
)
_PROSE_INSTRUCTION = (
    "Write a complete program that runs on its own: explain it in a sentence or two, then give one ```python "
    "block holding the definition of every library function it calls and {entries}."
)
_JSON_INSTRUCTION = 'Answer with a ```json block holding {{"output": <the string {call} returns>}}.'


@dataclass(frozen=True)
class AnswerFormat:
    """What an answer format is, in one place: every renderer, validate, the scorer, decomposed
    inference and the probes read these facts, never the format's name, so a new format is one
    :func:`register_answer_format` call and an unknown name raises (:func:`answer_spec`).

    ``gold(recall, body, output, lib)``: the gold answer from the recalled operators (recall order),
    the program's code (:func:`code_body`: sources, a blank line, the entry points), for a forward
    row the output, and the rows' operator library (its glosses and sources). A program format's
    answer must not depend on ``output`` and must hold ``body`` once, so the single-row fast path
    caches the text around it per operator tuple.
    ``check(text, gt, lib)``: validate's strict check of a gold answer ("" when it holds).
    ``structured``: the scorer counts an answer as well formatted only when its program is the
    ``Assemble:`` block (:data:`ASSEMBLE_HEADER`), not just the last code block.
    ``markers``: the structure's header lines, as written (decomposed inference prefixes and stops
    with them; opgen/score/parse.py's linear scanner reads the same words leniently).
    ``recall_block(op, lib)``: one operator's recall block (of the library ``lib``), which a probe's
    teacher-forced prefix holds.
    """

    name: str
    mode: str  # "program" or "forward": the prompt formats it goes with (PromptFormat.mode)
    instruction: str  # program: a template of {entries}; forward: of {call}
    gold: Callable[[tuple[str, ...], str, str, OperatorLibrary], str]
    check: Callable[[str, dict, OperatorLibrary], str]
    structured: bool = False
    markers: tuple[str, ...] = ()
    # one operator's recall block (teacher-forced prefixes): (op_id, lib) -> text
    recall_block: Callable[..., str] | None = None
    # a forward format whose answer is a function of the output alone may say so: the single-row
    # fast path then calls it without joining the program's code (gold must give the same text)
    gold_of_output: Callable[[str], str] | None = None


ANSWERS: dict[str, AnswerFormat] = {}
ANSWER_FORMATS: tuple[str, ...] = ()
COMPATIBLE: dict[str, tuple[str, ...]] = {}


def _sync() -> None:
    # A prompt format takes its own listed answers (the default first), then every other registered
    # answer format of its mode, in registration order.
    global ANSWER_FORMATS
    ANSWER_FORMATS = tuple(ANSWERS)
    COMPATIBLE.clear()
    for p in PROMPTS.values():
        listed = tuple(a for a in p.answers if a in ANSWERS)
        COMPATIBLE[p.name] = listed + tuple(a.name for a in ANSWERS.values()
                                            if a.mode == p.mode and a.name not in listed)


def register_answer_format(spec: AnswerFormat) -> AnswerFormat:
    """Add an answer format (a name taken raises): recipes, renderers, validate and grade accept it."""
    if spec.name in ANSWERS:
        raise FormatError(f"answer format {spec.name!r} is already registered")
    if spec.mode not in ("program", "forward"):
        raise FormatError(f"answer format {spec.name!r}: mode must be 'program' or 'forward', got {spec.mode!r}")
    ANSWERS[spec.name] = spec
    _sync()
    return spec


def unregister_answer_format(name: str) -> None:
    answer_spec(name)
    del ANSWERS[name]
    _sync()


def answer_spec(answer_format: str) -> AnswerFormat:
    """The registered answer format of that name; an unknown name raises :class:`FormatError`."""
    spec = ANSWERS.get(answer_format)
    if spec is None:
        raise FormatError(f"unknown answer format {answer_format!r} (known: {', '.join(ANSWER_FORMATS)})")
    return spec


def _ra_gold(recall: tuple[str, ...], body: str, output: str, lib: OperatorLibrary) -> str:
    if not recall:
        return ASSEMBLE_HEADER + "\n```python\n" + body + "\n```"
    return _recall_all(recall, lib) + "\n" + ASSEMBLE_HEADER + "\n```python\n" + body + "\n```"


def _prose_gold(recall: tuple[str, ...], body: str, output: str, lib: OperatorLibrary) -> str:
    if recall:
        named = _and([f"{o} ({lib.get(o).gloss})" for o in recall])
        lead = f"The program calls {named}. Here is the complete program with their definitions."
    else:
        lead = "The program calls no library function. Here it is."
    return lead + "\n\n```python\n" + body + "\n```"


def _json_gold_of_output(output: str) -> str:
    return '```json\n{"output": ' + _jstr(output) + "}\n```"


def _json_gold(recall: tuple[str, ...], body: str, output: str, lib: OperatorLibrary) -> str:
    return _json_gold_of_output(output)


_RECALL = re.compile("^" + re.escape(RECALL_HEADER).replace(re.escape("{op}"), r"([A-Za-z_]\w*)")
                     + r" ([^\n]*)\n```python\n(.*?)```\n", re.S | re.M)
_ASSEMBLE = re.compile("^" + re.escape(ASSEMBLE_HEADER) + r"\n```python\n(.*?)\n```\s*\Z", re.S | re.M)
_JSON = re.compile(r"```json\n(.*?)\n```", re.S)
_PYTHON = re.compile(r"```python\n(.*?)\n```", re.S)
# These strict patterns run over gold answers opgen wrote itself (validate), never over model text.


def check_code(code: str, gt: dict, lib: OperatorLibrary) -> str:
    """That ``code`` defines every task's entry point as the row's program ("" when it does)."""
    for t in gt["tasks"]:
        try:
            parsed = E.parse_program(code, t["entry"], lib)
        except E.ExprError as exc:
            return f"answer code: {exc}"
        if E.render(parsed) != t["expr"]:
            return f"answer code's {t['entry']} is not the row's program"
    return ""


def _ra_check(text: str, gt: dict, lib: OperatorLibrary) -> str:
    recalls = _RECALL.findall(text)
    wanted: list[str] = []
    for t in gt["tasks"]:
        for o in t["ops"]:
            if o not in wanted:
                wanted.append(o)
    got = [r[0] for r in recalls]
    if wanted and got[-len(wanted):] != wanted:
        return f"RA recall blocks {got} do not end with the operators in order of appearance {wanted}"
    m = _ASSEMBLE.search(text)
    if not m:
        return "RA answer has no final Assemble: block"
    return check_code(m.group(1), gt, lib)


def _prose_check(text: str, gt: dict, lib: OperatorLibrary) -> str:
    blocks = _PYTHON.findall(text)
    if len(blocks) != 1:
        return f"prose_code answer has {len(blocks)} python blocks, expected 1"
    return check_code(blocks[0], gt, lib)


def _json_check(text: str, gt: dict, lib: OperatorLibrary) -> str:
    m = _JSON.search(text)
    if not m:
        return "json_output answer has no ```json block"
    try:
        value = json.loads(m.group(1))["output"]
    except (ValueError, KeyError, TypeError):
        return "json_output block is not {\"output\": ...}"
    return "" if value == gt["tasks"][0]["output"] else "json_output value differs from the output"


for _spec in (
    AnswerFormat("ra", "program", _RA_INSTRUCTION, _ra_gold, _ra_check, structured=True,
                 markers=(RECALL_HEADER, ASSEMBLE_HEADER), recall_block=recall_block),
    AnswerFormat("prose_code", "program", _PROSE_INSTRUCTION, _prose_gold, _prose_check),
    AnswerFormat("json_output", "forward", _JSON_INSTRUCTION, _json_gold, _json_check,
                 gold_of_output=_json_gold_of_output),
):
    register_answer_format(_spec)
# the opening of a forward prompt, with and without the used operators' sources
_FORWARD_HEADS = {True: "Here is a Python program:\n\n```python\n",
                  False: ("Here is a Python program. The library functions it calls (func_N) are defined elsewhere "
                          "and not shown.\n\n```python\n")}


def library_member(named: object) -> str:
    """The JSON member a non-study library's ground truth ends with (``, "library": {...}``), its
    one home: the build writes it (opgen.build.library_tag), validate re-renders it from the row."""
    return ', "library": ' + json.dumps(named, ensure_ascii=False)


class Formatter:
    def __init__(self, prompt_format: str, answer_format: str, template: str | None = None,
                 library: OperatorLibrary = STUDY, library_tag: str = ""):
        """``library``: the rows' operator library (its sources, glosses and order);
        ``library_tag``: a JSON member (``, "library": {...}``) every ground truth ends with ("" for the study)."""
        check_pair(prompt_format, answer_format)
        self.lib = library
        self.gt_end = library_tag + "}"
        self.spec = prompt_spec(prompt_format)
        self.prompt_format = prompt_format
        self.answer_format = answer_format
        self.mode = self.spec.mode
        self.answer_spec = answer_spec(answer_format)
        self.instruction = self.answer_spec.instruction
        if template is not None:
            problem = check_template(template)
            if problem:
                raise FormatError(f"prompt template: {problem}")
        self.template = template

    def shown_code(self, recall: tuple[str, ...], programs: list[str]) -> str:
        """The code a prompt shows: the entry points, after the used sources where the format shows them."""
        return code_body(recall, programs, self.lib) if self.spec.shows_sources else "\n\n".join(programs)

    def templated(self, program: str, x: str) -> str:
        """The user's template filled in for one task (``program``: the code the format shows)."""
        assert self.template is not None
        return self.template.format(program=program, input=x, input_repr=repr(x), call=f"main_solution({x!r})")

    # ------------------------------------------------------------ prompt

    def prompt(self, item: Item, p: Prepared) -> str:
        entries = p.entries
        calls = [f"{e}({t.input!r})" for e, t in zip(entries, item.tasks)]
        progs = "\n\n".join(p.programs)
        if self.template is not None:
            if item.is_group:
                raise FormatError("a prompt template fills in one task; group rows use the format's own wording")
            return self.templated(self.shown_code(p.recall, p.programs), item.tasks[0].input)
        if self.mode == "forward":
            if item.is_group:
                raise FormatError("forward rows hold one task (the answer is one output)")
            return (_FORWARD_HEADS[self.spec.shows_sources] + self.shown_code(p.recall, p.programs)
                    + f"\n```\n\nWhat does {calls[0]} return? " + self.instruction.format(call=calls[0]))
        what = "programs" if item.is_group else "program"
        run = f"It will be called as {calls[0]}." if len(calls) == 1 else f"They will be called as {_and(calls)}."
        instruction = self.instruction.format(entries=_and(list(entries)))
        if self.spec.shows_sources:
            head = ("Here are the library functions the " + what + " below uses:\n\n```python\n"
                    + sources(p.recall, self.lib) + "```\n\n")
            if not p.recall:
                head = ""
            return head + f"```python\n{progs}\n```\n\n{run}\n\n{instruction}"
        verb = "call" if item.is_group else "calls"
        return (f"The Python {what} below {verb} library functions (func_N) whose definitions are not shown.\n\n"
                f"```python\n{progs}\n```\n\n{run}\n\n{instruction}")

    # ------------------------------------------------------------ gold answer

    def gold(self, recall: tuple[str, ...], body: str, output: str) -> str:
        """The answer format's gold answer, of this formatter's library."""
        return self.answer_spec.gold(recall, body, output, self.lib)

    def answer(self, item: Item, p: Prepared) -> str:
        text = self.gold(p.recall, code_body(p.recall, p.programs, self.lib), item.tasks[0].output)
        prefix = item.assistant_prefix
        if prefix and not text.startswith(prefix):
            # A teacher-forced prefix (probe 1b) precedes the regular answer, which continues it.
            text = prefix + text
        return text

    # ------------------------------------------------------------ ground truth

    def ground_truth(self, item: Item, p: Prepared) -> str:
        """JSON text of docs/contracts.md's ``ground_truth``; equals ``json.dumps(obj, ensure_ascii=False)``."""
        group = item.is_group
        parts = []
        for t, entry, text, prog, used, d in zip(item.tasks, p.entries, p.exprs, p.programs, p.task_ops, p.depths):
            inp, out = _jstr(t.input), _jstr(t.output)
            s = (f'{{"entry": "{entry}", "expr": {_jstr(text)}, "input": {inp}, "output": {out}, '
                 f'"ops": {_ops_json(used)}, "depth": {d}')
            if group:
                code = _jstr(code_body(used, [prog], self.lib) + "\n")
                s += f', "ref_code": {code}, "ref_input": {{"x": {inp}}}, "ref_output": {out}, "funcname": "{entry}"'
            parts.append(s + "}")
        gt = f'{{"mode": "{self.mode}", "tasks": [{", ".join(parts)}], "ops": {_ops_json(p.ops_sorted)}'
        if not group:
            t = item.tasks[0]
            code = _jstr(code_body(p.recall, p.programs, self.lib) + "\n")
            gt += (f', "ref_code": {code}, "ref_input": {{"x": {_jstr(t.input)}}}, '
                   f'"ref_output": {_jstr(t.output)}, "funcname": "main_solution"')
        return gt + self.gt_end


# ---------------------------------------------------------------- single-task rows, fast path


@dataclass(frozen=True)
class OpsText:
    """Every fragment of a single-task row that depends only on its operators (in recall order).

    A build renders the same few hundred operator tuples over and over, so these are made once:
    JSON escaping is character by character, which lets a cached escaped prefix be joined with
    the escaped rest of a string without re-escaping the whole of it.
    """

    recall: tuple[str, ...]
    ops_sorted: tuple[str, ...]
    ops_json: str  # the task's operators (recall order)
    sorted_json: str  # the row's operators (library order)
    code_head: str  # code_body's text before the program: sources and a blank line, or ""
    jcode_head: str  # _jstr(code_head) without its closing quote


@functools.lru_cache(maxsize=65536)
def ops_text(recall: tuple[str, ...], lib: OperatorLibrary = STUDY) -> OpsText:
    order = lib.position
    ops_sorted = recall if len(recall) < 2 else tuple(sorted(recall, key=order.__getitem__))
    head = sources(recall, lib) + "\n" if recall else ""
    return OpsText(recall, ops_sorted, _ops_json(recall), _ops_json(ops_sorted), head, _jstr(head)[:-1])


# A row's text: a str, or pieces (before, shared, after) whose concatenation is the text.
Text = Union[str, tuple[str, str, str]]


def text(value: Text) -> str:
    """The text a value of :data:`Text` stands for."""
    return value if type(value) is str else "".join(value)


class ProgramParts(NamedTuple):
    """A single-task row's texts that do not depend on its input or output (:meth:`SingleRenderer.parts`).

    Long fragments (operator sources, escaped or not) are shared per operator tuple, so a cache
    of these holds little more than the program's own text.
    """

    head: str  # the prompt before the program
    program: str  # def main_solution(x): ...
    g0: str  # ground truth up to the JSON input
    g2: str  # ground truth from the task's ops to ref_code's text
    jhead: str  # ref_code's escaped sources (no closing quote)
    jprog: str  # ref_code's escaped program, with its closing quote
    answer_head: str  # the gold program answer before the program ("" for a forward format)
    code_head: str = ""  # the used sources and a blank line (OpsText.code_head), for prompt templates
    answer_tail: str = ""  # the gold program answer after the program
    recall: tuple[str, ...] = ()  # the operators, in recall order


class SingleRenderer:
    """Prompt, ground truth and gold answer of a one-task row without an assistant prefix.

    Byte for byte what :class:`Formatter` writes for the same item (tested), at a fraction of the
    cost: the per-operator-tuple fragments come from :func:`ops_text`, and the constant parts of
    the prompt from this object.
    """

    def __init__(self, fmt: Formatter):
        self.fmt = fmt
        self.mode = fmt.mode
        self.gt_head = f'{{"mode": "{fmt.mode}", "tasks": [{{"entry": "main_solution", "expr": '
        self.tail = "\n\n" + fmt.instruction.format(entries="main_solution") if fmt.mode == "program" else ""
        self._heads: dict[tuple[str, ...], str] = {}
        self._answer_heads: dict[tuple[str, ...], tuple[str, str]] = {}
        self.gold = fmt.gold
        self.gt_end = fmt.gt_end
        self.gold_of_output = fmt.answer_spec.gold_of_output
        # The prompt after the program: q1, the input's repr, q2 (forward: the repr again, q3).
        if self.mode == "forward":
            instruction = fmt.instruction
            at = instruction.index("{call}")
            self.q1 = "\n```\n\nWhat does main_solution("
            self.q2 = ") return? " + instruction[:at].replace("{{", "{") + "main_solution("
            self.q3: str | None = ")" + instruction[at + 6:].replace("}}", "}")
        else:
            self.q1, self.q2, self.q3 = "\n```\n\nIt will be called as main_solution(", ")." + self.tail, None

    def head(self, t: OpsText) -> str:
        """The prompt's text before the program's ``def`` line."""
        head = self._heads.get(t.recall)
        if head is None:
            spec = self.fmt.spec
            if spec.mode == "forward":
                head = _FORWARD_HEADS[spec.shows_sources] + (t.code_head if spec.shows_sources else "")
            elif spec.shows_sources:
                head = ("Here are the library functions the program below uses:\n\n```python\n"
                        + sources(t.recall, self.fmt.lib) + "```\n\n" if t.recall else "") + "```python\n"
            else:
                head = ("The Python program below calls library functions (func_N) whose definitions are not "
                        "shown.\n\n```python\n")
            self._heads[t.recall] = head
        return head

    def prompt(self, t: OpsText, program: str, x: str) -> str:
        call = f"main_solution({x!r})"
        if self.fmt.template is not None:
            return self.fmt.templated((t.code_head + program) if self.fmt.spec.shows_sources else program, x)
        if self.mode == "forward":
            return (self.head(t) + program + f"\n```\n\nWhat does {call} return? "
                    + self.fmt.instruction.format(call=call))
        return self.head(t) + program + f"\n```\n\nIt will be called as {call}." + self.tail

    def ground_truth(self, t: OpsText, expr: str, program: str, depth: int, x: str, out: str) -> str:
        inp, jout, jcode = _jstr(x), _jstr(out), _jstr(program + "\n")
        return (f'{self.gt_head}{_jstr(expr)}, "input": {inp}, "output": {jout}, "ops": {t.ops_json}, '
                f'"depth": {depth}}}], "ops": {t.sorted_json}, "ref_code": {t.jcode_head}{jcode[1:]}, '
                f'"ref_input": {{"x": {inp}}}, "ref_output": {jout}, "funcname": "main_solution"{self.gt_end}')

    def parts(self, t: OpsText, expr: str, program: str, depth: int) -> ProgramParts:
        """Every fragment of a row that depends only on its program, for :meth:`render`."""
        g0 = f'{self.gt_head}{_jstr(expr)}, "input": '
        g2 = f', "ops": {t.ops_json}, "depth": {depth}}}], "ops": {t.sorted_json}, "ref_code": '
        around = self._answer_heads.get(t.recall)
        if around is None:
            around = self._answer_around(t)
            self._answer_heads[t.recall] = around
        return ProgramParts(self.head(t), program, g0, g2, t.jcode_head, _jstr(program + "\n")[1:], around[0],
                            t.code_head, around[1], t.recall)

    def _answer_around(self, t: OpsText) -> tuple[str, str]:
        """A program format's gold answer around the program, (head, tail), for this operator tuple;
        ("", "") for a forward format (its answer is made per row from the output)."""
        if self.mode == "forward":
            return "", ""
        mark = "\x00PROGRAM\x00"
        whole = self.answer(t, mark, "")
        head, found, tail = whole.partition(mark)
        if not found or mark in tail or not head:  # pragma: no cover - AnswerFormat.gold's contract
            raise FormatError(f"answer format {self.fmt.answer_format!r}: a program answer must hold the "
                              "program once, after some text")
        return head, tail

    def render(self, parts: ProgramParts, x: str, out: str, sft: bool) -> tuple[Text, Text, Text | None]:
        """(prompt, ground truth, gold answer or None): what prompt/ground_truth/answer write, from parts.

        Long texts come as pieces ``(before, shared, after)`` (see :func:`text`): the shared piece
        (operator sources, escaped or not) is one object for every row of an operator tuple, so
        writing a column encodes it once instead of copying it into every row's string.
        """
        r = repr(x)
        head, program, q1, q2 = parts.head, parts.program, self.q1, self.q2
        if self.fmt.template is not None:
            shown = (parts.code_head + program) if self.fmt.spec.shows_sources else program
            prompt: Text = self.fmt.templated(shown, x)
        elif self.q3 is None:
            prompt = ("", head, f"{program}{q1}{r}{q2}")
        else:
            prompt = ("", head, f"{program}{q1}{r}{q2}{r}{self.q3}")
        inp, jout = _jstr(x), _jstr(out)
        gt = (f'{parts.g0}{inp}, "output": {jout}{parts.g2}', parts.jhead,
              f'{parts.jprog}, "ref_input": {{"x": {inp}}}, "ref_output": {jout}, '
              f'"funcname": "main_solution"{self.gt_end}')
        if not sft:
            return prompt, gt, None
        if parts.answer_head:
            return prompt, gt, ("", parts.answer_head, program + parts.answer_tail)
        if self.gold_of_output is not None:
            return prompt, gt, self.gold_of_output(out)
        return prompt, gt, self.gold(parts.recall, parts.code_head + program, out)

    def answer(self, t: OpsText, program: str, out: str) -> str:
        return self.gold(t.recall, t.code_head + program, out)
