"""verl in the loop: verl's own, unchanged classes read opgen's files and call opgen's reward.

The tests marked ``verl`` run in a venv made by ``scripts/setup-verl.sh``; where verl is absent they
skip, unless OPGEN_REQUIRE_HEAVY=1 (CI's verl venv), where a missing verl is a failure. The
unmarked tests at the top check opgen.tokens' arithmetic and run everywhere.

Two sources of files go through verl: rows written by hand from docs/contracts.md (the contract
itself against verl) and real ``opgen build`` output of every bundled recipe.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import verl_helpers as H

from opgen import tokens

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples" / "verl"
REQUIRE_HEAVY = os.environ.get("OPGEN_REQUIRE_HEAVY") == "1"
BUILD_LIMIT = 6  # rows per split of each real build: every file kind, in seconds


# ---------------------------------------------------------------- opgen.tokens, no verl needed

def test_summarize_uses_nearest_rank_and_observed_values():
    assert tokens.summarize([]) is None
    assert tokens.summarize([5]) == {"min": 5, "median": 5, "p99": 5, "max": 5}
    lengths = list(range(1, 201))  # 1..200
    assert tokens.summarize(lengths) == {"min": 1, "median": 100, "p99": 198, "max": 200}
    assert tokens.summarize(list(reversed(lengths))) == tokens.summarize(lengths)


def test_recommend_covers_the_longest_row_of_every_split():
    splits = {
        "a": tokens.SplitLengths("rl", prompt=[10, 130], answer=[50, 300]),
        "b": tokens.SplitLengths("rl", prompt=[129, 12], answer=[]),
        "s": tokens.SplitLengths("sft", prompt=[5], answer=[7], conversation=[700]),
    }
    rec = tokens.recommend(splits)
    assert rec == {"data.max_prompt_length": 192, "data.max_response_length": 512, "data.max_length": 704}
    assert tokens.recommend({"a": tokens.SplitLengths("rl", prompt=[128])})["data.max_prompt_length"] == 128
    assert "data.max_response_length" not in tokens.recommend({"b": splits["b"]})
    with pytest.raises(ValueError, match="no splits"):
        tokens.recommend({})


def test_truncation_warnings_name_the_split_and_count():
    splits = {"train": tokens.SplitLengths("rl", prompt=[10, 300, 301]),
              "eval": tokens.SplitLengths("rl", prompt=[10])}
    warnings = tokens.truncation_warnings(splits, 256)
    assert len(warnings) == 1
    assert "'train'" in warnings[0] and "2 of 3" in warnings[0] and "longest 301" in warnings[0]
    assert tokens.truncation_warnings(splits, 301) == []


def test_missing_tokenizer_folder_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        tokens.load_tokenizer(tmp_path / "nowhere")


# ---------------------------------------------------------------- fixtures for the verl group

def _need(module: str):
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if REQUIRE_HEAVY:
            pytest.fail(f"OPGEN_REQUIRE_HEAVY=1 but {module} does not import: {exc}", pytrace=False)
        pytest.skip(f"{module} is not installed (scripts/setup-verl.sh makes a venv with it)")


@pytest.fixture(scope="session")
def heavy(tmp_path_factory):
    """verl and transformers, with verl's caches kept inside the test's temp folder."""
    _need("transformers")
    _need("verl")
    cache = tmp_path_factory.mktemp("hf-datasets-cache")
    import datasets

    datasets.config.HF_DATASETS_CACHE = cache
    return cache


@pytest.fixture(scope="session")
def tok_dir(heavy, tmp_path_factory):
    return H.build_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="session")
def tok(tok_dir):
    return tokens.load_tokenizer(tok_dir)


def _compose(config_dir: Path, name: str, overrides: list[str] | None = None):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return compose(config_name=name, overrides=overrides or [])


@pytest.fixture(scope="session")
def verl_config_dir(heavy):
    import verl.trainer.config as cfg

    return Path(cfg.__file__).parent


@pytest.fixture(scope="session")
def ppo_data_defaults(verl_config_dir, tmp_path_factory):
    """verl's own default ``data`` section of the PPO trainer, resolved."""
    from omegaconf import OmegaConf

    data = OmegaConf.to_container(_compose(verl_config_dir, "ppo_trainer").data, resolve=True)
    data["cache_dir"] = str(tmp_path_factory.mktemp("verl-rlhf-cache"))
    return data


