"""`opgen build` end to end: the eval suite, determinism, leakage, failures that leave nothing behind."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from det_recipe import det_recipe
from hang_guard import HANG_S

from opgen import build as B
from opgen import generate as G
from opgen import rows, write

EVAL_COUNTS = {"heldout_trees_d1-8": 2048, "trainop_trees_d1-8": 2048,
               "heldout_chains_d1-20": 2816, "trainop_chains_d1-20": 2816}


@pytest.fixture(scope="module")
def eval_suite(tmp_path_factory):
    from click.testing import CliRunner
    from opgen.cli import cli

    out = tmp_path_factory.mktemp("suite") / "eval"
    result = CliRunner().invoke(cli, ["build", "--out", str(out), "--workers", "2"])
    assert result.exit_code == 0, result.output
    return out, result.output


@pytest.mark.slow
def test_default_build_is_the_eval_suite_with_exact_counts(eval_suite):
    out, output = eval_suite
    man = json.loads((out / "manifest.json").read_text())
    assert {name: s["rows"] for name, s in man["splits"].items()} == EVAL_COUNTS
    assert sorted(p.name for p in out.glob("*.parquet")) == sorted(f"{n}.parquet" for n in EVAL_COUNTS)
    for name, split in man["splits"].items():
        table = pq.read_table(out / f"{name}.parquet")
        assert table.num_rows == EVAL_COUNTS[name] and table.schema.equals(rows.schema("rl"), check_metadata=False)
        assert not (table.schema.metadata or {}).get(b"huggingface")
        depths = split["counts"]["depth"]
        wanted = [1, 2, 3, 4, 5, 6, 7, 8] if "trees" in name else [1, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20]
        assert depths == {str(d): 256 for d in wanted}
        assert split["output_length"]["max"] <= 1000
        assert split["files"][0]["sha256"] == hashlib.sha256((out / f"{name}.parquet").read_bytes()).hexdigest()
        sources = set(table.column("data_source").to_pylist())
        assert sources == {"opgen/" + name.rsplit("_", 1)[0]}
    held = man["splits"]["heldout_trees_d1-8"]["counts"]["op"]
    assert set(held) <= {"func_0", "func_2", "func_6", "func_7", "func_8", "func_10", "func_12", "func_14",
                         "func_16", "func_18", "func_21", "func_24"}
    assert man["leakage"]["ok"] is True and "violations" in man["leakage"]
    assert "9,728 rows" in output and "heldout_chains_d1-20" in output


@pytest.mark.slow
def test_every_held_out_eval_program_holds_a_held_out_operator(eval_suite):
    out, _ = eval_suite
    for name in ("heldout_trees_d1-8", "heldout_chains_d1-20"):
        for gt in pq.read_table(out / f"{name}.parquet").column("reward_model").to_pylist():
            assert json.loads(gt["ground_truth"])["ops"]


@pytest.mark.slow
def test_validate_passes_on_every_built_file(eval_suite, runner, cli):
    out, _ = eval_suite
    result = runner.invoke(cli, ["validate", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output.count("ok ") == 4


@pytest.mark.slow
def test_stats_prints_counts_and_histograms(eval_suite, runner, cli):
    out, _ = eval_suite
    result = runner.invoke(cli, ["stats", str(out / "heldout_chains_d1-20.parquet")])
    assert result.exit_code == 0, result.output
    assert "rows: 2816" in result.output and "depth:" in result.output and "█" in result.output
    data = json.loads(runner.invoke(cli, ["stats", "--json", str(out / "heldout_trees_d1-8.parquet")]).output)
    assert data["counts"]["depth"] == {str(d): 256 for d in range(1, 9)}


# ---------------------------------------------------------------- determinism across workers and hash seeds
# (the recipe, DET, lives in tests/det_recipe.py: tests/test_split_tally.py builds it too)


def _build(recipe: Path, out: Path, workers: int, hashseed: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONHASHSEED": hashseed}
    subprocess.run([sys.executable, "-m", "opgen", "build", str(recipe), "--out", str(out), "--workers", str(workers),
                    "--no-progress"], check=True, env=env, capture_output=True)
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.iterdir()) if p.is_file()}


@pytest.mark.slow
def test_files_are_byte_identical_across_worker_counts_and_hash_seeds(tmp_path):
    recipe = tmp_path / "det.yaml"
    recipe.write_text(det_recipe())
    one = _build(recipe, tmp_path / "a", 1, "0")
    two = _build(recipe, tmp_path / "b", 2, "12345")
    assert one == two
    assert len([n for n in one if n.startswith("atoms-")]) == 5 and "trees.parquet" in one
    man = json.loads((tmp_path / "a" / "manifest.json").read_text())
    # the redraw path ran: 3,000 tasks from 2 * 26**3 possible ones collide
    assert man["splits"]["atoms"]["rejections"]["duplicate"] > 0
    ids = pq.read_table(tmp_path / "a" / "atoms-00000-of-00005.parquet").column("extra_info").to_pylist()
    assert [e["index"] for e in ids] == list(range(700))
    tasks = set()
    for f in sorted((tmp_path / "a").glob("atoms-*.parquet")):
        for gt in pq.read_table(f).column("reward_model").to_pylist():
            t = json.loads(gt["ground_truth"])["tasks"][0]
            tasks.add((t["expr"], t["input"]))
    assert len(tasks) == 3000


# A build with fewer shards than workers draws each shard in pieces (issue 32): ``atoms`` draws 900
# tasks from 2 * 26**3, so its pieces repeat each other's tasks and are drawn again; ``deep`` judges
# programs; ``free`` judges nothing (its first shard is not written at once, as it is unsplit).
PIECES = """\
name: pieces
seed: 3
defaults: {role: eval}
splits:
  atoms:
    generator: atomic
    options: {ops: [func_3, func_9], rows: 900, input_len: [3, 3]}
  deep:
    generator: trees
    unique: program
    options: {ops: all, depths: [3], rows: 700}
  free:
    generator: trees
    unique: none
    options: {ops: all, depths: [1], rows: 500}
