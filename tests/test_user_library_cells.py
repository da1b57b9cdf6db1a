"""A user's operator library through the training cells, the probes and the split rules (issue 25):
`opgen build` of recipes naming ``library:`` with ``sft_cell``, ``matched_stream``, ``rl_pool``, the
probe families, and ``split:`` rules (systematicity, heldout-ops, productivity, mcd)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import user_libraries as U
from click.testing import CliRunner
from opgen.cli import cli as main

from opgen import expr as E
from opgen import generate as G
from opgen import recipe as R
from opgen.generate import Generator
from opgen.splits import compounds as SC

CELLS = textwrap.dedent("""\
    name: six-cells
    seed: 3
    library: six.yaml
    split: {kind: systematicity, pairs: [[rev, up]], eval: any}
    splits:
      cell:
        generator: sft_cell
        role: train
        options:
          atomic: {pool: a, per_op: 6}
          width: [1, 3]
          compositions: {pool: c, rows: 20, depths: [2, 3]}
      stream:
        generator: matched_stream
        role: train
        unique: none
        options: {stream: isolated, atomic: {pool: a, per_op: 6}, steps: 3, atomic_per_step: 12,
                  grouped_rows_per_step: 5, comps_per_step: 0, width: [2, 3]}
      rl:
        generator: rl_pool
        role: train
        options: {rows: 12, chain_depth: [2, 4], width: [1, 3]}
    """)

PROBES = textwrap.dedent("""\
    name: six-probes
    seed: 3
    library: six.yaml
    splits:
      p1b: {generator: probe_1b, role: eval, options: {targets: [rot, drop_vowels], per_condition: 2, r: [0, 2],
                                                        others: [train, all]}}
      p1d: {generator: probe_1d, role: eval, options: {targets: [drop_vowels], per_condition: 2, depths: [3]}}
      p1f: {generator: probe_1f, role: eval, options: {targets: [rot], per_condition: 2, m: [0, 2]}}
      p1g: {generator: probe_1g, role: eval, options: {targets: [rot], per_condition: 2, lengths: [8]}}
    """)

MCD = textwrap.dedent("""\
    name: six-mcd
    seed: 1
    library: six.yaml
    split:
      kind: mcd
      pool: {generator: trees, rows: 120, options: {ops: all, depths: [2, 3], rows: 160}}
      train_rows: 60
      eval_rows: 20
      max_atom_divergence: 0.2
    defaults: {kind: rl, prompt_format: closed_book, answer_format: ra, unique: task}
    splits:
      train: {role: train}
      cell: {role: train, generator: sft_cell, unique: none,
             options: {atomic: {pool: a, per_op: 3}, compositions: {rows: 20}}}
      test: {role: eval}
    """)

PRODUCTIVITY = textwrap.dedent("""\
    name: six-productivity
    seed: 1
    library: six.yaml
    split: {kind: productivity, max_train_depth: 2}
    splits:
      train: {role: train, generator: trees, options: {ops: train, depths: [1, 2], per_depth: 15}}
      test: {role: eval, generator: chains, options: {ops: all, depths: [3, 4], per_depth: 5}}
    """)

HELDOUT_OPS = textwrap.dedent("""\
    name: six-heldout-ops
    seed: 1
    library: six.yaml
    split: {kind: heldout-ops}
    splits:
      train: {role: train, generator: trees, options: {ops: all, depths: [1, 2], per_depth: 15}}
      test: {role: eval, generator: trees, options: {ops: all, depths: [3], per_depth: 5}}
    """)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    U.write_six(tmp_path)
    return tmp_path


def _build(folder: Path, text: str) -> tuple[Path, dict]:
    recipe = folder / "recipe.yaml"
    recipe.write_text(text)
    out = folder / "out"
    runner = CliRunner()
    result = runner.invoke(main, ["build", str(recipe), "--out", str(out), "--no-progress", "--workers", "1"])
    assert result.exit_code == 0, result.output
    checked = runner.invoke(main, ["validate", str(out)])
    assert checked.exit_code == 0, checked.output
    return out, json.loads((out / "manifest.json").read_text())


def _truths(out: Path, split: str) -> list[dict]:
    table = pq.read_table(out / f"{split}.parquet")
    return [json.loads(r["ground_truth"]) for r in table.column("reward_model").to_pylist()]


def _ops_of(truths: list[dict]) -> set[str]:
    return {o for g in truths for o in g["ops"]}


def test_cells_and_a_systematicity_split_build_from_a_user_library(folder: Path) -> None:
    out, man = _build(folder, CELLS)
    six = R.load(str(folder / "recipe.yaml")).library
    assert man["library"]["digest"] == six.digest
    for split in ("cell", "stream", "rl"):
        truths = _truths(out, split)
        assert truths and _ops_of(truths) <= set(six.ids)
        assert all(g["library"]["digest"] == six.digest for g in truths)
    # the cell's atomic pool: per_op tasks of every operator of the library, in library order
    assert man["splits"]["cell"]["cell"]["atomic_pool"]["tasks"] == 6 * len(six)
    # the rl pool's chains (its even rows) draw the train operators only
    index = [info["index"] for info in pq.read_table(out / "rl.parquet").column("extra_info").to_pylist()]
    chains = [g for g, i in zip(_truths(out, "rl"), index) if i % 2 == 0]
    assert chains and {o for g in chains for o in g["ops"]} <= set(six.train_ids)
    # no training composition puts rev and up next to each other (the held-out pair)
    for g in _truths(out, "cell"):
        for t in g["tasks"]:
            edges = {frozenset((p, c)) for p, _, c in SC.edges(E.parse(t["expr"], six))}
            assert frozenset(("rev", "up")) not in edges
    cert = man["split_certificates"]["six-cells"]
    assert cert["check"]["ok"], cert["check"]
    assert set(cert["check"]["pair_operators_composed_in_training"]) == {"rev", "up"}


def test_the_probes_build_from_a_user_library_with_its_own_targets(folder: Path) -> None:
    out, _ = _build(folder, PROBES)
    six = R.load(str(folder / "recipe.yaml")).library
    targets = {"p1b": {"rot", "drop_vowels"}, "p1d": {"drop_vowels"}, "p1f": {"rot"}, "p1g": {"rot"}}
    for split, want in targets.items():
        infos = pq.read_table(out / f"{split}.parquet").column("extra_info").to_pylist()
        truths = _truths(out, split)
        assert truths and _ops_of(truths) <= set(six.ids)
        assert {info["target_op"] for info in infos} == want
    # 1b's teacher-forced prefix: the other operators' recall blocks, with the user's own sources
    infos = pq.read_table(out / "p1b.parquet").column("extra_info").to_pylist()
    prefixed = [info["assistant_prefix"] for info in infos if info["condition"].startswith("r2-")]
    assert prefixed and all(not info["assistant_prefix"] for info in infos if info["condition"].startswith("r0-"))
    for prefix in prefixed:
        blocks = [b.split("```", 1)[0] for b in prefix.split("```python\n")[1:]]
        assert len(blocks) == 2
        for block in blocks:
            assert block == six.get(block[len("def "):block.index("(")]).source


def test_a_probe_on_a_user_library_without_targets_is_a_named_error(folder: Path) -> None:
    recipe = folder / "recipe.yaml"
    recipe.write_text(PROBES.replace("options: {targets: [drop_vowels], per_condition: 2, depths: [3]}",
                                     "options: {per_condition: 2, depths: [3]}"))
    result = CliRunner().invoke(main, ["build", str(recipe), "--out", str(folder / "out"), "--no-progress"])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert "recipe.yaml: splits.p1d.options.targets" in result.output
    assert "the study's operators" in result.output and "'six'" in result.output
    assert "drop_vowels" in result.output  # the library's own held-out operator, suggested


@pytest.mark.parametrize("text,name", [(MCD, "six-mcd"), (PRODUCTIVITY, "six-productivity"),
                                       (HELDOUT_OPS, "six-heldout-ops")])
def test_split_rules_build_from_a_user_library(folder: Path, text: str, name: str) -> None:
    out, man = _build(folder, text)
    six = R.load(str(folder / "recipe.yaml")).library
    for split in man["splits"]:
        assert _ops_of(_truths(out, split)) <= set(six.ids)
    assert man["split_certificates"][name]["check"]["ok"], man["split_certificates"][name]
    if name == "six-heldout-ops":  # the library's own held-out operators are composed in no training row
        assert man["split_certificates"][name]["heldout_compounds"].endswith("rot, drop_vowels")


class _StudyOnly(Generator):
    """A user's generator that does not say it draws any library (ANY_LIBRARY stays False)."""

    NAME = "study_only_for_test"

    def count(self) -> int:
        return 1


