"""The least a fork-per-program grader costs on this machine, next to opgen's sandbox.

    python benchmarks/floor_sandbox.py [--n 2000] [--repeat 3]

A *bare* server is the cheapest design that still runs each program in a fresh child: a warm
``python -I -S`` worker (the same preloaded modules and warm-up as opgen's worker) reads a
marshalled code object and an input, forks, the child runs the program and writes ``repr`` of the
result to a pipe, the worker reads it, reaps the child and answers. No namespaces, uid, rlimits,
private directory, wall clock, frames or error classes — none of the isolation the scorer needs —
and no parsing or structure check in the scorer. Both run the same typical RA programs from two
client threads over two workers; the figure is CPU per program of the workers and their children
(the scorer's own CPU printed apart). This is not a grader: it shows how much of opgen's CPU per
program is the fork-per-program floor of this machine, and how much is isolation and grading.
"""

from __future__ import annotations

import argparse
import marshal
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_score import typical_rows

from opgen.score.parse import parse_program_answer
from opgen.score.sandbox import Sandbox, Unit

# The folder holding the sandbox worker's package (opgen/score/jail), as the worker's script adds it.
JAIL_PARENT = Path(__file__).resolve().parent.parent / "opgen" / "score"

# The bare server: the same warm image as opgen's worker (its preloaded modules and warm-up), no isolation.
BARE = r'''
import marshal, os, sys
sys.path.append(sys.argv[1])
from jail import imports, worker
imports.preload()
worker._warm_up()


def read(n):
    buf = b""
    while len(buf) < n:
        got = os.read(0, n - len(buf))
        if not got:
            os._exit(0)
        buf += got
    return buf


while True:
    code, x = marshal.loads(read(int.from_bytes(read(4), "little")))
    r, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        g = {"__name__": "__main__"}
        exec(code, g)
        os.write(wfd, repr(g["main_solution"](x)).encode())
        os._exit(0)
    os.close(wfd)
    out = os.read(r, 1 << 20)
    os.close(r)
    os.waitpid(pid, 0)
    os.write(1, len(out).to_bytes(4, "little") + out)
'''


def _cpu_of_tree(pid: int) -> float:
    """CPU seconds of a live process, its reaped children and its live descendants."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    total = sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    for task in os.listdir(f"/proc/{pid}/task"):
        for child in Path(f"/proc/{pid}/task/{task}/children").read_text().split():
            total += _cpu_of_tree(int(child))
    return total


def bare(programs: list, inputs: list[str]) -> float:
    procs = [subprocess.Popen([sys.executable, "-I", "-S", "-c", BARE, str(JAIL_PARENT)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, bufsize=0) for _ in range(2)]

    def run(k: int, stop: int) -> None:
        p = procs[k]
        for i in range(k, stop, 2):
            req = marshal.dumps((programs[i], inputs[i]))
            os.write(p.stdin.fileno(), len(req).to_bytes(4, "little") + req)
            n = int.from_bytes(os.read(p.stdout.fileno(), 4), "little")
            while n:
                n -= len(os.read(p.stdout.fileno(), n))

    try:
        run(0, 100)
        run(1, 100)
        before = sum(_cpu_of_tree(p.pid) for p in procs)
        threads = [threading.Thread(target=run, args=(k, len(programs))) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return (sum(_cpu_of_tree(p.pid) for p in procs) - before) / len(programs)
    finally:
        for p in procs:
            p.stdin.close()
            p.wait()


def opgen_sandbox(units: list[Unit]) -> tuple[float, str]:
    with Sandbox(workers=2) as box:
        for u in units[:100]:
            box.run_units([u])
        pids = [w.proc.pid for w in box._all]
        before = sum(_cpu_of_tree(p) for p in pids)
        threads = [threading.Thread(target=lambda k=k: [box.run_units([u]) for u in units[k::2]]) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        level = box.level
        cpu = (sum(_cpu_of_tree(p) for p in pids) - before) / len(units)
    return cpu, level


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rows = typical_rows(args.n)
    codes = [parse_program_answer(answer).code for _, answer in rows]
    inputs = [gt["tasks"][0]["input"] for gt, _ in rows]
    programs = [compile(code, "<answer>", "exec") for code in codes]
    units = [Unit(code, (("main_solution", (x,)),)) for code, x in zip(codes, inputs)]
    results: dict[str, list[float]] = {"bare": [], "opgen": []}
    t0 = time.perf_counter()
    level = ""
    for _ in range(max(1, args.repeat)):  # alternating, so both see the same load
        results["bare"].append(bare(programs, inputs))
        cpu, level = opgen_sandbox(units)
        results["opgen"].append(cpu)
    b, o = statistics.median(results["bare"]), statistics.median(results["opgen"])
    print(f"CPU per program, workers and children (medians of {args.repeat}, {args.n} programs, 2 workers, "
          f"{time.perf_counter() - t0:.0f} s):")
    print(f"  bare fork-per-program server:  {b * 1e3:.2f} ms")
    print(f"  opgen sandbox (run_units):     {o * 1e3:.2f} ms  (+{(o - b) * 1e3:.2f} ms for isolation and protocol; "
          f"isolation: {level})")
    print("  the scorer's own CPU (parsing, compiling, structure check, threads) comes on top: "
          "benchmarks/bench_score.py prints it")


if __name__ == "__main__":
    main()
