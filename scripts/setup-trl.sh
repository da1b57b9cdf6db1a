#!/usr/bin/env bash
# Builds the environment of the trainer-adapter test group (pytest marker `trl`): TRL, verifiers (0.4: the
# verifiers.v1 stack opgen.integrations.verifiers is written against), lm-eval, openenv-core (OpenEnv's
# client, driving opgen serve's /openenv), OpenRLHF's argument parser,
# the CPU torch that lies on this machine's disk, transformers, plus opgen itself (editable, with its
# test and serve extras). Kept outside the main environment so the light suite never imports torch.
# Idempotent: rerunning on an existing venv only re-checks the pins.
#
#   bash scripts/setup-trl.sh [VENV]        (default /work/venvs/trl)
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/venv.sh" "${1:-/work/venvs/trl}"

# torch first and pinned: a plain 'torch' (as trl asks) would otherwise pull a CUDA build of several
# GB; 2.13.0 is the CPU build on this machine's disk, and trl's range then keeps it.
"${PIP[@]}" install --quiet "torch==2.13.0"
"${PIP[@]}" install --quiet "trl>=0.20,<2" "verifiers>=0.4,<0.5" "lm-eval>=0.4.5,<0.5" "openenv-core==0.3.0"
# OpenRLHF without its GPU stack (ray, deepspeed, vllm, flash-attn): the tests read its argument parser only
# (tests/test_trainer_command_lines.py), so a flag a release renames fails CI.
"${PIP[@]}" install --quiet --no-deps "openrlhf==0.11.2"
"${PIP[@]}" install --quiet -e "$REPO[test,serve,hf]"

"$VENV/bin/python" - <<'PY'
import lm_eval, openenv.core.generic_client, torch, transformers, trl, verifiers  # noqa: F401
print("torch", torch.__version__, "| transformers", transformers.__version__, "| trl", trl.__version__,
      "| verifiers", getattr(verifiers, "__version__", "?"))
PY
