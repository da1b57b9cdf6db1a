"""Inference for `opgen eval`: backends that turn chat prompts into responses, and the resumable loop.

Backends (vLLM, transformers, replay) share one interface (`base.Backend`) and are imported only
when chosen, so importing `opgen.infer` never pulls in torch or vllm.
"""

from __future__ import annotations

from opgen.infer.backends import make_backend
from opgen.infer.base import Backend, Generation, Request, Sampling

__all__ = ["Backend", "Generation", "Request", "Sampling", "make_backend"]
