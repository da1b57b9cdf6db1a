"""Leakage by construction (issue 23 item 1): eval and probe tasks never equal a training task and
held-out compositions never occur in training because of how inputs are drawn (opgen.rng.input_side),
not because a build replays other recipes; the ID evals keep the programs' natural distribution.

The disjointness checks here read the built files back and normalise programs with Python's own
``ast`` module, not with opgen's parser, renderer or keys (the code under test)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections import Counter
from itertools import product
from pathlib import Path

import pyarrow.parquet as pq
import pytest

# The study's held-out operators (compgen-checkpoints: 12 of 25), written out here rather than read
# from opgen.ops, so that a change to the library's split is caught rather than followed.
STUDY_HELDOUT = {"func_0", "func_2", "func_6", "func_7", "func_8", "func_10", "func_12", "func_14", "func_16",
                 "func_18", "func_21", "func_24"}
TRAINING_CELLS = ("stage1", "stage15b-init", "sft-d1", "sft-v1", "sft-c1", "sft-eco", "sft-c4", "sft-c4b",
                  "sft-matched", "rl-r1", "rl-mda", "native-stage1", "native-stage2")
EVAL_RECIPES = ("eval-suite", "probes")


# ---------------------------------------------------------------- an independent reading of the files


def _norm(expr: str) -> str:
    """The program's AST, dumped: spacing, quoting and redundant brackets do not matter."""
    return ast.dump(ast.parse(expr, mode="eval").body)


def _calls(node: ast.AST) -> list[str]:
    return [n.func.id for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]


def _is_composition(expr: str) -> bool:
    """More than one call on x and literals: any call whose argument is itself computed (a call,
    a concatenation, a method), so ``func_9((x + x))`` is a composition."""
    body = ast.parse(expr, mode="eval").body
    if not (isinstance(body, ast.Call) and isinstance(body.func, ast.Name)):
        return True
    return not all(isinstance(a, (ast.Name, ast.Constant)) for a in body.args)


def _tasks(folder: Path, role: str):
    """(split file, program, input) of every task of every file of ``role`` in a build folder."""
    man = json.loads((folder / "manifest.json").read_text())
    for name, sec in man["splits"].items():
        if sec["role"] != role:
            continue
        for f in sec["files"]:
            for rm in pq.read_table(folder / f["path"], columns=["reward_model"]).column("reward_model").to_pylist():
                for t in json.loads(rm["ground_truth"])["tasks"]:
                    yield name, t["expr"], t["input"]


def _build(runner, cli, recipe: str, out: Path, *extra: str) -> Path:
    res = runner.invoke(cli, ["build", recipe, "--out", str(out), "--no-progress", *extra])
    assert res.exit_code == 0, res.output
    return out


def _check_disjoint(train_dirs: list[Path], eval_dirs: list[Path]) -> dict:
    train_tasks: set[tuple[str, str]] = set()
    train_programs: set[str] = set()
    composed_heldout = []
    n_train = 0
    for d in train_dirs:
        for split, expr, x in _tasks(d, "train"):
            n_train += 1
            p = _norm(expr)
            train_tasks.add((p, x))
            train_programs.add(p)
            if _is_composition(expr) and set(_calls(ast.parse(expr, mode="eval"))) & STUDY_HELDOUT:
                composed_heldout.append((d.name, split, expr))
    shared_tasks, heldout_shared = [], []
    n_eval = n_heldout_comps = 0
    for d in eval_dirs:
        for split, expr, x in _tasks(d, "eval"):
            n_eval += 1
            p = _norm(expr)
            if (p, x) in train_tasks:
                shared_tasks.append((d.name, split, expr, x))
            if _is_composition(expr) and set(_calls(ast.parse(expr, mode="eval"))) & STUDY_HELDOUT:
                n_heldout_comps += 1
                if p in train_programs:
                    heldout_shared.append((d.name, split, expr))
    return {"train_tasks": n_train, "eval_tasks": n_eval, "heldout_compositions": n_heldout_comps,
            "shared_tasks": shared_tasks, "heldout_composed_in_training": composed_heldout,
            "heldout_programs_in_training": heldout_shared}


@pytest.mark.slow
def test_no_eval_or_probe_task_is_a_training_task_limited(runner, cli, tmp_path):
    """The fast loop's version: the first rows of the cells that build fast (no composition pool),
    against the eval suite's first three depths and the probes; every input on its role's side."""
    from opgen.rng import input_side

    cells = ("stage1", "sft-d1", "rl-mda", "native-stage2")
    trains = [_build(runner, cli, r, tmp_path / r, "--limit", "100") for r in cells]
    evals = [_build(runner, cli, r, tmp_path / r, "--limit", "600") for r in EVAL_RECIPES]
    got = _check_disjoint(trains, evals)
    assert got["train_tasks"] > 600 and got["eval_tasks"] > 4000 and got["heldout_compositions"] > 600
    assert got["shared_tasks"] == [] and got["heldout_composed_in_training"] == []
    assert got["heldout_programs_in_training"] == []
    for out in (*trains, *evals):
        for role, side in (("train", 0), ("eval", 1)):
            sides = Counter(input_side(x) for _, _, x in _tasks(out, role))
            assert set(sides) <= {side}, (out.name, role, sides)