"""


@pytest.mark.slow
def test_shards_drawn_in_pieces_are_the_shards_one_worker_draws(runner, cli, tmp_path, monkeypatch):
    monkeypatch.setattr(write, "ROW_GROUP_ROWS", 100)  # pieces are whole row groups: a test's size
    again: list[B.Piece] = []
    run = B._run

    def spy(pool, fn, args, *rest, **kw):
        again.extend(t for t in args if isinstance(t, B.Piece) and t.taken is not None)
        return run(pool, fn, args, *rest, **kw)

    monkeypatch.setattr(B, "_run", spy)
    recipe = tmp_path / "pieces.yaml"
    recipe.write_text(PIECES)
    files = {}
    for workers in (1, 4):  # 3 shards, 4 workers: pieces of 300, 200 and 200 rows
        out = tmp_path / f"w{workers}"
        r = runner.invoke(cli, ["build", str(recipe), "--out", str(out), "--workers", str(workers), "--no-progress"])
        assert r.exit_code == 0, r.output
        files[workers] = {p.name: p.read_bytes() for p in sorted(out.iterdir())}
    assert files[1] == files[4]  # the parquet files and the manifest (rejections, counts, sha256)
    assert {p.part for p in again} and all(p.uid == 0 for p in again)  # atoms' pieces, drawn again
    man = json.loads(files[1]["manifest.json"])
    assert man["splits"]["atoms"]["rejections"]["duplicate"] > 0


# ---------------------------------------------------------------- leakage

LEAK = """\
name: leak
splits:
  train:
    generator: trees
    role: train
    options: {ops: train, depths: [1], rows: 400}
  test:
    generator: trees
    role: eval
    options: {ops: train, depths: [1], rows: 100}
