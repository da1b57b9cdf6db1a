"""Probe generators 1b / 1d / 1f / 1g (opgen.generate.probes): counts, conditions and measures."""

from __future__ import annotations

import json
from collections import Counter

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from opgen.cli import cli

from opgen import expr as E
from opgen import ops
from opgen.formats import Formatter, prepare
from opgen.generate import Context, GeneratorError, registry
from opgen.tasks import Item, Task

WHERE = "probes.yaml: splits.p.options"


def make(name, options=None, digest="d"):
    cls = registry()[name]
    return cls(cls.resolve(options or {}, WHERE), Context(digest=digest, split="p", seed=1, where=WHERE))


def items(gen):
    return [gen.item(i) for i in range(gen.count())]


@pytest.fixture(scope="module")
def built():
    return {name: items(make(name)) for name in ("probe_1b", "probe_1d", "probe_1f", "probe_1g")}


@pytest.mark.parametrize("name, rows, conditions", [
    ("probe_1b", 6912, 27), ("probe_1d", 1792, 7), ("probe_1f", 2048, 8), ("probe_1g", 1280, 5)])
def test_probe_counts_and_256_per_condition(built, name, rows, conditions):
    got = built[name]
    assert len(got) == rows
    per = Counter(it.condition for it in got)
    assert len(per) == conditions
    assert set(per.values()) == {256}


def test_every_probe_task_evaluates_to_its_output(built):
    for name, got in built.items():
        for it in got[::7]:
            for t in it.tasks:
                with E.recursion_headroom():
                    assert E.evaluate(t.program, t.input) == t.output, (name, t.expr_text)
                assert len(t.output) <= 1000


def test_targets_default_to_func24_first_then_other_heldout(built):
    for name, got in built.items():
        targets = Counter(dict(it.meta)["target_op"] for it in got)
        assert set(targets) <= set(ops.HELDOUT_IDS)
        assert targets.most_common(1)[0][0] == "func_24", name
        assert got[0].tasks[-1].ops[0] == "func_24"


def test_measures_come_from_the_expression_tree(built):
    for got in built.values():
        for it in got[::5]:
            meta = dict(it.meta)
            target = meta["target_op"]
            task = it.tasks[-1]
            calls = [n for n in E.walk(task.program) if isinstance(n, E.Call)]
            assert calls[meta["call_position"]].op == target
            tails = {t.position: t for t in E.tail_distances(task.program)}
            tail = tails.get(meta["call_position"])
            assert meta["tail_chars"] == (tail.chars if tail else -1)
            assert meta["tail_calls"] == (tail.call_tails if tail else -1)
            assert meta["method_tails"] == (tail.method_tails if tail else -1)


def test_1b_prefix_is_the_others_recall_blocks_and_the_gold_answer_continues_it(built):
    fmt = Formatter("closed_book", "ra")
    for it in built["probe_1b"][::13]:
        meta = dict(it.meta)
        r = meta["r"]
        others = [t.ops[0] for t in it.tasks[:-1]]
        assert len(others) == r == len(set(others)) and meta["target_op"] not in others
        assert it.condition == f"r{r}-{meta['others_from']}"
        pool = set(ops.resolve_set(meta["others_from"]))
        assert set(others) <= pool
        answer = fmt.answer(it, prepare(it))
        assert answer.startswith(it.assistant_prefix)
        rest = answer[len(it.assistant_prefix):]
        assert rest.startswith(f"Recall {meta['target_op']}: "), rest[:60]
        assert it.assistant_prefix.count("Recall ") == r
        if r == 0:
            assert it.assistant_prefix == "" and len(it.tasks) == 1


