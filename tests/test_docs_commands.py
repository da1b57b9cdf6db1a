"""The docs' command lines and numbers agree with the code (issue 24's docs mismatches: recipes.md
`--only heldout`, operators.md `func_19(x, 10**12)`, the sft-matched step counts in cells.md)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from opgen import ops
from opgen import recipe as R

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
BUNDLED = {p.stem for p in (ROOT / "datasets").glob("*.yaml")}


def _build_lines() -> list[tuple[str, str, str]]:
    """(doc, recipe, --only value) of every `opgen build <bundled recipe> ... --only X` in the docs."""
    found = []
    for doc in DOCS:
        for line in doc.read_text(encoding="utf-8").splitlines():
            m = re.search(r"opgen build (?:datasets/)?([\w.-]+?)(?:\.yaml)?\s.*?--only[ =]([\w.,-]+)", line)
            if m and m.group(1) in BUNDLED:
                found.append((doc.name, m.group(1), m.group(2)))
    return found


def test_the_docs_show_some_only_lines():
    assert len(_build_lines()) >= 1


@pytest.mark.parametrize("doc, recipe, only", _build_lines())
def test_every_only_in_the_docs_names_a_split_of_its_recipe(doc, recipe, only):
    names = {s.name for s in R.load(recipe, None).splits}
    for name in only.split(","):
        assert name in names, f"{doc}: --only {name} is no split of {recipe} ({sorted(names)})"


def test_operator_calls_in_the_operator_docs_take_literal_parameters():
    text = (ROOT / "docs" / "operators.md").read_text(encoding="utf-8")
    calls = re.findall(r"`(func_\d+)\(([^`]*)\)`", text)
    assert calls
    arity = {op.id: len(op.signature.strip("()").split(",")) for op in ops.OPERATORS}
    for name, args in calls:
        parts = [a.strip() for a in args.split(",")]
        assert len(parts) == arity[name], (name, args)
        for a in parts[1:]:  # the first argument is the string; the rest are parameters, written as literals
            assert a.isidentifier() or isinstance(ast.literal_eval(a), int), (name, args)


def test_the_sft_matched_step_counts_in_cells_md_are_the_recipes():
    text = (ROOT / "docs" / "cells.md").read_text(encoding="utf-8")
    line = next(ln for ln in text.splitlines() if ln.startswith("opgen build datasets/sft-matched.yaml"))
    limit = int(re.search(r"--limit (\d+)", line).group(1))
    steps, iso_rows = map(int, re.search(r"first (\d+) steps \((\d+) rows a step\)", line).groups())
    grp_steps, grp_rows = re.search(r"([\d.]+) steps of (\d+)", line).groups()
    opts = {s.name: s.options for s in R.load("sft-matched", None).splits}
    iso, grp = opts["isolated"], opts["grouped"]
    assert iso_rows == iso["atomic_per_step"] + iso["comps_per_step"]
    assert int(grp_rows) == grp["grouped_rows_per_step"] + grp["comps_per_step"]
    assert steps == limit // iso_rows and limit % iso_rows == 0
    assert grp_steps == f"{limit / int(grp_rows):.1f}"
