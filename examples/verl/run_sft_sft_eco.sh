#!/usr/bin/env bash
# SFT on the recall-then-assemble cell sft-eco with verl's multi-turn SFT trainer.
#
#   MODEL=/path/to/Qwen3-4B-Base NGPUS=8 bash examples/verl/run_sft_sft_eco.sh [extra Hydra overrides...]
#
# Environment: MODEL (required), NGPUS (default 8), DATA (default ./data/verl), OPGEN_LIMIT (rows
# per split, for a smoke run), PYTHON (default python3), DRY_RUN=1 (build the data and print the
# command instead of running it).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

opgen build sft-eco --out "$DATA/sft-eco" "${limit[@]}"

mapfile -t data_args < <("$PYTHON" "$here/verl_args.py" --kind sft --train "$DATA/sft-eco" --tokenizer "$MODEL")

cmd=("$PYTHON" -m torch.distributed.run --standalone --nnodes=1 --nproc_per_node="${NGPUS:-8}"
     -m verl.trainer.sft_trainer --config-path "$here/config" --config-name sft_sft_eco
     "${data_args[@]}" "model.path=$MODEL" "$@")
run_or_print "${cmd[@]}"
