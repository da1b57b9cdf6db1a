"""The backend interface: requests in, generations out, with explicit sampling parameters."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from opgen.errors import OpgenError

# finish reasons every backend reports, in vLLM's words
STOP = "stop"
LENGTH = "length"


class BackendError(RuntimeError, OpgenError):
    """A backend could not be started or could not answer (missing package, bad model dir, ...)."""

    exit_code = 1


class PartialGeneration(BackendError):
    """Some requests of one ``generate`` call failed; the others were answered. ``results`` holds a
    Generation per request (None where it failed), ``errors`` the reason per failed request's
    position. The loop writes the answered rows and records the failed ones for ``--resume``."""

    def __init__(self, message: str, results: Sequence[Generation | None], errors: dict[int, str]):
        super().__init__(message)
        self.results = list(results)
        self.errors = dict(errors)


def check_model_dir(model: Path) -> None:
    """A model backend's folder must be a Hugging Face model directory (it has a config.json)."""
    if not (Path(model) / "config.json").is_file():
        raise BackendError(f"{model} is not a model directory (no config.json)")


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters, always passed explicitly: vLLM's own default of 16 new tokens would
    silently truncate every program."""

    max_new_tokens: int = 3072
    n: int = 1
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    seed: int | None = None
    max_model_len: int | None = None
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_model_len is not None and self.max_model_len < 1:
            raise ValueError(f"max_model_len must be >= 1, got {self.max_model_len}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["stop"] = list(self.stop)
        return d


@dataclass(frozen=True)
class Request:
    """One prompt: chat messages, optionally with an assistant message the model must continue."""

    key: str  # unique within one generate() call; the loop uses "<row index>" or "<row index>/<op>"
    messages: tuple[tuple[str, str], ...]  # (role, content)
    assistant_prefix: str = ""
    prompt_sha256: str = ""  # of the data row; replay checks it against the recorded one

    def conversation(self) -> list[dict[str, str]]:
        """The messages a chat template renders; a prefix becomes a final assistant turn to continue."""
        conv = [{"role": role, "content": content} for role, content in self.messages]
        if self.assistant_prefix:
            conv.append({"role": "assistant", "content": self.assistant_prefix})
        return conv

    @property
    def continues(self) -> bool:
        return bool(self.assistant_prefix)


def prompt_sha256(messages: Sequence[tuple[str, str]] | Sequence[dict], assistant_prefix: str = "") -> str:
    """A digest of what the model is shown, so resume and replay can tell a changed data file."""
    pairs = [(m["role"], m["content"]) if isinstance(m, dict) else (m[0], m[1]) for m in messages]
    blob = json.dumps({"messages": pairs, "assistant_prefix": assistant_prefix},
                      ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass
class Generation:
    """A request's samples. ``responses`` hold only the generated text (never the prefix)."""

    key: str
    responses: list[str]
    finish_reasons: list[str]
    prompt_tokens: int = -1
    completion_tokens: list[int] = field(default_factory=list)


class Backend:
    """Turns requests into generations. Subclasses load their model in ``__init__`` and free it in
    ``close``; ``generate`` must return one Generation per request, in request order."""

    name = "base"

    def generate(self, requests: Sequence[Request], sampling: Sampling) -> list[Generation]:
        raise NotImplementedError

    def begin_data(self, data_name: str) -> None:
        """Called before the requests of each data file (replay picks that file's responses)."""

    def close(self) -> None:
        pass

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class EngineOptions:
    """Model-loading options shared by the model backends (ignored by replay)."""

    dtype: str = "auto"
    gpu_memory_utilization: float | None = None  # None: 0.9 on a GPU, 0.1 on CPU (host RAM share)
    enforce_eager: bool = False
    tensor_parallel_size: int = 1
    batch_size: int = 8  # transformers only: prompts per generate() call
    trust_remote_code: bool = False
    # vLLM only: more keyword arguments of vllm.LLM(...) (``--engine-arg KEY=VALUE``), sorted by key.
    engine_args: tuple[tuple[str, object], ...] = ()
    # vllm, hf, openai: variables of the chat template (``--chat-template-kwarg KEY=VALUE``, e.g.
    # enable_thinking=false), sorted by key: llm.chat(chat_template_kwargs=...), the tokenizer's
    # apply_chat_template(**...), the request's "chat_template_kwargs".
    chat_template_kwargs: tuple[tuple[str, object], ...] = ()


# apply_chat_template's own parameters, which opgen sets per request (a row with an assistant
# prefix continues its final message) or which are not template variables
OWN_TEMPLATE_ARGS = ("add_generation_prompt", "continue_final_message", "tokenize", "conversation", "messages",
                     "chat_template", "tools", "documents", "return_dict", "return_tensors")


def check_chat_template_kwargs(kwargs: dict) -> None:
    """Refuse a key opgen sets itself, or a value JSON cannot carry (ValueError naming the key)."""
    for key in sorted(kwargs):
        if key in OWN_TEMPLATE_ARGS:
            raise ValueError(f"--chat-template-kwarg {key}: opgen sets this itself (or it is no template variable)")
        try:
            json.dumps(kwargs[key], allow_nan=False)
        except (TypeError, ValueError):
            raise ValueError(f"--chat-template-kwarg {key}: {kwargs[key]!r} is not a JSON value (quote it "
                             f"to pass a string)") from None
