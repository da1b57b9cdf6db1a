"""The fast schema check that keeps jsonschema off a build's start-up: it may only vouch for
documents jsonschema accepts, and must vouch for the recipes and options opgen ships."""

from __future__ import annotations

import copy
import json

import jsonschema
import pytest
import yaml

from opgen import generate as G
from opgen import recipe as R
from opgen import schemacheck
from opgen.resources import resource_dir, schema_path
from opgen.rng import Rng

RECIPE_SCHEMA = json.loads(schema_path("recipe.schema.json").read_text())
BUNDLED = sorted(resource_dir("datasets").glob("*.yaml"))


def _jsonschema_valid(schema: dict, doc) -> bool:
    return not any(jsonschema.Draft202012Validator(schema).iter_errors(doc))


def test_every_bundled_recipe_and_its_resolved_options_pass_the_fast_check():
    assert BUNDLED
    for path in BUNDLED:
        doc = yaml.safe_load(path.read_text())
        assert schemacheck.surely_valid(RECIPE_SCHEMA, doc), path.name
        for cfg in R.load(str(path)).splits:
            cls = G.get(cfg.generator)
            assert schemacheck.surely_valid(cls.options_schema(), cfg.options), (path.name, cfg.name)


_ODD_VALUES = [None, True, False, 0, -1, 1, 1.0, 2.5, "", "x", "func_3", "train", "-bad name", [], [1], ["func_3"],
               ["a", "a"], {}, {"k": 1}, 10**30]


def _mutants(doc, rng: Rng, n: int):
    """Documents one random edit away from ``doc``: a value replaced, a key dropped or added."""
    paths = []

    def walk(node, path):
        paths.append(path)
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, path + (k,))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, path + (i,))

    walk(doc, ())
    for _ in range(n):
        out = copy.deepcopy(doc)
        path = paths[rng.below(len(paths))]
        parent = out
        for p in path[:-1]:
            parent = parent[p]
        action = rng.below(3)
        if not path:
            yield rng.choice(_ODD_VALUES)
            continue
        if action == 0:
            parent[path[-1]] = copy.deepcopy(rng.choice(_ODD_VALUES))
        elif action == 1 and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            target = parent[path[-1]]
            if isinstance(target, dict):
                target[rng.choice(["colour", "seed", "rows", "ops", "role", "1bad"])] = copy.deepcopy(
                    rng.choice(_ODD_VALUES))
            else:
                parent[path[-1]] = copy.deepcopy(rng.choice(_ODD_VALUES))
        yield out


def test_the_fast_check_never_vouches_for_a_recipe_jsonschema_rejects():
    rng = Rng("schema-check", "recipes")
    agreed = rejected = 0
    for path in BUNDLED:
        doc = yaml.safe_load(path.read_text())
        for mutant in _mutants(doc, rng, 150):
            fast, slow = schemacheck.surely_valid(RECIPE_SCHEMA, mutant), _jsonschema_valid(RECIPE_SCHEMA, mutant)
            assert not (fast and not slow), json.dumps(mutant, default=str)[:500]
            agreed += fast == slow
            rejected += not slow
    assert rejected > 100  # the edits do break recipes
    assert agreed > 0.9 * 150 * len(BUNDLED)  # and the check decides almost every one itself


@pytest.mark.parametrize("name", ["trees", "atomic", "chains"])
def test_the_fast_check_never_vouches_for_options_jsonschema_rejects(name):
    cls = G.get(name)
    schema = cls.options_schema()
    doc = cls.resolve({"rows": 10} if name != "atomic" else {"per_op": 1})
    rng = Rng("schema-check", name)
    rejected = 0
    for mutant in _mutants(doc, rng, 600):
        fast, slow = schemacheck.surely_valid(schema, mutant), _jsonschema_valid(schema, mutant)
        assert not (fast and not slow), mutant
        rejected += not slow
    assert rejected > 100


def test_a_bad_option_is_still_worded_by_jsonschema():
    with pytest.raises(G.GeneratorError, match=r"r\.yaml: splits\.s\.options\.p_binary: 2 is greater than"):
        G.get("trees").resolve({"depths": [1], "rows": 5, "p_binary": 2}, "r.yaml: splits.s.options")


def test_a_build_of_valid_recipes_never_imports_jsonschema(modules_after_build):
    assert modules_after_build("native-stage1", 20, ("jsonschema",)) == []
