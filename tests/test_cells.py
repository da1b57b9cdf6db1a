"""The study's training cells (opgen.generate.cells): shared pools, groups, matched streams, RL pools.

The first part tests the generators as a library; the second drives the bundled recipes
(datasets/<cell>.yaml) through `opgen build` and checks the files and the manifest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from opgen.cli import cli

from opgen import expr as E
from opgen import ops
from opgen import pack as P
from opgen.generate import Context, GeneratorError, registry
from opgen.generate import cells as C
from opgen.score.parse import parse_program_answer

# The study's shared atomic pool: 400 tasks per operator of its library (counted, not written out).
ATOMIC = C.ATOMIC_DEFAULTS["per_op"] * len(ops.STUDY)

WHERE = "cell.yaml: splits.train.options"
V1_COMPS = {"pool": "trainop-mixed-d2-4", "rows": 15979, "ops": "train", "depths": [2, 3, 4]}


def make(name, options=None, digest="d", seed=1):
    cls = registry()[name]
    # cells are training splits: their inputs are drawn on the training side (opgen.rng.input_side)
    return cls(cls.resolve(options or {}, WHERE), Context(digest=digest, split="train", seed=seed, role="train",
                                                          where=WHERE))


def tasks_of(gen, part=None):
    out = []
    for i in range(gen.count()):
        it = gen.item(i)
        if part is None or dict(it.meta).get("part") == part:
            out.extend(it.tasks)
    return out


def idset(tasks):
    return {t.identity() for t in tasks}


@pytest.fixture(scope="module")
def cells():
    return {
        "sft-d1": make("sft_cell", {"width": [1, 1]}, digest="d1"),
        "sft-v1": make("sft_cell", {"width": [1, 1], "compositions": V1_COMPS}, digest="v1"),
        "sft-c1": make("sft_cell", {"width": [1, 4]}, digest="c1"),
        "sft-eco": make("sft_cell", {"width": [1, 4], "compositions": V1_COMPS}, digest="eco"),
        "sft-c4": make("sft_cell", {"width": [1, 4], "compositions": {
            "pool": "trainop-mixed-d2", "rows": 12452, "ops": "train", "depths": [2]}}, digest="c4"),
        "sft-c4b": make("sft_cell", {"width": [1, 4], "compositions": {**V1_COMPS, "rows": 12436}}, digest="c4b"),
    }


POOL = 400 * len(ops.STUDY)  # the shared atomic pool: 400 tasks per operator of the study's library


def test_shared_atomic_pool_is_10000_tasks_400_per_operator():
    pool = C.atomic_pool()
    assert len(pool) == POOL and len(idset(pool)) == POOL
    per_op = Counter(t.ops[0] for t in pool)
    assert set(per_op) == set(ops.ALL_IDS) and set(per_op.values()) == {400}
    assert all(t.depth == 1 for t in pool)


@pytest.mark.slow
def test_every_sft_cell_holds_the_same_atomic_tasks(cells):
    reference = idset(C.atomic_pool())
    for name, gen in cells.items():
        atomic = tasks_of(gen, "atomic")
        assert len(atomic) == POOL, name
        assert idset(atomic) == reference, name


@pytest.mark.slow
def test_atomic_pool_does_not_depend_on_the_recipe_but_on_its_seed():
    a = make("sft_cell", {}, digest="one")
    b = make("sft_cell", {"width": [2, 3]}, digest="two")
    assert idset(a.atomic) == idset(b.atomic)
    assert idset(make("sft_cell", {}, seed=2).atomic) != idset(a.atomic)
    assert idset(make("sft_cell", {"atomic": {"pool": "another"}}).atomic) != idset(a.atomic)


@pytest.mark.parametrize("name, rows_atomic, comps", [
    ("sft-d1", ATOMIC, 0), ("sft-v1", ATOMIC, 15_979), ("sft-c1", None, 0), ("sft-eco", None, 15_979),
    ("sft-c4", None, 12_452), ("sft-c4b", None, 12_436)])
def test_cell_counts(cells, name, rows_atomic, comps):
    gen = cells[name]
    parts = Counter(dict(gen.item(i).meta)["part"] for i in range(gen.count()))
    assert parts["composition"] == comps
    if rows_atomic is not None:
        assert parts["atomic"] == rows_atomic
    else:  # groups of 1..4: fewer rows than tasks, at least a quarter
        assert ATOMIC // 4 <= parts["atomic"] < ATOMIC
    assert gen.count() == parts["atomic"] + comps


def test_groups_are_independent_and_within_width(cells):
    gen = cells["sft-eco"]
    widths = Counter()
    for i in range(gen.count()):
        it = gen.item(i)
        if dict(it.meta)["part"] == "atomic":
            widths[len(it.tasks)] += 1
            assert len(set(it.recall_order())) == len(it.tasks)
    assert set(widths) == {1, 2, 3, 4}


@pytest.mark.slow
def test_compositions_are_train_only_and_of_the_asked_depths(cells):
    for name, depths in (("sft-v1", {2, 3, 4}), ("sft-c4", {2}), ("sft-c4b", {2, 3, 4})):
        comps = tasks_of(cells[name], "composition")
        assert {t.depth for t in comps} == depths, name
        assert all(set(t.ops) <= set(ops.TRAIN_IDS) for t in comps)
        assert len(idset(comps)) == len(comps)
        assert all(E.uses_x(t.program) for t in comps)


def test_same_compositions_in_v1_and_eco_and_c4b_a_subset(cells):
    v1 = idset(tasks_of(cells["sft-v1"], "composition"))
    assert v1 == idset(tasks_of(cells["sft-eco"], "composition"))
    assert idset(tasks_of(cells["sft-c4b"], "composition")) < v1


def test_heldout_operators_only_in_depth1_atomic_tasks(cells):
    for name, gen in cells.items():
        for t in tasks_of(gen):
            if set(t.ops) & set(ops.HELDOUT_IDS):
                assert t.depth == 1 and len(t.ops) == 1, (name, t.expr_text)


def test_cell_rows_are_shuffled_but_deterministic(cells):
    again = make("sft_cell", {"width": [1, 4], "compositions": V1_COMPS}, digest="eco-elsewhere")
    eco = cells["sft-eco"]
    assert [eco.item(i) for i in range(0, eco.count(), 101)] == [again.item(i) for i in range(0, again.count(), 101)]
    first = [dict(eco.item(i).meta)["part"] for i in range(200)]
    assert "atomic" in first and "composition" in first


# ---------------------------------------------------------------- matched streams

MATCHED = {"compositions": V1_COMPS}


@pytest.fixture(scope="module")
def streams():
    return (make("matched_stream", {**MATCHED, "stream": "isolated"}, digest="iso"),
            make("matched_stream", {**MATCHED, "stream": "grouped"}, digest="grp"))


def test_matched_counts(streams):
    iso, grp = streams
    assert iso.count() == 400 * (48 + 76) and iso.rows_per_step == 124
    assert grp.count() == 400 * (20 + 76) and grp.rows_per_step == 96


def test_matched_step_hashes_equal(streams):
    iso, grp = streams
    hi, hg = iso.step_hashes(), grp.step_hashes()
    assert len(hi) == 400 and hi == hg
    assert len(set(hi)) == 400


@pytest.mark.slow
def test_matched_rows_consumed_step_by_step_hold_the_same_tasks(streams):
    iso, grp = streams
    for s in (0, 1, 207, 208, 399):
        a = [t.identity() for i in range(s * 124, (s + 1) * 124) for t in iso.item(i).tasks]
        b = [t.identity() for i in range(s * 96, (s + 1) * 96) for t in grp.item(i).tasks]
        assert Counter(a) == Counter(b) and len(a) == 124
        assert P.multiset_hash(a) == iso.step_hashes()[s]
        assert {dict(iso.item(i).meta)["step"] for i in range(s * 124, (s + 1) * 124)} == {s}
        groups = [grp.item(i) for i in range(s * 96, (s + 1) * 96) if dict(grp.item(i).meta)["part"] == "atomic"]
        assert len(groups) == 20 and sum(len(g.tasks) for g in groups) == 48
        assert all(2 <= len(g.tasks) <= 4 and len(set(g.recall_order())) == len(g.tasks) for g in groups)


def test_matched_atomic_tasks_come_from_the_shared_pool(streams):
    iso, _ = streams
    assert idset(tasks_of(iso, "atomic")) == idset(C.atomic_pool())


def test_a_changed_option_breaks_the_match():
    a = make("matched_stream", {**MATCHED, "steps": 3, "stream": "isolated"})
    b = make("matched_stream", {**MATCHED, "steps": 3, "stream": "grouped", "comps_per_step": 75})
    assert a.step_hashes() != b.step_hashes()


# ---------------------------------------------------------------- RL pools


@pytest.mark.parametrize("mix", ["r1", "mda"])
def test_rl_pool_shapes(mix):
    gen = make("rl_pool", {"mix": mix, "rows": 400})
    got = [gen.item(i) for i in range(400)]
    for i, it in enumerate(got):
        chain = it.tasks[0]
        if i % 2 == 0:
            assert len(it.tasks) == 1 and dict(it.meta)["part"] == "chain"
        if i % 2 == 0 or mix == "mda":
            assert 10 <= chain.depth <= 20 and E.structure(chain.program) == "chain"
            assert set(chain.ops) <= set(ops.TRAIN_IDS) and len(chain.output) <= 1000
        if i % 2 == 1 and mix == "r1":
            assert 1 <= len(it.tasks) <= 12 and all(t.depth == 1 for t in it.tasks)
            assert len(set(it.recall_order())) == len(it.tasks)
        if i % 2 == 1 and mix == "mda":
            lits = it.tasks[1:]
            assert 1 <= len(lits) <= 2
            for t in lits:
                assert t.depth == 1 and isinstance(t.program.args[0], E.Lit)
                assert 8 <= len(t.program.args[0].value) <= 200
        for t in it.tasks:
            if set(t.ops) & set(ops.HELDOUT_IDS):
                assert t.depth == 1
            with E.recursion_headroom():
                assert E.evaluate(t.program, t.input) == t.output
    if mix == "r1":
        widths = Counter(len(it.tasks) for it in got[1::2])
        assert min(widths) == 1 and max(widths) == 12
        assert {o for it in got[1::2] for o in it.recall_order()} == set(ops.ALL_IDS)


@pytest.mark.parametrize("name, options, message", [
    ("sft_cell", {"width": [3, 2]}, ".width"),
    ("sft_cell", {"width": [1, 40]}, "distinct operators"),
    ("sft_cell", {"atomic": {"pool": "p", "ops": "everything"}}, "atomic"),
    ("sft_cell", {"atomic": None}, "needs atomic tasks"),
    ("sft_cell", {"compositions": {**V1_COMPS, "rows": 10, "trees": {"rows": 5}}}, "compositions.trees"),
    ("sft_cell", {"compositions": {**V1_COMPS, "rows": 10, "trees": {"p_binary": 2}}}, "p_binary"),
    ("matched_stream", {"atomic_per_step": 48, "grouped_rows_per_step": 5, "compositions": V1_COMPS}, "width"),
    ("matched_stream", {}, "no composition pool"),
    ("rl_pool", {"width": [1, 30]}, "width"),
    ("rl_pool", {"chain_ops": ["func_3"]}, "chain_ops"),
    ("rl_pool", {"mix": "r2"}, "mix"),
])
def test_bad_cell_options_name_the_option(name, options, message):
    with pytest.raises(GeneratorError) as exc:
        make(name, options)
    assert WHERE in str(exc.value) and message in str(exc.value)


def test_cells_differing_only_in_compositions_pack_the_same_groups(cells):
    def groups(gen):
        return {tuple(t.identity() for t in it.tasks) for it in (gen.item(i) for i in range(gen.count()))
                if dict(it.meta)["part"] == "atomic"}

    assert groups(cells["sft-c1"]) == groups(cells["sft-eco"]) == groups(cells["sft-c4"])


# ---------------------------------------------------------------- bundled recipes through `opgen build`

SFT_CELLS = ("sft-d1", "sft-v1", "sft-c1", "sft-eco", "sft-c4", "sft-c4b")


def run_build(tmp: Path, recipe: str, *args: str) -> tuple[dict, Path]:
    out = tmp / recipe
    result = CliRunner().invoke(cli, ["build", f"datasets/{recipe}.yaml", "--out", str(out), "--workers", "1",
                                      "--no-progress", *args])
    assert result.exit_code == 0, result.output
    return json.loads((out / "manifest.json").read_text()), out


def read_rows(out: Path, split: str, columns=("reward_model", "extra_info")) -> list[dict]:
    """Rows of a built split, only the columns a test needs (whole rows are slow to convert)."""
    files = sorted(out.glob(f"{split}*.parquet"))
    return [row for f in files for row in pq.read_table(f, columns=list(columns)).to_pylist()]


def truths(out: Path, split: str) -> list[dict]:
    files = sorted(out.glob(f"{split}*.parquet"))
    return [json.loads(r["ground_truth"]) for f in files
            for r in pq.read_table(f, columns=["reward_model"]).column("reward_model").to_pylist()]


def task_ids(gt: dict) -> list[str]:
    return [t["expr"] + "\x00" + t["input"] for t in gt["tasks"]]


FULL = ("reward_model", "extra_info", "response")


def check_gold_ra(row: dict) -> None:
    """The gold answer is well-formed RA: one recall block per distinct operator in order of first
    appearance, each the verbatim source under the exact header, then one Assemble block whose
    entry points compute every task's output."""
    gt = json.loads(row["reward_model"]["ground_truth"])
    entries = tuple(t["entry"] for t in gt["tasks"])
    order = list(dict.fromkeys(o for t in gt["tasks"] for o in E.ops_used(E.parse(t["expr"]))))
    answer = parse_program_answer(row["response"], entries)
    assert answer.source == "assemble", row["response"][:300]
    assert [r.op for r in answer.recalls] == order
    for r in answer.recalls:
        assert r.gloss == ops.get(r.op).gloss and r.code == ops.get(r.op).source
    assert row["response"].startswith(row["extra_info"]["assistant_prefix"])
    namespace: dict = {}
    exec(compile(answer.code, "<gold answer>", "exec"), namespace)
    with E.recursion_headroom():
        for t in gt["tasks"]:
            assert E.parse_program(answer.code, t["entry"]) == E.parse(t["expr"])
            assert namespace[t["entry"]](t["input"]) == t["output"]


