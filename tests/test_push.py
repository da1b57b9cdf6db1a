"""`opgen push`: build dir → Hub tree (dry run) → datasets loads it; the push path with a fake Hub."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import huggingface_hub
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from opgen.cli import cli

from opgen import hub

# --- a real build: `opgen build` on a tiny recipe ---------------------------------------------------

REAL_RECIPE = """\
name: push-e2e
description: A tiny build for the push tests.
seed: 5
defaults: {role: eval, kind: rl, prompt_format: closed_book, answer_format: ra, unique: task}
leakage: {allow: [program], reason: "atomic training tasks may share depth-1 programs with the eval trees"}
splits:
  heldout_trees_d1-3:
    family: heldout_trees
    generator: trees
    options: {ops: heldout, depths: [1, 2, 3], per_depth: 4}
  heldout_trees_d4:
    family: heldout_trees
    generator: trees
    options: {ops: heldout, depths: [4], per_depth: 3}
  probe_1b:
    family: probe_1b
    generator: probe_1b
    options: {targets: [func_24], r: [0, 2], others: [train], per_condition: 3}
  forward-atomic:
    family: codeio_forward
    description: forward prediction over the held-out operators
    generator: atomic
    prompt_format: forward
    answer_format: json_output
    options: {ops: heldout, rows: 5}
  train:
    family: sft_eco
    generator: sft_cell
    role: train
    kind: sft
    shard_rows: 6
    options:
      atomic: {pool: e2e-atomic, per_op: 1, ops: all}
      width: [1, 3]
      compositions: {pool: e2e-comps, rows: 5, ops: train, depths: [2, 3]}
