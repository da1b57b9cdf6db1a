"""What the mcd redraw rule leaves (benchmarks/bench_split_redraw.py; docs/splits.md, "What the redraw
leaves"): a trees split on split-mcd's search keeps about 43% of its candidates, and the rows it keeps
hold about a quarter fewer interlace calls (func_7) and an eighth more concatenations than the
generator draws without the rule. The figures move only when the generator, the search or the rule
does; the tolerances say how far before this fails."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_split_redraw as B

from opgen import expr as E
from opgen import recipe as R
from opgen.splits import compounds as C

ROWS = 600
ACCEPTANCE, ACCEPTANCE_TOL = 0.43, 0.05  # 20,000 rows: 0.4346 (docs/splits.md)
INTERLACE_DROP, INTERLACE_DROP_TOL = 0.26, 0.12  # relative drop of func_7's share of nodes; 20,000 rows: 0.264
PLUS_RISE, PLUS_RISE_TOL = 0.125, 0.10  # relative rise of "+"'s share of nodes; 20,000 rows: 0.125


def test_mcd_redraw_keeps_its_acceptance_share_and_its_concatenation_skew():
    rec, cfg = B.scenario_recipe("mcd-trees")
    sample, cells, _sparse, held = B.measure(rec, cfg, ROWS)
    accepted = ROWS / (ROWS + sample.split_rejections)
    assert abs(accepted - ACCEPTANCE) <= ACCEPTANCE_TOL, accepted
    # independently of the benchmark's cells: '+''s share of the inner nodes, walked here
    gen = R.build_generator(cfg, rec)
    kept = [gen.first_valid(i)[1] for i in range(ROWS)]
    plain = [type(gen).first_valid(gen, i)[1] for i in range(ROWS)]

    def share(items, is_it):
        inner = [n for it in items for t in it.tasks for n in E.walk(t.program) if not isinstance(n, (E.Var, E.Lit))]
        return sum(map(is_it, inner)) / len(inner)

    def plus(n):
        return isinstance(n, E.Concat)

    def interlace(n):
        return isinstance(n, E.Call) and n.op == "func_7"

    by_key = {c.key: c for c in cells}
    assert abs(by_key["op_share|all|+"].kept - share(kept, plus)) < 1e-12
    assert abs(by_key["op_share|all|func_7"].without - share(plain, interlace)) < 1e-12
    drop = 1 - share(kept, interlace) / share(plain, interlace)
    assert abs(drop - INTERLACE_DROP) <= INTERLACE_DROP_TOL, drop
    assert by_key["op_share|all|func_7"].z < 0
    assert abs(share(kept, plus) / share(plain, plus) - 1 - PLUS_RISE) <= PLUS_RISE_TOL
    # by design: no kept row holds a held-out compound; a row whose first candidate held none is unchanged
    assert not any(set(held).intersection(C.row_units([t.program for t in it.tasks]).compounds) for it in kept)
    redrawn = sum(E.render(a.tasks[0].program) != E.render(b.tasks[0].program)
                  for a, b in zip(kept, plain))
    assert redrawn == sample.redrawn and 0 < redrawn < ROWS
