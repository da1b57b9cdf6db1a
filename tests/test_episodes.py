"""Multi-turn episodes with execution feedback (opgen.episode): the documented reward, feedback that
never holds an expected output, hostile programs graded in every turn as single-turn scoring grades
them, and the same episode over HTTP (/episodes) and OpenEnv's WebSocket exchange (/openenv/ws)."""

from __future__ import annotations

import asyncio
import json

import pytest

import opgen
from opgen.episode import Episode, EpisodeError, EpisodeSettings, expected_outputs, feedback_text, reward_of

WRONG = "```python\ndef main_solution(x):\n    return x + 'q'\n```"
RAISES = "```python\ndef main_solution(x):\n    raise ValueError('boom')\n```"


@pytest.fixture(scope="module")
def rows():
    from integration_fixtures import RECIPE

    return opgen.create_dataset(RECIPE, "train", size=4, seed=1).to_pylist()


def test_wrong_then_right_gets_the_documented_reward(rows):
    row = rows[0]
    ep = Episode(row)
    first = ep.step(WRONG)
    assert first["done"] is False and first["reward"] == 0.0 and first["score"] == 0.0
    assert "returned 'jafq'" in first["feedback"] or "returned '" in first["feedback"]
    assert ep.messages[-1] == {"role": "user", "content": first["feedback"]}
    second = ep.step(opgen.gold_answer(row))
    assert second["done"] and second["reward"] == reward_of(2, 1.0, EpisodeSettings()) == 0.5
    with pytest.raises(EpisodeError, match="over"):
        ep.step("x")
    # never right in max_turns: 0; right at once: 1
    never = Episode(row, EpisodeSettings(max_turns=2))
    assert [never.step(WRONG)["reward"], never.step(WRONG)["reward"]] == [0.0, 0.0] and never.done
    assert Episode(row).step(opgen.gold_answer(row))["reward"] == 1.0
    assert reward_of(3, 1.0, EpisodeSettings(discount=0.9)) == pytest.approx(0.81)


def test_feedback_never_holds_an_expected_output_unless_configured(rows):
    for row in rows:
        gt = row["reward_model"]["ground_truth"]
        expected = expected_outputs(gt)
        gold = opgen.gold_answer(row)
        # programs that return the expected output inside a wrong one, raise it, or print it
        hostile = [
            f"```python\ndef main_solution(x):\n    return {expected[0]!r} + 'q'\n```",
            f"```python\ndef main_solution(x):\n    raise ValueError({expected[0]!r})\n```",
            WRONG, RAISES, "no code at all", gold.replace("main_solution", "other_name"),
        ]
        for text in hostile:
            for mode in ("none", "exception", "returned"):
                ep = Episode(row, EpisodeSettings(feedback=mode, max_turns=2))
                out = ep.step(text)
                if out["done"]:
                    continue
                shown = out["feedback"].replace(str(row["reward_model"]["ground_truth"]), "")
                assert all(e not in shown for e in expected if len(e) >= 3), (mode, text, shown)
        told = Episode(row, EpisodeSettings(show_expected=True)).step(WRONG)["feedback"]
        assert all(e in told for e in expected)


def test_feedback_modes_say_what_happened(rows):
    row = rows[1]
    grade = opgen.score_answer(row, RAISES)
    assert all("returned" not in t for t in grade["tasks"])  # single-turn grades are as they were
    from opgen.score.judge import grade_from_wire, grade_to_wire

    told = {**grade, "tasks": [{**t, "returned": "zz"} for t in grade["tasks"]]}
    assert grade_from_wire(grade_to_wire(told)) == told  # a grading process sends what each program returned
    gt = row["reward_model"]["ground_truth"]
    assert "ValueError: boom" in feedback_text({**grade, "tasks": [{**t, "returned": None} for t in grade["tasks"]]},
                                               gt, EpisodeSettings(feedback="exception"))
    assert feedback_text(grade, gt, EpisodeSettings(feedback="none")) == "Your answer is not correct."
    ep = Episode(row, EpisodeSettings(feedback="exception"))
    assert "did not return the expected output" in ep.step(WRONG)["feedback"]
    cut = Episode(row, EpisodeSettings(feedback_chars=16)).step(
        "```python\ndef main_solution(x):\n    return 'z' * 5000\n```")["feedback"]
    assert "more characters" in cut and len(cut) < 400


def test_a_hostile_program_in_any_turn_is_graded_as_single_turn_scoring_grades_it(rows):
    from pathlib import Path

    hostile = sorted(Path(__file__).with_name("hostile").glob("*.py"))[:6]
    assert hostile
    row = rows[2]
    for path in hostile:
        code = path.read_text()
        text = f"```python\n{code}\n```"
        single = opgen.score_answer(row, text)
        for turn in (1, 2):
            ep = Episode(row, EpisodeSettings(max_turns=3))
            if turn == 2:
                ep.step(WRONG)
            out = ep.step(text)
            assert out["score"] == single["score"] and out["error"] == single["error"], path.name