"""


def expected_name(manifest: dict, name: str) -> str:
    """The Hub split name docs/hub.md promises: a family's only split of role train is `train`, its
    only eval split `test`; any other keeps its build name with dashes as underscores."""
    info = manifest["splits"][name]
    same = [s for s in manifest["splits"].values() if s["family"] == info["family"] and s["role"] == info["role"]]
    return {"train": "train", "eval": "test"}[info["role"]] if len(same) == 1 else name.replace("-", "_")


def expected_tree(build: Path) -> list[str]:
    """The tree docs/hub.md promises for a build, computed from its manifest alone."""
    manifest = json.loads((build / "manifest.json").read_text())
    paths = ["README.md", "manifest.json"]
    for name, info in manifest["splits"].items():
        n = len(info["files"])
        hub_split = expected_name(manifest, name)
        paths += [f"data/{info['family']}/{hub_split}-{i:05d}-of-{n:05d}.parquet" for i in range(n)]
    return sorted(paths)


def real_build(root: Path) -> Path:
    """`opgen build` of REAL_RECIPE into root/build."""
    recipe = root / "push-e2e.yaml"
    recipe.write_text(REAL_RECIPE)
    out = root / "build"
    result = CliRunner().invoke(cli, ["build", str(recipe), "--out", str(out), "--workers", "1", "--no-progress"])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return real_build(tmp_path_factory.mktemp("real"))


# --- a build directory written by hand, following docs/contracts.md -------------------------------
# (for what a real build cannot show: shards, mixed kinds, damaged files, hostile manifests)

_MSGS = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
_EXTRA = pa.struct([
    ("index", pa.int64()), ("split", pa.string()), ("family", pa.string()), ("depth", pa.int64()),
    ("k", pa.int64()), ("ops", pa.list_(pa.string())), ("structure", pa.string()), ("prompt_format", pa.string()),
    ("answer_format", pa.string()), ("mode", pa.string()), ("condition", pa.string()), ("n_tasks", pa.int64()),
    ("assistant_prefix", pa.string()), ("opgen_version", pa.string()), ("recipe", pa.string()),
    ("row_id", pa.string()), ("target_op", pa.string()), ("tail_chars", pa.int64()), ("tail_calls", pa.int64()),
])
RL_SCHEMA = pa.schema([
    ("data_source", pa.string()), ("prompt", _MSGS), ("ability", pa.string()),
    ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])), ("extra_info", _EXTRA),
])
SFT_SCHEMA = pa.schema(list(RL_SCHEMA) + [pa.field("messages", _MSGS), pa.field("response", pa.string()),
                                          pa.field("prompt_text", pa.string())])


def _rows(split: str, family: str, kind: str, n: int, prefix_from: int | None = None) -> list[dict]:
    out = []
    for i in range(n):
        x = f"in{i}"
        truth = {"mode": "program", "ops": ["func_3"],
                 "tasks": [{"entry": "main_solution", "expr": "func_3(x)", "input": x, "output": "".join(sorted(x)),
                            "ops": ["func_3"], "depth": 1}],
                 "ref_code": "def main_solution(x):\n    return func_3(x)", "ref_input": {"x": x},
                 "ref_output": "".join(sorted(x)), "funcname": "main_solution"}
        prompt = [{"role": "user", "content": f"{split} row {i}: write main_solution for func_3(x)"}]
        row = {"data_source": f"opgen/{family}", "prompt": prompt, "ability": "code",
               "reward_model": {"style": "rule", "ground_truth": json.dumps(truth)},
               "extra_info": {"index": i, "split": split, "family": family, "depth": 1 + i % 2, "k": 1,
                              "ops": ["func_3"], "structure": "atomic", "prompt_format": "closed_book",
                              "answer_format": "ra", "mode": "program", "condition": "", "n_tasks": 1,
                              "assistant_prefix": "" if prefix_from is None or i < prefix_from else
                              f"Recall func_3: sort the characters (row {i})\n",
                              "opgen_version": "0.1.0", "recipe": "hand",
                              "row_id": f"{i:016x}", "target_op": "", "tail_chars": -1, "tail_calls": -1}}
        if kind == "sft":
            answer = f"Recall func_3: sort the characters\n```python\ndef func_3(s):\n    return s\n```\n{i}"
            row |= {"messages": prompt + [{"role": "assistant", "content": answer}], "response": answer,
                    "prompt_text": prompt[0]["content"]}
        out.append(row)
    return out


def make_build(root: Path, splits: list[tuple[str, str, str, int, int]], prefix_from: int | None = None) -> Path:
    """splits: (split name, family, kind, rows, shards) → a build directory with its manifest; rows from
    ``prefix_from`` on carry a teacher-forced assistant prefix."""
    root.mkdir(parents=True, exist_ok=True)
    manifest = {"opgen_version": "0.1.0", "seed": 7,
                "recipes": [{"name": "hand", "path": "hand.yaml", "sha256": "a" * 64,
                             "resolved": {"name": "hand", "seed": 7, "splits": {"probe_1b": {"generator": "probe"}}}}],
                "splits": {}, "leakage": {"ok": True, "checked_pairs": 3, "violations": [], "allowed": []}}
    for split, family, kind, n, shards in splits:
        rows = _rows(split, family, kind, n, prefix_from)
        per = -(-n // shards)
        files = []
        for k in range(shards):
            name = f"{split}.parquet" if shards == 1 else f"{split}-{k:05d}-of-{shards:05d}.parquet"
            part = rows[k * per:(k + 1) * per]
            pq.write_table(pa.Table.from_pylist(part, schema=SFT_SCHEMA if kind == "sft" else RL_SCHEMA), root / name)
            data = (root / name).read_bytes()
            files.append({"path": name, "rows": len(part), "sha256": hashlib.sha256(data).hexdigest(),
                          "bytes": len(data)})
        depth = {"1": (n + 1) // 2, "2": n // 2}
        manifest["splits"][split] = {
            "family": family, "kind": kind, "mode": "program", "prompt_format": "closed_book",
            "answer_format": "ra", "rows": n, "files": files,
            "counts": {"depth": depth, "k": {"1": n}, "op": {"func_3": n}, "condition": {}},
            "output_length": {"min": 3, "median": 3, "p99": 4, "max": 4}, "rejections": {}}
    (root / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return root


HAND_SPLITS = [
    ("heldout_trees_d1-8", "heldout_trees", "rl", 12, 1),
    ("probe_1b", "probe_1b", "rl", 9, 2),
    ("train", "sft_eco", "sft", 10, 3),
    ("validation", "sft_eco", "sft", 4, 1),
]
HAND_TREE = [
    "README.md",
    "data/heldout_trees/heldout_trees_d1_8-00000-of-00001.parquet",
    "data/probe_1b/probe_1b-00000-of-00002.parquet",
    "data/probe_1b/probe_1b-00001-of-00002.parquet",
    "data/sft_eco/train-00000-of-00003.parquet",
    "data/sft_eco/train-00001-of-00003.parquet",
    "data/sft_eco/train-00002-of-00003.parquet",
    "data/sft_eco/validation-00000-of-00001.parquet",
    "manifest.json",
]


@pytest.fixture
def hand_build(tmp_path: Path) -> Path:
    return make_build(tmp_path / "build", HAND_SPLITS)


def run(*args: str):
    return CliRunner().invoke(cli, ["push", *map(str, args)], catch_exceptions=False)


def load_with_datasets(tree: Path, tmp: Path) -> dict:
    """Every config of ``tree`` loaded by `datasets` offline, in a fresh interpreter (datasets reads
    its offline switch and cache locations at import): {config: {split: [rows, columns]}}."""
    script = textwrap.dedent("""
        import json, sys, datasets
        tree, cache = sys.argv[1], sys.argv[2]
        out = {}
        for config in datasets.get_dataset_config_names(tree):
            d = datasets.load_dataset(tree, config, cache_dir=cache)
            out[config] = {split: [ds.num_rows, ds.column_names] for split, ds in d.items()}
        print(json.dumps(out))
    """)
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp / "hf_home"),
           "HF_DATASETS_CACHE": str(tmp / "hf_cache")}
    proc = subprocess.run([sys.executable, "-c", script, str(tree), str(tmp / "hf_cache")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def files_under(root: Path) -> dict[str, bytes]:
    return {rel: (root / rel).read_bytes() for rel in hub.tree_files(root)}


# --- the dry-run tree ---------------------------------------------------------------------------------

@pytest.mark.slow
def test_real_build_dry_run_loads_config_by_config(built: Path, tmp_path: Path):
    from opgen import rows

    tree = tmp_path / "tree"
    result = run(built, "--repo-id", "org/opgen-e2e", "--dry-run", tree)
    assert result.exit_code == 0, result.output
    assert hub.tree_files(tree) == expected_tree(built)
    assert "data/sft_eco/train-00001-of-" in "\n".join(hub.tree_files(tree)), "shard_rows: 6 gives several shards"
    manifest = json.loads((built / "manifest.json").read_text())
    expected: dict[str, dict] = {}
    for name, info in manifest["splits"].items():
        expected.setdefault(info["family"], {})[expected_name(manifest, name)] = [info["rows"],
                                                                                 rows.schema(info["kind"]).names]
    assert sorted(expected) == ["codeio_forward", "heldout_trees", "probe_1b", "sft_eco"]
    assert expected["heldout_trees"]["heldout_trees_d4"][0] == 3 and expected["probe_1b"]["test"][0] == 6
    assert sorted(expected["sft_eco"]) == ["train"] and sorted(expected["codeio_forward"]) == ["test"]
    assert load_with_datasets(tree, tmp_path) == expected



@pytest.mark.slow
def test_dry_run_writes_the_tree_and_datasets_loads_every_config(hand_build: Path, tmp_path: Path):
    tree = tmp_path / "tree"
    result = run(hand_build, "--repo-id", "org/opgen-hand", "--dry-run", tree)
    assert result.exit_code == 0, result.output
    assert "nothing uploaded" in result.output
    assert hub.tree_files(tree) == HAND_TREE
    loaded = load_with_datasets(tree, tmp_path)
    rl_cols = RL_SCHEMA.names
    sft_cols = SFT_SCHEMA.names
    assert loaded == {
        "heldout_trees": {"heldout_trees_d1_8": [12, rl_cols]},
        "probe_1b": {"probe_1b": [9, rl_cols]},
        "sft_eco": {"train": [10, sft_cols], "validation": [4, sft_cols]},
    }


def test_tree_holds_the_build_files_byte_for_byte(hand_build: Path, tmp_path: Path):
    tree = tmp_path / "tree"
    assert run(hand_build, "--repo-id", "org/x", "--dry-run", tree).exit_code == 0
    assert (tree / "manifest.json").read_bytes() == (hand_build / "manifest.json").read_bytes()
    placed = hub.plan(hand_build).placements()
    assert len(placed) == 7
    for f, rel in placed:
        assert (tree / rel).read_bytes() == (hand_build / f.path).read_bytes(), rel


def test_dry_run_is_deterministic(hand_build: Path, tmp_path: Path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert run(hand_build, "--repo-id", "org/x", "--dry-run", a).exit_code == 0
    assert run(hand_build, "--repo-id", "org/x", "--dry-run", b).exit_code == 0
    assert files_under(a) == files_under(b)


@pytest.mark.slow
def test_family_with_two_row_kinds_becomes_two_configs(tmp_path: Path):
    build = make_build(tmp_path / "build", [("train", "cell", "sft", 5, 1), ("eval", "cell", "rl", 3, 1)])
    tree = tmp_path / "tree"
    assert run(build, "--repo-id", "org/x", "--dry-run", tree).exit_code == 0
    assert hub.tree_files(tree) == ["README.md", "data/cell_rl/eval-00000-of-00001.parquet",
                                    "data/cell_sft/train-00000-of-00001.parquet", "manifest.json"]
    loaded = load_with_datasets(tree, tmp_path)
    assert loaded == {"cell_rl": {"eval": [3, RL_SCHEMA.names]}, "cell_sft": {"train": [5, SFT_SCHEMA.names]}}


def test_dry_run_into_existing_non_empty_dir_is_refused(hand_build: Path, tmp_path: Path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    result = run(hand_build, "--repo-id", "org/x", "--dry-run", out)
    assert result.exit_code == 1
    assert "not an empty directory" in result.output and str(out) in result.output
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_dry_run_replaces_its_own_tree_only_with_force_and_a_foreign_folder_never(hand_build: Path,
                                                                                   tmp_path: Path):
    tree = tmp_path / "tree"
    assert run(hand_build, "--repo-id", "org/x", "--dry-run", tree).exit_code == 0
    before = {p: (tree / p).read_bytes() for p in hub.tree_files(tree)}
    result = run(hand_build, "--repo-id", "org/y", "--dry-run", tree)
    assert result.exit_code == 1 and "pass --force" in result.output, result.output
    assert {p: (tree / p).read_bytes() for p in hub.tree_files(tree)} == before
    result = run(hand_build, "--repo-id", "org/y", "--dry-run", tree, "--force")
    assert result.exit_code == 0, result.output
    assert hub.tree_files(tree) == HAND_TREE and (tree / "README.md").read_bytes() != before["README.md"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["build", "tree"]  # no staging, no lock left
    # a folder that looks like a tree but holds one more file, or has no opgen manifest: never replaced
    (tree / "notes.md").write_text("mine")
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("mine")
    for out in (tree, project):
        result = run(hand_build, "--repo-id", "org/x", "--dry-run", out, "--force")
        assert result.exit_code == 1 and "never replaced" in result.output, result.output
    assert (tree / "notes.md").read_text() == "mine" and [p.name for p in project.iterdir()] == ["README.md"]
    assert run(hand_build, "--repo-id", "org/x", "--force").exit_code == 2  # --force needs --dry-run


def _dry_run(build: Path, tree: Path, *extra: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "opgen", "push", str(build), "--repo-id", "org/y",
                             "--dry-run", str(tree), *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **(env or {})})


def _wait_stopped(proc: subprocess.Popen) -> None:
    """Until ``proc`` stopped itself (SIGSTOP, state T); polled, not timed."""
    while Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
        assert proc.poll() is None, proc.communicate()
        os.sched_yield()


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads a process's state from /proc")
def test_a_concurrent_dry_run_refuses_and_a_killed_one_leaves_no_half_tree(hand_build: Path, tmp_path: Path):
    tree = tmp_path / "tree"
    assert run(hand_build, "--repo-id", "org/x", "--dry-run", tree).exit_code == 0
    before = {p: (tree / p).read_bytes() for p in hub.tree_files(tree)}
    # stops itself holding the lock, its new tree staged beside the old one
    first = _dry_run(hand_build, tree, "--force", env={"OPGEN_FAULT": "staged:STOP"})
    try:
        _wait_stopped(first)
        second = _dry_run(hand_build, tree, "--force")
        _, err = second.communicate(timeout=120)
        assert second.returncode == 1 and "another opgen push --dry-run" in err and str(first.pid) in err, err
    finally:
        first.kill()
        first.communicate(timeout=60)
    assert first.returncode == -9
    assert {p: (tree / p).read_bytes() for p in hub.tree_files(tree)} == before  # the old tree, whole
    assert [p.name for p in tmp_path.glob("tree.opgen-new-*")]  # the killed run's staging directory ...
    third = _dry_run(hand_build, tree, "--force")
    _, err = third.communicate(timeout=120)
    assert third.returncode == 0, err
    assert hub.tree_files(tree) == HAND_TREE and (tree / "README.md").read_bytes() != before["README.md"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["build", "tree"]  # ... removed, and the lock


@pytest.mark.parametrize("sig, code", [("INT", 130), ("TERM", 143)])
def test_a_dry_run_stopped_by_a_signal_exits_128_plus_it_and_leaves_the_old_tree(hand_build: Path, tmp_path: Path,
                                                                                sig: str, code: int):
    tree = tmp_path / "tree"
    assert run(hand_build, "--repo-id", "org/x", "--dry-run", tree).exit_code == 0
    before = {p: (tree / p).read_bytes() for p in hub.tree_files(tree)}
    proc = _dry_run(hand_build, tree, "--force", env={"OPGEN_FAULT": f"staged:{sig}"})
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code and "Traceback" not in err and "is as it was" in err, err
    assert {p: (tree / p).read_bytes() for p in hub.tree_files(tree)} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["build", "tree"]  # no staging, no lock left


def test_a_failing_dry_run_leaves_the_earlier_tree_as_it_was(hand_build: Path, tmp_path: Path):
    tree = tmp_path / "tree"
    assert run(hand_build, "--repo-id", "org/x", "--dry-run", tree).exit_code == 0
    before = {p: (tree / p).read_bytes() for p in hub.tree_files(tree)}
    victim = next(p for p in sorted(hand_build.rglob("*.parquet")))
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))  # its sha256 is no longer the manifest's: the copy fails midway
    result = run(hand_build, "--repo-id", "org/y", "--dry-run", tree, "--force")
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert {p: (tree / p).read_bytes() for p in hub.tree_files(tree)} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["build", "tree"]  # no staging, no lock left


def test_dry_run_into_empty_dir_is_allowed(hand_build: Path, tmp_path: Path):
    out = tmp_path / "out"
    out.mkdir()
    assert run(hand_build, "--repo-id", "org/x", "--dry-run", out).exit_code == 0
    assert hub.tree_files(out) == HAND_TREE


# --- refusals -------------------------------------------------------------------------------------------

def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF
    path.write_bytes(bytes(data))


def _no_leftovers(parent: Path, name: str) -> None:
    assert not (parent / name).exists()
    assert not [p for p in parent.iterdir() if p.name.startswith(f".{name}.")], "temporary tree left behind"


def test_corrupted_file_is_refused_naming_it(hand_build: Path, tmp_path: Path):
    _flip_last_byte(hand_build / "train-00001-of-00003.parquet")
    result = run(hand_build, "--repo-id", "org/x", "--dry-run", tmp_path / "tree")
    assert result.exit_code == 1
    assert "train-00001-of-00003.parquet" in result.output and "sha256" in result.output
    _no_leftovers(tmp_path, "tree")


def test_missing_file_is_refused(hand_build: Path, tmp_path: Path):
    (hand_build / "probe_1b-00001-of-00002.parquet").unlink()
    result = run(hand_build, "--repo-id", "org/x", "--dry-run", tmp_path / "tree")
    assert result.exit_code == 1
    assert "probe_1b-00001-of-00002.parquet" in result.output and "missing" in result.output
    _no_leftovers(tmp_path, "tree")


def _edit_manifest(build: Path, edit) -> None:
    manifest = json.loads((build / "manifest.json").read_text())
    edit(manifest)
    (build / "manifest.json").write_text(json.dumps(manifest))


def test_manifest_row_count_disagreeing_with_the_file_is_refused(hand_build: Path, tmp_path: Path):
    def edit(m):
        m["splits"]["validation"]["rows"] = 5
        m["splits"]["validation"]["files"][0]["rows"] = 5
    _edit_manifest(hand_build, edit)
    result = run(hand_build, "--repo-id", "org/x", "--dry-run", tmp_path / "tree")
    assert result.exit_code == 1
    assert "validation.parquet" in result.output and "4 rows" in result.output


def test_manifest_pointing_outside_the_build_is_refused(hand_build: Path, tmp_path: Path):
    (tmp_path / "secret.parquet").write_bytes(b"not yours")
    _edit_manifest(hand_build, lambda m: m["splits"]["probe_1b"]["files"][0].update(path="../secret.parquet"))
    result = run(hand_build, "--repo-id", "org/x", "--dry-run", tmp_path / "tree")
    assert result.exit_code == 1
    assert "splits.probe_1b.files[0].path" in result.output and "outside the build" in result.output


def test_symlink_leading_outside_the_build_is_refused(hand_build: Path, tmp_path: Path):
    outside = tmp_path / "elsewhere.parquet"
    target = hand_build / "validation.parquet"
    outside.write_bytes(target.read_bytes())  # same bytes, so only the location can refuse it
    target.unlink()
    target.symlink_to(outside)
    result = run(hand_build, "--repo-id", "org/x", "--dry-run", tmp_path / "tree")
    assert result.exit_code == 1
    assert "'validation.parquet' points outside the build directory" in result.output


def test_manifest_missing_field_is_named(hand_build: Path, tmp_path: Path):
    _edit_manifest(hand_build, lambda m: m["splits"]["train"].pop("family"))
    result = run(hand_build, "--repo-id", "org/x", "--dry-run", tmp_path / "tree")
    assert result.exit_code == 1
    assert "splits.train" in result.output and "'family'" in result.output


def test_split_names_colliding_on_the_hub_are_refused(tmp_path: Path):
    build = make_build(tmp_path / "build", [("a-b", "fam", "rl", 2, 1), ("a_b", "fam", "rl", 2, 1)])
    result = run(build, "--repo-id", "org/x", "--dry-run", tmp_path / "tree")
    assert result.exit_code == 1
    assert "'a-b'" in result.output and "'a_b'" in result.output


def test_families_colliding_on_the_hub_are_refused(tmp_path: Path):
    # "cell" mixes kinds and becomes cell_rl + cell_sft; a family called cell_rl would share a config
    build = make_build(tmp_path / "build", [("a", "cell", "rl", 2, 1), ("b", "cell", "sft", 2, 1),
                                            ("c", "cell_rl", "rl", 2, 1)])
    result = run(build, "--repo-id", "org/x", "--dry-run", tmp_path / "tree")
    assert result.exit_code == 1
    assert "'cell'" in result.output and "'cell_rl'" in result.output and "config" in result.output


def test_not_a_build_directory(tmp_path: Path):
    result = run(tmp_path, "--repo-id", "org/x", "--dry-run", tmp_path / "tree")
    assert result.exit_code == 1
    assert "manifest.json" in result.output


@pytest.mark.parametrize("repo_id", ["noslash", "org/", "org/a--b", "a/b/c", "org/name.git"])
def test_bad_repo_id_is_a_usage_error(hand_build: Path, tmp_path: Path, repo_id: str):
    result = run(hand_build, "--repo-id", repo_id, "--dry-run", tmp_path / "tree")
    assert result.exit_code == 2
    assert "--repo-id" in result.output


# --- the push path, against a fake Hub -------------------------------------------------------------------

class FakeHub:
    """Stands in for huggingface_hub.HfApi: records calls; create_commit reads what it is given,
    while the files still exist (as the real upload does)."""

    calls: list[tuple[str, dict]] = []
    commits: list[dict] = []
    tokens: list[str] = []
    fail_commit = False

    def __init__(self, token=None, **_):
        FakeHub.tokens.append(token)

    def create_repo(self, repo_id, **kw):
        FakeHub.calls.append(("create_repo", {"repo_id": repo_id, **kw}))
        return f"https://huggingface.co/datasets/{repo_id}"

    def create_branch(self, repo_id, **kw):
        FakeHub.calls.append(("create_branch", {"repo_id": repo_id, **kw}))

    def create_commit(self, repo_id, operations, **kw):
        FakeHub.calls.append(("create_commit", {"repo_id": repo_id, **kw}))
        if FakeHub.fail_commit:
            raise RuntimeError("503 Service Unavailable")
        ops = list(operations)
        FakeHub.commits.append({"repo_id": repo_id, **kw,
                                "files": [(op.path_in_repo, Path(op.path_or_fileobj).read_bytes()) for op in ops]})
        return huggingface_hub.CommitInfo(
            commit_url=f"https://huggingface.co/datasets/{repo_id}/commit/abc123", commit_message="m",
            commit_description="", oid="abc123")


@pytest.fixture
def fake_hub(monkeypatch: pytest.MonkeyPatch):
    FakeHub.calls, FakeHub.commits, FakeHub.tokens, FakeHub.fail_commit = [], [], [], False
    monkeypatch.setattr(huggingface_hub, "HfApi", FakeHub)
    monkeypatch.delenv("HF_OIDC_RESOURCE", raising=False)
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    return FakeHub


def test_push_is_one_commit_of_the_dry_run_tree(built: Path, tmp_path: Path, fake_hub):
    tree = tmp_path / "tree"
    assert run(built, "--repo-id", "org/opgen-e2e", "--dry-run", tree).exit_code == 0
    assert fake_hub.calls == [], "a dry run must not talk to the Hub"

    result = run(built, "--repo-id", "org/opgen-e2e")
    assert result.exit_code == 0, result.output
    assert "one commit" in result.output and "commit/abc123" in result.output
    assert [name for name, _ in fake_hub.calls] == ["create_repo", "create_commit"]
    assert fake_hub.calls[0][1] == {"repo_id": "org/opgen-e2e", "repo_type": "dataset", "private": False,
                                    "exist_ok": True}
    (commit,) = fake_hub.commits
    assert commit["repo_type"] == "dataset" and commit["revision"] is None
    paths = [p for p, _ in commit["files"]]
    assert len(paths) == len(set(paths)), "every file once"
    assert sorted(paths) == expected_tree(built)
    assert dict(commit["files"]) == files_under(tree), "uploaded bytes are the dry-run tree's bytes"
    assert fake_hub.tokens == ["hf_test_token"]


def test_private_and_revision_are_passed_through(hand_build: Path, fake_hub):
    result = run(hand_build, "--repo-id", "org/x", "--private", "--revision", "v2")
    assert result.exit_code == 0, result.output
    assert "org/x@v2" in result.output
    assert [name for name, _ in fake_hub.calls] == ["create_repo", "create_branch", "create_commit"]
    assert fake_hub.calls[0][1]["private"] is True
    assert fake_hub.calls[1][1] == {"repo_id": "org/x", "branch": "v2", "repo_type": "dataset", "exist_ok": True}
    assert fake_hub.commits[0]["revision"] == "v2"


@pytest.mark.slow
def test_push_refuses_a_corrupted_build_before_touching_the_hub(tmp_path: Path, fake_hub):
    build = real_build(tmp_path)
    victim = json.loads((build / "manifest.json").read_text())["splits"]["train"]["files"][1]["path"]
    _flip_last_byte(build / victim)
    result = run(build, "--repo-id", "org/x")
    assert result.exit_code == 1
    assert victim in result.output and "sha256" in result.output
    assert fake_hub.calls == []


def test_failed_commit_is_a_clear_failure(hand_build: Path, fake_hub):
    fake_hub.fail_commit = True
    result = run(hand_build, "--repo-id", "org/x")
    assert result.exit_code == 1
    assert "push to org/x failed" in result.output and "503" in result.output
    assert fake_hub.commits == []


@pytest.fixture
def login_cache(tmp_path: Path, monkeypatch, fake_hub) -> Path:
    """No HF_TOKEN: huggingface_hub's login cache, here a file no test has written yet, is all it has."""
    monkeypatch.delenv("HF_TOKEN")
    cache = tmp_path / "token"
    monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(cache))
    return cache


