"""TRL's own classes on opgen rows (marker ``trl``; scripts/setup-trl.sh builds the environment).

GRPOTrainer is constructed on a tiny model built here, with :data:`opgen.integrations.trl.reward`
and :func:`grpo_dataset`; its own reward path (``_calculate_rewards``, what every training step
calls) must give `opgen score`'s scores. One GRPO and one SFT step run on the tiny model (slow).
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tiny_model as tm
from integration_fixtures import build, opgen_score, responses_for, rows_of

from opgen.integrations import trl as otrl

pytestmark = pytest.mark.trl


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tm.require("torch")
    tm.require("trl")
    tmp = tmp_path_factory.mktemp("trl")
    model = tm.build(tmp / "tiny-model")
    out = build(tmp)
    rows = rows_of(out, "train")
    responses = responses_for(rows)
    data = tmp / "train.parquet"
    first = json.loads((out / "manifest.json").read_text())["splits"]["train"]["files"][0]["path"]
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(out / first)), data)
    scores = [r["score"] for r in sorted(opgen_score(tmp, data, responses), key=lambda r: r["index"])]
    return tmp, model, rows, responses, scores


def _model(path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


def _grpo(tmp, model_dir, rows, **extra):
    from trl import GRPOConfig, GRPOTrainer

    model, tok = _model(model_dir)
    args = GRPOConfig(output_dir=str(tmp / "grpo"), per_device_train_batch_size=2, num_generations=2,
                      max_completion_length=8, max_steps=1, report_to=[], use_cpu=True, logging_steps=1,
                      save_strategy="no", bf16=False, **extra)
    return GRPOTrainer(model=model, processing_class=tok, reward_funcs=otrl.reward,
                       train_dataset=otrl.grpo_dataset(rows), args=args)


def test_grpo_trainers_reward_path_gives_opgen_scores(setup):
    tmp, model_dir, rows, responses, scores = setup
    trainer = _grpo(tmp, model_dir, rows)
    inputs = list(otrl.grpo_dataset(rows))
    completions = [[{"role": "assistant", "content": r}] for r in responses]
    rewards = trainer._calculate_rewards(inputs, [x["prompt"] for x in inputs], completions, [[0]] * len(inputs))
    assert rewards.shape == (len(rows), 1)
    assert [float(v) for v in rewards[:, 0]] == scores


@pytest.mark.slow
def test_one_grpo_step_and_one_sft_step_on_the_tiny_model(setup):
    from trl import SFTConfig, SFTTrainer

    tmp, model_dir, rows, _, _ = setup
    trainer = _grpo(tmp, model_dir, rows[:4])
    out = trainer.train()
    assert out.global_step == 1
    logged = [h for h in trainer.state.log_history if "reward" in h or "rewards/opgen_reward/mean" in h]
    assert logged, trainer.state.log_history
    model, tok = _model(model_dir)
    sft = SFTTrainer(model=model, processing_class=tok, train_dataset=otrl.sft_dataset(rows[:4]),
                     args=SFTConfig(output_dir=str(tmp / "sft"), per_device_train_batch_size=2, max_steps=1,
                                    report_to=[], use_cpu=True, save_strategy="no", max_length=512, bf16=False))
    assert sft.train().global_step == 1
    # completion-only loss: the prompt's tokens are masked out of the labels, the answer's are not
    labels = sft.train_dataset[0].get("labels") or []
    mask = sft.train_dataset[0].get("completion_mask") or [int(t != -100) for t in labels]
    assert 0 < sum(mask) < len(sft.train_dataset[0]["input_ids"])