@pytest.fixture(scope="session")
def sft_data_defaults(verl_config_dir):
    from omegaconf import OmegaConf

    return OmegaConf.to_container(_compose(verl_config_dir, "sft_trainer_engine").data, resolve=True)


def _write_build(root: Path, splits: dict[str, tuple[str, str, int]]) -> Path:
    """A build directory of contract rows: ``{split: (kind, mode, rows)}`` + a contract manifest."""
    root.mkdir(parents=True)
    manifest = {"opgen_version": "test", "recipes": [], "seed": 0, "splits": {}}
    for split, (kind, mode, n) in splits.items():
        H.write_contract_file(root / f"{split}.parquet", split, kind, n, mode=mode)
        manifest["splits"][split] = {"kind": kind, "mode": mode, "rows": n,
                                     "files": [{"path": f"{split}.parquet", "rows": n}]}
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


@pytest.fixture(scope="session")
def contract_build(heavy, tmp_path_factory):
    return _write_build(tmp_path_factory.mktemp("contract") / "build", {
        "train": ("rl", "program", 40), "eval_forward": ("rl", "forward", 24), "sft_train": ("sft", "program", 24)})


def _bundled_recipes() -> list[str]:
    from opgen.resources import resource_dir

    return sorted(p.stem for p in resource_dir("datasets").glob("*.yaml"))


@pytest.fixture(scope="session")
def real_builds(heavy, tmp_path_factory):
    """``opgen build <recipe> --limit N`` of every bundled recipe, through the real CLI."""
    from click.testing import CliRunner
    from opgen.cli import cli

    recipes = _bundled_recipes()
    if "build" not in cli.list_commands(None) or not recipes:
        msg = "opgen build or its bundled recipes are not in this checkout yet"
        if REQUIRE_HEAVY:
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    root = tmp_path_factory.mktemp("builds")
    out = {}
    for recipe in recipes:
        res = CliRunner().invoke(cli, ["build", recipe, "--limit", str(BUILD_LIMIT), "--out", str(root / recipe)])
        assert res.exit_code == 0, f"opgen build {recipe} failed:\n{res.output}"
        out[recipe] = root / recipe
    return out


def _files(build: Path, kind: str) -> dict[str, list[Path]]:
    manifest = json.loads((build / "manifest.json").read_text())
    return {name: [build / f["path"] for f in info["files"]]
            for name, info in sorted(manifest["splits"].items()) if info["kind"] == kind}


def _rows(paths: list[Path]) -> list[dict]:
    import pyarrow.parquet as pq

    return [r for p in paths for r in pq.read_table(p).to_pylist()]


def _all_builds(request) -> dict[str, Path]:
    if request.param == "contract":
        return {"contract": request.getfixturevalue("contract_build")}
    return request.getfixturevalue("real_builds")


@pytest.fixture(scope="session", params=["contract", "opgen-build"])
def builds(request):
    return _all_builds(request)


def _each_split(builds: dict[str, Path], tok, kind: str, data_defaults: dict):
    """(where, verl's dataset, rows, rows measured, limit) for every split of ``kind`` in ``builds``:
    the dataset made at the length opgen.tokens recommends for that split alone (max_prompt_length
    for RL files, max_length for SFT ones)."""
    key, dataset = {"rl": ("data.max_prompt_length", _rl_dataset), "sft": ("data.max_length", _sft_dataset)}[kind]
    for name, build in builds.items():
        for split, paths in _files(build, kind).items():
            measured = tokens.measure_files(paths, tok, kind=kind)
            limit = tokens.recommend({split: measured})[key]
            yield f"{name}/{split}", dataset(paths, tok, data_defaults, limit), _rows(paths), measured.rows, limit


# ---------------------------------------------------------------- RL files through RLHFDataset

