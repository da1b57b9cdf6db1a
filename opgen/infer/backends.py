"""The registry of backends: one frozen :class:`BackendSpec` per inference backend, in one place.

The CLI's ``--backend`` choices, the model checks, which options apply, the Ray pool's replicas and
the loop's batch size read these descriptions, never a backend's name, so a new backend is one
:func:`register_backend` call (tests/test_backends_registry.py registers one from the test).

A spec's ``start`` imports its backend module only when that backend is chosen (so choosing
``replay`` never imports torch or vllm); the backends import ``base`` and never this module, so the
interface and its implementations form no import cycle (tests/test_import_cycles.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opgen.infer.base import Backend, EngineOptions, Sampling

if TYPE_CHECKING:
    from opgen.infer.openai_backend import OpenAIOptions

# what ``--model`` names for a backend
MODEL_KINDS = ("dir", "responses", "served")
# the backend-specific options of `opgen eval` a spec can accept (the others apply to every backend,
# or, as --dtype and the vLLM/transformers knobs, are ignored by backends without an engine)
OPTIONS = ("--engine-arg", "--chat-template-kwarg")


@dataclass(frozen=True)
class BackendSpec:
    """What an inference backend is, in one place.

    ``start(model, sampling, engine, openai)``: the started backend (imports its module itself).
    ``model``: what ``--model`` names: ``dir`` a model directory, ``responses`` a file or folder of
    recorded responses (checked against the data before anything is written), ``served`` a served
    model's name (not a path: never checked to exist).
    ``gpu``: runs an engine on GPUs (a Ray replica takes ``--tensor-parallel-size`` GPUs on a GPU
    cluster). ``servers``: answers through servers at ``--base-url`` (needs one; one Ray replica per
    URL; the ``openai`` options apply). ``engine_batch``: the engine's own batch
    (``--hf-batch-size``) caps the rows handed to it per call. ``options``: which of :data:`OPTIONS`
    apply (any other backend refuses them).
    """

    name: str
    start: Callable[[Path, Sampling, EngineOptions, Any], Backend]
    model: str = "dir"
    gpu: bool = False
    servers: bool = False
    engine_batch: bool = False
    options: frozenset[str] = frozenset()


SPECS: dict[str, BackendSpec] = {}
BACKENDS: tuple[str, ...] = ()  # the registered names, in registration order (a view of SPECS)


def register_backend(spec: BackendSpec) -> BackendSpec:
    """Add a backend (a name taken raises): `opgen eval --backend NAME`, ``EvalConfig(backend=NAME)``
    and the Ray executor then start it."""
    global BACKENDS
    if spec.name in SPECS:
        raise ValueError(f"backend {spec.name!r} is already registered")
    if not spec.name or not spec.name.replace("_", "").replace("-", "").isalnum():
        raise ValueError(f"backend name {spec.name!r}: letters, digits, '-' and '_' only")
    if spec.model not in MODEL_KINDS:
        raise ValueError(f"backend {spec.name!r}: model must be one of {', '.join(MODEL_KINDS)}, got {spec.model!r}")
    unknown = sorted(set(spec.options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"backend {spec.name!r}: unknown options {', '.join(unknown)} (known: {', '.join(OPTIONS)})")
    SPECS[spec.name] = spec
    BACKENDS = tuple(SPECS)
    return spec


def unregister_backend(name: str) -> None:
    global BACKENDS
    backend_spec(name)
    del SPECS[name]
    BACKENDS = tuple(SPECS)


def backend_spec(kind: str) -> BackendSpec:
    """The registered backend of that name; an unknown name raises ValueError naming the choices."""
    spec = SPECS.get(kind)
    if spec is None:
        raise ValueError(f"unknown backend {kind!r} (use one of {', '.join(BACKENDS)})")
    return spec


def accepting(option: str) -> tuple[str, ...]:
    """The backends an option of :data:`OPTIONS` applies to, in registration order."""
    return tuple(s.name for s in SPECS.values() if option in s.options)


def make_backend(kind: str, model: Path, sampling: Sampling, options: EngineOptions | None = None,
                 openai: OpenAIOptions | None = None) -> Backend:
    """Start the backend ``kind`` for ``model`` (a model directory, for replay a responses file/dir,
    for openai the served model's name); ``openai`` is an ``openai_backend.OpenAIOptions``."""
    return backend_spec(kind).start(model, sampling, options or EngineOptions(), openai)


def _vllm(model: Path, sampling: Sampling, engine: EngineOptions, openai: Any) -> Backend:
    from opgen.infer.vllm_backend import VLLMBackend
    return VLLMBackend(model, sampling, engine)


def _hf(model: Path, sampling: Sampling, engine: EngineOptions, openai: Any) -> Backend:
    from opgen.infer.hf_backend import HFBackend
    return HFBackend(model, sampling, engine)


def _replay(model: Path, sampling: Sampling, engine: EngineOptions, openai: Any) -> Backend:
    from opgen.infer.replay import ReplayBackend
    return ReplayBackend(model)


def _openai(model: Path, sampling: Sampling, engine: EngineOptions, openai: Any) -> Backend:
    from opgen.infer.openai_backend import OpenAIBackend, OpenAIOptions
    return OpenAIBackend(model, sampling, openai or OpenAIOptions(), chat_template_kwargs=engine.chat_template_kwargs)


for _spec in (
    BackendSpec("vllm", _vllm, gpu=True, options=frozenset(OPTIONS)),
    BackendSpec("hf", _hf, gpu=True, engine_batch=True, options=frozenset({"--chat-template-kwarg"})),
    BackendSpec("replay", _replay, model="responses"),
    BackendSpec("openai", _openai, model="served", servers=True, options=frozenset({"--chat-template-kwarg"})),
):
    register_backend(_spec)
