"""The registry of backends: how to start each backend named in ``base.BACKENDS``.

This module imports the backend modules, each only when its backend is chosen (so choosing
``replay`` never imports torch or vllm); the backends import ``base`` and never this module, so the
interface and its implementations form no import cycle (tests/test_import_cycles.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from opgen.infer.base import BACKENDS, Backend, EngineOptions, Sampling

if TYPE_CHECKING:
    from opgen.infer.openai_backend import OpenAIOptions


def make_backend(kind: str, model: Path, sampling: Sampling, options: EngineOptions | None = None,
                 replay_data_name: str | None = None, openai: OpenAIOptions | None = None) -> Backend:
    """Start the backend ``kind`` for ``model`` (a model directory, for replay a responses file/dir,
    for openai the served model's name); ``openai`` is an ``openai_backend.OpenAIOptions``."""
    options = options or EngineOptions()
    if kind == "vllm":
        from opgen.infer.vllm_backend import VLLMBackend
        return VLLMBackend(model, sampling, options)
    if kind == "hf":
        from opgen.infer.hf_backend import HFBackend
        return HFBackend(model, sampling, options)
    if kind == "replay":
        from opgen.infer.replay import ReplayBackend
        return ReplayBackend(model)
    if kind == "openai":
        from opgen.infer.openai_backend import OpenAIBackend, OpenAIOptions
        return OpenAIBackend(model, sampling, openai or OpenAIOptions(),
                             chat_template_kwargs=options.chat_template_kwargs)
    raise ValueError(f"unknown backend {kind!r} (use one of {', '.join(BACKENDS)})")
