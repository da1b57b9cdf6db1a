#!/usr/bin/env bash
# GRPO on the RL pool rl-r1 with opgen's reward, validated on the eval suite.
#
#   MODEL=/path/to/Qwen3-4B-Base-sft-eco bash examples/verl/run_grpo_rl_r1.sh [extra Hydra overrides...]
#
# Environment: MODEL (required: a local model folder with its tokenizer), DATA (build output,
# default ./data/verl), OPGEN_LIMIT (rows per split, for a smoke run), MAX_RESPONSE_LENGTH (default
# 3072, the study's generation budget), PYTHON (default python3), DRY_RUN=1 (build the data and
# print the verl command instead of running it).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# Same recipe + seed -> byte-identical files: rebuilding gives the same data.
opgen build rl-r1 --out "$DATA/rl-r1" "${limit[@]}"
opgen build eval-suite --out "$DATA/eval-suite" "${limit[@]}"

# Files and prompt lengths from the manifests and the model's own tokenizer.
mapfile -t data_args < <("$PYTHON" "$here/verl_args.py" --kind rl --train "$DATA/rl-r1" \
    --val "$DATA/eval-suite" --tokenizer "$MODEL")
if ! printf '%s\n' "${data_args[@]}" | grep -q '^data.max_response_length='; then
    data_args+=("data.max_response_length=${MAX_RESPONSE_LENGTH:-3072}")
fi

cmd=("$PYTHON" -m verl.trainer.main_ppo --config-path "$here/config" --config-name grpo_rl_r1
     "${data_args[@]}" "actor_rollout_ref.model.path=$MODEL" "$@")
run_or_print "${cmd[@]}"
