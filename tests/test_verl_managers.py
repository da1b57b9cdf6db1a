"""opgen's reward entry points under verl's own reward managers, driven with a small DataProto.

Every manager here is verl's unchanged class: the reward loop's ``naive``, ``dapo``, ``gdpo`` and
``rate_limited`` managers (verl 0.9.1, through ``RewardLoopWorker`` as the trainer builds it), and
the legacy ``batch`` and ``prime`` managers and ``main_eval``'s per-row scorer, whose files in
verl 0.9.1 are byte-identical to verl 0.7.0's (docs/verl.md, "Reward managers"). Marked ``verl``:
they run in scripts/setup-verl.sh's venv and skip elsewhere (fail with OPGEN_REQUIRE_HEAVY=1).
"""

from __future__ import annotations

import json

import pytest
import test_verl_compat as C
import verl_helpers as H

from opgen import tokens

pytestmark = pytest.mark.verl

# The compatibility suite's session fixtures and helpers (one tokenizer, one batch builder).
heavy, tok_dir, tok = C.heavy, C.tok_dir, C.tok
EXAMPLES, _compose, _reward_batch = C.EXAMPLES, C._compose, C._reward_batch


@pytest.fixture(scope="module")
def rows(heavy):
    return H.contract_rows("train", "rl", 6) + H.contract_rows("eval_forward", "rl", 4, mode="forward")


def _gold_wrong(rows):
    gold = [tokens.gold_answer_of_row(r) for r in rows]
    wrong = [H.wrong_answer(json.loads(r["reward_model"]["ground_truth"])) for r in rows]
    return gold, wrong


def _expected(rows):
    return [1.0] * len(rows) + [0.0] * len(rows)


def test_legacy_batch_manager_calls_compute_score_batch(rows, tok):
    from verl.workers.reward_manager.batch import BatchRewardManager

    import opgen.reward

    gold, wrong = _gold_wrong(rows)
    batch = _reward_batch(rows + rows, gold + wrong, tok)
    mgr = BatchRewardManager(tokenizer=tok, num_examine=0, compute_score=opgen.reward.compute_score_batch,
                             reward_fn_key="data_source", keys="minimal")
    out = mgr(batch, return_dict=True)
    assert out["reward_tensor"].sum(dim=1).tolist() == _expected(rows)
    assert set(out["reward_extra_info"]) == set(opgen.reward.MINIMAL_KEYS)
    assert batch.batch["acc"].tolist() == _expected(rows)
    full = BatchRewardManager(tokenizer=tok, num_examine=0, compute_score=opgen.reward.compute_score_batch)(
        _reward_batch(rows, gold, tok), return_dict=True)
    assert list(full["reward_extra_info"]) == list(opgen.reward.KEYS)
    # The one-sample entry point is what this manager cannot call (the old failure).
    with pytest.raises(TypeError):
        BatchRewardManager(tokenizer=tok, num_examine=0, compute_score=opgen.reward.compute_score)(
            _reward_batch(rows, gold, tok))


def test_legacy_prime_manager_scores_with_compute_score_float(rows, tok, monkeypatch):
    from verl.workers.reward_manager.prime import PrimeRewardManager

    import opgen.reward

    # prime grades in its own process pool (up to 64 forked processes, each with its own
    # sandbox): one sandbox worker each, as docs/verl.md advises.
    monkeypatch.setenv("OPGEN_SANDBOX_WORKERS", "1")
    gold, wrong = _gold_wrong(rows)
    bad = dict(rows[0], reward_model={"style": "rule", "ground_truth": "{not json"})
    batch = _reward_batch(rows + rows + [bad], gold + wrong + [gold[0]], tok)
    scores = PrimeRewardManager(tokenizer=tok, num_examine=0, compute_score=opgen.reward.compute_score_float)(batch)
    # A malformed row scores 0 alone; the batch keeps its rewards.
    assert scores.sum(dim=1).tolist() == _expected(rows) + [0.0]
    # The dict-returning entry point: prime reads result[0], fails, and zeroes the whole batch.
    zeroed = PrimeRewardManager(tokenizer=tok, num_examine=0, compute_score=opgen.reward.compute_score)(
        _reward_batch(rows, gold, tok))
    assert zeroed.sum(dim=1).tolist() == [0.0] * len(rows)


