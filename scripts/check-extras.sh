#!/usr/bin/env bash
# Each light extra installed alone into a fresh environment, then its feature run once (issue 24):
# an extra that lacks what its feature imports fails here, not in a user's hands.
#   plots:  opgen score writes its PNG plots
#   fit:    opgen fit --tidy fits a table (fit.json)
#   hub:    opgen push --dry-run writes a tree that `datasets` loads back; push without a token says so
#   tokens: opgen stats --tokenizer measures token lengths with a tokenizer trained on the spot
#   serve:  opgen serve answers GET /health and grades one POST /score
# Usage: bash scripts/check-extras.sh [--floors] [EXTRA ...]   (default: plots fit hub tokens serve)
#   --floors: each of the extra's requirements held at its declared floor (`name>=X` in pyproject.toml
#   installed as `name==X.*`, read from pyproject.toml, no second copy), so the floors are versions the
#   code really runs on (issue 24); the rest of the environment is whatever pip picks today.
# The pip cache is shared between the environments (PIP_CACHE_DIR, default ~/.cache/pip).
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export PIP_DISABLE_PIP_VERSION_CHECK=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1

floors=""
if [ "${1:-}" = "--floors" ]; then floors=1; shift; fi
extras=("$@")
[ ${#extras[@]} -gt 0 ] || extras=(plots fit hub tokens serve)

floor_constraints() {  # floor_constraints EXTRA: name==X.* for each name>=X of the extra, from pyproject.toml
  python3 - "$REPO/pyproject.toml" "$1" <<'EOF'
import re, sys, tomllib
extra = sys.argv[2]
with open(sys.argv[1], "rb") as fh:
    reqs = tomllib.load(fh)["project"]["optional-dependencies"][extra]
for req in reqs:
    m = re.match(r"\s*([A-Za-z0-9_.-]+)(\[[^\]]*\])?[^;]*?>=\s*([0-9][0-9A-Za-z.]*)", req)
    if m is None:
        sys.exit(f"pyproject.toml: extra {extra}: {req!r} has no >= floor")
    print(f"{m.group(1)}=={m.group(3)}.*")
EOF
}

fresh() {  # fresh NAME EXTRA: a venv with opgen[EXTRA] and nothing else (--floors: at the extra's floors)
  python3 -m venv "$work/$1"
  if [ -n "$floors" ]; then
    floor_constraints "$2" > "$work/$1.floors.txt"
    echo "   at the floors: $(tr '\n' ' ' < "$work/$1.floors.txt")"
    "$work/$1/bin/pip" install -q -e "$REPO[$2]" -c "$work/$1.floors.txt"
  else
    "$work/$1/bin/pip" install -q -e "$REPO[$2]"
  fi
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
    serve)
      "$env/bin/python" - "$env/bin/opgen" "$work/build/heldout_trees_d1-8.parquet" <<'EOF'
import json, socket, subprocess, sys, time, urllib.request
import pyarrow.parquet as pq
from opgen.tokens import gold_answer_of_row
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
proc = subprocess.Popen([sys.argv[1], "serve", "--port", str(port), "--allow-weak-sandbox"])
try:
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            health = json.load(urllib.request.urlopen(url + "/health", timeout=5))
            break
        except OSError:
            if proc.poll() is not None:
                sys.exit(f"serve: exited {proc.returncode} before answering /health")
            time.sleep(0.1)
    else:
        sys.exit("serve: no answer on /health")
    row = pq.read_table(sys.argv[2]).to_pylist()[0]
    body = json.dumps({"items": [{"ground_truth": row["reward_model"]["ground_truth"],
                                  "response": gold_answer_of_row(row), "extra_info": row["extra_info"]}]})
    req = urllib.request.Request(url + "/score", body.encode(), {"Content-Type": "application/json"})
    got = json.load(urllib.request.urlopen(req, timeout=120))
    assert got["scores"] == [1.0], got  # the gold answer, graded correct
finally:
    proc.terminate()
    proc.wait(30)
EOF
      ;;
    *) echo "unknown extra $extra"; exit 2 ;;
  esac
  echo "   ok"
done
