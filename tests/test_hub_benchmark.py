"""A benchmark's splits (a recipe with train and eval splits) stay in one Hub config, so
``load_dataset(tree)`` returns train and test together, whatever the splits' families."""

from __future__ import annotations

import json

import pytest
from integration_fixtures import RECIPE, build, rows_of

from opgen import hub


def _two_families() -> dict:
    splits = {k: {**v, "family": f"adapt_{k}"} for k, v in RECIPE["splits"].items()}
    return {**RECIPE, "splits": splits}


def test_load_dataset_of_the_tree_returns_the_benchmarks_train_and_test(tmp_path):
    datasets = pytest.importorskip("datasets")
    out = build(tmp_path, _two_families())
    plan = hub.write_tree(out, tmp_path / "tree", "org/adapt")
    assert plan.configs == ("adapt",) and plan.default_config == "adapt"
    assert {s.name for s in plan.splits} == {"train", "test"}
    dd = datasets.load_dataset(str(tmp_path / "tree"))
    assert sorted(dd) == ["test", "train"]
    for split in ("train", "test"):
        assert dd[split].to_list() == rows_of(out, split)
    card = (tmp_path / "tree" / "README.md").read_text()
    assert "config_name: adapt" in card


def test_recipes_without_both_roles_keep_one_config_per_family(tmp_path):
    only_eval = {**_two_families()}
    only_eval["splits"] = {k: {**v, "role": "eval"} for k, v in only_eval["splits"].items()}
    out = build(tmp_path, only_eval)
    plan = hub.write_tree(out, tmp_path / "tree", "org/adapt")
    assert plan.configs == ("adapt_test", "adapt_train")


def test_a_benchmark_config_takes_the_recipes_name_even_where_a_family_has_it(tmp_path):
    clash = _two_families()
    clash["name"] = "adapt_train"  # the recipe's config would take the train family's name
    out = build(tmp_path, clash)
    man = json.loads((out / "manifest.json").read_text())
    assert man["recipes"][0]["name"] == "adapt_train"
    plan = hub.plan(out)  # one recipe: every split is the benchmark's, so nothing clashes
    assert plan.configs == ("adapt_train",)
