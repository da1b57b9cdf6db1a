"""verl's entry point: same keys and types for every sample, policies, threads, loading by file path."""

from __future__ import annotations

import importlib.util
import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from test_grade import ARITY_24, json_answer, ra_answer, truth

import opgen.reward
from opgen.reward import KEYS, compute_score

PROGRAM = truth(("func_24(func_3(x), 2)", "abc"))
GROUP = truth(("func_3(x)", "cab"), ("func_9(x)", "ab"))
FORWARD = truth(("func_3(x)", "cab"), mode="forward")
NATIVE = {"ref_code": "def main_solution(x):\n    return x", "ref_input": {"x": "a"}, "ref_output": "a",
          "funcname": "main_solution"}

SAMPLES = [
    ("opgen/heldout_trees", ra_answer(PROGRAM), PROGRAM, 1.0),
    ("opgen/heldout_trees", ra_answer(PROGRAM, {"func_24": ARITY_24}), PROGRAM, 0.0),
    ("opgen/heldout_trees", "no code at all", PROGRAM, 0.0),
    ("opgen/heldout_trees", "```python\ndef main_solution(x):\n    while True: pass\n```", PROGRAM, 0.0),
    ("opgen/groups", ra_answer(GROUP).replace("return func_9(x)", "return x"), GROUP, 0.5),
    ("opgen/forward", json_answer("abc"), FORWARD, 1.0),
    ("opgen/forward", "", FORWARD, 0.0),
    ("codeio-forward-stage1", json_answer("a"), NATIVE, 1.0),
]


@pytest.mark.slow
def test_same_keys_and_types_for_every_sample():
    outs = [compute_score(ds, text, json.dumps(gt), extra_info={"answer_format": "ra"}) for ds, text, gt, _ in SAMPLES]
    for out, (_, _, _, expected) in zip(outs, SAMPLES):
        assert tuple(out) == KEYS
        assert out["score"] == expected
        assert all(type(v) is float for k, v in out.items() if k != "error") and type(out["error"]) is str
    assert [o["error"] for o in outs] == ["", "arity", "no_answer", "timeout", "wrong_output", "", "no_answer", ""]
    assert outs[1]["recall_arity"] == 1.0 and outs[0]["recall_correct"] == 2.0
    assert outs[5]["structure_ok"] == -1.0 and outs[0]["structure_ok"] == 1.0


def test_policies_as_keyword_arguments():
    same_value = ra_answer(PROGRAM).replace("return func_24(func_3(x), 2)", "return func_24(func_3(x), 3)")
    assert compute_score("d", same_value, PROGRAM)["score"] == 1.0
    assert compute_score("d", same_value, PROGRAM, policy="output_structure")["score"] == 0.0
    half = SAMPLES[4][1]
    assert compute_score("d", half, GROUP)["score"] == 0.5
    assert compute_score("d", half, GROUP, group="all")["score"] == 0.0


@pytest.mark.slow
def test_thread_safe_like_verl_reward_loops():
    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda s: compute_score(s[0], s[1], s[2])["score"], SAMPLES * 4))
    assert outs == [s[3] for s in SAMPLES] * 4


def test_loads_by_file_path_as_verl_does():
    # verl's custom_reward_function.path imports the file as a standalone module.
    spec = importlib.util.spec_from_file_location("custom_module", opgen.reward.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.compute_score("opgen/x", ra_answer(PROGRAM), json.dumps(PROGRAM))["score"] == 1.0


def test_malformed_ground_truth_raises():
    with pytest.raises(ValueError, match="ground_truth"):
        compute_score("d", "x", "{")


@pytest.mark.slow
def test_forked_process_gets_its_own_pool_and_the_parent_keeps_its():
    import os

    assert compute_score("d", ra_answer(PROGRAM), PROGRAM)["score"] == 1.0  # the shared pool exists now
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # a trainer's forked worker
        try:
            os.write(w, str(compute_score("d", ra_answer(PROGRAM), PROGRAM)["score"]).encode())
        finally:
            os._exit(0)
    os.close(w)
    got = os.read(r, 100).decode()
    os.waitpid(pid, 0)
    assert got == "1.0"
    assert compute_score("d", ra_answer(PROGRAM), PROGRAM)["score"] == 1.0