def test_bad_settings_and_rows_name_the_field():
    for raw, message in (({"max_turns": 0}, "settings.max_turns"), ({"discount": 2}, "settings.discount"),
                         ({"feedback": "all"}, "settings.feedback"), ({"turns": 3}, "unknown keys turns"),
                         ({"show_expected": "yes"}, "show_expected")):
        with pytest.raises(EpisodeError, match=message):
            EpisodeSettings.of(raw)
    with pytest.raises(EpisodeError, match="row.prompt"):
        Episode({"prompt": []})


# ---------------------------------------------------------------- over HTTP and OpenEnv's exchange


@pytest.fixture(scope="module")
def server():
    from test_serve import start_server as _start

    proc, url = _start(["--max-tasks", "32"])
    yield url
    proc.terminate()
    proc.wait(timeout=30)


def test_an_episode_over_http(server, rows):
    from integration_fixtures import RECIPE
    from test_serve_hardening import request

    status, opened = request(server + "/episodes", {"recipe": RECIPE, "split": "train", "seed": 1, "index": 0})
    assert status == 200, opened
    assert opened["messages"] == [{"role": m["role"], "content": m["content"]} for m in rows[0]["prompt"]]
    eid = opened["episode"]
    status, step = request(server + f"/episodes/{eid}/step", {"response": WRONG})
    assert status == 200 and not step["done"] and step["messages"][-1]["content"] == step["feedback"]
    status, step = request(server + f"/episodes/{eid}/step", {"response": opgen.gold_answer(rows[0])})
    assert status == 200 and step["done"] and step["reward"] == 0.5
    assert request(server + f"/episodes/{eid}/step", {"response": "x"})[0] == 409
    assert request(server + f"/episodes/{eid}", method="GET")[1]["scores"] == [0.0, 1.0]
    assert request(server + "/episodes/nope/step", {"response": "x"})[0] == 404
    status, reply = request(server + "/episodes", {"row": rows[1], "settings": {"max_turns": 99}})
    assert status == 422 and "settings.max_turns" in reply["error"]


def test_openenvs_websocket_exchange_drives_an_episode(server, rows):
    from integration_fixtures import RECIPE
    from websockets.asyncio.client import connect

    async def play():
        async with connect(server.replace("http://", "ws://") + "/openenv/ws") as ws:
            async def say(kind, data=None):
                await ws.send(json.dumps({"type": kind, "data": data or {}}))
                return json.loads(await ws.recv())

            early = await say("step", {"response": "x"})
            reset = await say("reset", {"recipe": RECIPE, "split": "train", "seed": 1, "index": 0,
                                        "settings": {"max_turns": 3}})
            first = await say("step", {"response": WRONG})
            second = await say("step", {"response": opgen.gold_answer(rows[0])})
            state = await say("state")
            bad = await say("dance")
            await ws.send(json.dumps({"type": "close"}))
            return early, reset, first, second, state, bad

    early, reset, first, second, state, bad = asyncio.run(play())
    assert early["type"] == "error" and "before reset" in early["data"]["message"]
    assert reset["type"] == "observation" and reset["data"]["done"] is False
    assert reset["data"]["observation"]["prompt"] == rows[0]["prompt"][-1]["content"]
    assert first["data"]["reward"] == 0.0 and not first["data"]["done"]
    assert first["data"]["observation"]["feedback"] in first["data"]["observation"]["prompt"]
    assert second["data"] == {**second["data"], "reward": 0.5, "done": True}
    assert state["type"] == "state" and state["data"]["step_count"] == 2 and state["data"]["scores"] == [0.0, 1.0]
    assert bad["type"] == "error" and "unknown message type" in bad["data"]["message"]


@pytest.mark.trl
def test_openenvs_own_client_drives_an_episode_end_to_end(server, rows):
    import tiny_model as tm

    generic = tm.require("openenv.core.generic_client")
    from integration_fixtures import RECIPE

    with generic.GenericEnvClient(base_url=server + "/openenv").sync() as env:
        first = env.reset(recipe=RECIPE, split="train", seed=1, index=0)
        assert first.done is False and first.observation["turn"] == 0
        wrong = env.step({"response": WRONG})
        assert wrong.reward == 0.0 and not wrong.done and "returned" in wrong.observation["feedback"]
        right = env.step({"response": opgen.gold_answer(rows[0])})
        assert right.reward == 0.5 and right.done
        assert env.state()["scores"] == [0.0, 1.0]
