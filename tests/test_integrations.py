"""The adapters (opgen.integrations.*) and the notebook additions give `opgen score`'s grades.

The reference is `opgen score` itself, run as a user runs it on the same built rows and the same
responses: every adapter's numbers must equal its scores.jsonl, row by row.
"""

from __future__ import annotations

import json

import pytest
from integration_fixtures import build, rows_of

import opgen
from opgen.integrations import common
from opgen.integrations import trl as otrl
from opgen.integrations import verifiers as ovf


def test_the_fixture_spans_every_score(graded):
    rows, _, scores, _ = graded
    assert len(rows) == len(scores) == 15
    assert 1.0 in scores and 0.0 in scores


def test_trl_reward_equals_opgen_score_for_plain_and_conversational_completions(graded):
    rows, responses, scores, _ = graded
    view = otrl.grpo_dataset(rows)
    columns = {k: view[k] for k in view.column_names if k != "prompt"}
    plain = otrl.reward(prompts=view["prompt"], completions=responses, completion_ids=None, trainer_state=None,
                        **columns)
    assert plain == scores
    chat = [[{"role": "assistant", "content": r}] for r in responses]
    assert otrl.reward(prompts=view["prompt"], completions=chat, **columns) == scores
    # opgen's parquet columns as they are (reward_model / extra_info), without the view
    raw = {"reward_model": [r["reward_model"] for r in rows], "extra_info": [r["extra_info"] for r in rows]}
    assert otrl.reward(prompts=[r["prompt"] for r in rows], completions=responses, **raw) == scores


def test_trl_and_verifiers_views_of_a_row_are_one_view(graded):
    rows = graded[0]
    trl_view = list(otrl.grpo_dataset(rows))
    for i, row in enumerate(rows):
        task = ovf.task_fields(row, i)
        assert task["id"] == row["extra_info"]["row_id"]
        for key in ("prompt", "ground_truth", "data_source", "extra_info"):
            assert trl_view[i][key] == task[key], (i, key)
        assert task["ground_truth"] == row["reward_model"]["ground_truth"]  # JSON text, as the row holds it
    bad = [rows[0], {**rows[1], "prompt": []}]
    with pytest.raises(common.AdapterError, match="row 1: prompt must be a non-empty list of messages"):
        otrl.grpo_dataset(bad)


def test_trl_reward_refuses_a_dataset_without_ground_truth(graded):
    rows, responses, _, _ = graded
    with pytest.raises(common.AdapterError, match="neither a 'ground_truth' nor a 'reward_model'"):
        otrl.reward(prompts=["p"], completions=responses[:1], extra_info=[{}])
    with pytest.raises(common.AdapterError, match=r"completions\[0\]\[0\]"):
        otrl.reward(prompts=["p"], completions=[["not a message"]], ground_truth=[rows[0]["reward_model"]
                                                                                   ["ground_truth"]])
    with pytest.raises(TypeError, match="unknown settings"):
        otrl.make_reward(polcy="output")


def test_make_reward_passes_the_scorer_settings(graded):
    rows, responses, _, _ = graded
    gt = [r["reward_model"]["ground_truth"] for r in rows]
    extras = [r["extra_info"] for r in rows]
    strict = otrl.make_reward(policy="output_structure")
    want = [opgen.score_answer(r, x, policy="output_structure")["score"] for r, x in zip(rows[:5], responses[:5])]
    assert strict(completions=responses[:5], ground_truth=gt[:5], extra_info=extras[:5]) == want


def test_score_answer_is_the_grade_opgen_score_writes(graded):
    rows, responses, scores, _ = graded
    for i in (0, 1, 2, 4, 7):
        g = opgen.score_answer(rows[i], responses[i])
        assert g["score"] == scores[i] and {"acc", "error", "format_ok", "recall"} <= set(g)
    with pytest.raises(TypeError, match="response: a string"):
        opgen.score_answer(rows[0], None)


