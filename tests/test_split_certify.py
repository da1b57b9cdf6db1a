"""Certificates re-checked from the files they describe by an independent walker (Python's ``ast``,
not opgen's parser or the certificate's code): path-strict systematicity, the baseline, the
counts; ``--only`` over a kept file that was edited; one build holding training cells and eval
splits of different recipes applies the leakage rule of separate builds."""

from __future__ import annotations

import ast
import json
import math
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

# ---------------------------------------------------------------- the independent walker


def programs(path: Path) -> list[list[str]]:
    """Each row's task programs, read from the file's ground truth."""
    out = []
    for rm in pq.read_table(path, columns=["reward_model"]).column(0).to_pylist():
        out.append([t["expr"] for t in json.loads(rm["ground_truth"])["tasks"]])
    return out


def _label(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Name):
            return node.func.id
        if isinstance(node.func, ast.Attribute):
            return "." + node.func.attr
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return "+"
    return None


def _kids(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.Call):
        return ([node.func.value] if isinstance(node.func, ast.Attribute) else []) + list(node.args)
    if isinstance(node, ast.BinOp):
        return [node.left, node.right]
    return []


def on_one_path(expr: str) -> set[tuple[str, str]]:
    """(operator above, operator below) for every two library calls on one root-to-leaf path."""
    found: set[tuple[str, str]] = set()

    def walk(node: ast.AST, above: tuple[str, ...]) -> None:
        label = _label(node)
        if label is not None and label.startswith("func_"):
            found.update((a, label) for a in above)
            above = (*above, label)
        for kid in _kids(node):
            walk(kid, above)

    walk(ast.parse(expr, mode="eval").body, ())
    return found


def atom_counts(exprs: list[str]) -> Counter[str]:
    """Every operator node of the row (calls, methods, concatenations), counted per occurrence."""
    out: Counter[str] = Counter()
    for e in exprs:
        for node in ast.walk(ast.parse(e, mode="eval").body):
            label = _label(node)
            if label is not None:
                out[label] += 1
    return out


def bhattacharyya_divergence(p: Counter[str], q: Counter[str]) -> float:
    sp, sq = sum(p.values()), sum(q.values())
    return 1 - sum(math.sqrt(p[k] / sp * q[k] / sq) for k in set(p) & set(q))


def build(args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "opgen", "build", *args], capture_output=True, text=True, cwd=cwd)


SYS = """\
name: sys
seed: 3
split: {kind: systematicity, pairs: [[func_3, func_9], [func_4, func_4]]}
defaults: {kind: rl, prompt_format: closed_book, answer_format: ra, unique: task}
splits:
  train: {generator: trees, role: train, options: {ops: train, depths: [2, 3, 4], per_depth: 150}}
  test:
    generator: chains
    role: eval
    options: {ops: [func_3, func_9, func_4, func_17], depths: [3, 4], per_depth: 30}
"""