"""


@pytest.mark.slow
def test_a_leaking_recipe_fails_and_writes_nothing(runner, cli, tmp_path):
    recipe = tmp_path / "leak.yaml"
    recipe.write_text(LEAK)
    result = runner.invoke(cli, ["build", str(recipe), "--out", str(tmp_path / "o")])
    assert result.exit_code == 1
    assert "leakage check failed" in result.output and "share their program with train split 'train'" in result.output
    assert not list((tmp_path / "o").glob("*.parquet")) and not (tmp_path / "o" / "manifest.json").exists()


def test_the_same_recipe_passes_when_it_allows_the_leak_and_the_manifest_says_so(runner, cli, tmp_path):
    recipe = tmp_path / "leak.yaml"
    recipe.write_text(LEAK + "leakage: {allow: [program], reason: test}\n")
    result = runner.invoke(cli, ["build", str(recipe), "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    leak = json.loads((tmp_path / "o" / "manifest.json").read_text())["leakage"]
    assert leak["ok"] and leak["checked_pairs"] == [["test", "train"]]
    assert [v["kind"] for v in leak["violations"]] == ["program"] and leak["violations"][0]["allowed"]


def test_composing_held_out_operators_in_train_data_is_a_violation(runner, cli, tmp_path):
    recipe = tmp_path / "h.yaml"
    recipe.write_text("name: h\nsplits:\n  atoms:\n    generator: atomic\n    role: train\n"
                      "    options: {ops: heldout, per_op: 3}\n"
                      "  comps:\n    generator: trees\n    role: train\n"
                      "    options: {ops: all, depths: [3], rows: 60}\n")
    result = runner.invoke(cli, ["build", str(recipe), "--out", str(tmp_path / "o")])
    assert result.exit_code == 1
    assert "train split 'comps'" in result.output and "compose a held-out operator" in result.output
    assert "'atoms'" not in result.output  # held-out operators as depth-1 atomic tasks are fine


# ---------------------------------------------------------------- failures

def test_unmeetable_constraints_fail_early_with_a_clear_message(tmp_path):
    recipe = tmp_path / "u.yaml"
    recipe.write_text("name: u\nsplits:\n  s:\n    generator: trees\n    role: eval\n    unique: program\n"
                      "    options: {ops: [func_3], depths: [1], rows: 40, max_attempts: 50}\n")
    # it ends (the timeout is a hang guard; how soon: benchmarks/bench_bounds.py)
    result = subprocess.run([sys.executable, "-m", "opgen", "build", str(recipe), "--out", str(tmp_path / "o"),
                             "--no-progress"], capture_output=True, text=True, timeout=HANG_S)
    assert result.returncode == 1, result.stderr
    assert "more distinct programs than its options can make" in result.stderr and "row 1" in result.stderr
    assert not (tmp_path / "o").exists()


class Boom(G.Generator):
    NAME = "boom"
    MANIFEST_KEY = "boom_plan"
    DEFAULTS = {"rows": 30, "fail_at": 25}
    OPTIONS_SCHEMA = {"properties": {"rows": {"type": "integer"}, "fail_at": {"type": "integer"}}}

    def count(self):
        return self.options["rows"]

    def manifest_section(self, rows):
        return {"rows_seen": rows, "fail_at": self.options["fail_at"]}

    def candidate(self, i, j):
        if i == self.options["fail_at"]:
            raise RuntimeError("generator crashed mid-build")
        return G.get("atomic")(G.get("atomic").resolve({"ops": ["func_3"], "rows": 30}), self.ctx).candidate(i, j)


@pytest.mark.slow
def test_a_failed_build_leaves_no_complete_looking_file_and_keeps_the_previous_build(tmp_path, monkeypatch):
    from opgen import build as B
    from opgen import recipe as R

    monkeypatch.setitem(G.registry(), "boom", Boom)
    text = ("name: b\nsplits:\n  s:\n    generator: boom\n    role: eval\n    shard_rows: 10\n"
            "    options: {fail_at: 99}\n")
    (tmp_path / "b.yaml").write_text(text)
    out = tmp_path / "o"
    B.build([R.load(str(tmp_path / "b.yaml"))], out)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert "manifest.json" in before and len(before) == 4
    # a generator's own manifest section lands under its MANIFEST_KEY
    assert json.loads(before["manifest.json"])["splits"]["s"]["boom_plan"] == {"rows_seen": 30, "fail_at": 99}
    (tmp_path / "b.yaml").write_text(text.replace("fail_at: 99", "fail_at: 25"))
    with pytest.raises(RuntimeError, match="crashed"):
        B.build([R.load(str(tmp_path / "b.yaml"))], out)
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert after == before


def test_a_killed_build_leaves_only_temporary_files(tmp_path):
    recipe = tmp_path / "big.yaml"
    recipe.write_text("name: big\nsplits:\n  s:\n    generator: trees\n    role: eval\n"
                      "    options: {ops: all, depths: [2], rows: 2000000}\n")
    out = tmp_path / "o"
    proc = subprocess.Popen([sys.executable, "-m", "opgen", "build", str(recipe), "--out", str(out), "--workers", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    staged = tmp_path / f"o.opgen-new-{proc.pid}" / ".opgen-build.tmp"  # the build stages beside --out
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(staged.glob("*")):
        time.sleep(0.05)
    time.sleep(0.3)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert list(staged.glob("*"))  # it was killed mid-build
    assert not list(out.glob("*.parquet")) and not (out / "manifest.json").exists()


def test_only_and_limit(runner, cli, tmp_path):
    result = runner.invoke(cli, ["build", "eval-suite", "--out", str(tmp_path / "o"), "--only",
                                 "trainop_chains_d1-20", "--limit", "7"])
    assert result.exit_code == 0, result.output
    man = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert list(man["splits"]) == ["trainop_chains_d1-20"] and man["splits"]["trainop_chains_d1-20"]["rows"] == 7
    bad = runner.invoke(cli, ["build", "--out", str(tmp_path / "p"), "--only", "nope"])
    assert bad.exit_code == 2 and "nope" in bad.output


@pytest.mark.parametrize("recipe, splits", [
    ("native-stage1", {"stage1_l1_train", "stage1_l1_test"}),
    ("native-stage2", {"stage2_l1_train", "stage2_l2_train", "stage2_l12_train", "stage2_l18_test"}),
])
def test_native_recipes_build_and_validate(runner, cli, tmp_path, recipe, splits):
    out = tmp_path / recipe
    result = runner.invoke(cli, ["build", recipe, "--out", str(out), "--limit", "150", "--workers", "1"])
    assert result.exit_code == 0, result.output
    man = json.loads((out / "manifest.json").read_text())
    assert set(man["splits"]) == splits and all(s["mode"] == "forward" for s in man["splits"].values())
    leak = man["leakage"]
    assert leak["ok"] and not [v for v in leak["violations"] if v["kind"] == "prompt"]
    assert runner.invoke(cli, ["validate", str(out)]).exit_code == 0
    if recipe == "native-stage2":
        assert set(man["splits"]["stage2_l18_test"]["counts"]["op"]) <= {
            "func_0", "func_2", "func_6", "func_7", "func_8", "func_10", "func_12", "func_14", "func_16", "func_18",
            "func_21", "func_24"}


def test_a_build_never_imports_pandas(tmp_path):
    # pyarrow's pa.array imports pandas on first use (0.2 s, 60 MiB per process); rows are built from buffers
    code = ("import sys; from pathlib import Path; from opgen import build, recipe; "
            f"build.build([recipe.load('eval-suite')], Path({str(tmp_path)!r}), limit=20); "
            "print('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_key_set_helpers_equal_numpys_set_operations():
    import numpy as np

    from opgen import leakage
    from opgen.rng import Rng

    rng = Rng("keys")
    for n, m, span in ((0, 5, 10), (7, 0, 10), (50, 40, 30), (1000, 700, 2**64 - 1), (3, 3, 1)):
        a = np.array([rng.below(span + 1) for _ in range(n)], dtype=np.uint64)
        b = np.array([rng.below(span + 1) for _ in range(m)], dtype=np.uint64)
        assert leakage.member(a, b).tolist() == np.isin(a, b).tolist()
        assert leakage.member(a, np.sort(b)).tolist() == np.isin(a, b).tolist()
        assert leakage.sorted_union(a, b).tolist() == np.union1d(a, b).tolist()


def test_a_build_without_progress_bar_imports_neither_tqdm_nor_numpy_ma(modules_after_build):
    assert modules_after_build("native-stage2", 50, ("tqdm", "numpy.ma", "multiprocessing")) == []
