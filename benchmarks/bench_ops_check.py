"""Benchmark `opgen ops check`: the property laws of an operator library, laws x examples per second.

    python benchmarks/bench_ops_check.py                         # the study's library, 100,000 examples per law
    python benchmarks/bench_ops_check.py --examples 200          # a smoke run
    python benchmarks/bench_ops_check.py --library my_ops.yaml   # any library opgen ops check takes

Runs opgen.opscheck.check in this one process (Hypothesis is single-threaded) and prints, per law,
the operator calls it made (drawn and shrunk examples) and their rate, then the total: laws x
examples per second. The machine's load average is printed with the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from opgen import library, opscheck


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--examples", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--library", default="study")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    lib = library.load(a.library)
    load_before = os.getloadavg()
    t0, c0 = time.perf_counter(), time.process_time()
    report = opscheck.check(lib, examples=a.examples, seed=a.seed)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    per_law = {law: sum(r.calls for r in report.results if r.law == law) for law in opscheck.LAWS}
    checked = sum(r.status != opscheck.NA for r in report.results)
    calls = sum(per_law.values())
    out = {"library": lib.name, "digest": lib.digest[:12], "operators": len(lib), "examples": a.examples,
           "seed": a.seed, "ok": report.ok, "laws_checked": checked, "calls": calls,
           "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "calls_per_s": round(calls / wall, 1),
           "per_law_calls": per_law, "loadavg_before": load_before, "loadavg_after": os.getloadavg()}
    if a.json:
        print(json.dumps(out, indent=2))
        return
    print(f"library {lib.name} ({out['digest']}): {len(lib)} operators x {len(opscheck.LAWS)} laws "
          f"({checked} checked, the rest n/a), {a.examples} examples per law, seed {a.seed}: "
          f"{'all hold' if report.ok else 'BROKEN'}")
    for law, n in per_law.items():
        print(f"  {law:13s} {n:9d} calls")
    print(f"{calls} calls in {wall:.1f} s wall ({cpu:.1f} s CPU): {calls / wall:,.0f} laws x examples/s")
    print(f"load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
