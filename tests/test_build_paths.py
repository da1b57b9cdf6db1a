"""Build paths added for speed: each must write what the plain path writes."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from opgen import build as B
from opgen import recipe as R
from opgen import rows, write

# 2 operators x 26**3 inputs: 1,200 tasks collide, so later shards hold rows redrawn in phase 2.
PATCHED = """\
name: patched
seed: 3
defaults: {role: eval, unique: task}
splits:
  atoms:
    generator: atomic
    shard_rows: 300
    options: {ops: [func_3, func_9], rows: 1200, input_len: [3, 3]}
"""


def test_a_shard_with_redrawn_rows_has_the_bytes_of_its_rows_written_at_once(tmp_path: Path, monkeypatch):
    path = tmp_path / "patched.yaml"
    path.write_text(PATCHED)
    patched = []
    real = B._patch

    def spy(unit, plan, patches):
        patched.append(unit.shard)
        real(unit, plan, patches)

    monkeypatch.setattr(B, "_patch", spy)
    man = B.build([R.load(str(path))], tmp_path / "out", workers=1)
    assert patched  # phase 3 rewrote at least one shard
    tasks = set()
    for f in man["splits"]["atoms"]["files"]:
        # read back, list items are named "element"; the row schema names them "item"
        table = pq.read_table(tmp_path / "out" / f["path"]).cast(rows.schema("rl"))
        again = tmp_path / ("again-" + f["path"])
        write.write_table(again, table)
        assert again.read_bytes() == (tmp_path / "out" / f["path"]).read_bytes()
        for gt in table.column("reward_model").to_pylist():
            t = json.loads(gt["ground_truth"])["tasks"][0]
            tasks.add((t["expr"], t["input"]))
    assert len(tasks) == 1200