def test_a_generator_without_any_library_is_refused_naming_the_field(folder: Path, monkeypatch) -> None:
    monkeypatch.setitem(G.registry(), _StudyOnly.NAME, _StudyOnly)  # registered for this test only
    recipe = folder / "r.yaml"
    recipe.write_text("name: c\nlibrary: six.yaml\nsplits:\n  s:\n    generator: study_only_for_test\n"
                      "    role: train\n    kind: sft\n")
    with pytest.raises(R.RecipeError, match=r"r.yaml: splits.s.generator: 'study_only_for_test' draws the "
                                            r"study's own operators only"):
        R.load(str(recipe))


TRAIN_COMPOSING_ALL = textwrap.dedent("""\
    name: six-train-all
    seed: 5
    library: six.yaml
    leakage: {heldout_ops: [up]}
    splits:
      train: {role: train, generator: trees, options: {ops: [rev, dup, rot, drop_vowels], depths: [2], per_depth: 20}}
    """)


def test_stats_orders_operators_by_the_rows_library(folder: Path) -> None:
    out, _ = _build(folder, CELLS)
    runner = CliRunner()
    result = runner.invoke(main, ["stats", str(out), "--json"])
    assert result.exit_code == 0, result.output
    stats = json.loads(result.output)
    six = R.load(str(folder / "recipe.yaml")).library
    assert stats["library"] == {"name": "six", "digest": six.digest}
    # the library's own order (rev, dup, up, mix, rot, drop_vowels), not the ids' name order
    assert list(stats["counts"]["op"]) == [o for o in six.ids if o in stats["counts"]["op"]]
    assert list(stats["counts"]["op"]) != sorted(stats["counts"]["op"])
    text = runner.invoke(main, ["stats", str(out)]).output
    assert "library: six" in text
    op_lines = text.split("\nop:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert [line.split()[0] for line in op_lines] == list(stats["counts"]["op"])


def test_leakage_defaults_to_the_held_out_operators_of_the_rows_library(folder: Path) -> None:
    train, _ = _build(folder, TRAIN_COMPOSING_ALL)
    train = train.rename(folder / "train-out")
    evals, _ = _build(folder, PROBES)
    runner = CliRunner()
    result = runner.invoke(main, ["leakage", str(train), "--against", str(evals)])
    # the training trees compose rot and drop_vowels, the six library's held-out operators
    assert result.exit_code == 1, result.output
    assert "compose a held-out operator" in result.output and "FAILED" in result.output
    ok = runner.invoke(main, ["leakage", str(train), "--against", str(evals), "--heldout-ops", "up,mix"])
    assert ok.exit_code == 0, ok.output
    bad = runner.invoke(main, ["leakage", str(train), "--against", str(evals), "--heldout-ops", "func_3"])
    assert bad.exit_code != 0 and "func_3" in bad.output and "'six'" in bad.output
    study = folder / "study"
    made = runner.invoke(main, ["build", "eval-suite", "--out", str(study), "--limit", "2", "--no-progress"])
    assert made.exit_code == 0, made.output
    mixed = runner.invoke(main, ["leakage", str(train), "--against", str(study)])
    assert mixed.exit_code == 2 and "different operator libraries" in mixed.output and "Traceback" not in mixed.output