@pytest.mark.slow
def test_no_eval_or_probe_task_is_a_training_task_of_any_bundled_cell(runner, cli, tmp_path):
    """Whole builds: every task of every bundled training cell against every eval and probe task."""
    trains = [_build(runner, cli, r, tmp_path / r) for r in TRAINING_CELLS]
    evals = [_build(runner, cli, r, tmp_path / r) for r in EVAL_RECIPES]
    got = _check_disjoint(trains, evals)
    assert got["train_tasks"] > 300_000 and got["eval_tasks"] > 9_728 + 12_544  # probe_1b rows hold r + 1 tasks
    assert got["shared_tasks"] == [] and got["heldout_composed_in_training"] == []
    assert got["heldout_programs_in_training"] == []
    # and opgen's own cross-build check agrees
    res = runner.invoke(cli, ["leakage", *map(str, trains), "--against", *map(str, evals)])
    assert res.exit_code == 0 and "0 violations" in res.output, res.output


# ---------------------------------------------------------------- no recipe depends on another


@pytest.mark.slow
def test_eval_and_probe_builds_load_no_other_recipe(runner, cli, tmp_path, monkeypatch):
    """The eval suite and the probes are built from their own recipe alone: no training recipe is
    loaded, nothing is replayed (the removed leakage.avoid replayed eleven cells per build)."""
    from opgen import leakage
    from opgen import recipe as R

    real = R.load
    loaded: list[str] = []

    def load(spec, *args, **kwargs):
        loaded.append(str(spec))
        return real(spec, *args, **kwargs)

    def replay(*a, **k):
        raise AssertionError("a training recipe was replayed")

    monkeypatch.setattr(R, "load", load)
    for name in ("training_keys", "training_programs"):
        monkeypatch.setattr(leakage, name, replay, raising=False)
    for recipe in EVAL_RECIPES:
        loaded.clear()
        _build(runner, cli, recipe, tmp_path / recipe, "--limit", "16", "--workers", "1")
        assert loaded == [recipe]
        assert R.load(recipe).avoid == ()
    # no bundled recipe opts into program-level avoidance (it would make its rows depend on others)
    from opgen.resources import resource_dir

    bundled = sorted(p.stem for p in resource_dir("datasets").glob("*.yaml"))
    assert "eval-suite" in bundled and all("avoid" not in (real(n).raw.get("leakage") or {}) for n in bundled)


# ---------------------------------------------------------------- the side bit itself


def test_input_side_is_a_pinned_keyed_hash():
    from opgen.rng import input_side, side_of

    # pinned: a change of key or hash changes every built row and must be a deliberate release
    got = [input_side(x) for x in ("", "a", "abc", "hello", "zzzzzzzzzz", "é")]
    assert got == PINNED_SIDES
    assert side_of("train") == 0 and side_of("eval") == 1
    with pytest.raises(ValueError, match="unknown role"):
        side_of("test")
    code = "from opgen.rng import input_side; print([input_side(w) for w in ('abc', 'hello', 'xyz', 'qq')])"
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": seed, "PATH": ""}).stdout for seed in ("0", "1", "12345")}
    assert len(outs) == 1


PINNED_SIDES = [1, 1, 1, 1, 0, 1]


def test_the_side_costs_little_input_length_shift():
    """Drawing inputs on one side keeps the input-length distribution: each length's strings fall
    on either side within sampling error of a half, so over the bundled 3-10 letters the length
    shares move by under 1% (exact for 3 and 4 letters; longer lengths have 26**5+ strings).
    Lengths 1 and 2 have too few strings for that (17 of the 26 one-letter strings are on side 1)."""
    from opgen.rng import LOWERCASE, input_side

    for n in (1, 2, 3, 4):
        strings = ["".join(p) for p in product(LOWERCASE, repeat=n)]
        share = sum(map(input_side, strings)) / len(strings)
        assert abs(share - 0.5) < 4 * 0.5 / len(strings) ** 0.5, (n, share)
        if n >= 3:  # P(length n | side) / P(length n) - 1, with the other lengths' shares ~1/2
            assert abs(share / 0.5 - 1) < 0.01 and abs((1 - share) / 0.5 - 1) < 0.01, (n, share)


def test_an_alphabet_with_no_input_on_the_side_fails_clearly(runner, cli, tmp_path):
    from opgen.rng import input_side

    # of the one-letter strings "a".."z", find one on the training side, and ask an eval split for it
    letter = next(c for c in "abcdefghijklmnopqrstuvwxyz" if input_side(c) == 0)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"""\
name: r
defaults: {{role: eval, kind: rl}}
splits:
  s:
    generator: chains
    options: {{ops: heldout, depths: [1], rows: 4, input_len: [1, 1], alphabet: "{letter}", max_attempts: 5}}
""")
    res = runner.invoke(cli, ["build", str(recipe), "--out", str(tmp_path / "o")])
    assert res.exit_code == 1 and "input_side" in res.output and "Traceback" not in res.output


