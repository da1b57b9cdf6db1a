"""Parsing: the RA structure, the last defining code block, the last JSON output; exact values."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from opgen.score.parse import MISSING, code_blocks, parse_forward_answer, parse_program_answer, strip_think

RA = """Recall func_3: sort the characters
```python
def func_3(s):
    return ''.join(sorted(s))
```

Recall func_1: repeat the string n times
```python
def func_1(s, n):
    return s * n
```

Assemble:
```python
def func_3(s):
    return ''.join(sorted(s))

def func_1(s, n):
    return s * n

def main_solution(x):
    return func_3(func_1(x, 2))
```
"""


def test_ra_structure():
    a = parse_program_answer(RA)
    assert a.source == "assemble" and a.has_assemble
    assert [(r.op, r.gloss) for r in a.recalls] == [("func_3", "sort the characters"),
                                                    ("func_1", "repeat the string n times")]
    assert a.recalls[1].code == "def func_1(s, n):\n    return s * n\n"
    assert a.code.endswith("return func_3(func_1(x, 2))\n")


def test_think_and_trailing_text_are_tolerated():
    a = parse_program_answer("<think>\n```python\ndef main_solution(x):\n    return 'draft'\n```\n</think>\n"
                             + RA + "\nHope this helps!")
    assert a.source == "assemble" and "draft" not in a.code
    assert strip_think("a</think>b</think>c") == "c"
    assert strip_think("no think") == "no think"


def test_recall_without_block_and_missing_assemble():
    a = parse_program_answer("Recall func_3: sort\n\nRecall func_9: mirror\n```python\ndef func_9(s):\n"
                             "    return s + s[::-1]\n```\n")
    assert [r.code is None for r in a.recalls] == [True, False]
    assert a.code is None and a.source == "none" and not a.has_assemble


def test_last_defining_block_without_ra():
    text = ("```python\ndef main_solution(x):\n    return 1\n```\nbetter:\n```py\ndef main_solution(x):\n"
            "    return 2\n```\n```python\nprint('not a definition')\n```\n")
    a = parse_program_answer(text)
    assert a.source == "last_block" and "return 2" in a.code


def test_group_entries_must_all_be_defined():
    two = "```python\ndef main_solution_1(x):\n    return x\n\ndef main_solution_2(x):\n    return x\n```"
    one = "```python\ndef main_solution_1(x):\n    return x\n```"
    entries = ("main_solution_1", "main_solution_2")
    assert parse_program_answer(two + "\n" + one, entries).code.count("def ") == 2
    assert parse_program_answer(one, entries).code is None


def test_assemble_missing_entry_falls_back_to_last_block():
    text = RA.replace("def main_solution(x)", "def solve(x)") + "\n```python\ndef main_solution(x):\n    return x\n```"
    a = parse_program_answer(text)
    assert a.source == "last_block" and a.has_assemble


def test_forward_last_object_wins_and_nested_are_not_answers():
    assert parse_forward_answer('{"output": "a"} then ```json\n{"output": "b"}\n```') == "b"
    assert parse_forward_answer('{"output": {"output": "inner"}}') == {"output": "inner"}
    assert parse_forward_answer('{"result": "x"}') is MISSING
    assert parse_forward_answer("{broken {\"output\": \"ok\"}") == "ok"
    assert parse_forward_answer("no json here") is MISSING


@given(st.text())
def test_forward_value_round_trips_exactly(value):
    import json

    text = "Sure.\n```json\n" + json.dumps({"output": value}) + "\n```\n"
    assert parse_forward_answer(text) == value


@given(st.text(alphabet=st.characters(blacklist_characters="`"), max_size=80))
def test_code_block_content_is_verbatim(body):
    blocks = code_blocks(f"x\n```python\n{body}\n```\n")
    assert [b.code for b in blocks] == [body + "\n"]
