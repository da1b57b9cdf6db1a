#!/usr/bin/env bash
# On a machine with one NVIDIA GPU: `opgen eval --backend vllm` on a small random-weight model made
# here (nothing downloaded), locally and with --executor ray on 1 and 2 replicas sharing the GPU.
# Prints generation tokens/s, opgen's overhead share (the same loop with an instant replay backend
# over the vLLM answers, divided by the vLLM run's time) and whether the three runs' greedy
# generations are identical. Needs vllm, ray, torch and transformers in $PYTHON (default python3;
# `pip install -e '.[vllm,ray]'`); opgen itself is installed into a venv beside it.
#
#   bash scripts/gpu-check.sh [WORKDIR]          (default /tmp/opgen-gpu-check; ROWS=512 NEW=256)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="$(realpath -m "${1:-/tmp/opgen-gpu-check}")"
PYTHON="${PYTHON:-python3}"
ROWS="${ROWS:-512}"
NEW="${NEW:-256}"
mkdir -p "$WORK"
VENV="$WORK/venv"
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv --system-site-packages "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --no-deps --no-build-isolation -e "$REPO"
PY="$VENV/bin/python"
"$PY" - <<'PY'
import sys
missing = []
for mod in ("torch", "transformers", "tokenizers", "vllm", "ray"):
    try:
        __import__(mod)
    except ImportError:
        missing.append(mod)
if missing:
    sys.exit(f"gpu-check: missing {', '.join(missing)} (pip install -e '.[vllm,ray]')")
import torch
if not torch.cuda.is_available():
    sys.exit("gpu-check: torch sees no GPU")
print("GPU:", torch.cuda.get_device_name(0), "| torch", torch.__version__,
      "| vllm", __import__("vllm").__version__, "| ray", __import__("ray").__version__)
PY

# a small Qwen2 with random weights (about 100M parameters), the tiny test model's tokenizer
"$PY" - "$REPO" "$WORK" <<'PY'
import sys
from pathlib import Path
repo, work = Path(sys.argv[1]), Path(sys.argv[2])
sys.path.insert(0, str(repo / "tests"))
import tiny_model as tm
import torch
from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM
target = work / "small-model"
if not (target / "config.json").is_file():
    tiny = tm.build(work / "tiny-model")
    tok = AutoTokenizer.from_pretrained(str(tiny))
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                      num_attention_heads=16, num_key_value_heads=4, head_dim=64, max_position_embeddings=8192,
                      tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                      bos_token_id=None, torch_dtype="bfloat16")
    Qwen2ForCausalLM(cfg).to(torch.bfloat16).save_pretrained(target)
    tok.save_pretrained(target)
print("model:", target)
PY

OPGEN=("$VENV/bin/opgen")
DATA="$WORK/data/heldout_trees_d1-8.parquet"
[ -f "$DATA" ] || "${OPGEN[@]}" build eval-suite --out "$WORK/data" --only heldout_trees_d1-8 --limit "$ROWS" --no-progress
COMMON=(--backend vllm --model "$WORK/small-model" --data "$DATA" --max-new-tokens "$NEW" --dtype bfloat16
        --max-model-len 4096 --no-score --quiet)
rm -rf "$WORK/local" "$WORK/ray1" "$WORK/ray2" "$WORK/replay"
"${OPGEN[@]}" eval "${COMMON[@]}" --out "$WORK/local"
"${OPGEN[@]}" eval "${COMMON[@]}" --out "$WORK/ray1" --executor ray --replicas 1 --replica-gpus 1
"${OPGEN[@]}" eval "${COMMON[@]}" --out "$WORK/ray2" --executor ray --replicas 2 --replica-gpus 0.5 \
    --gpu-memory-utilization 0.4
# opgen's own time: the same loop answering instantly with the local run's responses
"${OPGEN[@]}" eval --backend replay --model "$WORK/local/small-model" --data "$DATA" --out "$WORK/replay" \
    --no-score --quiet

"$PY" - "$WORK" <<'PY'
import json, sys
from pathlib import Path
work = Path(sys.argv[1])
gen = "small-model/heldout_trees_d1-8_generations.jsonl"
def tokens(run):
    return sum(json.loads(line)["completion_tokens"] for line in (work / run / gen).read_text().splitlines())
local = json.loads((work / "local/small-model/metrics.json").read_text())["data"]["heldout_trees_d1-8"]["run"]
replay = json.loads((work / "replay/small-model/metrics.json").read_text())
replay_s = replay["data"]["heldout_trees_d1-8"]["run"]["seconds"]
print(f"local:     {local['rows']} rows, {tokens('local')} tokens in {local['seconds']:.1f} s = "
      f"{tokens('local') / local['seconds']:.0f} tokens/s; opgen overhead {replay_s:.2f} s = "
      f"{replay_s / local['seconds']:.2%} of the run")
for run in ("ray1", "ray2"):
    rep = json.loads((work / run / "ray_report.json").read_text())
    print(f"{run}:      {rep['rows_generated']} rows, {tokens(run)} tokens in {rep['generation_s']:.1f} s = "
          f"{tokens(run) / rep['generation_s']:.0f} tokens/s; idle "
          + ", ".join(f"{r['idle_share']:.0%}" for r in rep["replicas"]))
same = {run: (work / run / gen).read_bytes() == (work / "local" / gen).read_bytes() for run in ("ray1", "ray2")}
print("generations identical to the local run:", same)
PY