def test_no_token_says_how_to_log_in(hand_build: Path, login_cache: Path, fake_hub):
    result = run(hand_build, "--repo-id", "org/x")
    assert result.exit_code == 1
    assert "hf auth login" in result.output and "HF_TOKEN" in result.output
    assert fake_hub.calls == []


def test_token_from_the_login_cache(hand_build: Path, login_cache: Path, fake_hub):
    login_cache.write_text("hf_cached_token\n")
    result = run(hand_build, "--repo-id", "org/x")
    assert result.exit_code == 0, result.output
    assert fake_hub.tokens == ["hf_cached_token"]


@pytest.mark.slow
def test_tree_is_identical_across_hash_seeds(hand_build: Path, tmp_path: Path):
    trees = []
    for seed in ("0", "12345"):
        out = tmp_path / f"tree{seed}"
        argv = ["push", str(hand_build), "--repo-id", "org/x", "--dry-run", str(out)]
        proc = subprocess.run([sys.executable, "-c", "from opgen.cli import main; main()", *argv],
                              capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": seed}, timeout=120)
        assert proc.returncode == 0, proc.stderr
        trees.append(files_under(out))
    assert trees[0] == trees[1]


@pytest.mark.slow
def test_hub_conventions_default_config_role_splits_and_dataset_info(built: Path, tmp_path: Path):
    # datasets, offline, on the dry-run tree: no config (the default), each config, split="test"/"train".
    tree = tmp_path / "tree"
    assert run(built, "--repo-id", "org/opgen-e2e", "--dry-run", tree).exit_code == 0
    script = textwrap.dedent("""
        import json, sys, datasets
        tree, cache = sys.argv[1], sys.argv[2]
        out = {"default": {k: v.num_rows for k, v in datasets.load_dataset(tree, cache_dir=cache).items()},
               "train": datasets.load_dataset(tree, "sft_eco", split="train", cache_dir=cache).num_rows,
               "test": datasets.load_dataset(tree, "probe_1b", split="test", cache_dir=cache).num_rows,
               "no_config_split": datasets.load_dataset(tree, split="heldout_trees_d4", cache_dir=cache).num_rows,
               "features": {}}
        for config in datasets.get_dataset_config_names(tree):
            builder = datasets.load_dataset_builder(tree, config, cache_dir=cache)
            out["features"][config] = builder.info.features._to_yaml_list()
        print(json.dumps(out))
    """)
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf_home")}
    proc = subprocess.run([sys.executable, "-c", script, str(tree), str(tmp_path / "hf_cache")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    manifest = json.loads((built / "manifest.json").read_text())
    rows = {name: info["rows"] for name, info in manifest["splits"].items()}
    # The default config is the build's first split's family (heldout_trees: d1-3 and d4, two eval splits).
    assert got["default"] == {"heldout_trees_d1_3": rows["heldout_trees_d1-3"],
                              "heldout_trees_d4": rows["heldout_trees_d4"]}
    assert got["no_config_split"] == rows["heldout_trees_d4"]
    assert got["train"] == rows["train"] and got["test"] == rows["probe_1b"]
    import yaml

    meta = yaml.safe_load((tree / "README.md").read_text().split("---\n")[1])
    assert [c["config_name"] for c in meta["configs"] if c.get("default")] == ["heldout_trees"]
    info = {d["config_name"]: d for d in meta["dataset_info"]}
    assert sorted(info) == sorted(got["features"])
    for config, d in info.items():
        # the card's features are datasets' own spelling of the files' schema
        assert d["features"] == got["features"][config], config
        files = [f for s in hub.plan(built).splits_of(config) for f in s.files]
        assert d["download_size"] == sum(f.bytes for f in files)
        assert sum(x["num_examples"] for x in d["splits"]) == sum(f.rows for f in files)
        assert all(x["num_bytes"] > 0 for x in d["splits"])