def test_main_eval_averages_compute_score_float_over_a_generation_parquet(rows, tmp_path, heavy):
    import numpy as np
    import pandas as pd
    from verl.trainer import main_eval

    # The file verl.trainer.main_generation_server writes: the data rows plus `responses` (n each).
    data = tmp_path / "data.parquet"
    H.write_contract_file(data, "train", "rl", 6)
    data_rows = H.contract_rows("train", "rl", 6)
    gold, wrong = _gold_wrong(data_rows)
    dataset = pd.read_parquet(data)
    dataset["responses"] = [[g, w] for g, w in zip(gold, wrong)]
    gen = tmp_path / "gen.parquet"
    dataset.to_parquet(gen)
    # verl 0.9.1's get_custom_reward_fn reads reward.custom_reward_function (0.7: the top-level keys
    # evaluation.yaml still has), so on 0.9.1 the keys are added with Hydra's `+`.
    config = _compose(_verl_config_dir(), "evaluation", [
        f"data.path={gen}", "+reward.custom_reward_function.path=pkg://opgen.reward",
        "+reward.custom_reward_function.name=compute_score_float"])
    df = pd.read_parquet(config.data.path)
    got = [main_eval.process_item._function(config, df[config.data.data_source_key][i],
                                            df[config.data.response_key][i], df[config.data.reward_model_key][i])
           for i in range(len(df))]
    assert [score for _, score in got] == [0.5] * len(df)
    assert float(np.mean([score for _, score in got])) == 0.5
    # The same file replayed by opgen eval: each row's 2 samples, gold then wrong.
    from click.testing import CliRunner
    from opgen.cli import cli

    res = CliRunner().invoke(cli, ["eval", "--backend", "replay", "--quiet", "--model", str(gen), "--data", str(data),
                                   "--out", str(tmp_path / "out"), "--n", "2"])
    assert res.exit_code == 0, res.output
    assert "data: 6 rows, 0 truncated, accuracy 0.500" in res.output


def _verl_config_dir():
    from pathlib import Path

    import verl.trainer.config as cfg

    return Path(cfg.__file__).parent


def _reward_worker(tok_dir, overrides):
    import asyncio

    from verl.experimental.reward_loop import RewardLoopWorker

    # The worker runs on the thread's current event loop; prime's manager closes the one it used.
    asyncio.set_event_loop(asyncio.new_event_loop())

    return RewardLoopWorker(_compose(EXAMPLES / "config", "grpo_rl_r1",
                                     [f"actor_rollout_ref.model.path={tok_dir}", *overrides]))


def _loop_scores(worker, rows, responses, tok):
    batch = _reward_batch(rows, responses, tok)
    return worker.loop.run_until_complete(worker.compute_score_batch(batch))


def test_reward_loop_awaits_compute_score_async(rows, tok, tok_dir):
    import opgen.reward

    worker = _reward_worker(tok_dir, ["reward.custom_reward_function.name=compute_score_async"])
    assert worker.reward_manager.is_async_reward_score
    assert worker.reward_manager.compute_score.args[0] is opgen.reward.compute_score_async
    gold, wrong = _gold_wrong(rows)
    outputs = _loop_scores(worker, rows + rows, gold + wrong, tok)
    assert [o["reward_score"] for o in outputs] == _expected(rows)
    assert {tuple(o["reward_extra_info"]) for o in outputs} == {opgen.reward.KEYS}


def test_reward_kwargs_need_hydras_plus_and_reach_the_function(rows, tok, tok_dir):
    from hydra.errors import ConfigCompositionException

    import opgen.reward

    # verl's reward config defines no reward_kwargs key: without `+` Hydra refuses the override.
    with pytest.raises(ConfigCompositionException, match="reward_kwargs"):
        _reward_worker(tok_dir, ["reward.custom_reward_function.reward_kwargs.keys=minimal"])
    worker = _reward_worker(tok_dir, ["+reward.custom_reward_function.reward_kwargs.keys=minimal"])
    gold, wrong = _gold_wrong(rows)
    outputs = _loop_scores(worker, rows + rows, gold + wrong, tok)
    assert [o["reward_score"] for o in outputs] == _expected(rows)
    assert {tuple(o["reward_extra_info"]) for o in outputs} == {opgen.reward.MINIMAL_KEYS}


def test_keys_stack_through_verls_reward_loop_output(rows, tok, tok_dir):
    # verl stacks reward_extra_info with the FIRST sample's key list (np.array per key): every
    # sample, forward or program, gold or failed, must carry the same keys with one type per key.
    import numpy as np

    worker = _reward_worker(tok_dir, [])
    gold, wrong = _gold_wrong(rows)
    outputs = _loop_scores(worker, rows + rows + rows[:1], gold + wrong + ["no answer at all"], tok)
    infos = [o["reward_extra_info"] for o in outputs]
    for key in infos[0]:
        column = np.array([info[key] for info in infos])
        assert column.dtype.kind == ("U" if key == "error" else "f"), (key, column.dtype)


