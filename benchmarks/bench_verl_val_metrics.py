"""Cost of verl's validation metrics per reward key policy: ``keys=full`` vs ``keys=minimal``.

    .venv-verl/bin/python benchmarks/bench_verl_val_metrics.py [--prompts 256] [--n 8] [--rows 9728]

verl's ``RayPPOTrainer._validate`` hands every numeric key of ``reward_extra_info`` (plus its own
``reward``) to ``verl.trainer.ppo.metric_utils.process_validation_metrics``, which for n > 1
bootstraps best@k / worst@k (1,000 resamples, k = 2, 4, ..., n) per prompt and key. This runs that
function, unchanged, on a synthetic validation batch shaped like opgen's (``--prompts`` prompts of
one data source, ``--n`` samples each, values drawn like a mid-accuracy model) with opgen's key
sets, and extrapolates linearly to ``--rows`` prompts (the work is per prompt and key; the
per-data-source means at the end are a negligible share). CPU time of this process, best of 3.
"""

from __future__ import annotations

import argparse
import random
import time

from opgen.reward import KEY_POLICIES


def infos(keys: tuple[str, ...], prompts: int, n: int, rng: random.Random) -> tuple[list, list, dict]:
    sources = [f"opgen/family_{p % 4}" for p in range(prompts) for _ in range(n)]
    uids = [f"uid-{p}" for p in range(prompts) for _ in range(n)]
    table: dict[str, list] = {"reward": []}
    for key in keys:
        table[key] = []
    for _ in range(prompts * n):
        ok = rng.random() < 0.6
        table["reward"].append(float(ok))
        for key in keys:
            table[key].append("" if key == "error" else float(ok) if key in ("score", "acc") else
                              float(rng.randint(0, 4)))
    return sources, uids, table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=256)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--rows", type=int, default=9728, help="prompts to extrapolate to (the eval suite: 9,728)")
    args = ap.parse_args()
    from verl.trainer.ppo.metric_utils import process_validation_metrics

    for policy, keys in KEY_POLICIES.items():
        sources, uids, table = infos(keys, args.prompts, args.n, random.Random(0))
        numeric = sum(1 for k in table if k != "error")
        best = float("inf")
        for _ in range(3):
            t0 = time.process_time()
            process_validation_metrics(sources, uids, table)
            best = min(best, time.process_time() - t0)
        per_prompt = best / args.prompts
        print(f"keys={policy:8s} {numeric:2d} numeric keys (with verl's 'reward'): {best:7.2f} s CPU for "
              f"{args.prompts} prompts x n={args.n} -> {per_prompt * 1e3:6.1f} ms/prompt -> "
              f"{per_prompt * args.rows / 60:6.1f} min for {args.rows:,} prompts")


if __name__ == "__main__":
    main()
