"""The registry of backends (opgen.infer.backends): every name the CLI offers starts its backend."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from opgen import infer
from opgen.infer import backends
from opgen.infer.base import BACKENDS, Sampling

CLASSES = {"vllm": ("opgen.infer.vllm_backend", "VLLMBackend"), "hf": ("opgen.infer.hf_backend", "HFBackend"),
           "replay": ("opgen.infer.replay", "ReplayBackend"),
           "openai": ("opgen.infer.openai_backend", "OpenAIBackend")}


def test_every_name_starts_its_backend(monkeypatch):
    # Each name in base.BACKENDS (the CLI's --backend choices) reaches its own class; the classes
    # are replaced by recorders, so nothing is started.
    assert sorted(CLASSES) == sorted(BACKENDS)
    started = []
    for kind, (module, cls) in CLASSES.items():
        monkeypatch.setattr(importlib.import_module(module), cls,
                            lambda *a, _kind=kind, **k: started.append(_kind) or _kind)
    for kind in BACKENDS:
        assert backends.make_backend(kind, Path("m"), Sampling()) == kind
    assert started == list(BACKENDS)


def test_unknown_backend_names_the_choices():
    with pytest.raises(ValueError, match=r"unknown backend 'nope' \(use one of vllm, hf, replay, openai\)"):
        backends.make_backend("nope", Path("."), Sampling())


def test_replay_through_the_package(tmp_path):
    from opgen.infer.replay import ReplayBackend

    src = tmp_path / "r.jsonl"
    src.write_text('{"index": 0, "response": "x"}\n')
    assert infer.make_backend is backends.make_backend
    assert isinstance(infer.make_backend("replay", src, Sampling()), ReplayBackend)


def test_importing_infer_loads_no_engine():
    code = ("import sys, opgen.infer, opgen.infer.backends; "
            "print(sorted(m for m in ('torch', 'vllm', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
