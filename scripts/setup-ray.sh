#!/usr/bin/env bash
# Builds the environment of the Ray test group: ray with Ray Serve (the ray extra: ray[serve], for
# `opgen serve --ray`), the CPU torch that lies on this machine's disk,
# transformers and tokenizers (the hf backend on the tiny test model), plus opgen itself (editable,
# with its test extras; the test extra brings starlette and uvicorn for the served app). Kept outside
# the system Python so the light suite never imports ray or torch.
# Idempotent: rerunning on an existing venv only re-checks the pins.
#
#   bash scripts/setup-ray.sh [VENV]        (default /work/venvs/ray)
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/venv.sh" "${1:-/work/venvs/ray}"

# torch first and pinned: plain 'torch' (as the hf extra asks) would otherwise pull a CUDA build of
# several GB; 2.13.0 is the CPU build on this machine's disk, and the extras' ranges then keep it.
"${PIP[@]}" install --quiet "torch==2.13.0"
"${PIP[@]}" install --quiet -e "$REPO[test,ray,hf]"

"$VENV/bin/python" - <<'PY'
import ray, ray.serve, starlette, torch, transformers  # noqa: F401
print("ray", ray.__version__, "| torch", torch.__version__, "| transformers", transformers.__version__)
PY
