"""`opgen eval --engine-arg KEY=VALUE`: more keyword arguments of vllm.LLM, passed through as typed;
`--chat-template-kwarg KEY=VALUE`: variables of the chat template, passed to llm.chat.

A stand-in `vllm` module records what the backend hands to LLM(...) (the real engine runs in the
vllm group, tests/test_eval_vllm.py); its EngineArgs names the accepted keys as vLLM's does.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
from pathlib import Path

import pytest
import tiny_model as tm


@pytest.fixture
def fake_vllm(monkeypatch):
    seen: dict = {}

    @dataclasses.dataclass
    class EngineArgs:
        model: str = ""
        max_num_seqs: int = 256
        enable_prefix_caching: bool = False
        revision: str | None = None
        hf_overrides: dict | None = None

    class Out:
        def __init__(self, text):
            self.text, self.index, self.finish_reason, self.token_ids = text, 0, "stop", [1, 2]

    class LLM:
        def __init__(self, model, **kwargs):
            seen.update(kwargs, model=model)

        def chat(self, conversations, params, **kw):
            seen.setdefault("chat", []).append(kw)
            return [types.SimpleNamespace(outputs=[Out("no answer")], prompt_token_ids=[1]) for _ in conversations]

    class SamplingParams:
        def __init__(self, **kw):
            self.kw = kw

    module = types.ModuleType("vllm")
    module.LLM, module.EngineArgs, module.SamplingParams = LLM, EngineArgs, SamplingParams
    monkeypatch.setitem(sys.modules, "vllm", module)
    import opgen.infer.vllm_backend as V

    monkeypatch.setattr(V, "_on_cpu", lambda: True)
    return seen


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text("{}")
    return d


def _eval(runner, cli, tmp_path, model_dir, *args, backend="vllm"):
    trees = tm.write_trees(tmp_path / "trees.parquet", n=2)
    return runner.invoke(cli, ["eval", "--backend", backend, "--quiet", "--no-score", "--model", str(model_dir),
                               "--data", str(trees), "--out", str(tmp_path / "out"), *args])


def test_engine_args_reach_llm_typed(runner, cli, tmp_path, model_dir, fake_vllm):
    res = _eval(runner, cli, tmp_path, model_dir, "--engine-arg", "max_num_seqs=8", "--engine-arg",
                "enable-prefix-caching=true", "--engine-arg", "revision=main", "--engine-arg",
                "hf_overrides={rope_scaling: null, max_position_embeddings: 4096}")
    assert res.exit_code == 0, res.output
    assert fake_vllm["max_num_seqs"] == 8 and fake_vllm["enable_prefix_caching"] is True
    assert fake_vllm["revision"] == "main"
    assert fake_vllm["hf_overrides"] == {"rope_scaling": None, "max_position_embeddings": 4096}
    assert fake_vllm["generation_config"] == "vllm"  # opgen's own arguments are untouched
    # A resumed run must use the same engine arguments: they are part of the recorded settings.
    settings = json.loads((tmp_path / "out" / "m" / "trees_generations.settings.json").read_text())
    assert settings["engine_args"]["revision"] == "main"


@pytest.mark.parametrize(("arg", "message"), [
    ("dtype=float16", "use --dtype"), ("generation_config=auto", "opgen sets this itself"),
    ("max_num_seqs", "expected KEY=VALUE"), ("max_num_seqs=[1", "not YAML")])
def test_bad_engine_args_are_usage_errors(runner, cli, tmp_path, model_dir, fake_vllm, arg, message):
    res = _eval(runner, cli, tmp_path, model_dir, "--engine-arg", arg)
    assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output
    assert "max_num_seqs" not in fake_vllm  # refused before the engine starts


def test_an_unknown_engine_arg_names_the_key(runner, cli, tmp_path, model_dir, fake_vllm):
    res = _eval(runner, cli, tmp_path, model_dir, "--engine-arg", "max_num_seqz=8")
    assert res.exit_code == 1 and "--engine-arg max_num_seqz: not an argument" in res.output
    assert not fake_vllm  # LLM(...) was never called


def test_engine_args_apply_to_vllm_only(runner, cli, tmp_path, model_dir):
    res = _eval(runner, cli, tmp_path, model_dir, "--engine-arg", "max_num_seqs=8", backend="hf")
    assert res.exit_code == 2 and "applies to --backend vllm only" in res.output


@pytest.mark.slow
def test_chat_template_kwargs_reach_llm_chat_typed_and_are_recorded(runner, cli, tmp_path, model_dir, fake_vllm):
    res = _eval(runner, cli, tmp_path, model_dir, "--chat-template-kwarg", "enable_thinking=false",
                "--chat-template-kwarg", "reasoning-effort=low", "--chat-template-kwarg", "tags=[a, 2]")
    assert res.exit_code == 0, res.output
    want = {"enable_thinking": False, "reasoning_effort": "low", "tags": ["a", 2]}
    assert fake_vllm["chat"] and all(kw["chat_template_kwargs"] == want for kw in fake_vllm["chat"])
    assert all(kw["add_generation_prompt"] is True for kw in fake_vllm["chat"])  # opgen's own, untouched
    settings = json.loads((tmp_path / "out" / "m" / "trees_generations.settings.json").read_text())
    assert settings["chat_template_kwargs"] == want
    # a resumed run with other template variables would mix two prompts in one file: refused
    res = _eval(runner, cli, tmp_path, model_dir, "--resume", "--chat-template-kwarg", "enable_thinking=true")
    assert res.exit_code == 1 and "chat_template_kwargs differ" in res.output
    res = _eval(runner, cli, tmp_path, model_dir, "--resume")
    assert res.exit_code == 1 and "chat_template_kwargs differ" in res.output


def test_without_chat_template_kwargs_chat_gets_none_and_settings_are_unchanged(runner, cli, tmp_path, model_dir,
                                                                                fake_vllm):
    res = _eval(runner, cli, tmp_path, model_dir)
    assert res.exit_code == 0, res.output
    assert all("chat_template_kwargs" not in kw for kw in fake_vllm["chat"])  # an older vLLM's chat() works
    settings = json.loads((tmp_path / "out" / "m" / "trees_generations.settings.json").read_text())
    assert "chat_template_kwargs" not in settings  # runs made before the option resume as they were


@pytest.mark.parametrize(("arg", "message"), [
    ("add_generation_prompt=false", "opgen sets this itself"), ("continue-final-message=true", "opgen sets this"),
    ("enable_thinking", "expected KEY=VALUE"), ("x={a: 1", "not YAML"),
    ("when=2024-01-01", "not a JSON value"), ("x=.nan", "not a JSON value")])
def test_bad_chat_template_kwargs_are_usage_errors(runner, cli, tmp_path, model_dir, fake_vllm, arg, message):
    res = _eval(runner, cli, tmp_path, model_dir, "--chat-template-kwarg", arg)
    assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output
    assert not fake_vllm


def test_chat_template_kwargs_apply_to_model_and_server_backends_only(runner, cli, tmp_path):
    src = tmp_path / "answers.jsonl"
    src.write_text("".join(json.dumps({"index": i, "response": "x"}) + "\n" for i in range(2)))
    res = _eval(runner, cli, tmp_path, src, "--chat-template-kwarg", "enable_thinking=false", backend="replay")
    assert res.exit_code == 2 and "applies to --backend vllm, hf and openai" in res.output
