"""What an evaluation is, as two frozen records validated when they are made (before any model loads).

``EvalConfig``: how each model is evaluated (backend, sampling, engine, scorer settings, ...), read
by the local loop (`opgen.infer.evaluate.evaluate_model`) and by the Ray sweep
(`opgen.distributed.driver.evaluate_sweep`). ``EvalRun``: one `opgen eval` — every model on every
data file under one output folder, with its executor. `opgen eval` builds both from its options;
a researcher builds them in Python (docs/eval.md, From Python). A bad value raises
:class:`EvalConfigError`, naming the field and the `opgen eval` option it comes from.

Composed of the records that already describe their part: `opgen.infer.base.Sampling` and
`EngineOptions`, `opgen.infer.openai_backend.OpenAIOptions`, `opgen.score.settings.GradeSettings`,
`opgen.score.metrics.MetricDefs`, `RayOptions` (defined here; `opgen.distributed.ray_executor` re-exports it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from opgen.choices import EXECUTORS
from opgen.errors import USAGE, OpgenError
from opgen.infer import backends
from opgen.infer.base import EngineOptions, Sampling, check_chat_template_kwargs
from opgen.score.metrics import MetricDefs
from opgen.score.settings import DEFAULT as DEFAULT_GRADING
from opgen.score.settings import GradeSettings

if TYPE_CHECKING:
    from opgen.infer.openai_backend import OpenAIOptions


class EvalConfigError(ValueError, OpgenError):
    """An ``EvalConfig``/``EvalRun`` field that cannot be: ``field`` (the record's), ``option`` (the
    `opgen eval` option it comes from), ``reason`` (names the option); ``usage``: a combination of
    options rather than one bad value."""

    exit_code = USAGE

    def __init__(self, field: str, option: str, reason: str, usage: bool = False):
        super().__init__(f"{field}: {reason}")
        self.field, self.option, self.reason, self.usage = field, option, reason, usage


def data_name(path: Path) -> str:
    """A data file's name in the output folder (``heldout.parquet`` -> ``heldout``)."""
    return Path(path).name.removesuffix(".parquet")


def _phrase(names: tuple[str, ...]) -> str:
    """``vllm only`` / ``vllm, hf and openai``."""
    return f"{names[0]} only" if len(names) == 1 else ", ".join(names[:-1]) + f" and {names[-1]}"


def _count(field: str, option: str, value: object, least: int, none: bool = False) -> None:
    if none and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise EvalConfigError(field, option, f"{option} must be an integer >= {least}, not {value!r}")


def _kind(field: str, value: object, kind: type, none: bool = False) -> None:
    if (value is None and none) or isinstance(value, kind):
        return
    raise EvalConfigError(field, "", f"must be a {kind.__name__}{' or None' if none else ''}, not {value!r}")


# EngineOptions's field of each backend-specific option (opgen.infer.backends.OPTIONS)
_OPTION_FIELDS = {"--engine-arg": "engine_args", "--chat-template-kwarg": "chat_template_kwargs"}


def check_backend_takes(backend: str, option: str) -> None:
    """``option`` (one of opgen.infer.backends.OPTIONS) given: EvalConfigError unless ``backend``
    takes it (`opgen eval` asks before parsing the option's values)."""
    if option not in backends.backend_spec(backend).options:
        raise EvalConfigError(f"engine.{_OPTION_FIELDS[option]}", option, f"applies to --backend "
                              f"{_phrase(backends.accepting(option))} (this run: {backend})")


