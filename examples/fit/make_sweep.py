"""Build the worked example of docs/fit.md: replayed "checkpoints" of four RL runs over a small program
data file made from the test fixtures (tests/tiny_model.py, tests/fit_fixtures.py), plus a runs table.

    python examples/fit/make_sweep.py OUT_DIR

At step s of a run, exactly round(40 · p_run(s)) of the 40 rows carry the gold answer, with
p_run(s) = 0.05 + (A_run − 0.05) / (1 + (C_mid / s)^1.3): runs pretrained longer start higher and
saturate higher. Then:

    opgen eval --backend replay --quiet --data OUT/trees.parquet --model OUT/replay/<run>/step<s> ... --out OUT/sweep
    opgen fit --sweep OUT/sweep --runs OUT/runs.yaml --out OUT/fit
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

import fit_fixtures as F

STEPS = (20, 40, 80, 160, 320, 640, 1280, 2560)
RUNS = {  # run: (pretraining tokens, validation loss, asymptote A, midpoint step)
    "pt1B": (1e9, 3.92, 0.45, 200.0),
    "pt2B": (2e9, 3.71, 0.55, 150.0),
    "pt4B": (4e9, 3.56, 0.70, 120.0),
    "pt8B": (8e9, 3.47, 0.80, 90.0),
}


def curve(a: float, mid: float):
    return lambda s: 0.05 + (a - 0.05) / (1 + (mid / s) ** 1.3)


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    _data, models = F.replay_sweep(out, {r: curve(a, m) for r, (_t, _l, a, m) in RUNS.items()}, STEPS,
                                   n_rows=40, prompt_tokens=180, completion_tokens=620)
    table = {"runs": {run: {"tokens": t, "loss": loss, "params": 20.5e6, "prompts_per_step": 256, "group": 8,
                            "checkpoints": [{"model": f"{run}_step{s}", "step": s, "seed": 1} for s in STEPS]}
                      for run, (t, loss, _a, _m) in RUNS.items()}}
    (out / "runs.yaml").write_text(yaml.safe_dump(table, sort_keys=False), encoding="utf-8")
    print(" ".join(f"--model {m}" for m in models))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "fit-example"))