@pytest.fixture(scope="module")
def small_cells(tmp_path_factory):
    """The cheap cells built in full, the big ones limited (their full counts: test_cell_counts)."""
    tmp = tmp_path_factory.mktemp("cells")
    out = {}
    for cell in ("sft-d1", "sft-c1", "sft-eco"):
        out[cell] = run_build(tmp, cell)
    for cell in ("sft-v1", "sft-c4", "sft-c4b", "stage1", "stage15b-init"):
        out[cell] = run_build(tmp, cell, "--limit", "3000")
    return out


@pytest.mark.slow
@pytest.mark.parametrize("cell, rows", [("sft-d1", ATOMIC), ("sft-v1", 3000), ("sft-c4", 3000),
                                        ("sft-c4b", 3000), ("stage1", 3000), ("stage15b-init", 3000)])
def test_built_counts(small_cells, cell, rows):
    man, out = small_cells[cell]
    assert man["splits"]["train"]["rows"] == rows == len(read_rows(out, "train"))
    assert man["leakage"]["ok"] and man["leakage"]["heldout_ops"] == list(ops.HELDOUT_IDS)


@pytest.mark.slow
def test_built_grouped_cells_count_every_task_once(small_cells):
    for cell, comps in (("sft-c1", 0), ("sft-eco", 15_979)):
        man, out = small_cells[cell]
        rows = read_rows(out, "train", ("extra_info",))
        groups = [r for r in rows if r["extra_info"]["depth"] == 1]
        assert len(rows) - len(groups) == comps
        assert sum(r["extra_info"]["n_tasks"] for r in groups) == ATOMIC
        assert {r["extra_info"]["n_tasks"] for r in groups} == {1, 2, 3, 4}
        assert man["splits"]["train"]["rows"] == len(rows)


