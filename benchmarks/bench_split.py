"""Benchmark the mcd split: a pool of 100,000 distinct trees → 20,000 train / 5,000 eval rows.

    python benchmarks/bench_split.py             # 100,000 pooled rows → 20,000 / 5,000
    python benchmarks/bench_split.py --quick     # 10,000 → 2,000 / 500, a smoke run
    python benchmarks/bench_split.py --steps 1000  # the annealed search's moves (0: greedy only)

Prints the time and CPU seconds of drawing the pool and of the search, the peak RSS of the
process, and D_A / D_C reached against a random split of the same sizes, beside DBCA's CFQ MCD
splits (Keysers et al., ICLR 2020: D_C ≈ 0.69 at D_A ≤ 0.02). The annealed search
(``search: anneal``) runs on the same pool's units beside the greedy one, timed on its own. Runs
in this one process (the search is single-threaded); the machine's load average is printed with
the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time

from opgen.splits import compounds as C
from opgen.splits import divergence as D
from opgen.splits import mcd

CFQ = {"atom_divergence_at_most": 0.02, "compound_divergence": 0.69}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--pool", type=int, default=100_000)
    ap.add_argument("--train", type=int, default=20_000)
    ap.add_argument("--eval", type=int, default=5_000)
    ap.add_argument("--bound", type=float, default=0.02)
    ap.add_argument("--depths", default="2,3,4")
    ap.add_argument("--steps", type=int, default=mcd.DEFAULT_STEPS, help="annealing moves (0: skip it)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.pool, a.train, a.eval = 10_000, 2_000, 500
    depths = [int(d) for d in a.depths.split(",")]
    config = {"kind": "mcd", "compounds": C.DEFAULT.as_dict(),
              "pool": {"generator": "trees", "rows": a.pool,
                       "options": {"ops": "all", "depths": depths, "rows": int(a.pool * 1.3)}},
              "train_rows": a.train, "eval_rows": a.eval, "max_atom_divergence": a.bound,
              "candidates": mcd.DEFAULT_CANDIDATES, "rounds": mcd.DEFAULT_ROUNDS}
    load = os.getloadavg()
    w0, c0 = time.perf_counter(), time.process_time()
    # the pool alone (the search then runs again below on the cached units, timed on its own)
    orig = mcd.search
    timing = {}

    def timed(*args, **kw):
        timing["pool_wall"], timing["pool_cpu"] = time.perf_counter() - w0, time.process_time() - c0
        w, c = time.perf_counter(), time.process_time()
        out = orig(*args, **kw)
        timing["search_wall"], timing["search_cpu"] = time.perf_counter() - w, time.process_time() - c
        return out

    mcd.search = timed
    items, sel = mcd.pool_and_selection(config, 1)
    mcd.search = orig
    units = [C.row_units([t.program for t in it.tasks]) for it in items]
    train, evals = mcd.random_split(len(units), a.train, a.eval, (1, mcd._canon(config)))
    random = D.compare([units[i] for i in train], [units[i] for i in evals])
    anneal = None
    if a.steps:
        cfg_a = {**config, "search": "anneal", "steps": a.steps, "temperature": mcd.DEFAULT_TEMPERATURE}
        w, c = time.perf_counter(), time.process_time()
        seed_config = {k: v for k, v in cfg_a.items() if k not in mcd.ANNEAL_KEYS}  # as pool_and_selection seeds it
        anneal = mcd.search(units, a.train, a.eval, (1, mcd._canon(seed_config)), C.DEFAULT, a.bound,
                            mcd.DEFAULT_CANDIDATES, mcd.DEFAULT_ROUNDS, "anneal", a.steps, mcd.DEFAULT_TEMPERATURE)
        timing["anneal_wall"], timing["anneal_cpu"] = time.perf_counter() - w, time.process_time() - c
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result = {
        "pool_rows": len(items), "train_rows": len(sel.train), "eval_rows": len(sel.eval),
        "pool_seconds": round(timing["pool_wall"], 2), "pool_cpu_seconds": round(timing["pool_cpu"], 2),
        "search_seconds": round(timing["search_wall"], 2), "search_cpu_seconds": round(timing["search_cpu"], 2),
        "peak_rss_mib": round(peak), "load_average": [round(x, 2) for x in load],
        "mcd": {"atom_divergence": sel.atom_divergence, "compound_divergence": sel.compound_divergence,
                "heldout_compounds": len(sel.heldout), "rounds": sel.rounds},
        "anneal": None if anneal is None else {
            "atom_divergence": anneal.atom_divergence, "compound_divergence": anneal.compound_divergence,
            "heldout_compounds": len(anneal.heldout), "greedy_rounds": anneal.rounds, "steps": anneal.anneal_steps,
            "accepted": anneal.anneal_accepted, "seconds": round(timing["anneal_wall"], 2),
            "cpu_seconds": round(timing["anneal_cpu"], 2)},
        "random_split": {"atom_divergence": random["atom_divergence"],
                         "compound_divergence": random["compound_divergence"]},
        "cfq_mcd_reference": CFQ,
    }
    if a.json:
        print(json.dumps(result, indent=2))
        return
    print(f"pool: {len(items):,} distinct trees (depths {depths}, all 25 operators) in {result['pool_seconds']} s "
          f"({result['pool_cpu_seconds']} s CPU)")
    print(f"search: {sel.rounds} greedy rounds in {result['search_seconds']} s ({result['search_cpu_seconds']} s CPU); "
          f"peak RSS {result['peak_rss_mib']} MiB; load average {result['load_average']}")
    print(f"{'split':<28} {'D_A':>8} {'D_C':>8}")
    print(f"{'opgen mcd':<28} {sel.atom_divergence:>8.4f} {sel.compound_divergence:>8.4f}")
    if anneal is not None:
        print(f"{'opgen mcd, annealed':<28} {anneal.atom_divergence:>8.4f} {anneal.compound_divergence:>8.4f}   "
              f"({anneal.rounds} greedy rounds + {anneal.anneal_steps} moves, {anneal.anneal_accepted} accepted; "
              f"{result['anneal']['seconds']} s, {result['anneal']['cpu_seconds']} s CPU)")
    print(f"{'opgen random, same sizes':<28} {random['atom_divergence']:>8.4f} {random['compound_divergence']:>8.4f}")
    print(f"{'CFQ MCD (DBCA paper)':<28} {'<= 0.02':>8} {CFQ['compound_divergence']:>8.2f}")


if __name__ == "__main__":
    main()
