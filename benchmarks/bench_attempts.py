"""How far every bundled recipe is from the bounds a generator gives up at (issue 36 item 5).

    python benchmarks/bench_attempts.py                 # every bundled recipe, built whole
    python benchmarks/bench_attempts.py sft-eco probes  # some of them
    python benchmarks/bench_attempts.py --limit 3000    # the first 3,000 rows of each split

Builds each recipe in this process (one worker) and prints, per split, the largest candidate index
any row took (``attempts`` = that + 1, duplicate redraws included; the bound is ``max_attempts``,
1,000 by default), the largest candidate a trees composition pool took, and the largest tree a
trees generator drew (nodes, before any check; the bound is ``max_nodes``, 1,000,000), so the
bounds can be judged against what the study needs. Rows are the build's own: wrappers only watch.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from opgen import build as B
from opgen import recipe as R
from opgen.generate import trees as T
from opgen.resources import resource_dir


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recipes", nargs="*", help="bundled recipe names (default: all)")
    ap.add_argument("--limit", type=int, default=None)
    args = ap.parse_args()
    names = args.recipes or sorted(p.stem for p in resource_dir("datasets").glob("*.yaml"))

    attempts: dict[str, int] = defaultdict(int)  # split -> largest candidate index a row took
    pool_attempts: dict[str, int] = defaultdict(int)  # trees generator's split (a pool's name) -> largest j
    nodes: dict[str, int] = defaultdict(int)  # trees generator's split -> largest shape drawn

    shard_facts = B._shard_facts

    def watch_facts(facts, tried, rejections, *rest, **kw):
        out = shard_facts(facts, tried, rejections, *rest, **kw)
        if tried:
            attempts[current[0]] = max(attempts[current[0]], max(tried))
        return out

    redraw = B._redraw

    def watch_redraw(plan, i, start, taken):
        j, facts = redraw(plan, i, start, taken)
        attempts[plan.cfg.name] = max(attempts[plan.cfg.name], j)
        return j, facts

    produce = B._produce

    def watch_produce(uid, *a, **kw):
        shards = B.current()
        current[0] = shards.plans[shards.units[uid].plan].cfg.name
        return produce(uid, *a, **kw)

    verdict = T.Trees._verdict

    def watch_verdict(self, kinds):
        nodes[self.ctx.split] = max(nodes[self.ctx.split], len(kinds))
        return verdict(self, kinds)

    candidate = T.Trees.candidate

    def watch_candidate(self, i, j):
        pool_attempts[self.ctx.split] = max(pool_attempts[self.ctx.split], j)
        return candidate(self, i, j)

    current = ["?"]
    B._shard_facts, B._redraw, B._produce = watch_facts, watch_redraw, watch_produce
    T.Trees._verdict, T.Trees.candidate = watch_verdict, watch_candidate
    print(f"{'recipe':24} {'split':32} {'rows':>7} {'max attempts':>12} {'pool max j':>10} {'max nodes':>9}")
    worst = (0, "")
    for name in names:
        attempts.clear()
        pool_attempts.clear()
        nodes.clear()
        loaded = R.load(name)
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            man = B.build([loaded], Path(tmp) / "out", workers=1, limit=args.limit)
        secs = time.perf_counter() - t0
        for split, section in man["splits"].items():
            a = attempts.get(split, 0) + 1
            worst = max(worst, (a, f"{name}/{split}"))
            print(f"{name:24} {split:32} {section['rows']:>7,} {a:>12,} {'':>10} {nodes.get(split, 0):>9,}")
        for pool in sorted(set(pool_attempts) - set(man["splits"])):
            print(f"{name:24} {'pool ' + pool[:26]:32} {'':>7} {'':>12} {pool_attempts[pool] + 1:>10,} "
                  f"{nodes.get(pool, 0):>9,}")
        print(f"{'':24} ({secs:.1f} s)", file=sys.stderr)
    print(f"largest: {worst[0]:,} attempts ({worst[1]}); bounds: max_attempts 1,000, max_nodes {T.MAX_NODES:,}")


if __name__ == "__main__":
    main()
