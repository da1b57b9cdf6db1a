"""Prompt and answer formats, and the ground truth, exactly as docs/contracts.md fixes them."""

from __future__ import annotations

import json

import pytest

from opgen import expr as E
from opgen import formats as F
from opgen import generate as G
from opgen import ops
from opgen.rows import RowBuffer, RowRecord, RowSpec, structure_of
from opgen.tasks import Item, Task
from opgen.validate import check_answer


def task(src: str, x: str) -> Task:
    prog = E.parse(src)
    return Task(prog, x, E.evaluate(prog, x))


def run_ref_code(code: str, entry: str, x: str) -> str:
    namespace: dict = {}
    exec(compile(code, "<ref_code>", "exec"), namespace)  # our own rendered sources, not model code
    return namespace[entry](x)


def test_ra_answer_is_exactly_the_contract():
    item = Item((task("func_3(func_1(x, 2))", "abc"),))
    p = F.prepare(item)
    s3, s1 = ops.get("func_3").source, ops.get("func_1").source
    expected = (
        f"Recall func_3: sort the characters\n```python\n{s3}```\n\n"
        f"Recall func_1: repeat the string n times\n```python\n{s1}```\n\n"
        f"Assemble:\n```python\n{s3}\n{s1}\ndef main_solution(x):\n    return func_3(func_1(x, 2))\n```"
    )
    assert F.Formatter("closed_book", "ra").answer(item, p) == expected


def test_ground_truth_is_the_json_of_the_contract():
    item = Item((task("func_15(func_3(x))", "bca"),))
    gt_text = F.Formatter("closed_book", "ra").ground_truth(item, F.prepare(item))
    gt = json.loads(gt_text)
    ref_code = ops.get("func_15").source + "\n" + ops.get("func_3").source + \
        "\ndef main_solution(x):\n    return func_15(func_3(x))\n"
    assert gt == {
        "mode": "program",
        "tasks": [{"entry": "main_solution", "expr": "func_15(func_3(x))", "input": "bca", "output": "«a»«b»«c»",
                   "ops": ["func_15", "func_3"], "depth": 2}],
        "ops": ["func_3", "func_15"],
        "ref_code": ref_code, "ref_input": {"x": "bca"}, "ref_output": "«a»«b»«c»", "funcname": "main_solution",
    }
    assert gt_text == json.dumps(gt, ensure_ascii=False)
    assert run_ref_code(gt["ref_code"], "main_solution", "bca") == "«a»«b»«c»"


def test_group_items_have_numbered_entries_one_recall_per_operator_and_per_task_ground_truth():
    item = Item((task("func_3(x)", "cab"), task("func_9(func_3(x))", "zy"), task("func_6(x, 'ab')", "q")))
    p = F.prepare(item)
    fmt = F.Formatter("closed_book", "ra")
    answer = fmt.answer(item, p)
    assert [line for line in answer.splitlines() if line.startswith("Recall ")] == [
        "Recall func_3: sort the characters", "Recall func_9: append the reversed string",
        "Recall func_6: add a fixed suffix"]
    assemble = answer.split("Assemble:\n```python\n")[1].removesuffix("\n```")
    for n, t in enumerate(item.tasks, 1):
        assert E.parse_program(assemble, f"main_solution_{n}") == t.program
    gt = json.loads(fmt.ground_truth(item, p))
    assert "ref_code" not in gt and [t["entry"] for t in gt["tasks"]] == ["main_solution_1", "main_solution_2",
                                                                            "main_solution_3"]
    for t, want in zip(gt["tasks"], item.tasks):
        assert run_ref_code(t["ref_code"], t["funcname"], t["ref_input"]["x"]) == want.output == t["ref_output"]
    prompt = fmt.prompt(item, p)
    assert "main_solution_1('cab'), main_solution_2('zy') and main_solution_3('q')" in prompt
    assert check_answer(answer, "ra", gt) == ""


def test_assistant_prefix_starts_the_gold_answer():
    prefix = F.recall_block("func_2") + "\n"
    item = Item((task("func_24(x, 2)", "ab"),), assistant_prefix=prefix)
    answer = F.Formatter("closed_book", "ra").answer(item, F.prepare(item))
    assert answer.startswith(prefix) and "Recall func_24:" in answer


@pytest.mark.parametrize("pf, af", [("shown", "ra"), ("closed_book", "prose_code"), ("forward", "json_output"),
                                    ("shown", "prose_code")])