@pytest.mark.slow
def test_built_sft_cells_share_the_same_10000_atomic_tasks(small_cells):
    # Built in full here: d1, c1, eco; the others' atomic side is the same pool by construction
    # (test_every_sft_cell_holds_the_same_atomic_tasks checks all six through their generators).
    sets = {}
    for cell in ("sft-d1", "sft-c1", "sft-eco"):
        _, out = small_cells[cell]
        sets[cell] = {i for gt in truths(out, "train") if len(gt["tasks"]) > 1 or gt["tasks"][0]["depth"] == 1
                      for i in task_ids(gt)}
    assert len(sets["sft-d1"]) == ATOMIC
    assert sets["sft-d1"] == sets["sft-c1"] == sets["sft-eco"] == idset(C.atomic_pool())


@pytest.mark.slow
def test_built_heldout_only_in_depth1_atomic_tasks(small_cells):
    for cell, (_, out) in small_cells.items():
        for gt in truths(out, "train"):
            for t in gt["tasks"]:
                if set(t["ops"]) & set(ops.HELDOUT_IDS):
                    assert t["depth"] == 1 and len(t["ops"]) == 1, (cell, t["expr"])


@pytest.mark.slow
def test_built_gold_answers_are_well_formed_ra(small_cells):
    for cell in ("sft-eco", "sft-v1", "sft-c4", "sft-c4b"):
        _, out = small_cells[cell]
        rows = read_rows(out, "train", FULL)
        for r in rows[:: max(1, len(rows) // 300)]:
            check_gold_ra(r)


@pytest.mark.slow
def test_built_stage15b_is_prose_and_one_code_block(small_cells):
    _, out = small_cells["stage15b-init"]
    for r in read_rows(out, "train", FULL)[:500]:
        assert "Recall " not in r["response"] and r["response"].count("```python") == 1
        assert r["extra_info"]["answer_format"] == "prose_code"


@pytest.mark.slow
def test_built_stage1_shows_the_bodies(small_cells):
    _, out = small_cells["stage1"]
    for r in read_rows(out, "train", ("prompt", "extra_info"))[:200]:
        op = r["extra_info"]["ops"][0]
        assert ops.get(op).source in r["prompt"][0]["content"]
        assert r["extra_info"]["depth"] == 1


@pytest.mark.slow
def test_built_files_are_reproducible_across_workers_and_hash_seeds(tmp_path, small_cells):
    man, _ = small_cells["sft-c1"]
    env = {**os.environ, "PYTHONHASHSEED": "4242"}
    subprocess.run([sys.executable, "-c", "from opgen.cli import main; main()", "build", "datasets/sft-c1.yaml",
                    "--out", str(tmp_path), "--workers", "2", "--no-progress"],
                   check=True, env=env, capture_output=True)
    again = json.loads((tmp_path / "manifest.json").read_text())
    assert [f["sha256"] for f in again["splits"]["train"]["files"]] == \
        [f["sha256"] for f in man["splits"]["train"]["files"]]


@pytest.fixture(scope="module")
def matched_build(tmp_path_factory):
    # 10 isolated steps (124 rows each) and 12 complete grouped steps (96 rows each)
    return run_build(tmp_path_factory.mktemp("matched"), "sft-matched", "--limit", "1240")


@pytest.mark.slow
def test_built_matched_streams_match_step_by_step(matched_build):
    man, out = matched_build
    iso = [task_ids(gt) for gt in truths(out, "isolated")]
    grp = [task_ids(gt) for gt in truths(out, "grouped")]
    assert len(iso) == len(grp) == 1240
    hi, hg = C.step_hashes_of(iso, 124), C.step_hashes_of(grp, 96)
    assert len(hi) == 10 and len(hg) == 12
    assert hi == hg[:10]
    # and they are the plan's hashes, which a full build carries for all 400 steps
    gen = make("matched_stream", {**MATCHED, "stream": "isolated"})
    assert hi == gen.step_hashes()[:10]
    for r in read_rows(out, "grouped", FULL)[:96 * 2]:
        check_gold_ra(r)


@pytest.mark.slow
def test_matched_single_stream_recipes_plan_the_same_steps(tmp_path, matched_build):
    _, both = matched_build
    _, alone = run_build(tmp_path, "sft-matched-grouped", "--limit", "192")
    assert [task_ids(gt) for gt in truths(alone, "train")] == [task_ids(gt) for gt in truths(both, "grouped")[:192]]


@pytest.mark.slow
def test_manifest_shows_shared_pool_and_step_hashes(matched_build, small_cells):
    man, _ = matched_build
    sections = man["splits"]
    assert C.stream_match(sections)["equal"]
    assert man["matched_streams"]["equal"] and man["matched_streams"]["steps_compared"] > 0
    pools = {small_cells[c][0]["splits"]["train"]["cell"]["atomic_pool"]["sha256"] for c in ("sft-d1", "sft-eco")}
    assert len(pools) == 1


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["rl-r1", "rl-mda"])
def test_built_rl_pools(tmp_path, recipe):
    man, out = run_build(tmp_path, recipe, "--limit", "300")
    rows = truths(out, "train")
    assert man["splits"]["train"]["rows"] == len(rows) == 300 and man["leakage"]["ok"]
    for i, gt in enumerate(rows):
        tasks = gt["tasks"]
        if i % 2 == 0 or recipe == "rl-mda":
            assert 10 <= tasks[0]["depth"] <= 20 and set(tasks[0]["ops"]) <= set(ops.TRAIN_IDS)
        if i % 2 == 0:
            assert len(tasks) == 1 and "ref_code" in gt
        elif recipe == "rl-r1":
            assert all(t["depth"] == 1 for t in tasks) and 1 <= len(tasks) <= 12
        else:
            assert 2 <= len(tasks) <= 3 and all(t["depth"] == 1 for t in tasks[1:])
            assert [t["entry"] for t in tasks] == [f"main_solution_{k}" for k in range(1, len(tasks) + 1)]


def test_rl_pool_full_count_without_rendering():
    for mix in ("r1", "mda"):
        assert registry()["rl_pool"](registry()["rl_pool"].resolve({"mix": mix}, WHERE),
                                     Context("d", "train", 1, where=WHERE)).count() == 12_800


def test_a_broken_cell_recipe_fails_naming_file_and_option(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(Path("datasets/sft-c1.yaml").read_text().replace("width: [1, 4]", "width: [1, 40]"))
    result = CliRunner().invoke(cli, ["build", str(bad), "--out", str(tmp_path / "o"), "--no-progress"])
    assert result.exit_code != 0
    assert "bad.yaml" in result.output and "width" in result.output
    assert not (tmp_path / "o" / "train.parquet").exists()


@pytest.mark.slow
@pytest.mark.parametrize("cell, rows", [
    ("stage1", ATOMIC), ("stage15b-init", 32_000), ("sft-v1", ATOMIC + 15_979), ("sft-c4", None), ("sft-c4b", None),
    ("sft-matched", 49_600 + 38_400), ("sft-matched-isolated", 49_600), ("sft-matched-grouped", 38_400),
    ("rl-r1", 12_800), ("rl-mda", 12_800)])
def test_full_build(tmp_path, cell, rows):
    man, out = run_build(tmp_path, cell, "--workers", "2")
    total = sum(s["rows"] for s in man["splits"].values())
    if rows is not None:
        assert total == rows
    else:
        comps = {"sft-c4": 12_452, "sft-c4b": 12_436}[cell]
        data = read_rows(out, "train", ("extra_info",))
        assert sum(r["extra_info"]["n_tasks"] for r in data if r["extra_info"]["depth"] == 1) == ATOMIC
        assert sum(1 for r in data if r["extra_info"]["depth"] > 1) == comps
    if cell == "sft-matched":
        iso = C.step_hashes_of([task_ids(gt) for gt in truths(out, "isolated")], 124)
        grp = C.step_hashes_of([task_ids(gt) for gt in truths(out, "grouped")], 96)
        assert len(iso) == 400 and iso == grp
