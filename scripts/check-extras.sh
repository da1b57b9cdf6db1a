#!/usr/bin/env bash
# Each light extra installed alone into a fresh environment, then its feature run once (issue 24):
# an extra that lacks what its feature imports fails here, not in a user's hands.
#   plots:  opgen score writes its PNG plots
#   fit:    opgen fit --tidy fits a table (fit.json)
#   hub:    opgen push --dry-run writes a tree that `datasets` loads back; push without a token says so
#   tokens: opgen stats --tokenizer measures token lengths with a tokenizer trained on the spot
# Usage: bash scripts/check-extras.sh [EXTRA ...]   (default: plots fit hub tokens)
# The pip cache is shared between the environments (PIP_CACHE_DIR, default ~/.cache/pip).
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export PIP_DISABLE_PIP_VERSION_CHECK=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1

extras=("$@")
[ ${#extras[@]} -gt 0 ] || extras=(plots fit hub tokens)

fresh() {  # fresh NAME EXTRA: a venv with opgen[EXTRA] and nothing else
  python3 -m venv "$work/$1"
  "$work/$1/bin/pip" install -q -e "$REPO[$2]"
}

# a small build and a responses file every check can use (made with the first environment)
made=""
inputs() {
  [ -n "$made" ] && return
  "$1/bin/opgen" build eval-suite --only heldout_trees_d1-8 --limit 16 --out "$work/build" --workers 1 --no-progress >/dev/null
  "$1/bin/python" - "$work" <<'EOF'
import json, sys
from pathlib import Path
import pyarrow.parquet as pq
from opgen.tokens import gold_answer_of_row
work = Path(sys.argv[1])
rows = pq.read_table(work / "build" / "heldout_trees_d1-8.parquet").to_pylist()
with open(work / "responses.jsonl", "w") as f:
    for i, r in enumerate(rows):
        f.write(json.dumps({"index": i, "response": gold_answer_of_row(r) if i % 2 else "no"}) + "\n")
EOF
  made=1
}

for extra in "${extras[@]}"; do
  echo "-- extra: $extra"
  fresh "$extra" "$extra"
  env="$work/$extra"
  inputs "$env"
  case "$extra" in
    plots)
      "$env/bin/opgen" score --data "$work/build/heldout_trees_d1-8.parquet" --responses "$work/responses.jsonl" \
        --out "$work/score" >/dev/null
      ls "$work"/score/*.png >/dev/null || { echo "plots: opgen score wrote no PNG"; exit 1; }
      ;;
    fit)
      "$env/bin/python" - "$work/tidy.csv" <<'EOF'
import csv, sys
with open(sys.argv[1], "w", newline="") as fh:
    w = csv.writer(fh)
    w.writerow(["run", "compute", "split", "n_correct", "n_total", "tokens", "loss"])
    for i, run in enumerate("abcd"):
        for j, c in enumerate((1e18, 2e18, 4e18, 8e18, 1.6e19)):
            w.writerow([run, c, "all", 20 + 10 * j + 3 * i, 200, 10 ** (9 + i), 4 - 0.2 * i])
EOF
      "$env/bin/opgen" fit --tidy "$work/tidy.csv" --out "$work/fit-out" --resamples 50 --no-plots >/dev/null
      [ -s "$work/fit-out/fit.json" ] || { echo "fit: no fit.json"; exit 1; }
      ;;
    hub)
      "$env/bin/opgen" push "$work/build" --repo-id org/check-extras --dry-run "$work/tree" >/dev/null
      "$env/bin/python" - "$work/tree" <<'EOF'
import sys
import datasets
ds = datasets.load_dataset(sys.argv[1], "heldout_trees")
assert sum(len(s) for s in ds.values()) == 16, ds
EOF
      # no token anywhere: one line saying how to log in (huggingface_hub imported and asked)
      if HOME="$work/home" HF_HOME="$work/home/hf" env -u HF_TOKEN "$env/bin/opgen" push "$work/build" \
          --repo-id org/check-extras 2>"$work/push.err"; then
        echo "hub: push without a token succeeded"; exit 1
      fi
      grep -q "no Hugging Face token found" "$work/push.err" || { cat "$work/push.err"; exit 1; }
      ;;
    tokens)
      "$env/bin/python" - "$work/tok" <<'EOF'
import sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|im_start|>", "<|im_end|>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
tok.train_from_iterator(["def main_solution(x):", "    return func_3(x)", "Recall func_1"] * 20, trainer=trainer)
fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>")
fast.chat_template = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}"
                      "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
fast.save_pretrained(sys.argv[1])
EOF
      "$env/bin/opgen" stats "$work/build" --tokenizer "$work/tok" --json > "$work/stats.json"
      grep -q "prompt" "$work/stats.json" || { echo "tokens: no token lengths"; exit 1; }
      ;;
    *) echo "unknown extra $extra"; exit 2 ;;
  esac
  echo "   ok"
done
