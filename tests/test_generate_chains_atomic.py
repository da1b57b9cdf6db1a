"""Chains (pure nesting) and atomic tasks."""

from __future__ import annotations

from collections import Counter

import pytest

from opgen import expr as E
from opgen import generate as G
from opgen import ops


def make(name: str, options: dict) -> G.Generator:
    cls = G.get(name)
    ctx = G.Context(digest="d", split="s", seed=0, where="r.yaml: splits.s.options")
    return cls(cls.resolve(options, ctx.where), ctx)


def calls(e: E.Expr) -> list[str]:
    out = []
    while isinstance(e, E.Call):
        out.append(e.op)
        e = e.args[0]
    assert isinstance(e, E.Var)
    return out


def test_chains_nest_to_depth_20_without_repeats_and_under_the_cap():
    gen = make("chains", {"ops": "heldout", "depths": [1, 10, 20], "per_depth": 30})
    for i in range(gen.count()):
        task = gen.item(i).tasks[0]
        chain = calls(task.program)
        assert len(chain) == gen.plan.depth(i)
        assert all(a != b for a, b in zip(chain, chain[1:]))
        assert "func_7" not in chain and set(chain) <= set(ops.HELDOUT_IDS)
        assert len(task.output) <= 1000 and E.evaluate(task.program, task.input) == task.output
        assert E.structure(task.program) == ("atomic" if len(chain) == 1 else "chain")


def test_chains_refuse_an_explicit_binary_operator():
    with pytest.raises(G.GeneratorError, match="func_7"):
        make("chains", {"ops": ["func_7", "func_2"], "depths": [2], "rows": 3})


def test_chains_allow_repeats_when_asked():
    gen = make("chains", {"ops": ["func_2", "func_3"], "depths": [12], "rows": 40, "no_repeat": False})
    assert any(a == b for i in range(40) for a, b in zip(calls(gen.item(i).tasks[0].program),
                                                          calls(gen.item(i).tasks[0].program)[1:]))


def test_atomic_tasks_are_balanced_single_calls_on_x():
    gen = make("atomic", {"ops": "all", "per_op": 8})
    assert gen.count() == 200
    used = Counter()
    for i in range(200):
        task = gen.item(i).tasks[0]
        assert isinstance(task.program, E.Call) and isinstance(task.program.args[0], E.Var)
        assert E.depth(task.program) == 1
        used[task.program.op] += 1
    assert set(used) == set(ops.ALL_IDS) and set(used.values()) == {8}


def test_atomic_interlace_gets_a_literal_second_input():
    gen = make("atomic", {"ops": ["func_7"], "rows": 5})
    prog = gen.item(0).tasks[0].program
    assert isinstance(prog.args[1], E.Lit) and 3 <= len(prog.args[1].value) <= 6


def test_atomic_and_chain_outputs_are_the_evaluators_and_the_cap_rejects():
    for name, options in (("atomic", {"ops": "all", "rows": 300}),
                          ("chains", {"ops": "heldout", "depths": [1, 4, 9], "per_depth": 40}),
                          ("atomic", {"ops": ["func_1", "func_15"], "rows": 200, "max_output_chars": 12}),
                          ("chains", {"ops": ["func_1", "func_15"], "depths": [3], "per_depth": 40,
                                      "max_output_chars": 40, "no_repeat": False})):
        cls = G.get(name)
        gen = cls(cls.resolve(options), G.Context("d", "s", 0))
        for i in range(gen.count()):
            task = gen.item(i).tasks[0]
            assert E.evaluate(task.program, task.input, options.get("max_output_chars", 1000)) == task.output
        if "max_output_chars" in options:
            assert gen.rejections["output_too_long"] > 0


@pytest.mark.parametrize("options", [
    {"ops": "heldout", "depths": [1, 2, 6, 20], "per_depth": 60},
    {"ops": "train", "depths": [2, 8], "per_depth": 80, "no_repeat": False},
    {"ops": ["func_21", "func_2", "func_8"], "depths": [3], "per_depth": 80, "alphabet": "abe"},
])
def test_chains_note_the_measures_unchanged_count_row_by_row(options):
    """The chain generator counts calls that return their argument while it grows the chain, so
    the builder does not evaluate the chain again: the count is ``measure.unchanged_calls``'s."""
    from opgen.generate.measure import task_unchanged_calls, unchanged_calls

    gen = make("chains", options)
    with E.recursion_headroom():
        tasks = [gen.item(i).tasks[0] for i in range(gen.count())]
        truth = [unchanged_calls(t.program, t.input) for t in tasks]
    assert [t.__dict__.get("_unchanged") for t in tasks] == truth
    assert [task_unchanged_calls(t) for t in tasks] == truth
    assert 0 in truth or "alphabet" in options
    assert any(truth)  # calls that change nothing occur (func_21 on lowercase letters, func_2 without vowels)
