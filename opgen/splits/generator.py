"""``mcd_side``: the rows of one side (train or eval) of an ``mcd`` split, from its pool's selection.

Recipes never name it: an ``mcd`` split (opgen.splits.kinds.mcd) gives it to every split of the
recipe, with ``side`` (the split's role) and the split's resolved config as options; that kind's
module imports this one, which registers the generator (opgen.generate.register_generator).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opgen.generate import Context, Generator, GeneratorError, register_generator
from opgen.splits import mcd
from opgen.tasks import Item


class McdSide(Generator):
    NAME = "mcd_side"
    # 2: DBCA compounds of up to 3 nodes with atoms per occurrence (compounds.DEFAULT) and the exchange
    # search by default: the selections of split-mcd and sft-eco-mcd changed (CHANGELOG.md, "Which rows
    # change, and why")
    VERSION = 2
    REDRAWABLE = False  # the selection is planned: a row is what the search chose
    MANIFEST_KEY = "mcd"
    ANY_LIBRARY = True  # the pool is drawn from ctx.library (opgen.splits.mcd.pool_and_selection)
    OPTIONS_SCHEMA = {"required": ["side", "split"], "properties": {
        "side": {"enum": ["train", "eval"]}, "split": {"type": "object"}}}

    def __init__(self, options: Mapping[str, Any], ctx: Context):
        super().__init__(options, ctx)
        where = ctx.where.rsplit("splits.", 1)[0] if "splits." in ctx.where else ""
        try:
            self.items, self.selection = mcd.pool_and_selection(self.options["split"], ctx.seed, where, ctx.library)
        except mcd.McdError as exc:
            raise GeneratorError(str(exc)) from None
        self.index = self.selection.train if self.options["side"] == "train" else self.selection.eval

    def count(self) -> int:
        return len(self.index)

    def candidate(self, i: int, j: int) -> Item | None:
        return self.items[self.index[i]]

    def manifest_section(self, rows: int) -> dict[str, Any]:
        return {"side": self.options["side"], **mcd.section(len(self.items), self.selection)}


register_generator(McdSide)