def _rl_dataset(paths, tok, data_defaults, max_prompt_length):
    from omegaconf import OmegaConf
    from verl.trainer.ppo.utils import create_rl_dataset

    cfg = OmegaConf.create({**data_defaults, "max_prompt_length": max_prompt_length,
                            "filter_overlong_prompts": True, "filter_overlong_prompts_workers": 1,
                            "truncation": "error", "return_raw_chat": True})
    return create_rl_dataset([str(p) for p in paths], cfg, tok, None, is_train=True)


@pytest.mark.verl
def test_every_rl_file_loads_whole_at_the_recommended_prompt_length(builds, tok, ppo_data_defaults):
    checked = 0
    for where, ds, rows, measured_rows, limit in _each_split(builds, tok, "rl", ppo_data_defaults):
        assert len(ds) == len(rows) == measured_rows, f"{where}: verl dropped prompts at {limit}"
        for i in range(len(ds)):
            item = ds[i]
            assert [dict(m) for m in item["raw_prompt"]] == rows[i]["prompt"], f"{where} row {i}"
            assert item["reward_model"]["ground_truth"] == rows[i]["reward_model"]["ground_truth"]
            assert item["data_source"] == rows[i]["data_source"]
            assert item["index"] == rows[i]["extra_info"]["index"]
        checked += 1
    assert checked, "no RL file was checked"


