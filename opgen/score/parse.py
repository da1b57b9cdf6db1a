"""Find the answer in a model's text: a forward prediction's JSON value, or a program and its recall blocks.

Lenient about what surrounds the answer (a ``<think>`` section, prose, text after the block),
never about the answer itself: values are returned exactly as written.
"""

from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass

from opgen import formats
from opgen.ops import STUDY, OperatorLibrary
from opgen.truth import too_deep

# Every scan below over model text is linear in its length: no regex with a backtracking construct
# runs over unbounded model text (the old ``re`` patterns for fences and headers were quadratic on
# runs of blanks: a 999 KB gloss of blanks took minutes, holding the GIL). They are hand-written
# scanners with exactly the old patterns' semantics (tests/test_parse_linear.py holds the old
# patterns as the reference and checks both agree):
#   fence:    ```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```   (re.S)
#   recall:   ^[ \t]*Recall[ \t]+(func_\d+)[ \t]*:[ \t]*(.*?)[ \t]*$   (re.M)
#   assemble: ^[ \t]*Assemble[ \t]*:[ \t]*$   (re.M)
_BLANKS = " \t"
# The header words come from the answer formats' markers (opgen/formats.py), read leniently here.
RECALL_WORD = formats.RECALL_HEADER.split(" ", 1)[0]  # "Recall"
ASSEMBLE_WORD = formats.ASSEMBLE_HEADER.rstrip(":")  # "Assemble"

_CODE_LANGS = ("python", "py", "python3", "")
_DECODER = json.JSONDecoder()


def strip_think(text: str) -> str:
    """The text after the last closed ``</think>`` (the whole text when there is none)."""
    cut = text.rfind("</think>")
    return text[cut + len("</think>"):] if cut >= 0 else text


@dataclass(frozen=True)
class Block:
    lang: str
    code: str
    start: int  # offset of the opening fence
    end: int  # offset just past the closing fence


# A fence's opening line, each run atomic (``(?=(X*))\\N`` is an atomic ``X*`` in any Python's
# ``re``: a lookahead's match is never re-entered). A failed attempt gives nothing back, so it is
# one forward scan that stops at the first character outside its classes, never past the next
# backtick; the attempts of one search together visit each character a bounded number of times.
# The closing fence is found with ``str.find``.
_OPEN = re.compile(r"```(?=([ \t]*))\1(?=([A-Za-z0-9_+-]*))\2(?=([ \t]*))\3\n")
_BLANK_RUN = re.compile(r"[ \t]*")  # one class, nothing after it: a single forward scan


def code_blocks(text: str) -> list[Block]:
    """Every fenced block, as ``re.finditer`` of the fence pattern above would find them."""
    out: list[Block] = []
    pos = 0
    while True:
        m = _OPEN.search(text, pos)
        if m is None:
            return out
        close = text.find("```", m.end())
        if close < 0:
            # No fence closes after this opening, so none opened later could close either.
            return out
        out.append(Block(m.group(2).lower(), text[m.end():close], m.start(), close + 3))
        pos = close + 3


def _recall_header(line: str, any_name: bool = False) -> tuple[str, str] | None:
    s = line.lstrip(_BLANKS)
    if not s.startswith(RECALL_WORD):
        return None
    rest = s[len(RECALL_WORD):]
    t = rest.lstrip(_BLANKS)
    if any_name:  # a user library's ids: any ASCII identifier ([A-Za-z_][A-Za-z0-9_]*)
        if len(t) == len(rest) or not t or not (t[0] == "_" or (t[0].isascii() and t[0].isalpha())):
            return None
        k = 1
        while k < len(t) and (t[k] == "_" or (t[k].isascii() and t[k].isalnum())):
            k += 1
    else:
        if len(t) == len(rest) or not t.startswith("func_"):
            return None
        k = 5
        while k < len(t) and t[k].isdecimal():  # re's \d: any Unicode decimal digit (category Nd)
            k += 1
        if k == 5:
            return None
    after = t[k:].lstrip(_BLANKS)
    if not after.startswith(":"):
        return None
    return t[:k], after[1:].strip(_BLANKS)


def _is_assemble(line: str) -> bool:
    s = line.lstrip(_BLANKS)
    if not s.startswith(ASSEMBLE_WORD):
        return False
    rest = s[len(ASSEMBLE_WORD):].lstrip(_BLANKS)
    return rest.startswith(":") and not rest[1:].strip(_BLANKS)


def _headers(body: str, any_name: bool = False) -> list[tuple[int, int, str, tuple[str, str] | None]]:
    """(line start, line end, kind, (op, gloss)) of every Recall/Assemble header line, in order.

    Lines are those of ``re.M`` (split at ``\\n`` only). Only lines holding one of the two words
    are looked at; the next occurrence of each word is searched for again only once the scan has
    passed it, so every character is visited a bounded number of times."""
    out: list[tuple[int, int, str, tuple[str, str] | None]] = []
    cur, n = 0, len(body)
    nxt = {RECALL_WORD: body.find(RECALL_WORD), ASSEMBLE_WORD: body.find(ASSEMBLE_WORD)}
    while True:
        for word in nxt:
            if 0 <= nxt[word] < cur:
                nxt[word] = body.find(word, cur)
        hits = [k for k in nxt.values() if k >= 0]
        if not hits:
            return out
        k = min(hits)
        start = body.rfind("\n", cur, k) + 1 or cur
        end = body.find("\n", k)
        end = n if end < 0 else end
        line = body[start:end]
        found = _recall_header(line, any_name)
        if found is not None:
            out.append((start, end, "recall", found))
        elif _is_assemble(line):
            out.append((start, end, "assemble", None))
        cur = end + 1