# ---------------------------------------------------------------- the ID evals keep their distribution


def _by_depth(tasks) -> dict[int, list]:
    """Per depth: (operators, whether the program holds a literal, input length) of each task."""
    from opgen.expr import Lit, parse, walk

    out: dict[int, list] = {}
    for t in tasks:
        program = parse(t["expr"]) if isinstance(t, dict) else t.program
        ops_, depth, x = (t["ops"], t["depth"], t["input"]) if isinstance(t, dict) else (t.ops, t.depth, t.input)
        has_literal = any(isinstance(n, Lit) for n in walk(program))
        out.setdefault(depth, []).append((tuple(sorted(set(ops_))), has_literal, len(x)))
    return out


def _chi2_p(a: Counter, b: Counter) -> float:
    from scipy.stats import chi2_contingency

    keys = [k for k in sorted(set(a) | set(b)) if a.get(k, 0) + b.get(k, 0) >= 5]
    if len(keys) < 2:
        return 1.0
    return float(chi2_contingency([[a.get(k, 0) for k in keys], [b.get(k, 0) for k in keys]])[1])


def _two_proportion_z(k1: int, n1: int, k2: int, n2: int) -> float:
    p = (k1 + k2) / (n1 + n2)
    if p in (0.0, 1.0):
        return 0.0
    return abs(k1 / n1 - k2 / n2) / (p * (1 - p) * (1 / n1 + 1 / n2)) ** 0.5


ID_SPLITS = ("trainop_trees_d1-8", "trainop_chains_d1-20")


@pytest.fixture(scope="module")
def id_evals(tmp_path_factory):
    """The bundled eval suite's ID splits as `opgen build` writes them (whatever rule it applies)."""
    from click.testing import CliRunner
    from opgen.cli import cli

    out = tmp_path_factory.mktemp("id") / "suite"
    only = [a for s in ID_SPLITS for a in ("--only", s)]
    res = CliRunner().invoke(cli, ["build", "eval-suite", "--out", str(out), "--no-progress", *only])
    assert res.exit_code == 0, res.output
    got = {}
    for split in ID_SPLITS:
        rms = pq.read_table(out / f"{split}.parquet", columns=["reward_model"]).column("reward_model").to_pylist()
        got[split] = [json.loads(rm["ground_truth"])["tasks"][0] for rm in rms]
    return got


@pytest.mark.slow
@pytest.mark.parametrize("split", ID_SPLITS)
def test_id_evals_have_the_distribution_of_the_recipe_drawn_without_a_leakage_rule(split, id_evals):
    """Per depth, the built ID eval's operator frequencies, literal share and input lengths are
    within sampling error of the same options drawn with no leakage rule at all (no side, no
    replay): chi-square and two-proportion tests at 0.1% / 4 sigma. The removed leakage.avoid fails
    this at depth 2 (256/256 train-operator chains held func_5; 38/256 without it)."""
    from opgen import generate as G
    from opgen import recipe as R
    from opgen.expr import recursion_headroom

    recipe = R.load("eval-suite")
    cfg = next(c for c in recipe.splits if c.name == split)
    cls = G.get(cfg.generator)

    class Unruled(cls):  # type: ignore[misc, valid-type]
        def side_input(self, draw):
            return draw

    ctx = G.Context(digest="an independent reference draw", split=split, seed=7, role="eval")
    gen = Unruled(cfg.options, ctx)
    ours = _by_depth(id_evals[split])
    with recursion_headroom():
        ref = _by_depth([gen.item(i).tasks[0] for i in range(gen.count())])
    assert sorted(ours) == sorted(ref) and all(len(ours[d]) == len(ref[d]) == 256 for d in ours)
    for d in sorted(ours):
        a, b = ours[d], ref[d]
        ops_a = Counter(o for ops_, _, _ in a for o in ops_)
        ops_b = Counter(o for ops_, _, _ in b for o in ops_)
        assert _chi2_p(ops_a, ops_b) > 1e-3, (d, ops_a, ops_b)
        # rows holding each operator (func_5 in 256/256 depth-2 chains under the old rule)
        for op in sorted(set(ops_a) | set(ops_b)):
            ka, kb = sum(op in o for o, _, _ in a), sum(op in o for o, _, _ in b)
            assert _two_proportion_z(ka, len(a), kb, len(b)) < 4.0, (d, op, ka, kb)
        la, lb = sum(lit for _, lit, _ in a), sum(lit for _, lit, _ in b)
        assert _two_proportion_z(la, len(a), lb, len(b)) < 4.0, (d, "literal share", la, lb)
        assert _chi2_p(Counter(n for _, _, n in a), Counter(n for _, _, n in b)) > 1e-3, (d, "input lengths")