def test_gold_answer_of_rl_rows_equals_the_sft_rows_of_the_same_tasks(tmp_path):
    from integration_fixtures import RECIPE

    sft = {**RECIPE, "splits": {k: {**v, "kind": "sft"} for k, v in RECIPE["splits"].items()}}
    out_rl, out_sft = build(tmp_path / "rl"), build(tmp_path / "sft", sft)
    for split in ("train", "test"):
        rl, sf = rows_of(out_rl, split), rows_of(out_sft, split)
        assert [r["reward_model"] for r in rl] == [r["reward_model"] for r in sf]
        assert [opgen.gold_answer(r) for r in rl] == [r["response"] for r in sf]
    with pytest.raises(ValueError, match="no opgen tasks"):
        opgen.gold_answer({"reward_model": {"ground_truth": json.dumps({"ref_output": "x"})}, "extra_info": {}})


def test_sft_view_is_trl_prompt_completion_and_the_completion_scores_1(graded):
    rows, _, _, _ = graded
    view = otrl.sft_dataset(rows)
    assert view.column_names == ["prompt", "completion"]
    first = view[0]
    assert first["prompt"] == rows[0]["prompt"] and first["completion"][0]["role"] == "assistant"
    gold = [c[0]["content"] for c in view["completion"]]
    gt = [r["reward_model"]["ground_truth"] for r in rows]
    assert otrl.reward(completions=gold, ground_truth=gt, extra_info=[r["extra_info"] for r in rows]) == \
        [1.0] * len(rows)
    with pytest.raises(common.AdapterError, match="row 0: no gold answer"):
        otrl.sft_dataset([{"prompt": [{"role": "user", "content": "q"}],
                           "reward_model": {"ground_truth": json.dumps({"ref_output": 1})}, "extra_info": {}}])


def test_list_recipes_names_every_bundled_recipe():
    got = opgen.list_recipes()
    names = [r["name"] for r in got]
    assert names == sorted(names) and {"eval-suite", "rl-r1", "sft-eco", "probes"} <= set(names)
    suite = next(r for r in got if r["name"] == "eval-suite")
    assert {"heldout_trees_d1-8", "heldout_chains_d1-20"} <= {s["name"] for s in suite["splits"]}
    assert all(s["role"] in ("train", "eval") for r in got for s in r["splits"])


def test_mix_datasets_is_deterministic_weighted_and_never_repeats():
    a = [{"prompt": f"a{i}", "extra_info": {"i": i}} for i in range(300)]
    b = [{"prompt": f"b{i}"} for i in range(300)]
    mix = opgen.mix_datasets([a, b], weights=[3, 1], size=200, seed=7)
    assert mix == opgen.mix_datasets([a, b], weights=[3, 1], size=200, seed=7)
    assert mix != opgen.mix_datasets([a, b], weights=[3, 1], size=200, seed=8)
    n_a = sum(r["extra_info"]["mix_source"] == 0 for r in mix)
    assert 130 <= n_a <= 170  # 150 expected
    prompts = [r["prompt"] for r in mix]
    assert len(set(prompts)) == len(prompts)
    # each source's rows keep their order; the row's own extra_info is kept
    assert [p for p in prompts if p.startswith("a")] == [f"a{i}" for i in range(n_a)]
    assert next(r for r in mix if r["prompt"] == "a0")["extra_info"] == {"i": 0, "mix_source": 0}
    assert a[0]["extra_info"] == {"i": 0}  # inputs untouched
    # no size: until the first source runs out; a zero weight never draws
    whole = opgen.mix_datasets([a[:10], b], weights=[1, 1], seed=1)
    assert sum(r["extra_info"]["mix_source"] == 0 for r in whole) == 10
    assert all(r["extra_info"]["mix_source"] == 1 for r in opgen.mix_datasets([a, b], weights=[0, 1], size=50))
    for bad, match in (({"weights": [1]}, "1 weights for 2"), ({"weights": [0, 0]}, "not all zero"),
                       ({"weights": [-1, 2]}, "non-negative"), ({"weights": [float("nan"), 1]}, "non-negative"),
                       ({"size": 700, "weights": [1, 1]}, "needs more"), ({"size": -1}, "size")):
        with pytest.raises(ValueError, match=match):
            opgen.mix_datasets([a, b], **bad)