def _blank_end(text: str, pos: int) -> int:
    """Where the run of blanks starting at ``pos`` ends."""
    m = _BLANK_RUN.match(text, pos)
    assert m is not None  # ``[ \t]*`` matches everywhere
    return m.end()


def defines(code: str, name: str) -> bool:
    """Whether a line starts ``def <name>(`` (blanks allowed around the name), as the regex
    ``^def[ \\t]+<name>[ \\t]*\\(`` (re.M) says."""
    pos = code.find("def")
    while pos >= 0:
        if pos == 0 or code[pos - 1] == "\n":
            i = _blank_end(code, pos + 3)
            if i > pos + 3 and code.startswith(name, i):
                j = _blank_end(code, i + len(name))
                if j < len(code) and code[j] == "(":
                    return True
        pos = code.find("def", pos + 3)
    return False


@dataclass(frozen=True)
class Recall:
    op: str  # func_N (a user library: the identifier) as written in the header
    gloss: str  # the header's text after the colon
    code: str | None  # the python block that follows the header (None when there is none)


@dataclass(frozen=True)
class ProgramAnswer:
    code: str | None  # the program to run: the Assemble block, else the last block defining the entries
    recalls: tuple[Recall, ...]  # every Recall block, in order of appearance
    has_assemble: bool  # an ``Assemble:`` header followed by a code block was found
    source: str  # "assemble" | "last_block" | "none": where ``code`` came from


def parse_program_answer(text: str, entries: tuple[str, ...] = ("main_solution",),
                         library: OperatorLibrary = STUDY) -> ProgramAnswer:
    """The RA structure when present, else the last python block that defines every entry point.
    ``library``: the rows' library; the study's recall headers name ``func_N``, another library's
    any identifier."""
    body = strip_think(text)
    blocks = [b for b in code_blocks(body) if b.lang in _CODE_LANGS]
    headers = _headers(body, not library.is_study)
    recalls: list[Recall] = []
    assemble: str | None = None
    starts = [b.start for b in blocks]
    for i, (_pos, header_end, kind, found) in enumerate(headers):
        limit = headers[i + 1][0] if i + 1 < len(headers) else len(body)
        k = bisect.bisect_left(starts, header_end)
        block = blocks[k] if k < len(blocks) and blocks[k].start < limit else None
        if kind == "recall":
            assert found is not None
            recalls.append(Recall(found[0], found[1], block.code if block else None))
        elif block is not None:
            assemble = block.code  # the last Assemble block wins, like the last code block would
    if assemble is not None and all(defines(assemble, e) for e in entries):
        return ProgramAnswer(assemble, tuple(recalls), True, "assemble")
    for block in reversed(blocks):
        if all(defines(block.code, e) for e in entries):
            return ProgramAnswer(block.code, tuple(recalls), assemble is not None, "last_block")
    return ProgramAnswer(None, tuple(recalls), assemble is not None, "none")


_MISSING = object()
_OBJECT_START = re.compile(r'\{\s*"')  # an object whose first key is a string: the only candidates
# Bounds on the work one response can cause: how far back candidates are tried, and how long one
# candidate may be (a failed decode costs time proportional to the text it is given).
MAX_CANDIDATES = 256
MAX_OBJECT_CHARS = 200_000


# Deeper JSON values are the error class ``nesting`` (grade.py): far beyond any answer (outputs
# are strings; native ``ref_output`` values are shallow), and shallow enough that comparing them
# never nears the interpreter's recursion limit.
MAX_JSON_DEPTH = 100


def parse_forward(text: str) -> tuple[object, bool]:
    """``(value, too_deep)``: the ``output`` value of the last JSON object holding an ``output`` key
    (or ``MISSING``), and whether any candidate object nests deeper than ``MAX_JSON_DEPTH`` (or
    deeper than the decoder's recursion limit), which makes the answer the error ``nesting``.

    Objects are searched in ```json blocks and bare in the text alike; the one that ends last wins
    (an object nested inside another is not an answer of its own). Only the last ``MAX_CANDIDATES``
    object openings are tried, each on at most ``MAX_OBJECT_CHARS`` characters.
    """
    body = strip_think(text)
    starts = [m.start() for m in _OBJECT_START.finditer(body)][-MAX_CANDIDATES:]
    best_end, best = -1, _MISSING
    deep = False
    for pos in reversed(starts):
        chunk = body[pos:pos + MAX_OBJECT_CHARS]
        try:
            obj, length = _DECODER.raw_decode(chunk)
        except RecursionError:
            deep = True
            continue
        except ValueError:
            continue
        if too_deep(obj, MAX_JSON_DEPTH):
            deep = True
            continue
        # >= : of two objects ending at the same place, the earlier-starting one encloses the other.
        if isinstance(obj, dict) and "output" in obj and pos + length >= best_end:
            best_end, best = pos + length, obj["output"]
    return best, deep


def parse_forward_answer(text: str) -> object:
    """The ``output`` value of :func:`parse_forward` (``MISSING`` when none, or when too deep)."""
    value, too_deep = parse_forward(text)
    return _MISSING if too_deep else value


MISSING = _MISSING
