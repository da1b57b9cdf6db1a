"""Sandbox-only grading throughput of this tree next to another (before/after a sandbox change).

    python benchmarks/bench_zygote.py --against DIR [--n 1000] [--repeat 3] [--workers 2]

``DIR`` is another checkout of opgen (e.g. ``git archive main | tar -x -C /tmp/main``). Each round
grades the same ``--n`` typical RA answers (bench_score.typical_rows) with the static path off, so
every response runs in the sandbox (bench_score's run (c)), from 2 x workers threads, once with
this tree and once with ``DIR``, alternating, each in a fresh process (``PYTHONPATH`` set to its
tree). Prints, per tree, the median programs/s (wall clock), CPU ms per program (the grading
process and all its descendants) and the load average around the runs (the machine is shared).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from bench_score import against_options  # benchmarks/, this script's folder

HERE = Path(__file__).resolve().parents[1]

_ROUND = r"""
import json, os, resource, sys, time, warnings
from concurrent.futures import ThreadPoolExecutor
sys.path.insert(0, {bench!r})
from bench_score import typical_rows
from opgen.score import grade
from opgen.score.sandbox import Sandbox
warnings.simplefilter("ignore")
rows = typical_rows({n}, seed=7)
with Sandbox(workers={workers}) as box:
    for gt, answer in rows[:20]:  # warm
        grade(gt, answer, sandbox=box, static=False)
    t0, c0 = time.perf_counter(), os.times()
    with ThreadPoolExecutor({workers} * 2) as pool:
        scores = list(pool.map(lambda r: grade(r[0], r[1], sandbox=box, static=False)["score"], rows))
    wall = time.perf_counter() - t0
    level = box.level
c1 = os.times()  # the workers (and their zygotes and children) are reaped by now
cpu = (c1.user + c1.system + c1.children_user + c1.children_system) - (c0.user + c0.system + c0.children_user
                                                                       + c0.children_system)
print(json.dumps({{"rate": len(rows) / wall, "cpu_ms": 1000 * cpu / len(rows), "level": level,
                  "mean_score": sum(scores) / len(scores)}}))
"""


def one_round(tree: Path, n: int, workers: int) -> dict:
    code = _ROUND.format(bench=str(HERE / "benchmarks"), n=n, workers=workers)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=str(tree),
                          timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"round in {tree} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = against_options(__doc__, n=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    trees = {"this": HERE, "against": args.against.resolve()}
    got: dict[str, list[dict]] = {k: [] for k in trees}
    load = [os.getloadavg()[0]]
    for _ in range(args.repeat):
        for name, tree in trees.items():
            got[name].append(one_round(tree, args.n, args.workers))
            load.append(os.getloadavg()[0])
    for name, rounds in got.items():
        rate = statistics.median(r["rate"] for r in rounds)
        cpu = statistics.median(r["cpu_ms"] for r in rounds)
        each = ", ".join("{:.0f}/s {:.2f} ms".format(r["rate"], r["cpu_ms"]) for r in rounds)
        print(f"{name:8s} {trees[name]}: {rate:7.1f} programs/s, {cpu:5.2f} ms CPU/program (rounds: {each}; "
              f"level {rounds[0]['level']}, mean score {rounds[0]['mean_score']:.3f})")
    print(f"load average (1 min) during the runs: {min(load):.2f}-{max(load):.2f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
