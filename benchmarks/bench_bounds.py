"""How soon the bounded cases end: the inputs whose tests once asserted a wall-clock bound (tests
never time anything; they now check that each case ends, with its verdict, under a hang guard of
minutes: tests/hang_guard.py). Each case is timed here, beside the bound its test used to assert.

    python benchmarks/bench_bounds.py [--repeat 3] [--only PREFIX] [--skip-hostile]

Cases (their inputs are the tests' own, imported from tests/):
- parse/<name>: the response parser on each megabyte of tests/test_parse_linear.py ADVERSARIAL
  (was < 5 s each; the old regexes took minutes on several);
- grade/blank_runs: grading tests/test_grade_hostile.py BLANK_RUNS (was < 10 s each);
- hostile/<kind>: grading each kind of tests/hostile/ at timeout 1 s without the import allowlist
  (was < 2 timeouts + 5 s, plus the grading process's wall clock for a generated kind);
- pathological/<name>: tests/test_hostile.py PATHOLOGICAL (was < 2 timeouts + 5 s);
- looping_recall: a recalled definition that loops costs one timeout, not one per probe
  (was < 3 timeouts + 2 s);
- fail_fast: a fail-fast unit of 20 looping calls stops at the first (was < 3 timeouts);
- one_budget: 12 calls sleeping just under the timeout end at the response's budget
  (was < 2 budgets + 1 s);
- forged_load_reports: a child re-announcing "loaded" cannot restart the wall clock (was < 3 s);
- build/unmeetable: `opgen build` of a recipe no draw can satisfy fails early (was < 30 s).

Prints one line per case: the median wall seconds over --repeat runs, the old bound, and their
ratio; and the load average before and after (the machine is shared: read the ratio with it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import test_grade_hostile  # noqa: E402
import test_hostile  # noqa: E402
import test_parse_linear  # noqa: E402
import test_sandbox_protocol  # noqa: E402

from opgen.score import batch, grade, parse  # noqa: E402
from opgen.score.sandbox import Job, Sandbox, Unit  # noqa: E402

UNMEETABLE = ("name: u\nsplits:\n  s:\n    generator: trees\n    role: eval\n    unique: program\n"
              "    options: {ops: [func_3], depths: [1], rows: 40, max_attempts: 50}\n")


def timed(fn: Callable[[], object], repeat: int) -> float:
    walls = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
    return statistics.median(walls)


def report(name: str, seconds: float, bound: float) -> None:
    print(f"{name:40s} {seconds:8.3f} s   bound {bound:6.1f} s   {seconds / bound:6.1%} of it", flush=True)


def parse_cases(repeat: int, only: str) -> None:
    entries = ("main_solution_1", "main_solution_2")
    for name, text in sorted(test_parse_linear.ADVERSARIAL.items()):
        if f"parse/{name}".startswith(only):
            report(f"parse/{name}", timed(lambda t=text: parse.parse_program_answer(t, entries), repeat), 5.0)


def weak_sandbox(**kwargs) -> Sandbox:
    """A sandbox below full isolation, as the tests that time these cases built it (no warning)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Sandbox(allow_weak_sandbox=True, **kwargs)


def sandbox_cases(repeat: int, only: str, hostile: bool) -> None:
    def graded(name: str, gold: dict, response: str, box: Sandbox, bound: float) -> None:
        if name.startswith(only):
            report(name, timed(lambda: grade(gold, response, sandbox=box), repeat), bound)

    with Sandbox(workers=2, timeout_s=2.0) as box:
        for n, response in enumerate(test_grade_hostile.BLANK_RUNS):
            graded(f"grade/blank_runs[{n}]", test_grade_hostile.GOLD, response, box, 10.0)
    t, gold = test_hostile.TIMEOUT_S, test_hostile.GOLD
    old, batch.RESPONSE_CPU_S = batch.RESPONSE_CPU_S, 1.0  # as tests/test_hostile.py runs them
    try:
        with weak_sandbox(workers=2, timeout_s=t, imports="open") as box, tempfile.TemporaryDirectory() as tmp:
            sentinel = Path(tmp) / "precious.txt"
            sentinel.write_text("do not touch")
            for kind in test_hostile.KINDS if hostile else ():
                code, _ = test_hostile.load(kind, sentinel)
                generated = (test_hostile.CORPUS / f"{kind}.py").read_text().splitlines()[1].startswith("# generate:")
                graded(f"hostile/{kind}", gold, f"```python\n{code}\n```", box,
                       2 * t + 5 + (batch.RESPONSE_WALL_S if generated else 0))
            for name, response in test_hostile.PATHOLOGICAL.items():
                graded(f"pathological/{name}", gold, response, box, 2 * t + 5)
            graded("looping_recall", gold, test_hostile.LOOPING_RECALL, box, 3 * t + 2)
    finally:
        batch.RESPONSE_CPU_S = old
    with Sandbox(workers=2, timeout_s=1.0, max_output=1000) as box:
        if "fail_fast".startswith(only):
            looping = Unit("def f(x):\n    while True: pass\n", tuple(("f", (str(i),)) for i in range(20)),
                           fail_fast=True)
            report("fail_fast", timed(lambda: box.run_units([looping]), repeat), 3 * box.timeout_s)
    with weak_sandbox(workers=1, timeout_s=0.5, imports="open") as one:
        if "one_budget".startswith(only):
            sleepy = Unit("import time\ndef f(x):\n    time.sleep(0.45)\n    return x\n",
                          tuple(("f", (str(i),)) for i in range(12)))
            report("one_budget", timed(lambda: one.run_units([sleepy]), repeat), 2 * one.budget_s + 1.0)
    with weak_sandbox(workers=1, timeout_s=1.0, max_output=1000, imports="open") as forger:
        if "forged_load_reports".startswith(only):
            job = Job(test_sandbox_protocol._FORGER, "f", ("a",))
            report("forged_load_reports", timed(lambda: forger.run([job]), repeat), 3.0)


def build_case(repeat: int, only: str) -> None:
    if not "build/unmeetable".startswith(only):
        return
    with tempfile.TemporaryDirectory() as tmp:
        recipe = Path(tmp) / "u.yaml"
        recipe.write_text(UNMEETABLE)

        def run() -> None:
            done = subprocess.run([sys.executable, "-m", "opgen", "build", str(recipe), "--out", str(Path(tmp) / "o"),
                                   "--no-progress"], capture_output=True, text=True)
            assert done.returncode == 1, done.stderr

        report("build/unmeetable (a fresh process)", timed(run, repeat), 30.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", default="", help="run the cases whose name starts so (parse, hostile/fork_bomb, ...)")
    ap.add_argument("--skip-hostile", action="store_true", help="leave out the corpus (minutes)")
    args = ap.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    parse_cases(args.repeat, args.only)
    sandbox_cases(args.repeat, args.only, hostile=not args.skip_hostile)
    build_case(args.repeat, args.only)
    print(f"load average after:  {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