@pytest.mark.parametrize("manager", ["naive", "dapo", "gdpo", "rate_limited"])
def test_every_reward_loop_manager_scores_gold_1_and_wrong_0(rows, tok, tok_dir, manager):
    # verl 0.9.1's reward loop registers five managers; each calls compute_score with keywords (awaited
    # when it is a coroutine) and reads result["score"]. `remote` is the same call on Ray actors.
    import opgen.reward

    worker = _reward_worker(tok_dir, [f"reward.reward_manager.name={manager}"])
    assert type(worker.reward_manager).__module__.endswith(manager if manager != "rate_limited" else "limited")
    gold, wrong = _gold_wrong(rows)
    outputs = _loop_scores(worker, rows + rows, gold + wrong, tok)
    assert [o["reward_score"] for o in outputs] == _expected(rows)
    assert {tuple(o["reward_extra_info"]) for o in outputs} == {opgen.reward.KEYS}


def test_verls_agent_loop_plays_an_opgen_episode(rows, tok, tok_dir):
    # verl 0.9.1's multi-turn rollouts are agent loops: opgen's (opgen.integrations.verl_agent) is built
    # as verl builds one, its model a scripted server manager: wrong at turn 1, the gold answer at turn 2.
    import asyncio

    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, _agent_loop_registry
    from verl.workers.rollout.replica import TokenOutput

    from opgen.integrations.verl_agent import OpgenEpisodeAgentLoop

    assert _agent_loop_registry["opgen_episode"]["_target_"].endswith("verl_agent.OpgenEpisodeAgentLoop")
    row = rows[0]
    gold, wrong = _gold_wrong([row])
    said: list[list[int]] = []

    class Model:  # the server manager's generate, as the agent loop calls it
        async def generate(self, request_id, prompt_ids, sampling_params, **kw):
            said.append(list(prompt_ids))
            text = wrong[0] if len(said) == 1 else gold[0]
            return TokenOutput(token_ids=tok.encode(text, add_special_tokens=False) + [tok.eos_token_id])

    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": 4096, "response_length": 8192}}})
    events = asyncio.new_event_loop()  # the agent loop runs its tokenizer work on the loop current when made
    asyncio.set_event_loop(events)
    loop = OpgenEpisodeAgentLoop(DictConfigWrap(config), Model(), tok, None, None, DictConfigWrap(OmegaConf.create({})))
    out = events.run_until_complete(loop.run({}, raw_prompt=row["prompt"], reward_model=row["reward_model"],
                                             extra_info={**row["extra_info"], "episode": {"max_turns": 3}}))
    assert out.reward_score == 0.5 and out.extra_fields["turn_scores"] == [0.0, 1.0]
    assert len(said) == 2 and said[1][:len(said[0])] == said[0]  # turn 2 continues turn 1's context
    text = tok.decode(out.response_ids)
    assert "not the expected output" in text or "did not return" in text or "failed" in text  # the feedback
    model_tokens = sum(out.response_mask)
    assert 0 < model_tokens < len(out.response_mask)  # the feedback turn is context, not trained on


def _verl_doc() -> str:
    from pathlib import Path

    return (Path(__file__).resolve().parent.parent / "docs" / "verl.md").read_text()


def _doc_commands(module: str) -> list[list[str]]:
    """The overrides of every ``python -m verl.trainer.<module>`` line in docs/verl.md (``...`` dropped)."""
    import re
    import shlex

    found = []
    for block in re.findall(r"```bash\n(.*?)```", _verl_doc(), flags=re.S):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            if line.strip().startswith(f"python -m verl.trainer.{module}"):
                found.append([a for a in shlex.split(line)[3:] if a != "..."])
    return found


def test_the_docs_verl_command_lines_compose_with_verls_own_config(heavy):
    # docs/verl.md's command lines, composed by Hydra against verl's own config (a renamed key fails)
    import re

    from hydra.utils import get_class
    from omegaconf import OmegaConf

    (agent,) = _doc_commands("main_ppo")
    config = _compose(_verl_config_dir(), "ppo_trainer", agent)
    assert config.actor_rollout_ref.rollout.agent.default_agent_loop == "opgen_episode"
    loops = OmegaConf.create(re.search(r"```yaml\n# agent_loops.yaml\n(.*?)```", _verl_doc(), flags=re.S).group(1))
    assert [x["name"] for x in loops] == ["opgen_episode"]
    assert get_class(loops[0]["_target_"]).__name__ == "OpgenEpisodeAgentLoop"
    (evaluation,) = _doc_commands("main_eval")
    config = _compose(_verl_config_dir(), "evaluation", evaluation)
    assert config.reward.custom_reward_function.name == "compute_score_float"
    with pytest.raises(Exception, match="agent_loop_confg"):  # the check can fail
        _compose(_verl_config_dir(), "ppo_trainer", ["actor_rollout_ref.rollout.agent.agent_loop_confg=x"])