def test_1d_target_sits_at_the_named_position(built):
    for it in built["probe_1d"]:
        meta = dict(it.meta)
        task = it.tasks[0]
        calls = [n for n in E.walk(task.program) if isinstance(n, E.Call)]
        d = meta["chain_depth"]
        assert len(calls) == d == task.depth and E.structure(task.program) in ("chain", "atomic")
        assert [c.op for c in calls].count(meta["target_op"]) == 1
        expected = {"outer": 0, "middle": d // 2, "inner": d - 1}[meta["position"]]
        assert calls[expected].op == meta["target_op"]
        others = [c.op for c in calls if c.op != meta["target_op"]]
        assert set(others) <= set(ops.TRAIN_IDS)
        assert all(a != b for a, b in zip([c.op for c in calls], [c.op for c in calls][1:]))


def test_1d_outer_targets_have_the_longest_tails(built):
    by_pos: dict[str, list[int]] = {}
    for it in built["probe_1d"]:
        meta = dict(it.meta)
        if meta["target_op"] == "func_24" and meta["chain_depth"] == 16:
            by_pos.setdefault(meta["position"], []).append(meta["tail_chars"])
    assert min(by_pos["outer"]) > max(by_pos["inner"])


def test_1f_method_tails_count_equals_condition(built):
    for it in built["probe_1f"]:
        meta = dict(it.meta)
        assert it.condition == f"m{meta['m']}"
        assert meta["method_tails"] == meta["m"] and meta["tail_calls"] == 0
        call = it.tasks[0].program
        assert isinstance(call, E.Call) and call.op == meta["target_op"] and call.params


def test_1g_literal_is_the_first_argument(built):
    for it in built["probe_1g"]:
        meta = dict(it.meta)
        call = it.tasks[0].program
        assert isinstance(call.args[0], E.Lit) and len(call.args[0].value) == meta["literal_len"]
        assert it.condition == f"lit{meta['literal_len']}"
        assert meta["tail_chars"] == meta["literal_len"] + 5  # "('" + literal + "', "


def test_probe_items_are_pure_functions_of_the_row():
    a, b = make("probe_1d"), make("probe_1d")
    # row i alone, in any order, by a fresh generator: the same item
    for i in reversed(range(0, 1792, 97)):
        assert b.item(i) == a.item(i)
    assert make("probe_1g", digest="other").item(3) != a.item(3)


def test_probe_options_change_conditions():
    g = make("probe_1b", {"r": [0, 12], "others": ["train"], "targets": ["func_24"], "per_condition": 4})
    got = items(g)
    assert [it.condition for it in got] == ["r0-train"] * 4 + ["r12-train"] * 4
    assert {dict(it.meta)["target_op"] for it in got} == {"func_24"}


@pytest.mark.parametrize("name, options, message", [
    ("probe_1b", {"r": [len(ops.HELDOUT_IDS)], "others": ["heldout"]}, f"only {len(ops.HELDOUT_IDS) - 1} available"),
    ("probe_1d", {"targets": ["func_7"]}, "cannot stand in a chain"),
    ("probe_1d", {"depths": [2]}, "depths"),
    ("probe_1f", {"methods": ["__class__"]}, "methods"),
    ("probe_1g", {"targets": ["func_99"]}, "func_99"),
    ("probe_1g", {"lengths": [900]}, "lengths"),
])
def test_bad_probe_options_name_the_option(name, options, message):
    with pytest.raises(GeneratorError) as exc:
        make(name, options)
    assert WHERE in str(exc.value) and message in str(exc.value)


# ---------------------------------------------------------------- datasets/probes.yaml through `opgen build`

PROBE_ROWS = {"probe_1b": (6912, 27), "probe_1d": (1792, 7), "probe_1f": (2048, 8), "probe_1g": (1280, 5)}


@pytest.fixture(scope="module")
def probes_build(tmp_path_factory):
    out = tmp_path_factory.mktemp("probes")
    result = CliRunner().invoke(cli, ["build", "datasets/probes.yaml", "--out", str(out), "--workers", "2",
                                      "--no-progress"])
    assert result.exit_code == 0, result.output
    return json.loads((out / "manifest.json").read_text()), out


@pytest.mark.slow
def test_built_probe_counts_per_condition_in_the_manifest(probes_build):
    man, out = probes_build
    for split, (rows, conditions) in PROBE_ROWS.items():
        sec = man["splits"][split]
        assert sec["rows"] == rows and sec["role"] == "eval"
        assert len(sec["counts"]["condition"]) == conditions
        assert set(sec["counts"]["condition"].values()) == {256}
        assert pq.read_metadata(out / f"{split}.parquet").num_rows == rows
    assert man["leakage"]["ok"]


@pytest.mark.slow
def test_built_probe_rows_carry_their_measures(probes_build):
    _, out = probes_build
    for split in PROBE_ROWS:
        table = pq.read_table(out / f"{split}.parquet", columns=["reward_model", "extra_info"])
        extra = table.column("extra_info").to_pylist()
        gts = [json.loads(r["ground_truth"]) for r in table.column("reward_model").to_pylist()]
        for x, gt in zip(extra[::11], gts[::11]):
            assert x["condition"] and x["target_op"] in ops.HELDOUT_IDS
            target = gt["tasks"][-1]
            assert x["target_op"] in target["ops"]
            program = E.parse(target["expr"])
            calls = [n for n in E.walk(program) if isinstance(n, E.Call)]
            pos = next(i for i, c in enumerate(calls) if c.op == x["target_op"])
            tail = {t.position: t for t in E.tail_distances(program)}.get(pos)
            assert x["tail_chars"] == (tail.chars if tail else -1)
            assert x["tail_calls"] == (tail.call_tails if tail else -1)
            if split == "probe_1b":
                r = int(x["condition"].split("-")[0][1:])
                assert x["assistant_prefix"].count("Recall ") == r == len(gt["tasks"]) - 1
                assert x["n_tasks"] == r + 1
                if r:
                    assert [t["entry"] for t in gt["tasks"]] == [f"main_solution_{k}" for k in range(1, r + 2)]
            else:
                assert x["assistant_prefix"] == "" and x["n_tasks"] == 1


@pytest.mark.slow
def test_a_gold_answer_continuing_the_1b_prefix_grades_correct_task_by_task(probes_build):
    from opgen.score import grade

    _, out = probes_build
    table = pq.read_table(out / "probe_1b.parquet", columns=["reward_model", "extra_info"])
    fmt = Formatter("closed_book", "ra")
    rows = table.to_pylist()
    for i in (0, 2000, 6911):
        row = rows[i]
        gt = json.loads(row["reward_model"]["ground_truth"])
        prefix = row["extra_info"]["assistant_prefix"]
        # the gold answer for the row's tasks, rebuilt from the ground truth
        tasks = tuple(Task(E.parse(t["expr"]), t["input"], t["output"]) for t in gt["tasks"])
        gold = fmt.answer(Item(tasks, assistant_prefix=prefix), prepare(Item(tasks)))
        assert gold.startswith(prefix)
        result = grade(gt, gold)
        assert result["score"] == 1.0, result
        # a continuation that drops func_24's parameter fails the target's task only
        if row["extra_info"]["target_op"] == "func_24":
            broken = gold.replace("def func_24(s, depth):", "def func_24(s):")
            assert grade(gt, broken)["score"] < 1.0
