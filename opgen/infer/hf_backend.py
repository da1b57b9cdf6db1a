"""transformers: plain ``generate`` with left padding, for machines without vLLM."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from opgen.infer.base import (
    LENGTH,
    STOP,
    Backend,
    BackendError,
    EngineOptions,
    Generation,
    Request,
    Sampling,
    check_model_dir,
)


class HFBackend(Backend):
    name = "hf"

    def __init__(self, model: Path, sampling: Sampling, options: EngineOptions):
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as exc:
            raise BackendError(f"the hf backend needs torch and transformers (pip install 'opgen[hf]'): "
                               f"{exc}") from None
        check_model_dir(model)
        self.torch = torch
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        dtype = options.dtype
        torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype, None)
        if torch_dtype is None:
            raise BackendError(f"unknown dtype {dtype!r}")
        try:
            self.tok = AutoTokenizer.from_pretrained(str(model), trust_remote_code=options.trust_remote_code)
            self.model = AutoModelForCausalLM.from_pretrained(
                str(model), dtype=torch_dtype, trust_remote_code=options.trust_remote_code).to(self.device)
        except Exception as exc:
            raise BackendError(f"transformers could not load {model}: {type(exc).__name__}: {exc}") from exc
        self.model.eval()
        if self.tok.chat_template is None:
            raise BackendError(f"{model}: the tokenizer has no chat_template")
        self.tok.padding_side = "left"
        if self.tok.pad_token_id is None:
            self.tok.pad_token = self.tok.eos_token
        self.eos_ids = self._eos_ids()
        self.batch_size = max(1, options.batch_size)
        self.template_kwargs = dict(options.chat_template_kwargs)
        self.max_model_len = sampling.max_model_len or getattr(self.model.config, "max_position_embeddings", None)

    def _eos_ids(self) -> set[int]:
        ids = set()
        gen_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        for value in (self.tok.eos_token_id, gen_eos):
            if isinstance(value, int):
                ids.add(value)
            elif isinstance(value, list):
                ids.update(v for v in value if isinstance(v, int))
        return ids

    def _prompt_ids(self, req: Request) -> list[int]:
        text = self.tok.apply_chat_template(
            req.conversation(), tokenize=False,
            add_generation_prompt=not req.continues, continue_final_message=req.continues, **self.template_kwargs)
        # the template already writes any BOS it wants
        return self.tok(text, add_special_tokens=False)["input_ids"]

    def generate(self, requests: Sequence[Request], sampling: Sampling) -> list[Generation]:
        out: list[Generation] = []
        for start in range(0, len(requests), self.batch_size):
            out.extend(self._generate_batch(requests[start:start + self.batch_size], sampling))
        return out

    def _generate_batch(self, requests: Sequence[Request], sampling: Sampling) -> list[Generation]:
        torch = self.torch
        prompts = [self._prompt_ids(r) for r in requests]
        longest = max(len(p) for p in prompts)
        max_new = sampling.max_new_tokens
        if self.max_model_len is not None:
            if longest >= self.max_model_len:
                raise BackendError(f"prompt of request {requests[0].key}.. has {longest} tokens, "
                                   f"max model length is {self.max_model_len}")
            max_new = min(max_new, self.max_model_len - longest)
        pad = self.tok.pad_token_id
        input_ids = torch.tensor([[pad] * (longest - len(p)) + p for p in prompts], device=self.device)
        attention = torch.tensor([[0] * (longest - len(p)) + [1] * len(p) for p in prompts], device=self.device)
        kwargs: dict = dict(
            max_new_tokens=max_new, num_return_sequences=sampling.n, pad_token_id=pad,
            eos_token_id=sorted(self.eos_ids) or None,
        )
        if sampling.greedy:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            kwargs.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=0)
        if sampling.stop:
            kwargs.update(stop_strings=list(sampling.stop), tokenizer=self.tok)
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        with torch.no_grad():
            seqs = self.model.generate(input_ids=input_ids, attention_mask=attention, **kwargs)
        new = seqs[:, longest:].tolist()
        gens = []
        for i, req in enumerate(requests):
            texts, reasons, counts = [], [], []
            for ids in new[i * sampling.n:(i + 1) * sampling.n]:
                text, reason, count = self._finish(ids, pad, max_new, sampling.stop)
                texts.append(text)
                reasons.append(reason)
                counts.append(count)
            gens.append(Generation(req.key, texts, reasons, len(prompts[i]), counts))
        return gens

    def _finish(self, ids: list[int], pad: int, max_new: int, stop: Sequence[str]) -> tuple[str, str, int]:
        """Cut a generated row at its end of sequence; say why it ended, as vLLM would."""
        for j, t in enumerate(ids):
            if t in self.eos_ids:
                return self.tok.decode(ids[:j], skip_special_tokens=True), STOP, j + 1
        # rows that ended early are padded on the right (pad may equal eos, handled above)
        while ids and ids[-1] == pad and pad not in self.eos_ids:
            ids = ids[:-1]
        text = self.tok.decode(ids, skip_special_tokens=True)
        cuts = [c for c in (text.find(s) for s in stop) if c >= 0]
        if cuts:
            return text[:min(cuts)], STOP, len(ids)
        return text, (LENGTH if len(ids) >= max_new else STOP), len(ids)

    def close(self) -> None:
        self.model = None
