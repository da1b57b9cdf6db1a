"""The determinism recipe (DET), shared by tests/test_build.py (files byte-identical across worker
counts and hash seeds) and tests/test_split_tally.py (the tally equals the rows read back).

Its ``atoms`` split draws 3,000 tasks from 2 * 26**3 possible ones in 5 shards of 700: tasks
collide across shards, so phase 3 of the build redraws rows (the path both tests need to reach).
"""

from __future__ import annotations

_HEAD = """\
name: {name}
seed: 5
defaults: {{role: eval}}
splits:
  atoms:
    generator: atomic
    shard_rows: 700
    kind: sft
    options: {{ops: [func_3, func_9], rows: 3000, input_len: [3, 3]}}
  trees:
    generator: trees
    prompt_format: shown
    options: {{ops: all, depths: [1, 2, 3], rows: {trees_rows}}}
"""

_CHAINS = """\
  chains:
    generator: chains
    options: {ops: heldout, depths: [1, 4], rows: 200}
"""


def det_recipe(name: str = "det", *, trees_rows: int = 900, chains: bool = False) -> str:
    """DET as recipe YAML: the cross-shard ``atoms`` split, ``trees_rows`` shown-format trees, and
    (``chains``) 200 held-out chains."""
    return _HEAD.format(name=name, trees_rows=trees_rows) + (_CHAINS if chains else "")
