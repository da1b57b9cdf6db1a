"""The recall-then-assemble markers live in opgen/formats.py; the parser and validate read them there."""

from __future__ import annotations

from opgen import formats as F
from opgen.score import parse as P


def test_the_parser_reads_the_formats_markers():
    assert F.RECALL_HEADER == P.RECALL_WORD + " {op}:"
    assert F.ASSEMBLE_HEADER == P.ASSEMBLE_WORD + ":"
    assert F.answer_spec("ra").markers == (F.RECALL_HEADER, F.ASSEMBLE_HEADER)


def test_a_gold_ra_answer_parses_back_into_its_parts():
    answer = F.recall_block("func_3") + "\n" + F.ASSEMBLE_HEADER + "\n```python\ndef main_solution(x):\n" \
        "    return func_3(x)\n```"
    parsed = P.parse_program_answer(answer)
    assert [r.op for r in parsed.recalls] == ["func_3"]
    assert parsed.source == "assemble" and parsed.has_assemble
    assert F._RECALL.search(answer) and F._ASSEMBLE.search(answer)