@pytest.fixture(scope="module")
def sys_build(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sys")
    (root / "sys.yaml").write_text(SYS)
    r = build([str(root / "sys.yaml"), "--out", str(root / "out")])
    assert r.returncode == 0, r.stderr
    return root


def test_systematicity_certificate_is_path_strict_by_an_independent_walk(sys_build: Path):
    out = sys_build / "out"
    cert = json.loads((out / "manifest.json").read_text())["split_certificates"]["sys"]
    pairs = {frozenset(("func_3", "func_9")), frozenset(("func_4",))}
    train, evals = programs(out / "train.parquet"), programs(out / "test.parquet")

    def held(row: list[str]) -> set[tuple[str, str]]:
        return {p for e in row for p in on_one_path(e) if frozenset(p) in pairs}

    # no training row has both operators of a pair on one path, at any distance (func_4 twice included)
    assert not [row for row in train if held(row)]
    # ... while training does compose each of them with something else, and nests calls 3 deep
    assert any(len(on_one_path(e)) >= 3 for row in train for e in row)
    assert all(held(row) for row in evals)  # eval: require
    assert cert["rule"] == "path" and cert["config"]["rule"] == "path"
    tested = {f"{a}(..{b})" for row in evals for a, b in held(row)}
    assert cert["heldout_tested"] == sorted(tested)
    assert cert["heldout_untested"] == sorted(set(cert["heldout_compounds"]) - tested)
    assert cert["check"]["train_rows_with_heldout_compound"] == 0 and cert["check"]["ok"]
    # the counts
    assert (cert["train_rows"], cert["eval_rows"]) == (len(train), len(evals)) == (450, 60)
    assert cert["heldout_share_of_eval_rows"] == 1.0
    # D_A with atoms per occurrence, recomputed from the files
    p = sum((atom_counts(r) for r in train), Counter())
    q = sum((atom_counts(r) for r in evals), Counter())
    assert cert["atom_divergence"] == pytest.approx(bhattacharyya_divergence(p, q), abs=1e-5)
    # the baseline and the excess over it; the D_A warning (eval uses 4 operators, training 13)
    base = cert["baseline"]
    assert base["seeds"] >= 3 and base["pool_rows"] == 510 and (base["train_rows"], base["eval_rows"]) == (450, 60)
    for key in ("atom_divergence", "compound_divergence"):
        assert base[key]["min"] <= base[key]["mean"] <= base[key]["max"]
        assert cert["excess_over_baseline"][key] == pytest.approx(cert[key] - base[key]["mean"], abs=2e-6)
    assert cert["excess_over_baseline"]["compound_divergence"] > 0.3
    assert any("not" in w or "compound-only" in w for w in cert["check"]["warnings"])
    assert cert["definitions"]["compounds"].startswith("connected fragments of 2 to 3 nodes")


def test_the_adjacent_rule_stays_an_option_and_lets_distant_pairs_through(tmp_path: Path):
    (tmp_path / "adj.yaml").write_text(SYS.replace("[func_4, func_4]]}", "[func_4, func_4]], rule: adjacent}"))
    r = build([str(tmp_path / "adj.yaml"), "--out", str(tmp_path / "out")])
    assert r.returncode == 0, r.stderr
    cert = json.loads((tmp_path / "out" / "manifest.json").read_text())["split_certificates"]["sys"]
    assert cert["rule"] == "adjacent" and "func_3(func_9)" in cert["heldout_compounds"]
    distant = [row for row in programs(tmp_path / "out" / "train.parquet")
               if any(frozenset(p) == frozenset(("func_3", "func_9")) for e in row for p in on_one_path(e))]
    assert distant  # adjacency only: func_3(func_x(func_9(...))) is allowed in training


def test_only_recomputes_when_a_kept_file_was_edited_and_fails_on_a_held_out_pair(sys_build: Path, tmp_path: Path):
    out = tmp_path / "out"
    r = build([str(sys_build / "sys.yaml"), "--out", str(out)])
    assert r.returncode == 0, r.stderr
    # the same rows again: the certificate is kept
    r = build([str(sys_build / "sys.yaml"), "--only", "test", "--out", str(out)])
    assert r.returncode == 0, r.stderr
    cert = json.loads((out / "manifest.json").read_text())["split_certificates"]["sys"]
    assert cert["only"]["certificate"] == "kept"
    # a training row edited in the kept file to compose a held-out pair
    table = pq.read_table(out / "train.parquet")
    rms = table.column("reward_model").to_pylist()
    gt = json.loads(rms[0]["ground_truth"])
    gt["tasks"][0]["expr"] = "func_3(func_17(func_9(x)))"
    rms[0] = {**rms[0], "ground_truth": json.dumps(gt)}
    i = table.schema.get_field_index("reward_model")
    pq.write_table(table.set_column(i, table.schema.field(i), pa.array(rms, type=table.schema.field(i).type)),
                   out / "train.parquet")
    r = build([str(sys_build / "sys.yaml"), "--only", "test", "--out", str(out)])
    assert r.returncode != 0
    assert "certificate's check failed: 1 training rows hold a held-out compound (rows [0])" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.slow
def test_only_says_why_it_recomputed_when_a_kept_file_changed_within_the_rule(sys_build: Path, tmp_path: Path):
    out = tmp_path / "out"
    assert build([str(sys_build / "sys.yaml"), "--out", str(out)]).returncode == 0
    table = pq.read_table(out / "train.parquet")
    pq.write_table(table.slice(0, table.num_rows), out / "train.parquet", compression="gzip")  # same rows, new bytes
    r = build([str(sys_build / "sys.yaml"), "--only", "test", "--out", str(out)])
    assert r.returncode == 0, r.stderr
    only = json.loads((out / "manifest.json").read_text())["split_certificates"]["sys"]["only"]
    assert only["certificate"] == "recomputed" and "kept files differ" in only["why"] and "train.parquet" in only["why"]


# ---------------------------------------------------------------- one build, several recipes

EVAL = """\
name: ev
defaults: {role: eval, kind: rl, prompt_format: closed_book, answer_format: ra, unique: task}
splits:
  trainop: {generator: trees, options: {ops: train, depths: [1, 2], per_depth: 60}}
  heldout: {generator: chains, options: {ops: heldout, depths: [2], per_depth: 40}}
"""
CELL = """\
name: cell
defaults: {role: train, kind: rl, prompt_format: closed_book, answer_format: ra, unique: task}
splits:
  atoms: {generator: atomic, options: {ops: all, per_op: 12}}
  comps: {generator: trees, options: {ops: train, depths: [2], rows: 300}}
"""


@pytest.mark.slow
def test_one_build_of_cells_and_evals_applies_the_rule_of_separate_builds(tmp_path: Path):
    (tmp_path / "ev.yaml").write_text(EVAL)
    (tmp_path / "cell.yaml").write_text(CELL)
    for name in ("ev", "cell"):
        assert build([str(tmp_path / f"{name}.yaml"), "--out", str(tmp_path / name)]).returncode == 0
    lk = subprocess.run([sys.executable, "-m", "opgen", "leakage", str(tmp_path / "cell"), "--against",
                         str(tmp_path / "ev"), "--report", str(tmp_path / "apart.json")],
                        capture_output=True, text=True)
    assert lk.returncode == 0, lk.stdout + lk.stderr
    apart = json.loads((tmp_path / "apart.json").read_text())
    assert apart["ok"] and sum(p["shared_composition_rows"] for p in apart["pairs"]) + sum(
        v["in_training"] for s in apart["program_share"].values() for v in s.values()) > 0
    r = build([str(tmp_path / "ev.yaml"), str(tmp_path / "cell.yaml"), "--out", str(tmp_path / "both")])
    assert r.returncode == 0, r.stderr  # the depth-1 and train-operator overlaps are the study's design
    leak = json.loads((tmp_path / "both" / "manifest.json").read_text())["leakage"]
    assert leak["ok"] and not leak["violations"] and leak["shared_programs"]
    # a held-out composition that training also holds is still a violation across recipes
    (tmp_path / "bad.yaml").write_text(CELL.replace("name: cell", "name: bad").replace(
        "comps: {generator: trees, options: {ops: train, depths: [2], rows: 300}}",
        "comps: {generator: chains, options: {ops: heldout, depths: [2], rows: 2000}}") +
        "leakage: {heldout_ops: []}\n")
    r = build([str(tmp_path / "ev.yaml"), str(tmp_path / "bad.yaml"), "--out", str(tmp_path / "bad")])
    assert r.returncode == 1 and "held-out compositions occur in train split 'comps'" in r.stderr
