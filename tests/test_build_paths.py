"""Build paths added for speed: each must write what writing the final rows at once writes."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from opgen import build as B
from opgen import recipe as R
from opgen import rows, write

# 2 operators x 26**3 inputs: 1,200 tasks collide, so later shards hold rows redrawn in phase 2.
# (The builder encodes a shard as parquet in phase 1 when phase 2 cannot change it, else in phase 3.)
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


def test_every_shard_has_the_bytes_of_its_final_rows_written_at_once(tmp_path: Path, monkeypatch):
    # the first shard is encoded in phase 1, later ones in phase 3 with redrawn rows swapped in
    path = tmp_path / "patched.yaml"
    path.write_text(PATCHED)
    patched = []
    real = B._finish

    def spy(args):
        if args[1]:
            patched.append(args[0])
        return real(args)

    monkeypatch.setattr(B, "_finish", spy)
    man = B.build([R.load(str(path))], tmp_path / "out", workers=1)
    assert patched and 0 not in patched  # phase 3 swapped redrawn rows into later shards
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
