"""The scorer's canonical batch, this tree against another, in alternating rounds of one run.

    python benchmarks/bench_score_against.py --against DIR [--n 20000] [--rounds 3] [--processes 2]

DIR is another checkout of opgen (e.g. ``git archive main | tar -x -C DIR``). Each round grades the
same ``--n`` canonical RA answers (bench_score.typical_rows: depth 2-4, 2-4 operators, static path on,
full isolation) through ``grade_many`` on ``--processes`` grading processes, once with each tree, each
in a fresh interpreter with ``PYTHONPATH`` set to its tree; then runs ``opgen score`` on the same
answers end to end with each tree. Prints, per tree, the medians of: responses/s (wall clock), the
main process's CPU per response (the trusted side: routing, unmarshalling, the records), the grading
processes' CPU per response, and ``opgen score``'s wall clock and CPU (all its processes), with the
load average before and after. The same machine, the same load, the same rows: the ratio is what
counts. Run it under ``flock /tmp/opgen-bench.lock nice`` on a shared machine.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_score import against_options, typical_rows, write_score_inputs  # noqa: E402

ONE_ROUND = r'''
import json, os, resource, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1] + "/benchmarks")
from bench_score import typical_rows
from opgen.score import batch as B
from opgen.score.sandbox import Sandbox

n, processes = int(sys.argv[2]), int(sys.argv[3])
rows = typical_rows(n)
items = [B.Item(gt, a) for gt, a in rows]
tick = os.sysconf("SC_CLK_TCK")


def cpu_of(pids):
    total = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def self_cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


with Sandbox(workers=2, timeout_s=2.0) as box:
    B.close_pool()
    B.grade_many(items[:256], sandbox=box, processes=processes)  # start and warm every grading process
    pids = B.pool_pids()
    g0, s0, t0 = cpu_of(pids), self_cpu(), time.perf_counter()
    grades = B.grade_many(items, sandbox=box, processes=processes)
    dt = time.perf_counter() - t0
    main, graders = self_cpu() - s0, cpu_of(pids) - g0
    level = box.level
    B.close_pool()
print(json.dumps({"rate": n / dt, "main_ms": main / n * 1e3, "graders_ms": graders / n * 1e3,
                  "correct": sum(g["score"] == 1.0 for g in grades), "level": level,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
'''


def _env(tree: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(tree)}


def grade_many_round(tree: Path, n: int, processes: int) -> dict:
    proc = subprocess.run([sys.executable, "-c", ONE_ROUND, str(tree), str(n), str(processes)], env=_env(tree),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{tree}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cli_round(tree: Path, data: Path, responses: Path, out: Path) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "opgen", "score", "--data", str(data), "--responses", str(responses),
                           "--out", str(out), "--no-progress"], env=_env(tree), capture_output=True, text=True,
                          cwd=str(tree))
    dt = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{tree}: opgen score failed: {proc.stderr[-2000:]}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {"wall_s": dt, "cpu_s": cpu}


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def main() -> None:
    ap = against_options(__doc__, n=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--processes", type=int, default=2)
    args = ap.parse_args()
    trees = {"this tree": HERE.parent, "against": args.against.resolve()}
    load0 = os.getloadavg()
    results: dict[str, list[dict]] = {name: [] for name in trees}
    clis: dict[str, list[dict]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory() as tmp:
        data, responses = write_score_inputs(typical_rows(args.n, seed=5), Path(tmp))
        for round_ in range(args.rounds):
            order = list(trees.items()) if round_ % 2 == 0 else list(trees.items())[::-1]
            for name, tree in order:
                r = grade_many_round(tree, args.n, args.processes)
                results[name].append(r)
                c = cli_round(tree, data, responses, Path(tmp) / f"out-{name.replace(' ', '-')}")
                clis[name].append(c)
                print(f"  round {round_ + 1}, {name}: grade_many {r['rate']:.0f}/s, main {r['main_ms']:.3f} ms, "
                      f"graders {r['graders_ms']:.3f} ms per response ({r['correct']}/{args.n} correct, "
                      f"{r['level']}); opgen score {c['wall_s']:.1f} s wall, {c['cpu_s']:.1f} s CPU; "
                      f"load {os.getloadavg()[0]:.2f}", flush=True)
    print(f"{args.n} canonical answers, {args.processes} grading processes, medians of {args.rounds} alternating "
          f"rounds; load average before {load0}, after {os.getloadavg()}")
    print(f"{'':12s} {'grade_many /s':>14s} {'main ms/resp':>13s} {'graders ms/resp':>16s} "
          f"{'opgen score s':>14s} {'its CPU ms/resp':>16s}")
    for name in trees:
        rs, cs = results[name], clis[name]
        print(f"{name:12s} {_median([r['rate'] for r in rs]):14.0f} {_median([r['main_ms'] for r in rs]):13.3f} "
              f"{_median([r['graders_ms'] for r in rs]):16.3f} {_median([c['wall_s'] for c in cs]):14.1f} "
              f"{_median([c['cpu_s'] for c in cs]) / args.n * 1e3:16.3f}")


if __name__ == "__main__":
    main()
