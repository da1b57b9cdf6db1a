"""The static path against the sandbox: grade generated programs both ways and count disagreements.

    python benchmarks/differential_static.py [--n 100000] [--seed 0] [--suite /tmp/opgen-eval-suite]

Programs come from the bundled eval suite's rows (built into ``--suite`` if it is not there) and
tests/static_corpus.py's variants (canonical, chimeras, arity errors, renamed variables, mutated
bodies, resource limits, helpers, top-level code, ...). Each is graded with ``static=False`` (every
program in the sandbox) and ``static=True``; the full grade dicts must be equal. Prints the count
of disagreements (0 expected where the static path answered), how many responses the static path
answered, per kind, and the first disagreements in full. Exit status 1 when the static path
disagreed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import static_corpus as C

from opgen.score.sandbox import Sandbox


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--suite", type=Path, default=Path("/tmp/opgen-eval-suite"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=1.0, help="the sandbox's per-call wall clock (s)")
    args = ap.parse_args()
    rows = C.built_rows(args.suite)
    items = list(C.corpus(rows, args.n, seed=args.seed))
    t0 = time.perf_counter()
    with Sandbox(workers=args.workers, timeout_s=args.timeout) as box:
        print(f"{len(rows)} built rows, {len(items)} programs, isolation {box.level}", flush=True)
        result = C.differential(items, box, threads=2 * args.workers, progress=True)
    dt = time.perf_counter() - t0
    bad = result["static_disagreements"]
    print(f"\n{result['n']} programs graded both ways in {dt:.0f} s: {len(result['disagreements'])} disagreements, "
          f"{bad} of them where the static path answered; it answered {result['static']} "
          f"({result['static'] / result['n']:.1%}); the others are the sandbox disagreeing with itself (a call "
          f"near its time or memory limit)")
    print(f"{'kind':20s} {'programs':>9s} {'static':>8s}")
    for kind, (n, hits) in sorted(result["by_kind"].items()):
        print(f"{kind:20s} {n:9d} {hits:8d}")
    for kind, _gt, response, fast, slow, hit in result["disagreements"][:5]:
        print(f"\n--- {kind} ({'static path' if hit else 'sandbox both times'})\n{response}")
        for key in sorted(set(fast) | set(slow)):
            if fast.get(key) != slow.get(key):
                print(f"  {key}: static {fast.get(key)!r}\n  {' ' * len(key)}  sandbox {slow.get(key)!r}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
