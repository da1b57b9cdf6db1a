"""What the split tests share: the small MCD split they build, `opgen` in a child process, and the
built rows' trees walked here, independently of opgen.splits."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from opgen import expr as E

MCD_SPLIT = """\
split:
  kind: mcd
  pool: {generator: trees, rows: 1500, options: {ops: all, depths: [2, 3], rows: 2000}}
  train_rows: 500
  eval_rows: 120
"""

RL_TRAIN_TEST = """\
defaults: {kind: rl, prompt_format: closed_book, answer_format: ra}
splits: {train: {role: train}, test: {role: eval}}
"""


def mcd_recipe(name: str, max_atom_divergence: float | None = None, rest: str = RL_TRAIN_TEST) -> str:
    """The recipe ``name`` (seed 2) of the small MCD split: a pool of 1,500 trees searched for 500
    train and 120 eval rows (D_A bounded where given), then ``rest``: its defaults and splits."""
    bound = "" if max_atom_divergence is None else f"  max_atom_divergence: {max_atom_divergence}\n"
    return f"name: {name}\nseed: 2\n{MCD_SPLIT}{bound}{rest}"


def opgen(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "opgen", *args], capture_output=True, text=True)
    if check:
        assert r.returncode == 0, r.stdout + r.stderr
    return r


def trees_of(path: Path) -> list[list[E.Expr]]:
    rows = pq.read_table(path, columns=["reward_model"]).column(0).to_pylist()
    return [[E.parse(t["expr"]) for t in json.loads(r["ground_truth"])["tasks"]] for r in rows]


def fragment_texts(t: E.Expr) -> set[str]:
    """A tree's compound texts of 2 and 3 operator nodes (an edge, a node with two of its arguments, a
    path of three), walked here (not via opgen.splits' occurrences)."""
    lab = {E.Call: lambda x: x.op, E.Concat: lambda x: "+", E.Method: lambda x: "." + x.name}

    def kids(n: E.Expr) -> list[E.Expr | None]:
        return [k if isinstance(k, (E.Call, E.Concat, E.Method)) else None for k in E.children(n)]

    def text(n: E.Expr, chosen: dict[int, str]) -> str:
        return f"{lab[type(n)](n)}({','.join(chosen.get(i, '_') for i in range(len(E.children(n))))})"

    out = set()
    for n in E.walk(t):
        if not isinstance(n, (E.Call, E.Concat, E.Method)):
            continue
        ks = kids(n)
        for i, k in enumerate(ks):
            if k is None:
                continue
            out.add(text(n, {i: lab[type(k)](k)}))
            for j, g in enumerate(kids(k)):
                if g is not None:
                    out.add(text(n, {i: text(k, {j: lab[type(g)](g)})}))
            for j in range(i + 1, len(ks)):
                if ks[j] is not None:
                    out.add(text(n, {i: lab[type(k)](k), j: lab[type(ks[j])](ks[j])}))
    return out