def test_every_format_pair_renders_rows_whose_gold_answer_reparses(pf, af):
    item = Item((task("(func_7(x, 'ab')).upper()", "xyz"),))
    p = F.prepare(item)
    fmt = F.Formatter(pf, af)
    prompt = fmt.prompt(item, p)
    gt = json.loads(fmt.ground_truth(item, p))
    assert ("def func_7" in prompt) == (pf != "closed_book")
    assert "'xyz'" in prompt and gt["mode"] == ("forward" if pf == "forward" else "program")
    assert check_answer(fmt.answer(item, p), af, gt) == ""


def test_incompatible_pairs_are_refused():
    with pytest.raises(F.FormatError, match="does not go with"):
        F.Formatter("forward", "ra")


def test_one_pass_scan_equals_render_depth_and_ops_used():
    cls = G.get("trees")
    ctx = G.Context("d", "s", 0)
    gen = cls(cls.resolve({"ops": "all", "depths": [1, 2, 4, 8], "per_depth": 60, "p_method": 0.2}), ctx)
    for i in range(gen.count()):
        prog = gen.item(i).tasks[0].program
        seen: dict = {}
        text, depth = F.scan(prog, seen)
        assert (text, depth, tuple(seen)) == (E.render(prog), E.depth(prog), E.ops_used(prog))
        assert structure_of(prog) == E.structure(prog)


def test_sft_rows_carry_messages_and_flat_strings():
    buf = RowBuffer(RowSpec("s", "fam", "sft", "closed_book", "ra", "r"))
    item = Item((task("func_3(x)", "cab"),))
    buf.add(0, item)
    row = buf.table().to_pylist()[0]
    assert row["messages"] == [{"role": "user", "content": row["prompt_text"]},
                               {"role": "assistant", "content": row["response"]}]
    assert row["prompt"] == [{"role": "user", "content": row["prompt_text"]}]
    assert row["data_source"] == "opgen/fam" and row["ability"] == "code"
    assert row["extra_info"]["structure"] == "atomic" and row["extra_info"]["ops"] == ["func_3"]


@pytest.mark.parametrize("pf,af", [(pf, af) for pf, afs in F.COMPATIBLE.items() for af in afs])
def test_single_task_fast_path_writes_the_same_row_as_the_generic_renderer(pf, af):
    cls = G.get("trees")
    gen = cls(cls.resolve({"ops": "all", "depths": [1, 2, 3, 5], "per_depth": 25, "p_method": 0.2,
                           "p_binary": 0.4}), G.Context("d", "s", 0))
    items = [gen.item(i) for i in range(gen.count())]
    items += [Item((task("('ab' + 'cd').upper()", "q"),)), Item((task("x", "it's \"q\"\n"),)),
              Item((task("func_3(x)", "abc"),), condition="c1"),
              Item((task("func_3(x)", "abd"),), meta=(("target_op", "func_3"), ("tail_calls", 2)))]
    for kind in ("rl", "sft"):
        for unique in ("task", "program", "none"):
            fast = RowBuffer(RowSpec("s", "f", kind, pf, af, "r", unique))
            slow = RowBuffer(RowSpec("s", "f", kind, pf, af, "r", unique))
            for i, item in enumerate(items):
                assert fast.add(i, item) == slow._add_general(i, item)
                assert _texts_joined(fast.rows[-1]) == slow.rows[-1]
                assert type(slow.rows[-1]) is RowRecord and len(fast.rows[-1]) == len(RowRecord._fields)
                assert RowRecord._make(_texts_joined(fast.rows[-1]))._asdict() == slow.rows[-1]._asdict()
            assert fast.table().equals(slow.table())


def _texts_joined(row: tuple) -> tuple:
    """A buffered row with its prompt, ground truth and answer as whole strings (the fast path
    keeps long texts as pieces until a column is written)."""
    return tuple(F.text(v) if k < 3 and v is not None else v for k, v in enumerate(row))


def test_the_recipe_schema_lists_exactly_the_registered_formats():
    from opgen.resources import schema_path

    props = json.loads(schema_path("recipe.schema.json").read_text())
    found = {}

    def walk(node):
        if isinstance(node, dict):
            for key in ("prompt_format", "answer_format"):
                if isinstance(node.get(key), dict) and "enum" in node[key]:
                    found.setdefault(key, []).append(node[key]["enum"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(props)
    assert found["prompt_format"] and all(e == list(F.PROMPT_FORMATS) for e in found["prompt_format"])
    assert found["answer_format"] and all(e == list(F.ANSWER_FORMATS) for e in found["answer_format"])
