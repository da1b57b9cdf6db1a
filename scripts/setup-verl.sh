#!/usr/bin/env bash
# Install verl into its own virtual environment, beside (never inside) the system Python.
#
#   bash scripts/setup-verl.sh [VENV]        # default VENV: .venv-verl in the repository root
#
# Idempotent: a venv whose pinned versions already import is left as it is, so CI can call this
# on every run. verl pulls ray, transformers, datasets, wandb...: about 2 GB and a few minutes.
# Versions are pinned exactly because tests/test_verl_compat.py checks verl's own classes, whose
# constructor signatures and config keys change between minor releases.
set -euo pipefail

VERL_VERSION="0.9.1"
# The CPU build of this torch lies on the project's machines (pip's find-links); verl needs torch
# but none of the CUDA wheels, and installing torch first stops pip from picking a CUDA build.
TORCH_VERSION="2.13.0"
# verl.trainer.sft_trainer imports the rollout server's web stack at module level; the suite
# imports the trainer to run its own config checks (SFTTrainer._build_config).
# verl.experimental.agent_loop (the multi-turn rollouts; opgen.integrations.verl_agent) imports cachetools,
# which verl 0.9.1 does not declare.
SERVER_PKGS=("uvicorn==0.54.0" "fastapi==0.165.0" "cachetools>=5")

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-$repo/.venv-verl}"
py="${PYTHON:-python3}"

if [[ ! -x "$venv/bin/python" ]]; then
    "$py" -m venv "$venv"
fi
vpy="$venv/bin/python"

installed() {
    "$vpy" - "$VERL_VERSION" "$TORCH_VERSION" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
verl, torch = sys.argv[1], sys.argv[2]
ok = version("verl") == verl and version("torch").split("+")[0] == torch
import verl.utils.dataset.rl_dataset, verl.utils.dataset.multiturn_sft_dataset  # noqa: E401,F401
import uvicorn, fastapi  # noqa: E401,F401
import opgen  # noqa: F401
sys.exit(0 if ok else 1)
PY
}

if installed; then
    echo "setup-verl: verl==$VERL_VERSION and torch==$TORCH_VERSION already in $venv"
    # The opgen checkout may have moved or gained dependencies: keep the editable install current.
    "$vpy" -m pip install --quiet -e "$repo[test]"
    exit 0
fi

start=$(date +%s)
"$vpy" -m pip install --quiet --upgrade pip
"$vpy" -m pip install --quiet "torch==$TORCH_VERSION"
"$vpy" -m pip install --quiet "verl==$VERL_VERSION" "${SERVER_PKGS[@]}"
"$vpy" -m pip install --quiet -e "$repo[test]"
installed || { echo "setup-verl: verl did not import after install in $venv" >&2; exit 1; }
echo "setup-verl: installed verl==$VERL_VERSION into $venv in $(( $(date +%s) - start )) s" \
     "($(du -sh "$venv" | cut -f1))"
