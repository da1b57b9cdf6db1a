"""The response parser is linear-time on every input and returns exactly what the old regex parser did.

The old parser (quadratic on runs of blanks: a 40,000-blank gloss took 7.7 s, holding the GIL) is
kept here, only as the reference for the property test.
"""

from __future__ import annotations

import bisect
import re

import pytest
from hang_guard import ends
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opgen.score import parse as P

# ------------------------------------------------------------ the old parser, verbatim (reference only)

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.S)
_RECALL = re.compile(r"^[ \t]*Recall[ \t]+(func_\d+)[ \t]*:[ \t]*(.*?)[ \t]*$", re.M)
_ASSEMBLE = re.compile(r"^[ \t]*Assemble[ \t]*:[ \t]*$", re.M)


def old_code_blocks(text):
    return [P.Block(m.group(1).lower(), m.group(2), m.start(), m.end()) for m in _FENCE.finditer(text)]


def old_defines(code, name):
    return re.search(rf"^def[ \t]+{re.escape(name)}[ \t]*\(", code, re.M) is not None


def old_parse_program_answer(text, entries=("main_solution",)):
    body = P.strip_think(text)
    blocks = [b for b in old_code_blocks(body) if b.lang in P._CODE_LANGS]
    headers = [(m.start(), "recall", m) for m in _RECALL.finditer(body)]
    headers += [(m.start(), "assemble", m) for m in _ASSEMBLE.finditer(body)]
    headers.sort(key=lambda h: h[0])
    recalls = []
    assemble = None
    starts = [b.start for b in blocks]
    for i, (_pos, kind, match) in enumerate(headers):
        limit = headers[i + 1][0] if i + 1 < len(headers) else len(body)
        k = bisect.bisect_left(starts, match.end())
        block = blocks[k] if k < len(blocks) and blocks[k].start < limit else None
        if kind == "recall":
            recalls.append(P.Recall(match.group(1), match.group(2), block.code if block else None))
        elif block is not None:
            assemble = block.code
    if assemble is not None and all(old_defines(assemble, e) for e in entries):
        return P.ProgramAnswer(assemble, tuple(recalls), True, "assemble")
    for block in reversed(blocks):
        if all(old_defines(block.code, e) for e in entries):
            return P.ProgramAnswer(block.code, tuple(recalls), assemble is not None, "last_block")
    return P.ProgramAnswer(None, tuple(recalls), assemble is not None, "none")


# ------------------------------------------------------------ same answers on ordinary (and odd) inputs

# Pieces responses are made of, the separators and look-alikes the patterns care about included.
PIECES = ["```", "```python", "```py", "```json", "``` python ", "```Python3", "````", "`", "\n", "\n\n", " ", "\t",
          "\r", "\r\n", "\f", "\u2028", "\x0b", "Recall", "Recall ", "Recall\t", "func_3", "func_12", "func_\u0663",
          "func_", ":", " : ", "Assemble", "Assemble:", "Assemble :", "def ", "def\t", "main_solution", "(x)", "(",
          "x", "sort it", "return x", "    ", "<think>", "</think>", "# c", "py thon", "+-", "é"]
STRUCTURED = st.lists(st.sampled_from(PIECES), max_size=60).map("".join)
TEXTS = st.one_of(STRUCTURED, st.text(alphabet=st.sampled_from(list(" \t\n`:Recal func_12def(x)Asmb")), max_size=80))


@pytest.mark.slow
@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TEXTS)
def test_new_parser_matches_the_old_one(text):
    assert P.code_blocks(text) == old_code_blocks(text)
    for name in ("main_solution", "func_3"):
        assert P.defines(text, name) == old_defines(text, name)
    for entries in (("main_solution",), ("main_solution_1", "main_solution_2")):
        assert P.parse_program_answer(text, entries) == old_parse_program_answer(text, entries)


def test_new_parser_matches_the_old_one_on_gold_answers():
    from test_grade import ra_answer, truth

    for gt in (truth(("func_5(func_3(x), 'ab')", "hello")), truth(("func_1(x, 2)", "a"), ("func_9(x)", "b"))):
        entries = tuple(t["entry"] for t in gt["tasks"])
        text = ra_answer(gt, think="<think>\n```python\ndef main_solution(x):\n    return 1\n```\n</think>\n")
        assert P.parse_program_answer(text, entries) == old_parse_program_answer(text, entries)
        assert P.parse_program_answer(text, entries).source == "assemble"


# ------------------------------------------------------------ linear time on 1 MB adversarial inputs

MB = 1_000_000
ADVERSARIAL = {
    "blank_gloss": "Recall func_3:" + " " * MB + "x",
    "blank_gloss_tabs": "Recall func_3:" + " \t" * (MB // 2) + "x\n```python\ndef func_3(s):\n  return s\n```",
    "blanks_after_recall": "Recall" + " " * MB,
    "blanks_before_colon": "Recall func_3" + "\t" * MB + "x",
    "fence_then_blanks": "```" + " " * MB + "x",
    "fence_blanks_tabs": "```" + " \t" * (MB // 2) + "python" + " " * 10 + "x",
    "many_backticks": "`" * MB,
    "many_fences_one_line": "``` " * (MB // 4),
    "open_fences": "```python\n" * (MB // 10),
    "nested_fences": ("```python\n" + "````\n" * 5) * (MB // 35),
    "many_recall_prefixes": "Recall " * (MB // 7),
    "many_recall_lines": "Recall func_3: x\n" * (MB // 17),
    "recall_digits": "Recall func_" + "1" * MB,
    "assemble_blanks": "Assemble" + " " * MB + ":" + " " * MB,
    "def_blanks": "```python\ndef" + " " * MB + "main_solution\n```",
    "newlines": "\n" * MB,
    "blank_lines": " \t\n" * (MB // 3),
    "think_prefix": "<think>" * (MB // 7),
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_adversarial_megabytes_parse(name):
    # The old regexes took minutes on several; how long the linear scans take:
    # benchmarks/bench_bounds.py. Here: it ends, with an answer of the parser's shape.
    parsed = ends(P.parse_program_answer, ADVERSARIAL[name], ("main_solution_1", "main_solution_2"))
    assert isinstance(parsed, P.ProgramAnswer), name
