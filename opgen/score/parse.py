"""Find the answer in a model's text: a forward prediction's JSON value, or a program and its recall blocks.

Lenient about what surrounds the answer (a ``<think>`` section, prose, text after the block),
never about the answer itself: values are returned exactly as written.
"""

from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.S)
_RECALL = re.compile(r"^[ \t]*Recall[ \t]+(func_\d+)[ \t]*:[ \t]*(.*?)[ \t]*$", re.M)
_ASSEMBLE = re.compile(r"^[ \t]*Assemble[ \t]*:[ \t]*$", re.M)
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


def code_blocks(text: str) -> list[Block]:
    return [Block(m.group(1).lower(), m.group(2), m.start(), m.end()) for m in _FENCE.finditer(text)]


def defines(code: str, name: str) -> bool:
    return re.search(rf"^def[ \t]+{re.escape(name)}[ \t]*\(", code, re.M) is not None


@dataclass(frozen=True)
class Recall:
    op: str  # func_N as written in the header
    gloss: str  # the header's text after the colon
    code: str | None  # the python block that follows the header (None when there is none)


@dataclass(frozen=True)
class ProgramAnswer:
    code: str | None  # the program to run: the Assemble block, else the last block defining the entries
    recalls: tuple[Recall, ...]  # every Recall block, in order of appearance
    has_assemble: bool  # an ``Assemble:`` header followed by a code block was found
    source: str  # "assemble" | "last_block" | "none": where ``code`` came from


def parse_program_answer(text: str, entries: tuple[str, ...] = ("main_solution",)) -> ProgramAnswer:
    """The RA structure when present, else the last python block that defines every entry point."""
    body = strip_think(text)
    blocks = [b for b in code_blocks(body) if b.lang in _CODE_LANGS]
    headers = [(m.start(), "recall", m) for m in _RECALL.finditer(body)]
    headers += [(m.start(), "assemble", m) for m in _ASSEMBLE.finditer(body)]
    headers.sort(key=lambda h: h[0])
    recalls: list[Recall] = []
    assemble: str | None = None
    starts = [b.start for b in blocks]
    for i, (_pos, kind, match) in enumerate(headers):
        limit = headers[i + 1][0] if i + 1 < len(headers) else len(body)
        k = bisect.bisect_left(starts, match.end())
        block = blocks[k] if k < len(blocks) and blocks[k].start < limit else None
        if kind == "recall":
            recalls.append(Recall(match.group(1), match.group(2), block.code if block else None))
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


def parse_forward_answer(text: str) -> object:
    """The ``output`` value of the last JSON object holding an ``output`` key, or ``MISSING``.

    Objects are searched in ```json blocks and bare in the text alike; the one that ends last wins
    (an object nested inside another is not an answer of its own). Only the last ``MAX_CANDIDATES``
    object openings are tried, each on at most ``MAX_OBJECT_CHARS`` characters.
    """
    body = strip_think(text)
    starts = [m.start() for m in _OBJECT_START.finditer(body)][-MAX_CANDIDATES:]
    best_end, best = -1, _MISSING
    for pos in reversed(starts):
        chunk = body[pos:pos + MAX_OBJECT_CHARS]
        try:
            obj, length = _DECODER.raw_decode(chunk)
        except (ValueError, RecursionError):
            continue
        # >= : of two objects ending at the same place, the earlier-starting one encloses the other.
        if isinstance(obj, dict) and "output" in obj and pos + length >= best_end:
            best_end, best = pos + length, obj["output"]
    return best


MISSING = _MISSING
