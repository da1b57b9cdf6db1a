"""opgen.infer.config: `opgen eval`'s options as two frozen records, validated when made."""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path

import pytest

from opgen.errors import OpgenError
from opgen.infer.base import EngineOptions, Sampling
from opgen.infer.config import EvalConfig, EvalConfigError, EvalRun
from opgen.score.metrics import MetricDefs
from opgen.score.settings import GradeSettings


@pytest.mark.parametrize("kw, field, option", [
    ({"backend": "nope"}, "backend", "--backend"),
    ({"batch_size": 0}, "batch_size", "--batch-size"),
    ({"workers": True}, "workers", "--workers"),
    ({"limit": 0}, "limit", "--limit"),
    ({"decomposed": True, "sampling": Sampling(n=2)}, "decomposed", "--decomposed"),
    ({"backend": "openai"}, "openai", "--base-url"),
    ({"engine": EngineOptions(engine_args=(("max_num_seqs", 8),))}, "engine.engine_args", "--engine-arg"),
    ({"backend": "vllm", "engine": EngineOptions(engine_args=(("seed", 1),))}, "engine.engine_args",
     "--engine-arg"),
    ({"engine": EngineOptions(chat_template_kwargs=(("tools", 1),))}, "engine.chat_template_kwargs",
     "--chat-template-kwarg"),
    ({"grading": "strict"}, "grading", ""),
])
def test_a_bad_field_is_refused_naming_it_and_its_option(kw, field, option):
    base = {"backend": "replay", "sampling": Sampling()}
    with pytest.raises(EvalConfigError) as err:
        EvalConfig(**{**base, **kw})
    assert err.value.field == field and err.value.option == option
    assert str(err.value).startswith(f"{field}: ") and isinstance(err.value, OpgenError)


def test_a_good_config_is_frozen_and_a_run_derives_its_names(tmp_path):
    cfg = EvalConfig(backend="openai", sampling=Sampling(), engine=EngineOptions(chat_template_kwargs=(("a", 1),)),
                     openai=importlib.import_module("opgen.infer.openai_backend").OpenAIOptions())
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.workers = 3  # type: ignore[misc]
    run = EvalRun(models=(Path("r1/step"), Path("r2/step")), data_files=(tmp_path / "a.parquet",), out=tmp_path,
                  config=cfg)  # served models: never checked to exist
    assert run.names == ("r1_step", "r2_step") and run.ray is None
    for kw, field in (({"models": ()}, "models"), ({"models": (Path("a/x"), Path("a/x"))}, "models"),
                      ({"data_files": (Path("a/d.parquet"), Path("b/d.parquet"))}, "data_files"),
                      ({"executor": "slurm"}, "executor")):
        with pytest.raises(EvalConfigError) as err:
            dataclasses.replace(run, **kw)
        assert err.value.field == field
    with pytest.raises(EvalConfigError, match="does not exist"):
        EvalRun(models=(tmp_path / "missing",), data_files=(tmp_path / "a.parquet",), out=tmp_path,
                config=EvalConfig(backend="hf", sampling=Sampling()))


def test_the_cli_builds_the_records(tmp_path, monkeypatch, cli, runner):
    eval_cmd = importlib.import_module("opgen.cli.eval_cmd")  # the module the cli fixture runs
    data = tmp_path / "d.parquet"
    data.write_bytes(b"")
    model = tmp_path / "m.jsonl"
    model.write_text("", encoding="utf-8")
    seen = []
    monkeypatch.setattr(eval_cmd, "_evaluate", seen.append)
    monkeypatch.setattr(eval_cmd, "_check_replay", lambda run: None)
    res = runner.invoke(cli, ["eval", "--model", str(model), "--data", str(data), "--out", str(tmp_path / "o"),
                              "--backend", "replay", "--no-score", "--limit", "3", "--batch-size", "5", "--n", "2",
                              "--temperature", "0.5", "--pass-k", "earliest", "--quiet", "--no-plots"])
    assert res.exit_code == 0, res.output
    want = EvalConfig(backend="replay", sampling=Sampling(n=2, temperature=0.5), limit=3, score=False,
                      batch_size=5, progress=False, grading=GradeSettings(), plots=False,
                      metric_defs=MetricDefs(pass_k="earliest"))
    assert seen == [EvalRun(models=(model,), data_files=(data,), out=tmp_path / "o", config=want)]


@pytest.mark.parametrize("args, message", [
    (["--decomposed", "--n", "2"], "--decomposed draws one sample per recall; use it with --n 1"),
    (["--base-url", "http://h:1/v1"], "--base-url is for --backend openai"),
    (["--engine-arg", "max_num_seqs=8"], "Invalid value for --engine-arg: applies to --backend vllm only"),
    (["--engine-arg", "bad"], "Invalid value for --engine-arg: applies to --backend vllm only"),  # before parsing
])
def test_the_cli_reports_the_records_errors_as_usage_errors(tmp_path, cli, runner, args, message):
    data = tmp_path / "d.parquet"
    data.write_bytes(b"")
    model = tmp_path / "m.jsonl"
    model.write_text("", encoding="utf-8")
    res = runner.invoke(cli, ["eval", "--model", str(model), "--data", str(data), "--out", str(tmp_path / "o"),
                              "--backend", "replay", *args])
    assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output, res.output