@pytest.mark.verl
def test_opgen_counts_prompt_tokens_exactly_as_verl_filters_them(contract_build, tok, ppo_data_defaults):
    # At a limit between observed lengths verl keeps exactly the rows opgen says fit: the counts
    # agree token for token, not just below some margin.
    paths = _files(contract_build, "rl")["train"]
    lengths = tokens.measure_files(paths, tok, kind="rl").prompt
    assert len(set(lengths)) > 3, "contract rows should have varied prompt lengths"
    for limit in (max(lengths) - 1, sorted(lengths)[len(lengths) // 2], min(lengths)):
        ds = _rl_dataset(paths, tok, ppo_data_defaults, limit)
        assert len(ds) == sum(n <= limit for n in lengths), f"limit {limit}"


@pytest.mark.verl
def test_rl_files_of_different_splits_and_builds_concatenate(builds, tok, ppo_data_defaults):
    # verl concatenates every train (and val) file into one dataset; a column whose type differs
    # between splits (an empty list typed null, an int that became a string) fails right here.
    paths = [p for build in builds.values() for ps in _files(build, "rl").values() for p in ps]
    measured = {str(p): tokens.measure_files([p], tok, kind="rl") for p in paths}
    limit = tokens.recommend(measured)["data.max_prompt_length"]
    ds = _rl_dataset(paths, tok, ppo_data_defaults, limit)
    assert len(ds) == sum(m.rows for m in measured.values())
    assert {ds[i]["data_source"] for i in range(len(ds))} == {
        r["data_source"] for r in _rows(paths)}


# ---------------------------------------------------------------- SFT files through MultiTurnSFTDataset

def _sft_dataset(paths, tok, data_defaults, max_length):
    from omegaconf import OmegaConf
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

    # The class verl.trainer.sft_trainer.create_sft_dataset builds when data.custom_cls is unset
    # (importing the trainer module itself needs the rollout server's packages).
    cfg = OmegaConf.create({**data_defaults, "max_length": max_length, "truncation": "error"})
    return MultiTurnSFTDataset(parquet_files=[str(p) for p in paths], tokenizer=tok, config=cfg)


def _check_sft_items(ds, rows, tok, where):
    for i, row in enumerate(rows):
        item = ds[i]
        ids, mask = item["input_ids"], item["loss_mask"].bool()
        # The loss covers the whole gold answer and its end-of-turn, and nothing of the prompt.
        trained = tok.decode(ids[mask].tolist(), skip_special_tokens=False)
        assert trained == row["response"] + tok.eos_token + "\n", f"{where} row {i}"
        context = tok.decode(ids[~mask].tolist(), skip_special_tokens=False)
        assert context == tok.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
        assert row["messages"] == row["prompt"] + [{"role": "assistant", "content": row["response"]}]


@pytest.mark.verl
def test_every_sft_file_loads_with_the_loss_on_the_answer(builds, tok, sft_data_defaults):
    checked = 0
    for where, ds, rows, _, _ in _each_split(builds, tok, "sft", sft_data_defaults):
        assert len(ds) == len(rows)
        _check_sft_items(ds, rows, tok, where)
        checked += 1
    if not checked and builds.keys() != {"contract"}:
        pytest.fail("no bundled recipe has an SFT split")


@pytest.mark.verl
def test_sft_files_of_different_splits_concatenate(builds, tok, sft_data_defaults):
    paths = [p for build in builds.values() for ps in _files(build, "sft").values() for p in ps]
    if not paths:
        pytest.fail("no SFT file to concatenate")
    limit = tokens.recommend({str(p): tokens.measure_files([p], tok, kind="sft") for p in paths})["data.max_length"]
    ds = _sft_dataset(paths, tok, sft_data_defaults, limit)
    rows = _rows(paths)
    assert len(ds) == len(rows)
    _check_sft_items(ds, rows, tok, "concatenated")


@pytest.mark.verl
def test_recommended_sft_length_is_tight(contract_build, tok, sft_data_defaults):
    # One token less than the longest conversation and verl refuses that row (truncation=error):
    # the recommendation is not padding over a miscount.
    paths = _files(contract_build, "sft")["sft_train"]
    conv = tokens.measure_files(paths, tok, kind="sft").conversation
    longest = conv.index(max(conv))
    ds = _sft_dataset(paths, tok, sft_data_defaults, max(conv) - 1)
    with pytest.raises(ValueError, match="larger than"):
        ds[longest]


@pytest.mark.verl
def test_build_token_report_on_a_build_dir(contract_build, tok_dir):
    report = tokens.build_token_report(contract_build, tok_dir, max_prompt_length=16)
    assert set(report["splits"]) == {"train", "eval_forward", "sft_train"}
    assert report["splits"]["train"]["rows"] == 40
    # RL rows carry no answer text: it is re-rendered from the ground truth.
    assert report["splits"]["train"]["answer_tokens"]["min"] > 1
    assert report["splits"]["sft_train"]["answer_tokens"]["min"] > 1
    assert set(report["recommended"]) == {"data.max_prompt_length", "data.max_response_length", "data.max_length"}
    assert len(report["warnings"]) == 3
    assert report["tokenizer"]["name"] == tok_dir.name and len(report["tokenizer"]["sha256"]) == 64
    again = tokens.build_token_report(contract_build, tok_dir, max_prompt_length=16)
    assert json.dumps(again, sort_keys=True) == json.dumps(report, sort_keys=True)
    with pytest.raises(KeyError, match="no split 'nope'"):
        tokens.build_token_report(contract_build, tok_dir, splits=["nope"])


@pytest.mark.verl
def test_load_tokenizer_refuses_folders_verl_could_not_use(tok_dir, tmp_path):
    with pytest.raises(ValueError, match="not a tokenizer folder"):
        tokens.load_tokenizer(tmp_path)
    bare = tmp_path / "no-template"
    bare.mkdir()
    for f in tok_dir.iterdir():
        if f.name != "chat_template.jinja":
            (bare / f.name).write_bytes(f.read_bytes())
    cfg = json.loads((bare / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    (bare / "tokenizer_config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="no chat_template"):
        tokens.load_tokenizer(bare)


@pytest.mark.verl
def test_gold_answer_of_row_re_renders_every_sft_answer(real_builds):
    # SFT rows store the gold answer the build rendered; re-rendering it from the ground truth
    # must give the same text, so RL rows (which store none) get true answer lengths.
    checked = 0
    for name, build in real_builds.items():
        for split, paths in _files(build, "sft").items():
            for row in _rows(paths):
                assert tokens.gold_answer_of_row(row) == row["response"], f"{name}/{split} {row['extra_info']}"
                checked += 1
    assert checked


# ---------------------------------------------------------------- verl's reward path

def _gold_and_wrong(row: dict) -> tuple[str, str]:
    """A correct and an incorrect response for a row, in the row's own answer format."""
    gold = row["response"] if row.get("response") else tokens.gold_answer_of_row(row)
    assert gold, f"no gold answer for row {row['extra_info']['index']} of {row['data_source']}"
    wrong = H.wrong_answer(json.loads(row["reward_model"]["ground_truth"]))
    return gold, wrong


def _reward_batch(rows: list[dict], responses: list[str], tok):
    """A DataProto shaped like a rollout's output: left-padded prompts, right-padded responses."""
    import numpy as np
    import torch
    from verl import DataProto

    prompts = [tok.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False) for r in rows]
    p_ids = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
    r_ids = [tok(s, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for s in responses]
    P, R, pad = max(map(len, p_ids)), max(map(len, r_ids)), tok.pad_token_id
    prompt_t = torch.tensor([[pad] * (P - len(x)) + x for x in p_ids])
    resp_t = torch.tensor([x + [pad] * (R - len(x)) for x in r_ids])
    mask = torch.tensor([[0] * (P - len(a)) + [1] * len(a) + [1] * len(b) + [0] * (R - len(b))
                         for a, b in zip(p_ids, r_ids)])

    def obj(values):
        arr = np.empty(len(values), dtype=object)
        arr[:] = values
        return arr

    return DataProto.from_dict(
        tensors={"prompts": prompt_t, "responses": resp_t, "attention_mask": mask,
                 "input_ids": torch.cat([prompt_t, resp_t], dim=1)},
        non_tensors={"data_source": obj([r["data_source"] for r in rows]),
                     "reward_model": obj([dict(r["reward_model"]) for r in rows]),
                     "extra_info": obj([dict(r["extra_info"]) for r in rows]),
                     "raw_prompt": obj([list(r["prompt"]) for r in rows])})


@pytest.fixture(scope="session")
def reward_worker(heavy, tok_dir):
    """verl's RewardLoopWorker built from the shipped GRPO example config, as the trainer builds it."""
    _need("opgen.reward")
    from verl.experimental.reward_loop import RewardLoopWorker

    config = _compose(EXAMPLES / "config", "grpo_rl_r1", [f"actor_rollout_ref.model.path={tok_dir}"])
    return RewardLoopWorker(config)


def _score(worker, rows, responses, tok):
    batch = _reward_batch(rows, responses, tok)
    outputs = worker.loop.run_until_complete(worker.compute_score_batch(batch))
    scores = [o["reward_score"] for o in outputs]
    rm = worker.reward_manager.assemble_rm_scores(batch, scores)
    assert rm.sum(dim=1).tolist() == pytest.approx(scores)
    return outputs


@pytest.mark.verl
def test_verl_reward_path_scores_gold_1_and_wrong_0(builds, reward_worker, tok):
    import opgen.reward

    assert reward_worker.reward_manager.compute_score.func.__name__ == "_call_with_kwargs"
    assert reward_worker.reward_manager.compute_score.args[0] is opgen.reward.compute_score
    for name, build in builds.items():
        for kind in ("rl", "sft"):
            for split, paths in _files(build, kind).items():
                rows = _rows(paths)[:8]
                pairs = [_gold_and_wrong(r) for r in rows]
                outputs = _score(reward_worker, rows + rows, [g for g, _ in pairs] + [w for _, w in pairs], tok)
                scores = [o["reward_score"] for o in outputs]
                where = f"{name}/{split}"
                assert scores[: len(rows)] == [1.0] * len(rows), f"{where}: gold answers scored {scores[:len(rows)]}"
                assert scores[len(rows):] == [0.0] * len(rows), f"{where}: wrong answers scored {scores[len(rows):]}"
                keys = {tuple(sorted(o["reward_extra_info"])) for o in outputs}
                assert len(keys) == 1, f"{where}: reward_extra_info keys differ between samples: {keys}"


# ---------------------------------------------------------------- the shipped examples

def _example_keys(node, prefix=""):
    for key, value in node.items():
        if key in ("defaults", "hydra"):
            continue
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from _example_keys(value, path + ".")
        else:
            yield path


@pytest.mark.verl
@pytest.mark.parametrize(("config", "base"), [("grpo_rl_r1", "ppo_trainer"), ("sft_sft_eco", "sft_trainer_engine")])
def test_example_config_sets_only_keys_verl_defines(config, base, verl_config_dir):
    import yaml
    from omegaconf import OmegaConf

    own = yaml.safe_load((EXAMPLES / "config" / f"{config}.yaml").read_text())
    # Hydra merges a primary config's new keys without complaint, so a misspelt key would be
    # silently ignored by the trainer: every key the example sets must exist in verl's own config.
    reference = _compose(verl_config_dir, base)
    for key in _example_keys(own):
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(reference, parent) if parent else reference
        assert node is not None and leaf in node.keys(), f"{config}.yaml sets {key}, undefined in verl's {base}"
    composed = _compose(EXAMPLES / "config", config)
    for key in _example_keys(own):
        assert OmegaConf.select(composed, key) == OmegaConf.select(OmegaConf.create(own), key), key


@pytest.mark.verl
def test_grpo_example_reward_function_loads_through_verl(heavy):
    _need("opgen.reward")
    from verl.trainer.ppo.reward import get_custom_reward_fn

    import opgen.reward

    fn = get_custom_reward_fn(_compose(EXAMPLES / "config", "grpo_rl_r1"))
    assert fn is not None and fn.args[0] is opgen.reward.compute_score


def _dry_run(script: str, env: dict[str, str]) -> list[str]:
    res = subprocess.run(["bash", str(EXAMPLES / script)], env={**os.environ, **env, "DRY_RUN": "1"},
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, f"{script} failed:\n{res.stdout}\n{res.stderr}"
    return res.stdout.splitlines()


def _overrides(argv: list[str]) -> list[str]:
    i = argv.index("--config-name") + 2
    return argv[i:]


@pytest.mark.verl
@pytest.mark.parametrize(("script", "config", "kind"), [
    ("run_grpo_rl_r1.sh", "grpo_rl_r1", "rl"), ("run_sft_sft_eco.sh", "sft_sft_eco", "sft")])
def test_launch_script_builds_data_and_composes_a_valid_verl_config(
        script, config, kind, real_builds, tok_dir, tmp_path, ppo_data_defaults, sft_data_defaults, tok):
    from omegaconf import OmegaConf

    env = {"MODEL": str(tok_dir), "DATA": str(tmp_path / "data"), "OPGEN_LIMIT": str(BUILD_LIMIT),
           "PYTHON": sys.executable, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    argv = _dry_run(script, env)
    cfg = _compose(EXAMPLES / "config", config, _overrides(argv))
    files = list(cfg.data.train_files) + list(cfg.data.val_files or [])
    assert files and all(Path(f).is_file() for f in files), files
    if kind == "rl":
        assert cfg.actor_rollout_ref.model.path == str(tok_dir)
        assert len(_rl_dataset(files, tok, ppo_data_defaults, cfg.data.max_prompt_length)) == len(_rows(files))
        assert cfg.data.max_response_length > 0
    else:
        assert cfg.model.path == str(tok_dir)
        data = OmegaConf.to_container(cfg.data, resolve=True)
        ds = _sft_dataset(files, tok, {**sft_data_defaults, **data}, cfg.data.max_length)
        _check_sft_items(ds, _rows(files), tok, script)



@pytest.fixture(scope="session")
def model_dir(tok_dir, tmp_path_factory):
    return H.build_model_dir(tmp_path_factory.mktemp("model"), tok_dir)


def _main_ppo_checks(cfg) -> None:
    """What ``verl.trainer.main_ppo.main`` runs on its composed config before any training."""
    from verl.trainer.main_ppo import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    auto_set_device(cfg)
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))


def _sft_trainer_checks(cfg):
    """What ``verl.trainer.sft_trainer.SFTTrainer.__init__`` builds from its config first
    (``_build_config``: model, engine, optimizer, checkpoint and profiler dataclasses)."""
    _need("uvicorn")  # verl.trainer.sft_trainer imports the rollout server at module level
    from verl.trainer.sft_trainer import SFTTrainer
    from verl.utils.device import auto_set_device

    auto_set_device(cfg)
    trainer = SFTTrainer.__new__(SFTTrainer)  # __init__ would start torch.distributed and load weights
    trainer.config = cfg
    trainer._build_config()
    return trainer


@pytest.mark.verl
def test_grpo_example_passes_main_ppo_validation_as_launched(real_builds, model_dir, tmp_path):
    env = {"MODEL": str(model_dir), "DATA": str(tmp_path / "data"), "OPGEN_LIMIT": str(BUILD_LIMIT),
           "PYTHON": sys.executable, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    cfg = _compose(EXAMPLES / "config", "grpo_rl_r1", _overrides(_dry_run("run_grpo_rl_r1.sh", env)))
    _main_ppo_checks(cfg)
    # The study's RL settings (compgen-checkpoints.md): batch 128, KL 0.01 to the init, 100 steps.
    assert cfg.data.train_batch_size == 128
    actor = cfg.actor_rollout_ref.actor
    assert actor.use_kl_loss and actor.kl_loss_coef == 0.01 and not cfg.algorithm.use_kl_in_reward
    assert cfg.trainer.total_training_steps == 100


@pytest.mark.verl
def test_validation_catches_what_the_old_grpo_example_left_unset(model_dir):
    # The check can fail: the micro-batch sizes the example once left unset (dynamic batch size off).
    cfg = _compose(EXAMPLES / "config", "grpo_rl_r1", [
        f"actor_rollout_ref.model.path={model_dir}", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=null"])
    with pytest.raises(Exception, match="ppo_micro_batch_size"):
        _main_ppo_checks(cfg)


@pytest.mark.verl
def test_sft_example_passes_the_sft_trainers_config_checks_as_launched(real_builds, model_dir, tmp_path):
    env = {"MODEL": str(model_dir), "DATA": str(tmp_path / "data"), "OPGEN_LIMIT": str(BUILD_LIMIT),
           "PYTHON": sys.executable, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    cfg = _compose(EXAMPLES / "config", "sft_sft_eco", _overrides(_dry_run("run_sft_sft_eco.sh", env)))
    trainer = _sft_trainer_checks(cfg)
    # The study's SFT settings: 2 epochs, batch 128, LR 2e-5.
    assert trainer.optimizer_config.lr == 2e-5
    assert cfg.data.train_batch_size == 128 and cfg.trainer.total_epochs == 2
    # The check reads the model folder, so it can fail: a config.json that names no architecture.
    bare = H.build_model_dir(tmp_path / "bare", model_dir)
    config = json.loads((bare / "config.json").read_text())
    config.pop("architectures")
    (bare / "config.json").write_text(json.dumps(config))
    with pytest.raises(Exception, match="architecture"):
        _sft_trainer_checks(_compose(EXAMPLES / "config", "sft_sft_eco", [f"model.path={bare}"]))


@pytest.mark.verl
def test_legacy_reward_keys_need_migration_in_verl_0_9(verl_config_dir):
    # docs/verl.md warns that verl 0.9's main_ppo reads only reward.custom_reward_function: the
    # pre-0.7.1 top-level keys still parse but are ignored unless migrated. This pins that claim.
    _need("opgen.reward")
    from verl.experimental.reward_loop import migrate_legacy_reward_impl
    from verl.trainer.ppo.reward import get_custom_reward_fn

    import opgen.reward

    legacy = _compose(verl_config_dir, "ppo_trainer", [
        f"custom_reward_function.path={REPO / 'opgen' / 'reward.py'}", "custom_reward_function.name=compute_score",
        "reward_model.reward_manager=naive"])
    assert get_custom_reward_fn(legacy) is None
    fn = get_custom_reward_fn(migrate_legacy_reward_impl(legacy))
    assert fn is not None and fn.args[0].__name__ == opgen.reward.compute_score.__name__