@dataclass(frozen=True)
class EvalConfig:
    """How each model is evaluated; the `opgen eval` option of each field in its comment."""

    backend: str  # --backend: a name of opgen.infer.backends' registry
    sampling: Sampling  # --max-new-tokens, --n, --temperature, --top-p, --seed, --max-model-len
    engine: EngineOptions = EngineOptions()  # --dtype, --gpu-memory-utilization, ..., --engine-arg
    limit: int | None = None  # --limit
    resume: bool = False  # --resume
    decomposed: bool = False  # --decomposed
    score: bool = True  # not --no-score
    batch_size: int = 256  # --batch-size
    workers: int = 2  # --workers
    progress: bool = True  # not --no-progress / --quiet
    openai: OpenAIOptions | None = None  # --base-url, --api-key-env, ... (backends with servers)
    # how the scorer grades (opgen eval --namespace, --no-static, --library; docs/scoring.md)
    grading: GradeSettings = DEFAULT_GRADING
    metric_defs: MetricDefs | None = None  # --drift-call / --pass-k (docs/scoring.md, Metric definitions)
    plots: bool = True  # the scorer's plots (--no-plots: none)

    def __post_init__(self) -> None:
        if self.backend not in backends.SPECS:
            raise EvalConfigError("backend", "--backend", f"{self.backend!r} is not one of "
                                  f"{', '.join(map(repr, backends.BACKENDS))}")
        spec = backends.backend_spec(self.backend)
        _kind("sampling", self.sampling, Sampling)
        _kind("engine", self.engine, EngineOptions)
        _kind("grading", self.grading, GradeSettings)
        if self.metric_defs is not None:
            _kind("metric_defs", self.metric_defs, MetricDefs)
        _count("limit", "--limit", self.limit, 1, none=True)
        _count("batch_size", "--batch-size", self.batch_size, 1)
        _count("workers", "--workers", self.workers, 1)
        for name in ("resume", "decomposed", "score", "progress", "plots"):
            _kind(name, getattr(self, name), bool)
        if self.decomposed and self.sampling.n != 1:
            raise EvalConfigError("decomposed", "--decomposed",
                                  "--decomposed draws one sample per recall; use it with --n 1", usage=True)
        if spec.servers and self.openai is None:
            raise EvalConfigError("openai", "--base-url", f"--backend {self.backend} needs --base-url "
                                  f"(e.g. http://127.0.0.1:8000/v1)", usage=True)
        if not spec.servers and self.openai is not None:
            servers = tuple(s.name for s in backends.SPECS.values() if s.servers)
            raise EvalConfigError("openai", "--base-url", f"--base-url is for --backend {' or '.join(servers)}",
                                  usage=True)
        if self.openai is not None:
            from opgen.infer.openai_backend import OpenAIOptions

            _kind("openai", self.openai, OpenAIOptions)
        self._check_pairs("engine_args", "--engine-arg")
        self._check_pairs("chat_template_kwargs", "--chat-template-kwarg")

    def _check_pairs(self, name: str, option: str) -> None:
        """``engine.engine_args`` / ``engine.chat_template_kwargs``: for a backend that takes them,
        sorted unique keys, none that opgen sets itself."""
        pairs = getattr(self.engine, name)
        if not pairs:
            return
        check_backend_takes(self.backend, option)
        keys = [k for k, _ in pairs]
        if keys != sorted(set(keys)):
            raise EvalConfigError(f"engine.{name}", option, f"{option}: the keys must be unique and sorted, "
                                  f"not {keys}")
        from opgen.infer.vllm_backend import check_engine_args

        try:
            (check_engine_args if name == "engine_args" else check_chat_template_kwargs)(dict(pairs))
        except ValueError as exc:
            raise EvalConfigError(f"engine.{name}", option, str(exc)) from None


def model_names(models: tuple[Path, ...]) -> tuple[str, ...]:
    """Output folder names: the models' names; where two checkpoints share one (run1/step100,
    run2/step100) the parent joins in. Two left equal: EvalConfigError."""
    names = [m.name.removesuffix(".jsonl").removesuffix(".parquet") for m in models]
    if len(set(names)) < len(names):
        names = [f"{m.parent.name}_{n}" if names.count(n) > 1 else n for m, n in zip(models, names)]
    if len(set(names)) < len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise EvalConfigError("models", "--model", f"two models would both be written to {dup[0]!r}; "
                              f"give distinct paths")
    return tuple(names)


@dataclass(frozen=True)
class RayOptions:
    """How `--executor ray` runs: the cluster, the replicas and their resources, the chunks."""

    address: str | None = None  # None: start a local cluster (127.0.0.1 only)
    replicas: int | None = None  # None: one per GPU group of the cluster, else 1 (openai: one per base URL)
    replica_gpus: float | None = None  # None: the tensor-parallel size on a GPU cluster, else 0
    replica_cpus: float = 1.0
    num_cpus: int | None = None  # the local cluster's CPUs (None: this machine's)
    chunk_rows: int = 1024
    depth: int = 2  # chunks in flight per replica (one generating, one waiting)


@dataclass(frozen=True)
class EvalRun:
    """One `opgen eval`: every model (--model) on every data file (--data) under ``out`` (--out),
    each evaluated per ``config``, on ``executor`` (--executor; ``ray``: ``ray`` its options, the
    defaults if None). ``names``: each model's output folder (derived)."""

    models: tuple[Path, ...]
    data_files: tuple[Path, ...]
    out: Path
    config: EvalConfig
    executor: str = "local"
    ray: RayOptions | None = None
    names: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "models", tuple(Path(m) for m in self.models))
        object.__setattr__(self, "data_files", tuple(Path(d) for d in self.data_files))
        object.__setattr__(self, "out", Path(self.out))
        _kind("config", self.config, EvalConfig)
        if not self.models:
            raise EvalConfigError("models", "--model", "no model given")
        if not self.data_files:
            raise EvalConfigError("data_files", "--data", "no data file given")
        if self.executor not in EXECUTORS:
            raise EvalConfigError("executor", "--executor", f"{self.executor!r} is not one of "
                                  f"{', '.join(map(repr, EXECUTORS))}")
        if self.executor == "ray":
            object.__setattr__(self, "ray", self.ray if self.ray is not None else RayOptions())
            _kind("ray", self.ray, RayOptions)
        elif self.ray is not None:
            raise EvalConfigError("ray", "--executor", "Ray options: only with --executor ray", usage=True)
        if backends.backend_spec(self.config.backend).model != "served":
            for m in self.models:
                if not m.exists():
                    raise EvalConfigError("models", "--model", f"{m} does not exist")
        object.__setattr__(self, "names", model_names(self.models))
        data_names = [data_name(d) for d in self.data_files]
        if len(set(data_names)) < len(data_names):
            raise EvalConfigError("data_files", "--data", f"two data files are both named "
                                  f"{sorted(data_names)[0]!r}")
