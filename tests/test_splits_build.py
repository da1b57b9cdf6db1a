"""Split recipes built end to end: every kind's rows checked independently of the builder's certificate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from split_helpers import fragment_texts, mcd_recipe, opgen, trees_of

from opgen import expr as E
from opgen import ops
from opgen.resources import recipe_path

SYSTEMATICITY = """\
name: sys-e2e
seed: 2
split: {kind: systematicity, pairs: [[func_3, func_9], [func_15, func_17]]}
defaults: {generator: chains, kind: rl, prompt_format: closed_book, answer_format: ra, unique: task}
splits:
  train: {role: train, options: {ops: train, depths: [2, 3], per_depth: 150}}
  test: {role: eval, options: {ops: [func_3, func_9, func_15, func_17], depths: [2, 3], per_depth: 20}}
"""

MCD = mcd_recipe("mcd-e2e", max_atom_divergence=0.05)

PRODUCTIVITY = """\
name: prod-e2e
seed: 2
split: {kind: productivity, max_train_depth: 2}
defaults: {generator: trees, kind: rl, prompt_format: closed_book, answer_format: ra, unique: task}
splits:
  train: {role: train, options: {ops: train, depths: [1, 2], per_depth: 100}}
  test: {role: eval, options: {ops: train, depths: [3, 4], per_depth: 20}}
"""

SFT_HELDOUT = """\
name: sft-heldout-e2e
seed: 2
split: {kind: heldout-ops}
splits:
  train:
    generator: sft_cell
    role: train
    kind: sft
    options:
      atomic: {pool: e2e-atomic, per_op: 2, ops: all}
      compositions: {pool: e2e-comps, rows: 150, ops: all, depths: [2, 3]}
"""

MCD_CELLS = mcd_recipe("mcd-cells-e2e", max_atom_divergence=0.05, rest="""\
defaults: {prompt_format: closed_book, answer_format: ra}
splits:
  train:
    generator: sft_cell
    role: train
    kind: sft
    options:
      atomic: {pool: e2e-atomic, per_op: 2, ops: all}
      width: [1, 3]
      compositions: {rows: 400}
  rl: {generator: rl_pool, role: train, kind: rl, options: {rows: 60, chain_depth: [3, 5], width: [1, 3]}}
  test: {role: eval, kind: rl}
