"""Reproducible, provably: versions and content digests in the manifest, `opgen verify` (issue 13).

The cross-version check (a build by pyarrow 21.0.0 verified under the main environment's pyarrow,
and back) runs at the end of .ci/run in its own environment.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from opgen import content, write
from opgen import manifest as M


def _build(runner, cli, out: Path, *extra: str) -> dict:
    r = runner.invoke(cli, ["build", "native-stage1", "--out", str(out), "--limit", "80", "--workers", "1", *extra])
    assert r.exit_code == 0, r.output
    return json.loads((out / "manifest.json").read_text())


def _rewrite(out: Path, name: str, table: pa.Table, **kw) -> None:
    """Replace a split file and record its new sha256 in the manifest (a consistent-looking build)."""
    path = out / f"{name}.parquet"
    pq.write_table(table, path, **kw) if kw else write.write_table(path, table)
    man = json.loads((out / "manifest.json").read_text())
    f = man["splits"][name]["files"][0]
    f["sha256"], f["bytes"] = write.sha256_of(path), path.stat().st_size
    (out / "manifest.json").write_text(M.dumps(man))


@pytest.mark.slow
def test_the_manifest_records_versions_and_content_digests(runner, cli, tmp_path):
    man = _build(runner, cli, tmp_path / "o")
    assert man["versions"] == M.versions() and set(man["versions"]) == {"opgen", "pyarrow", "numpy", "python"}
    assert man["versions"]["pyarrow"] == pa.__version__
    for s in man["splits"].values():
        assert s["content_sha256"] == content.digest_files([tmp_path / "o" / f["path"] for f in s["files"]])


def test_the_content_digest_ignores_the_encoder_and_sees_every_value():
    t = pa.table({"n": pa.array([1, None, 3], pa.int16()), "s": pa.array(["x", None, "zz"]),
                  "l": pa.array([[{"role": "user", "content": "a"}], None, []]), "b": pa.array([True, False, None])})
    d = content.digest_tables([t])
    assert content.digest_tables([t.slice(0, 1), t.slice(1)]) == d  # chunking, files, row groups
    assert content.digest_tables([t.set_column(0, "n", pa.array([1, None, 3], pa.int64()))]) == d  # int widths
    for col, values in (("s", ["x", "", "zz"]), ("s", ["x", None, "z"]), ("n", [1, 0, 3])):
        changed = t.set_column(t.schema.get_field_index(col), col, pa.array(values, t.schema.field(col).type))
        assert content.digest_tables([changed]) != d
    assert content.digest_tables([t.select(["s", "n", "l", "b"])]) != d  # column order is part of the rows


@pytest.mark.slow
def test_verify_passes_a_fresh_build_with_identical_bytes(runner, cli, tmp_path):
    man = _build(runner, cli, tmp_path / "o")
    r = runner.invoke(cli, ["verify", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    assert r.output.count("bytes identical") == len(man["splits"])


@pytest.mark.slow
def test_verify_compares_content_across_writers_and_bytes_within_one(runner, cli, tmp_path):
    out = tmp_path / "o"
    _build(runner, cli, out)
    name = "stage1_l1_test"
    _rewrite(out, name, pq.read_table(out / f"{name}.parquet"), compression="snappy", row_group_size=7)
    r = runner.invoke(cli, ["verify", str(out)])
    assert r.exit_code == 1 and f"FAIL {name}: parquet bytes differ" in r.output
    man = json.loads((out / "manifest.json").read_text())
    man["versions"]["pyarrow"] = "21.0.0-elsewhere"  # as if another machine's writer had made it
    (out / "manifest.json").write_text(M.dumps(man))
    r = runner.invoke(cli, ["verify", str(out), "--json"])
    assert r.exit_code == 0, r.output
    assert all(s["ok"] and not s["bytes_compared"] for s in json.loads(r.output)["splits"])


def test_verify_fails_rows_that_differ_from_the_rebuild(runner, cli, tmp_path):
    out = tmp_path / "o"
    _build(runner, cli, out)
    name = "stage1_l1_train"
    table = pq.read_table(out / f"{name}.parquet")
    rows = table.to_pylist()
    rows[5]["prompt"][-1]["content"] += " "
    _rewrite(out, name, pa.Table.from_pylist(rows, schema=table.schema))
    assert runner.invoke(cli, ["validate", str(out)]).exit_code == 1  # validate sees this one too
    r = runner.invoke(cli, ["verify", str(out)])
    assert r.exit_code == 1 and f"FAIL {name}: content of the files" in r.output
    assert "ok   stage1_l1_test" in r.output


@pytest.mark.slow
def test_verify_rebuilds_an_only_update_by_its_groups(runner, cli, tmp_path):
    out = tmp_path / "o"
    _build(runner, cli, out)
    _build(runner, cli, out, "--only", "stage1_l1_test")
    r = runner.invoke(cli, ["verify", str(out)])
    assert r.exit_code == 0, r.output


def test_verify_names_a_directory_without_a_manifest(runner, cli, tmp_path):
    r = runner.invoke(cli, ["verify", str(tmp_path)])
    assert r.exit_code == 2 and "manifest.json" in r.output


@pytest.mark.slow
def test_the_digest_taken_while_writing_equals_the_files_with_redraws_and_workers(tmp_path):
    from opgen import build as B
    from opgen import recipe as R

    split = ("    generator: trees\n    role: eval\n    shard_rows: 100\n"
             "    options: {ops: [func_3, func_1, func_2, func_4], depths: [1], input_len: [1, 2], rows: %d}\n")
    (tmp_path / "r.yaml").write_text("name: r\nsplits:\n  a:\n" + split % 400 + "  b:\n" + split % 300)
    for workers in (1, 2):
        out = tmp_path / f"o{workers}"
        man = B.build([R.load(str(tmp_path / "r.yaml"))], out, workers=workers)
        for s in man["splits"].values():
            assert s["rejections"]["duplicate"] > 0  # rows redrawn in phase 2 are in the digest
            assert s["content_sha256"] == content.digest_files([out / f["path"] for f in s["files"]])
    assert json.loads((tmp_path / "o1" / "manifest.json").read_text()) == \
        json.loads((tmp_path / "o2" / "manifest.json").read_text())


@pytest.mark.slow
def test_digesting_while_building_imports_neither_pyarrow_compute_nor_pandas(modules_after_build):
    # pyarrow.compute costs ~40 ms of start-up and pandas 0.2 s; the digest reads Arrow buffers directly
    assert modules_after_build("eval-suite", 30, ("pyarrow.compute", "pandas")) == []
