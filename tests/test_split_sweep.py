"""`opgen split-sweep` (CFQ's divergence sweep) on a small pool: monotone D_C levels, every split a
normal build whose certificate is re-verified from its files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from split_helpers import fragment_texts, mcd_recipe, opgen, trees_of

SMALL = mcd_recipe("small-mcd")


@pytest.mark.slow
def test_a_sweep_on_a_small_pool_rises_level_by_level_and_every_split_is_certified(tmp_path: Path):
    (tmp_path / "small.yaml").write_text(SMALL)
    out = tmp_path / "sweep"
    r = opgen("split-sweep", str(tmp_path / "small.yaml"), "--out", str(out), "--step", "0.2")
    report = json.loads((out / "sweep.json").read_text())
    levels = [lv["level"] for lv in report["levels"]]
    assert levels[0] == "random" and levels[-1] == "max" and len(levels) >= 4
    means = [lv["compound_divergence"]["mean"] for lv in report["levels"]]
    assert means[:-1] == sorted(means[:-1]) and len(set(means[:-1])) == len(means) - 1 and report["monotone"]
    assert means[-1] >= means[-2] - 1e-6 and report["highest"]["compound_divergence"] == pytest.approx(
        report["maximum_untargeted"], abs=0.02)
    assert all(lv["splits"] == 3 for lv in report["levels"])
    assert "highest D_C reached" in r.stdout and "CFQ" in r.stdout
    assert (out / "sweep.svg").read_text().startswith("<svg")
    assert len((out / "sweep.csv").read_text().splitlines()) == 1 + 3 * len(levels)
    for split in report["splits"]:
        build = Path(split["build"])
        man = json.loads((build / "manifest.json").read_text())
        cert = man["split_certificates"][next(iter(man["split_certificates"]))]
        assert cert["check"]["ok"] and cert["atom_divergence"] <= 0.02 + 1e-9
        assert cert["compound_divergence"] == split["compound_divergence"] and cert["baseline"]["seeds"] >= 3
        if split["level"] not in ("random", "max"):  # the target reached (a split stops at it, or where D_A binds)
            assert cert["compound_divergence"] >= float(split["level"]) - 0.05
        # re-verified from the files: the divergences measured again, and no held-out compound in training
        again = json.loads(opgen("split-stats", str(build / "train.parquet"), str(build / "test.parquet"),
                                 "--json", "--baseline-seeds", "0").stdout)
        assert again["compound_divergence"] == cert["compound_divergence"]
        assert again["atom_divergence"] == cert["atom_divergence"]
        held = set(cert["heldout_compounds"])
        assert not any(held & fragment_texts(t) for row in trees_of(build / "train.parquet") for t in row)
        # each split rebuilds alone from the recipe written beside it
        assert Path(split["recipe"]).is_file()


def test_a_sweep_refuses_a_recipe_without_an_mcd_split_before_any_work(tmp_path: Path):
    r = opgen("split-sweep", "split-systematicity", "--out", str(tmp_path / "s"), check=False)
    assert r.returncode == 2 and "needs a recipe with an mcd split (this one's: systematicity)" in r.stderr
    assert not (tmp_path / "s").exists()
    r = opgen("split-sweep", "split-mcd", "--out", str(tmp_path / "s"), "--levels", "0.5,x", check=False)
    assert r.returncode == 2 and "--levels" in r.stderr and "Traceback" not in r.stderr


def test_each_split_of_a_sweep_is_the_recipe_at_a_level_with_the_seed_it_was_given():
    from opgen import recipe as R
    from opgen.splits import sweep

    recipe = R.load("split-mcd", 7)
    data = sweep.variant(recipe, "0.30", 2, 0.02)
    assert data["seed"] == 7 and data["name"] == "split-mcd-0.30-2"
    assert data["split"] | {} == {**data["split"], "search": "exchange", "replicate": 2, "max_atom_divergence": 0.02,
                                  "target_compound_divergence": 0.3}
    random = sweep.variant(recipe, sweep.RANDOM, 0, 0.02)["split"]
    assert random["rounds"] == 0 and "target_compound_divergence" not in random
    resolved = R.resolve(data, "x.yaml").split.config  # a recipe opgen builds as it is
    assert resolved["target_compound_divergence"] == 0.3 and resolved["replicate"] == 2