""")


def build(tmp: Path, text: str, name: str, *extra: str) -> tuple[Path, dict]:
    recipe = tmp / f"{name}.yaml"
    recipe.write_text(text)
    out = tmp / name
    opgen("build", str(recipe), "--out", str(out), *extra)
    return out, json.loads((out / "manifest.json").read_text())


def direct_pairs(tree: E.Expr) -> set[frozenset[str]]:
    """Operator pairs composed directly (a call whose argument is a call): walked here, not via opgen.splits."""
    out = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        kids = list(node.args) if isinstance(node, E.Call) else \
            [node.left, node.right] if isinstance(node, E.Concat) else [node.expr] if isinstance(node, E.Method) else []
        for kid in kids:
            if isinstance(node, E.Call) and isinstance(kid, E.Call):
                out.add(frozenset((node.op, kid.op)))
            stack.append(kid)
    return out


@pytest.mark.slow
def test_systematicity_recipe_builds_with_a_certificate_and_a_card(tmp_path: Path):
    out, man = build(tmp_path, SYSTEMATICITY, "sys")
    held = {frozenset(("func_3", "func_9")), frozenset(("func_15", "func_17"))}
    train = trees_of(out / "train.parquet")
    assert train and not any(held & direct_pairs(t) for row in train for t in row)
    composed = {o for row in train for t in row for p in direct_pairs(t) for o in p}
    assert {"func_3", "func_9", "func_15", "func_17"} <= composed  # each operator seen in other compositions
    assert not any(held & path_pairs(t) for row in train for t in row)  # the default rule: no pair on one path
    evals = trees_of(out / "test.parquet")
    assert all(any(held & path_pairs(t) for t in row) for row in evals)
    cert = man["split_certificates"]["sys-e2e"]
    assert cert["check"]["ok"] and cert["check"]["train_rows_with_heldout_compound"] == 0
    assert cert["heldout_compounds"] == ["func_15(..func_17)", "func_17(..func_15)", "func_3(..func_9)",
                                         "func_9(..func_3)"]
    assert 0 < cert["compound_divergence"] <= 1 and cert["heldout_share_of_eval_rows"] == 1.0
    assert man["splits"]["train"]["compounds"]["rows"] == 300
    assert man["recipes"][0]["resolved"]["split"]["pairs"] == [["func_3", "func_9"], ["func_15", "func_17"]]
    # split-stats measures the same divergences from the files
    r = json.loads(opgen("split-stats", str(out / "train.parquet"), str(out / "test.parquet"), "--json").stdout)
    assert r["compound_divergence"] == cert["compound_divergence"]
    assert r["atom_divergence"] == cert["atom_divergence"]
    # the Hub card shows the certified divergences
    tree = tmp_path / "tree"
    opgen("push", str(out), "--repo-id", "org/sys", "--dry-run", str(tree))
    card = (tree / "README.md").read_text()
    assert "## Compositional split" in card
    assert f"{cert['compound_divergence']:.4f}" in card and f"{cert['atom_divergence']:.4f}" in card
    assert "`func_3(..func_9)`" in card and "| certificate check | passed |" in card
    # opgen verify rebuilds it from the manifest (the resolved split included)
    assert "FAIL" not in opgen("verify", str(out)).stdout
    # deterministic: the same recipe builds the same rows
    out2, man2 = build(tmp_path, SYSTEMATICITY, "sys2")
    assert [f["sha256"] for f in man2["splits"]["train"]["files"]] == \
        [f["sha256"] for f in man["splits"]["train"]["files"]]


@pytest.mark.slow
def test_mcd_recipe_builds_within_its_atom_bound(tmp_path: Path):
    out, man = build(tmp_path, MCD, "mcd")
    cert = man["split_certificates"]["mcd-e2e"]
    assert cert["check"]["ok"]
    assert cert["atom_divergence"] <= 0.05
    base = cert["baseline"]
    assert base["of"] == "the search's pool" and base["pool_rows"] == 1500
    assert cert["compound_divergence"] > base["compound_divergence"]["max"]
    assert cert["excess_over_baseline"]["compound_divergence"] == pytest.approx(
        cert["compound_divergence"] - base["compound_divergence"]["mean"], abs=2e-6)
    held = set(cert["heldout_compounds"])
    assert held
    # independently: no held-out compound (a fragment of up to 3 nodes, walked here) in any training row
    train = trees_of(out / "train.parquet")
    assert len(train) == 500 and not any(held & fragment_texts(t) for row in train for t in row)
    assert len(trees_of(out / "test.parquet")) == 120
    assert "FAIL" not in opgen("verify", str(out)).stdout
    tree = tmp_path / "tree"
    opgen("push", str(out), "--repo-id", "org/mcd", "--dry-run", str(tree))
    card = (tree / "README.md").read_text()
    assert f"{cert['compound_divergence']:.4f}" in card and "random splits of the search's pool" in card


def path_pairs(tree: E.Expr) -> set[frozenset[str]]:
    """Every two library calls on one root-to-leaf path, at any distance: walked here."""
    out: set[frozenset[str]] = set()
    stack: list[tuple[E.Expr, tuple[str, ...]]] = [(tree, ())]
    while stack:
        node, above = stack.pop()
        if isinstance(node, E.Call):
            out.update(frozenset((a, node.op)) for a in above)
            above = (*above, node.op)
        stack.extend((k, above) for k in E.children(node))
    return out


@pytest.mark.slow
def test_training_cells_on_an_mcd_split_compose_only_the_search_train_side(tmp_path: Path):
    out, man = build(tmp_path, MCD_CELLS, "mcd-cells")
    cert = man["split_certificates"]["mcd-cells-e2e"]
    assert cert["check"]["ok"] and cert["train_splits"] == ["train", "rl"] and cert["eval_splits"] == ["test"]
    assert cert["train_cells"] == ["rl_pool", "sft_cell"] and cert["check"]["train_rows_with_heldout_compound"] == 0
    held = set(cert["heldout_compounds"])
    assert held and cert["compound_divergence"] > 0
    # independently: no held-out compound in any training row of either cell
    rows = {n: trees_of(out / f"{n}.parquet") for n in ("train", "rl", "test")}
    assert not any(held & fragment_texts(t) for n in ("train", "rl") for row in rows[n] for t in row)
    assert any(held & fragment_texts(t) for row in rows["test"] for t in row)
    # the cell's compositions are the search's train side; its atomic skills cover every operator
    comps = [row[0] for row in rows["train"] if E.depth(row[0]) > 1]
    assert len(comps) == 400 and man["splits"]["train"]["cell"]["compositions"]["pool"] == "mcd-train"
    atomic_ops = {t.op for row in rows["train"] for t in row if E.depth(t) == 1 and isinstance(t, E.Call)}
    assert atomic_ops == set(ops.ALL_IDS)
    # the RL pool's chains drew again around the held-out compounds
    assert len(rows["rl"]) == 60 and man["splits"]["rl"]["rejections"].get("split", 0) > 0
    # the search's side shares no program with the cell's compositions
    assert not {E.render(t) for t in comps} & {E.render(row[0]) for row in rows["test"]}
    assert "FAIL" not in opgen("verify", str(out)).stdout
    # --only rl with its recorded files changed: certified again from the kept cell and eval side
    _edit_manifest(out, lambda m: m["splits"]["rl"]["files"][0].update(sha256="0" * 64))
    opgen("build", str(tmp_path / "mcd-cells.yaml"), "--out", str(out), "--only", "rl")
    again = json.loads((out / "manifest.json").read_text())["split_certificates"]["mcd-cells-e2e"]
    assert again.pop("only")["certificate"] == "recomputed" and again == cert


@pytest.mark.slow
def test_mcd_cells_refuse_options_the_search_sets(tmp_path: Path):
    bad = MCD_CELLS.replace("compositions: {rows: 400}", "compositions: {rows: 400, depths: [2]}")
    (tmp_path / "bad.yaml").write_text(bad)
    r = opgen("build", str(tmp_path / "bad.yaml"), "--out", str(tmp_path / "o"), check=False)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "splits.train.options.compositions.depths" in r.stderr
    (tmp_path / "big.yaml").write_text(MCD_CELLS.replace("{rows: 400}", "{rows: 501}"))
    r = opgen("build", str(tmp_path / "big.yaml"), "--out", str(tmp_path / "o"), check=False)
    assert r.returncode != 0 and "compositions.rows: 501" in r.stderr and "Traceback" not in r.stderr
    (tmp_path / "ev.yaml").write_text(MCD_CELLS.replace("test: {role: eval, kind: rl}",
                                                        "test: {role: eval, kind: rl, generator: trees}"))
    r = opgen("build", str(tmp_path / "ev.yaml"), "--out", str(tmp_path / "o"), check=False)
    assert r.returncode != 0 and "splits.test.generator" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_annealed_mcd_recipe_builds_and_its_certificate_names_the_search(tmp_path: Path):
    text = MCD.replace("max_atom_divergence: 0.05", "max_atom_divergence: 0.05\n  search: anneal\n  steps: 80")
    out, man = build(tmp_path, text, "mcd-anneal")
    cert = man["split_certificates"]["mcd-e2e"]
    assert cert["check"]["ok"] and cert["atom_divergence"] <= 0.05
    assert cert["search"]["search"] == "anneal" and cert["search"]["anneal_steps"] == 80
    assert cert["config"]["search"] == "anneal" and cert["config"]["temperature"] == 0.005
    held = set(cert["heldout_compounds"])
    assert held and not any(held & fragment_texts(t) for row in trees_of(out / "train.parquet") for t in row)
    # steps without the annealed search is refused, naming the field
    bad = MCD.replace("max_atom_divergence: 0.05", "max_atom_divergence: 0.05\n  steps: 5")
    (tmp_path / "bad.yaml").write_text(bad)
    r = opgen("build", str(tmp_path / "bad.yaml"), "--out", str(tmp_path / "o"), check=False)
    assert r.returncode != 0 and "split.steps: only the annealed search" in r.stderr and "Traceback" not in r.stderr


def test_productivity_recipe_splits_by_depth(tmp_path: Path):
    out, man = build(tmp_path, PRODUCTIVITY, "prod")
    assert max(E.depth(t) for row in trees_of(out / "train.parquet") for t in row) <= 2
    assert min(max(E.depth(t) for t in row) for row in trees_of(out / "test.parquet")) > 2
    cert = man["split_certificates"]["prod-e2e"]
    assert cert["check"]["ok"] and cert["depths"] == {"train_max": 2, "eval_min": 3}


def test_productivity_depths_on_the_wrong_side_are_refused(tmp_path: Path):
    recipe = tmp_path / "bad.yaml"
    recipe.write_text(PRODUCTIVITY.replace("depths: [1, 2]", "depths: [1, 2, 3]"))
    r = opgen("build", str(recipe), "--out", str(tmp_path / "o"), check=False)
    assert r.returncode != 0
    assert "splits.train.options.depths: [3]" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_split_errors_name_the_field(tmp_path: Path):
    recipe = tmp_path / "bad.yaml"
    recipe.write_text(SYSTEMATICITY.replace("func_9]", "func_99]"))
    r = opgen("build", str(recipe), "--out", str(tmp_path / "o"), check=False)
    assert r.returncode != 0 and "split.pairs[0]: unknown operator 'func_99'" in r.stderr
    recipe.write_text(MCD.replace("train_rows: 500", "train_rows: 5000"))
    r = opgen("build", str(recipe), "--out", str(tmp_path / "o"), check=False)
    assert r.returncode != 0 and "split.pool.rows" in r.stderr and "Traceback" not in r.stderr
    recipe.write_text(MCD.replace("test: {role: eval}", "test: {role: eval, generator: trees}"))
    r = opgen("build", str(recipe), "--out", str(tmp_path / "o"), check=False)
    assert r.returncode != 0 and "splits.test.generator" in r.stderr


@pytest.mark.slow
def test_heldout_ops_split_of_an_sft_cell_composes_no_heldout_operator(tmp_path: Path):
    out, man = build(tmp_path, SFT_HELDOUT, "sft")
    held = set(ops.HELDOUT_IDS)
    rows = trees_of(out / "train.parquet")
    comps = [t for row in rows for t in row if E.size(t) > 2]
    assert comps
    for t in comps:  # independently: no pair composed directly with a held-out operator
        assert not any(p & held for p in direct_pairs(t))
    assert man["split_certificates"]["sft-heldout-e2e"]["check"]["ok"]
    assert man["leakage"]["ok"]
    assert "FAIL" not in opgen("verify", str(out)).stdout


@pytest.mark.slow
def test_share_of_pairs_is_named_in_the_manifest_and_rebuilds(tmp_path: Path):
    text = SYSTEMATICITY.replace("pairs: [[func_3, func_9], [func_15, func_17]]", "share: 0.05, ops: train") \
        .replace("ops: [func_3, func_9, func_15, func_17]", "ops: train")
    out, man = build(tmp_path, text, "share")
    split = man["recipes"][0]["resolved"]["split"]
    assert split["drawn"] == {"share": 0.05, "ops": list(ops.TRAIN_IDS), "seed": 2} and len(split["pairs"]) == 5
    assert man["split_certificates"]["sys-e2e"]["check"]["ok"]
    assert "FAIL" not in opgen("verify", str(out)).stdout


def _eval_suite_without_avoid(tmp: Path, with_split: bool) -> Path:
    data = yaml.safe_load(recipe_path("eval-suite").read_text())
    data.get("leakage", {}).pop("avoid", None)  # (the bundled suite names none since 0.3)
    if with_split:
        data["split"] = {"kind": "heldout-ops"}
    path = tmp / ("with.yaml" if with_split else "without.yaml")
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.slow
def test_heldout_ops_split_leaves_the_eval_suite_rows_byte_for_byte(tmp_path: Path):
    shas = []
    for with_split in (False, True):
        out = tmp_path / f"b{with_split}"
        opgen("build", str(_eval_suite_without_avoid(tmp_path, with_split)), "--out", str(out), "--limit", "40")
        man = json.loads((out / "manifest.json").read_text())
        shas.append({n: ([f["sha256"] for f in s["files"]], s["content_sha256"]) for n, s in man["splits"].items()})
    assert shas[0] == shas[1]


@pytest.mark.slow
def test_heldout_ops_split_reproduces_the_bundled_eval_suite(tmp_path: Path):
    """The bundled eval suite (its leakage.avoid included) with `split: heldout-ops` added: the same files."""
    data = yaml.safe_load(recipe_path("eval-suite").read_text())
    data["split"] = {"kind": "heldout-ops"}
    recipe = recipe_path("eval-suite").parent / "eval-suite.yaml"
    with_split = tmp_path / "eval-suite-split.yaml"
    with_split.write_text(yaml.safe_dump(data, sort_keys=False))
    a, b = tmp_path / "a", tmp_path / "b"
    opgen("build", str(recipe), "--out", str(a), "--limit", "64")
    opgen("build", str(with_split), "--out", str(b), "--limit", "64")
    ma, mb = (json.loads((d / "manifest.json").read_text()) for d in (a, b))
    assert {n: s["content_sha256"] for n, s in ma["splits"].items()} == \
        {n: s["content_sha256"] for n, s in mb["splits"].items()}
    for s in ma["splits"].values():
        for f in s["files"]:
            assert (a / f["path"]).read_bytes() == (b / f["path"]).read_bytes()


def _edit_manifest(out: Path, fn) -> None:
    path = out / "manifest.json"
    man = json.loads(path.read_text())
    fn(man)
    path.write_text(json.dumps(man, indent=2))


@pytest.mark.slow
def test_only_keeps_the_certificate_when_the_rebuilt_rows_are_identical(tmp_path: Path):
    out, man = build(tmp_path, SYSTEMATICITY, "sys")
    before = man["split_certificates"]["sys-e2e"]
    opgen("build", str(tmp_path / "sys.yaml"), "--out", str(out), "--only", "test")
    after = json.loads((out / "manifest.json").read_text())["split_certificates"]["sys-e2e"]
    only = after.pop("only")
    assert only["certificate"] == "kept" and only["rebuilt"] == ["test"] and "byte-identical" in only["why"]
    assert after == before
    tree = tmp_path / "tree"
    opgen("push", str(out), "--repo-id", "org/sys", "--dry-run", str(tree))
    assert "| updated by --only | test rebuilt; certificate kept" in (tree / "README.md").read_text()


@pytest.mark.slow
def test_only_recomputes_the_certificate_from_the_kept_files_when_the_rows_differ(tmp_path: Path):
    out, man = build(tmp_path, SYSTEMATICITY, "sys")
    true = man["split_certificates"]["sys-e2e"]

    def stale(m: dict) -> None:  # the recorded test rows are not those the rebuild writes; a stale value
        m["splits"]["test"]["files"][0]["sha256"] = "0" * 64
        m["split_certificates"]["sys-e2e"]["compound_divergence"] = 0.123

    _edit_manifest(out, stale)
    opgen("build", str(tmp_path / "sys.yaml"), "--out", str(out), "--only", "test")
    after = json.loads((out / "manifest.json").read_text())["split_certificates"]["sys-e2e"]
    only = after.pop("only")
    assert only["certificate"] == "recomputed" and "train" in only["why"] and "read back" in only["why"]
    assert after == true  # measured again: the kept train split's rows read from the folder
    # a previous build without a certificate: recomputed too, and said why
    _edit_manifest(out, lambda m: m.pop("split_certificates"))
    opgen("build", str(tmp_path / "sys.yaml"), "--out", str(out), "--only", "train")
    after = json.loads((out / "manifest.json").read_text())["split_certificates"]["sys-e2e"]
    assert after.pop("only")["why"].startswith("no certificate in the previous build") and after == true
    # the kept split's rows are what is checked: a kept training file holding a held-out pair fails it
    bad, _ = build(tmp_path, SYSTEMATICITY.replace("pairs: [[func_3, func_9], [func_15, func_17]]",
                                                   "pairs: [[func_3, func_15]]"), "other")
    import shutil

    shutil.copy(bad / "train.parquet", out / "train.parquet")
    _edit_manifest(out, stale)
    r = opgen("build", str(tmp_path / "sys.yaml"), "--out", str(out), "--only", "test", check=False)
    assert r.returncode != 0 and "certificate's check failed" in r.stderr and "Traceback" not in r.stderr
