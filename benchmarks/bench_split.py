"""Benchmark the mcd split at CFQ's scale: a pool of 200,000 distinct trees → 80,000 train / 20,000 eval
(CFQ's 40% / 10% of its pool), under the default compound spec (opgen.splits.compounds.DEFAULT).

    python benchmarks/bench_split.py                  # 200,000 → 80,000 / 20,000, the exchange search
    python benchmarks/bench_split.py --quick          # 20,000 → 8,000 / 2,000, a smoke run
    python benchmarks/bench_split.py --search greedy  # another search over the same pool
    python benchmarks/bench_split.py --target 0.5     # the exchange search stopping at a D_C (a sweep's level)

Prints the CPU and wall seconds of drawing the pool, of measuring its rows (the table), of the search,
and of the random-split baseline; the peak RSS of the process; D_A and D_C of the split the search
returns (measured as its certificate measures them) beside random splits of the same pool at the same
sizes and beside DBCA's CFQ MCD splits (Keysers et al., ICLR 2020: D_C 0.694-0.713 at D_A <= 0.02).
Runs in this one process; the machine's load average is printed with the numbers. A benchmark, not a
test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time

from opgen.splits import compounds as C
from opgen.splits import mcd

CFQ = {"atom_divergence_at_most": 0.02, "compound_divergence": [0.694, 0.713]}


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _since(t: tuple[float, float]) -> tuple[float, float]:
    w, c = _clock()
    return round(w - t[0], 2), round(c - t[1], 2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--pool", type=int, default=200_000)
    ap.add_argument("--train", type=int, default=80_000)
    ap.add_argument("--eval", type=int, default=20_000)
    ap.add_argument("--bound", type=float, default=0.02)
    ap.add_argument("--depths", default="2,3,4")
    ap.add_argument("--search", choices=mcd.SEARCHES, default=mcd.DEFAULT_SEARCH)
    ap.add_argument("--target", type=float, help="stop the exchange search at this D_C")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.pool, a.train, a.eval = 20_000, 8_000, 2_000
    depths = [int(d) for d in a.depths.split(",")]
    config = {"kind": "mcd", "compounds": C.DEFAULT.as_dict(),
              "pool": {"generator": "trees", "rows": a.pool,
                       "options": {"ops": "all", "depths": depths, "rows": int(a.pool * 1.3)}},
              "train_rows": a.train, "eval_rows": a.eval, "max_atom_divergence": a.bound, "search": a.search,
              "rounds": mcd.DEFAULT_ROUNDS,
              **({"candidates": mcd.DEFAULT_CANDIDATES} if a.search != "exchange" else {}),
              **({"steps": mcd.DEFAULT_STEPS, "temperature": mcd.DEFAULT_TEMPERATURE} if a.search == "anneal" else {}),
              **({"target_compound_divergence": a.target} if a.target is not None else {})}
    load_before = os.getloadavg()
    t = _clock()
    items, table = mcd.pool(config, 1)
    pool_wall, pool_cpu = _since(t)
    t = _clock()
    baseline = mcd._pool_baseline(config, 1, table)
    base_wall, base_cpu = _since(t)
    t = _clock()
    _, sel = mcd.pool_and_selection(config, 1)
    search_wall, search_cpu = _since(t)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rdc, rda = baseline["compound_divergence"], baseline["atom_divergence"]
    result = {
        "pool_rows": len(items), "train_rows": len(sel.train), "eval_rows": len(sel.eval),
        "compounds": C.DEFAULT.describe(), "distinct_compounds": len(table.comp_vocab),
        "pool_and_table": {"seconds": pool_wall, "cpu_seconds": pool_cpu},
        "baseline": {"seconds": base_wall, "cpu_seconds": base_cpu, **baseline},
        "search": {"method": sel.method, "rounds": sel.rounds, "seconds": search_wall, "cpu_seconds": search_cpu,
                   "atom_divergence": sel.atom_divergence, "compound_divergence": sel.compound_divergence,
                   "heldout_compounds": len(sel.heldout),
                   "excess_over_random": round(sel.compound_divergence - rdc["mean"], 6)},
        "peak_rss_mib": round(peak), "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()], "cfq_mcd_reference": CFQ,
    }
    if a.json:
        print(json.dumps(result, indent=2))
        return
    print(f"pool: {len(items):,} distinct trees (depths {depths}, all 25 operators), {len(table.comp_vocab):,} "
          f"distinct compounds ({C.DEFAULT.describe()}); drawn and measured in {pool_wall} s ({pool_cpu} s CPU)")
    print(f"search ({sel.method}): {sel.rounds} rounds in {search_wall} s ({search_cpu} s CPU); random baseline "
          f"({baseline['seeds']} splits) {base_wall} s ({base_cpu} s CPU); peak RSS {result['peak_rss_mib']} MiB; "
          f"load average {result['load_average_before']} → {result['load_average_after']}")
    print(f"{'split':<34} {'D_A':>8} {'D_C':>8}")
    print(f"{'opgen mcd (' + sel.method + ')':<34} {sel.atom_divergence:>8.4f} {sel.compound_divergence:>8.4f}")
    print(f"{'random splits, same sizes (mean)':<34} {rda['mean']:>8.4f} {rdc['mean']:>8.4f}   "
          f"(± {rdc['std']:.4f}; excess {result['search']['excess_over_random']:+.4f})")
    print(f"{'CFQ MCD1-3 (DBCA paper)':<34} {'<= 0.02':>8} {'0.694-0.713':>8}")


if __name__ == "__main__":
    main()
