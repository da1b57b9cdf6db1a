"""`opgen fit` speed: a 20-run x 20-checkpoint sweep with 1,000 bootstrap resamples.

    python benchmarks/bench_fit.py [--runs 20] [--checkpoints 20] [--prompts 256] [--resamples 1000]
                                   [--cluster-by prompt|none] [--forms linear_log,sigmoid,power]

Synthetic sweep (no model, no grading): every run has ``--prompts`` prompts of its own whose
answers at each checkpoint follow a saturating curve with binomial noise; the three forms are
fitted per run with bootstrap (prompts resampled in clusters), profile intervals, AIC/BIC, the
backtest and the fit-window table, then the across-run statistics, and fit.json, the CSVs and the
plots are written. Prints wall and CPU seconds for the fit (reading excluded) and for the writing,
and whether the 60 s target is met.
"""

from __future__ import annotations

import argparse
import math
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--checkpoints", type=int, default=20)
    ap.add_argument("--prompts", type=int, default=256)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--cluster-by", choices=["prompt", "none"], default="prompt")
    ap.add_argument("--forms", default="linear_log,sigmoid,power")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import fit_fixtures as F

    from opgen.fit import pipeline as P
    from opgen.fit import report

    steps = [10 * 2 ** (i / 3) for i in range(args.checkpoints)]
    steps = [int(round(s)) for s in steps]
    obs = None
    t0 = time.perf_counter()
    for i in range(args.runs):
        mid = 40 * 1.3 ** i

        def curve(s, mid=mid):
            return 0.05 + 0.7 / (1 + (mid / s) ** 1.2)

        one = F.synthetic(curve, steps, args.prompts, 1, args.seed + i, clusters=args.cluster_by == "prompt")
        run = f"run{i:02d}"
        if obs is None:
            obs = type(one)(one.source, one.counts, one.cluster_by)
        for (split, _r, seed, step, comp, cl), (k, n) in one.cells.items():
            obs.add((split, run, seed, step, comp, None if cl is None else f"{run}#{cl}"), k, n)
        obs.runs[run] = {"tokens": 1e9 * 2 ** i, "loss": 4.0 - 0.05 * i + 0.01 * math.sin(i)}
    build_s = time.perf_counter() - t0
    cfg = P.FitConfig(compute="step", forms=tuple(args.forms.split(",")), resamples=args.resamples,
                      seed=args.seed)
    c0, w0 = time.process_time(), time.perf_counter()
    result, _ = P.run_fit(obs, cfg)
    fit_wall, fit_cpu = time.perf_counter() - w0, time.process_time() - c0
    with tempfile.TemporaryDirectory() as tmp:
        w1 = time.perf_counter()
        report.write(Path(tmp), result)
        write_wall = time.perf_counter() - w1
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"sweep: {args.runs} runs x {args.checkpoints} checkpoints x {args.prompts} prompts "
          f"({args.cluster_by} clusters), forms {args.forms}, {args.resamples} resamples (synthetic data "
          f"built in {build_s:.1f} s)")
    print(f"fit:   {fit_wall:.1f} s wall, {fit_cpu:.1f} s CPU")
    print(f"write: {write_wall:.1f} s wall (fit.json, CSVs, plots)")
    total = fit_wall + write_wall
    print(f"total: {total:.1f} s  target < 60 s: {'met' if total < 60 else 'NOT met'}  peak RSS {rss:.0f} MiB")


if __name__ == "__main__":
    main()
