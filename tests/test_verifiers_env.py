"""The verifiers environment (opgen.integrations.verifiers) gives `opgen score`'s grades.

The light tests call the rubric function on verifiers' documented call (``task``: the task's
data; ``trace``: with ``assistant_messages``, ``info``) without verifiers installed. The ``trl``
tests (scripts/setup-trl.sh installs verifiers 0.4) build the real environment through verifiers'
own loader (``verifiers.v1.load_environment`` of the taskset id ``opgen-verifiers``) on real opgen
rows, and run each task's own ``score`` (the rubric: ``@vf.reward`` / ``@vf.metric``) on a real
``vf.Trace`` holding the gold answer and a wrong one.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

import opgen
from opgen.integrations import common
from opgen.integrations import verifiers as ovf


def _trace(text: str):
    return SimpleNamespace(assistant_messages=[SimpleNamespace(role="assistant", content=text)], info={})


def test_rubric_function_on_the_documented_call_equals_opgen_score(graded):
    rows, responses, scores, _ = graded
    got = []
    for i, (row, text) in enumerate(zip(rows, responses)):
        task = SimpleNamespace(**ovf.task_fields(row, i))
        trace = _trace(text)
        g = ovf.grade_trace(task=task, trace=trace)
        assert trace.info["opgen_grade"] == g and ovf.grade_trace(task, trace) == g  # graded once, cached
        got.append(g["score"])
    assert got == scores
    assert 1.0 in got and 0.0 in got
    # content parts, as an AssistantMessage may carry them; no reply at all grades as an empty answer
    parts = SimpleNamespace(assistant_messages=[{"content": [{"type": "text", "text": responses[0]}]}], info=None)
    assert ovf.grade_trace(SimpleNamespace(**ovf.task_fields(rows[0])), parts)["score"] == scores[0]
    empty = ovf.grade_trace(SimpleNamespace(**ovf.task_fields(rows[0])), SimpleNamespace(assistant_messages=[]))
    assert empty["score"] == opgen.score_answer(rows[0], "")["score"]


def test_gold_check_passes_gold_rows_and_skips_native_ones(graded):
    rows, _, _, _ = graded
    assert all(ovf.gold_scores_1(SimpleNamespace(**ovf.task_fields(r))) for r in rows)
    native = SimpleNamespace(ground_truth=json.dumps({"ref_output": "1"}), extra_info={}, data_source="")
    assert ovf.gold_scores_1(native) is None


def test_task_fields_and_bad_rows_name_the_row(graded):
    rows, _, _, _ = graded
    f = ovf.task_fields(rows[0])
    assert f["prompt"] == rows[0]["prompt"] and f["ground_truth"] == rows[0]["reward_model"]["ground_truth"]
    assert f["id"] == str(rows[0]["extra_info"]["row_id"])
    with pytest.raises(common.AdapterError, match="row 3: no ground truth"):
        ovf.task_fields({"prompt": [{"role": "user", "content": "q"}]}, 3)
    with pytest.raises(common.AdapterError, match="row 0: prompt"):
        ovf.task_fields({**rows[0], "prompt": []})
    with pytest.raises(common.AdapterError, match="no ground_truth"):
        ovf.grade_trace(SimpleNamespace(), _trace("x"))


def _vf():
    import tiny_model as tm

    return tm.require("verifiers.v1")


@pytest.mark.trl
def test_verifiers_loads_the_environment_by_its_id_and_its_rubric_gives_opgen_grades(graded):
    import asyncio

    vf = _vf()
    rows, responses, scores, _ = graded
    # verifiers' own loader, as vf-eval resolves `opgen-verifiers`; the taskset builds the rows itself
    config = vf.resolve_env_config({"taskset": {"id": "opgen-verifiers", "recipe": "rl-r1", "split": "train",
                                                "size": 2, "seed": 0}})
    env = vf.load_environment(config)
    assert isinstance(env, vf.SingleAgentEnv) and type(env.taskset).__name__ == "OpgenTaskset"
    assert type(env._harnesses["agent"]).__name__ == "OpgenHarness"  # the single-turn chat program
    built = [t.data.ground_truth for t in env.taskset]
    assert built == [r["reward_model"]["ground_truth"] for r in opgen.create_dataset("rl-r1", "train", size=2,
                                                                                     seed=0).to_pylist()]

    env = ovf.load_environment(rows=rows)
    tasks = list(env.taskset)
    assert len(tasks) == len(rows)

    def score(task, text):
        trace = vf.Trace(task=vf.TraceTask(type=type(task).__name__, data=task.data),
                         agent=vf.AgentInfo(config=vf.AgentConfig()),
                         nodes=[vf.MessageNode(message=vf.UserMessage(content="q")),
                                vf.MessageNode(parent=0, sampled=True, message=vf.AssistantMessage(content=text))])
        asyncio.run(task.score(trace))
        return trace.rewards["opgen_score"].value, trace.metrics["opgen_acc"], trace.reward

    got = [score(t, x) for t, x in zip(tasks, responses)]
    assert [g[0] for g in got] == scores == [g[2] for g in got]
    assert [g[1] for g in got] == [float(s == 1.0) for s in scores]
    gold = [opgen.gold_answer(r) for r in rows]
    assert [score(t, g)[0] for t, g in zip(tasks, gold)] == [1.0] * len(rows)
    assert [score(t, "def main_solution(x):\n    return None")[0] for t in tasks[:3]] == [0.0] * 3
    # vf-validate's gold check (Task.validate): every row's gold answer scores 1.0
    assert [asyncio.run(t.validate(None)) for t in tasks] == [True] * len(rows)
    # scorer settings reach the grade
    strict = ovf.load_environment(rows=rows[:3], policy="output_structure")
    want = [opgen.score_answer(r, x, policy="output_structure")["score"] for r, x in zip(rows[:3], responses[:3])]
    assert [score(t, x)[0] for t, x in zip(strict.taskset, responses[:3])] == want
    with pytest.raises(TypeError, match="unknown arguments"):
        ovf.load_environment(rows=rows, polcy="x")


@pytest.mark.trl
@pytest.mark.slow
def test_vf_eval_plays_the_multi_turn_environment_with_a_model_wrong_then_right(tmp_path):
    """`vf-eval opgen-verifiers --env.id opgen-episodes` against a scripted OpenAI-compatible model
    (tests/fake_openai.py, streaming as verifiers asks): wrong on turn 1, the gold answer once it has
    seen the feedback. The trace's reward is the episode's: 0.5 (right at turn 2, discount 0.5)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from fake_openai import FakeServer

    _vf()
    rows = opgen.create_dataset("rl-r1", "train", size=2).to_pylist()  # the taskset's rows (its seed)
    gold = {r["prompt"][-1]["content"]: opgen.gold_answer(r) for r in rows}
    wrong = "```python\ndef main_solution(x):\n    return x + 'q'\n```"

    def reply(body, j):
        users = [m["content"] for m in body["messages"] if m["role"] == "user"]
        return wrong if len(users) == 1 else gold.get(users[0], "no idea")

    with FakeServer() as fake:
        fake.reply = reply
        cmd = [str(Path(sys.executable).with_name("vf-eval")), "opgen-verifiers", "--env.id", "opgen-episodes",
               "--env.taskset.recipe", "rl-r1", "--env.taskset.split", "train", "--env.taskset.size", "2",
               "--env.agent.runtime.type", "subprocess", "--client.base-url", fake.url,
               "--client.api-key-var", "FAKE_KEY", "--model", fake.model, "--no-push", "--output-dir", str(tmp_path)]
        got = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path,
                             env={**os.environ, "FAKE_KEY": "x"})
        assert got.returncode == 0, got.stdout + got.stderr
        calls = [len(b["messages"]) for b in fake.bodies]
    (traces,) = tmp_path.glob("*/traces.jsonl")
    played = [json.loads(line)["traces"][0] for line in traces.read_text().splitlines()]
    assert len(played) == 2 and sorted(calls) == [1, 1, 3, 3]  # two turns each: the feedback came between
    for trace in played:
        assert trace["rewards"]["opgen_score"]["score"] == 0.5 and trace["metrics"]["opgen_acc"] == 1.0
        assert trace["info"]["opgen_episode"]["scores"] == [0.0, 1.0]
