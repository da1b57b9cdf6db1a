"""The registry of backends (opgen.infer.backends): one frozen BackendSpec per backend.

Every name the CLI offers starts its backend; the capabilities the CLI, the loop and the Ray pool
read come from the spec; a new backend is one register call (made here, touching no package file).
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import tiny_model as tm

from opgen import infer
from opgen.infer import backends
from opgen.infer import evaluate as ev
from opgen.infer.base import Backend, EngineOptions, Generation, Sampling

CLASSES = {"vllm": ("opgen.infer.vllm_backend", "VLLMBackend"), "hf": ("opgen.infer.hf_backend", "HFBackend"),
           "replay": ("opgen.infer.replay", "ReplayBackend"),
           "openai": ("opgen.infer.openai_backend", "OpenAIBackend")}


def test_every_name_starts_its_backend(monkeypatch):
    # Each registered name (the CLI's --backend choices) reaches its own class; the classes are
    # replaced by recorders, so nothing is started.
    assert backends.BACKENDS == tuple(backends.SPECS) == ("vllm", "hf", "replay", "openai")
    assert sorted(CLASSES) == sorted(backends.BACKENDS)
    started = []
    for kind, (module, cls) in CLASSES.items():
        monkeypatch.setattr(importlib.import_module(module), cls,
                            lambda *a, _kind=kind, **k: started.append(_kind) or _kind)
    for kind in backends.BACKENDS:
        assert backends.make_backend(kind, Path("m"), Sampling()) == kind
    assert started == list(backends.BACKENDS)


def test_the_builtin_capabilities():
    spec = backends.backend_spec
    assert [s.name for s in backends.SPECS.values() if s.gpu] == ["vllm", "hf"]
    assert [s.name for s in backends.SPECS.values() if s.servers] == ["openai"]
    assert [s.name for s in backends.SPECS.values() if s.engine_batch] == ["hf"]
    assert (spec("replay").model, spec("openai").model, spec("vllm").model) == ("responses", "served", "dir")
    assert backends.accepting("--engine-arg") == ("vllm",)
    assert backends.accepting("--chat-template-kwarg") == ("vllm", "hf", "openai")


def test_unknown_backend_names_the_choices():
    with pytest.raises(ValueError, match=r"unknown backend 'nope' \(use one of vllm, hf, replay, openai\)"):
        backends.make_backend("nope", Path("."), Sampling())


def test_a_spec_must_be_complete():
    start = backends.SPECS["replay"].start
    with pytest.raises(ValueError, match="already registered"):
        backends.register_backend(backends.BackendSpec("hf", start))
    with pytest.raises(ValueError, match="model must be one of"):
        backends.register_backend(backends.BackendSpec("x", start, model="url"))
    with pytest.raises(ValueError, match="unknown options --dtype"):
        backends.register_backend(backends.BackendSpec("x", start, options=frozenset({"--dtype"})))
    with pytest.raises(ValueError, match="letters, digits"):
        backends.register_backend(backends.BackendSpec("a b", start))
    assert "x" not in backends.SPECS


def test_replay_through_the_package(tmp_path):
    from opgen.infer.replay import ReplayBackend

    src = tmp_path / "r.jsonl"
    src.write_text('{"index": 0, "response": "x"}\n')
    assert infer.make_backend is backends.make_backend
    assert isinstance(infer.make_backend("replay", src, Sampling()), ReplayBackend)


def test_importing_infer_loads_no_engine():
    code = ("import sys, opgen.infer, opgen.infer.backends, opgen.cli.eval_cmd, opgen.distributed.driver, "
            "opgen.distributed.ray_executor; "
            "print(sorted(m for m in ('torch', 'vllm', 'transformers', 'ray') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ------------------------------------------------------------------ a backend registered from here


class EchoGold(Backend):
    """Answers every tiny_model tree with its gold answer, but row 1 with a wrong one."""

    name = "echo_gold"

    def __init__(self, model: Path, sampling: Sampling, engine: EngineOptions):
        self.model, self.closed = model, False

    def generate(self, requests, sampling):
        out = []
        for req in requests:
            i = int(req.key)
            text = tm.ra_answer(tm.TREES[i][0]) if i != 1 else "no program"
            out.append(Generation(req.key, [text] * sampling.n, ["stop"] * sampling.n, 7, [3] * sampling.n))
        return out


@pytest.fixture
def echo():
    spec = backends.register_backend(backends.BackendSpec(
        "echo_gold", lambda model, sampling, engine, openai: EchoGold(model, sampling, engine), model="served"))
    try:
        yield spec
    finally:
        backends.unregister_backend(spec.name)
    assert "echo_gold" not in backends.BACKENDS


def _accs(path: Path) -> dict[int, float]:
    return {r["index"]: r["acc"] for r in map(json.loads, path.read_text().splitlines())}


def test_a_registered_backend_evaluates_end_to_end(echo, tmp_path):
    data = tm.write_trees(tmp_path / "trees.parquet")
    cfg = ev.EvalConfig(backend="echo_gold", sampling=Sampling(), progress=False, plots=False)
    metrics = ev.evaluate_model(Path("served-name"), "echo", [data], tmp_path / "out", cfg)
    assert metrics["backend"] == "echo_gold"
    accs = _accs(tmp_path / "out" / "echo" / "trees" / "scores.jsonl")
    assert accs == {i: (0.0 if i == 1 else 1.0) for i in range(len(tm.TREES))}


def test_a_registered_backend_is_a_cli_choice(echo, runner, cli, tmp_path):
    data = tm.write_trees(tmp_path / "trees.parquet")
    out = tmp_path / "out"
    # a served model's name is not a path: it need not exist
    res = runner.invoke(cli, ["eval", "--backend", "echo_gold", "--model", "srv", "--data", str(data),
                              "--out", str(out), "--quiet", "--no-plots", "--allow-weak-sandbox"],
                        catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert _accs(out / "srv" / "trees" / "scores.jsonl")[1] == 0.0
    # options of other backends are refused, naming the backends they apply to
    res = runner.invoke(cli, ["eval", "--backend", "echo_gold", "--model", "srv", "--data", str(data),
                              "--out", str(tmp_path / "o2"), "--engine-arg", "a=1"])
    assert res.exit_code == 2 and "applies to --backend vllm only (this run: echo_gold)" in res.output
    res = runner.invoke(cli, ["eval", "--backend", "echo_gold", "--model", "srv", "--data", str(data),
                              "--out", str(tmp_path / "o3"), "--base-url", "http://127.0.0.1:1/v1"])
    assert res.exit_code == 2 and "--base-url is for --backend openai" in res.output


def test_an_unregistered_backend_is_no_cli_choice(runner, cli, tmp_path):
    data = tm.write_trees(tmp_path / "trees.parquet")
    res = runner.invoke(cli, ["eval", "--backend", "echo_gold", "--model", "srv", "--data", str(data),
                              "--out", str(tmp_path / "out")])
    assert res.exit_code == 2 and "'echo_gold' is not one of 'vllm', 'hf', 'replay', 'openai'" in res.output
