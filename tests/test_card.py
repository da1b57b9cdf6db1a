"""The dataset card of a Hub tree: front matter the Hub reads, prose built from the build's real rows."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner
from opgen.cli import cli
from test_push import HAND_SPLITS, make_build, real_build

from opgen import card, hub
from opgen import ops as library


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("card")
    build = make_build(root / "build", HAND_SPLITS)
    out = root / "tree"
    result = CliRunner().invoke(cli, ["push", str(build), "--repo-id", "org/opgen-hand", "--dry-run", str(out),
                                      "--pretty-name", "Hand-made opgen build", "--license", "cc-by-4.0"])
    assert result.exit_code == 0, result.output
    return out


def _split_card(text: str) -> tuple[dict, str]:
    m = re.match(r"---\n(.*?)\n---\n(.*)", text, re.S)
    assert m, "the card must open with YAML front matter"
    return yaml.safe_load(m.group(1)), m.group(2)


def test_front_matter_parses_and_lists_every_config_and_split(tree: Path):
    meta, _ = _split_card((tree / "README.md").read_text())
    assert meta["pretty_name"] == "Hand-made opgen build"
    assert meta["license"] == "cc-by-4.0"
    assert meta["task_categories"] == ["text-generation"]
    assert "compositional-generalization" in meta["tags"]
    configs = {c["config_name"]: c["data_files"] for c in meta["configs"]}
    assert sorted(configs) == ["heldout_trees", "probe_1b", "sft_eco"]
    assert [d["split"] for d in configs["sft_eco"]] == ["train", "validation"]
    listed = []
    for data_files in configs.values():
        for d in data_files:
            assert "-" not in d["split"]
            listed += d["path"] if isinstance(d["path"], list) else [d["path"]]
    data_files = [p for p in hub.tree_files(tree) if p.startswith("data/")]
    assert sorted(listed) == data_files, "every data file listed once, and nothing else"


def test_configs_table_keeps_the_study_file_names(tree: Path):
    _, body = _split_card((tree / "README.md").read_text())
    assert "`heldout_trees_d1-8.parquet`" in body
    assert "eval/heldout_trees_d1-8.parquet" in body  # what the config serves in the study
    assert "sft-eco-s1" in body and "eval/probe_1b.parquet" in body


def test_operator_table_comes_from_the_library(tree: Path):
    body = (tree / "README.md").read_text()
    for op in library.OPERATORS:
        line = next(ln for ln in body.splitlines() if ln.startswith(f"| `{op.id}` |"))
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[2:] == [str(op.arity), op.split, op.gloss]


def _first_row(tree: Path, rel: str) -> dict:
    return pq.read_table(tree / rel).slice(0, 1).to_pylist()[0]


def test_format_examples_are_real_rows(tree: Path):
    body = (tree / "README.md").read_text()
    rl = _first_row(tree, "data/heldout_trees/heldout_trees_d1_8-00000-of-00001.parquet")
    sft = _first_row(tree, "data/sft_eco/train-00000-of-00003.parquet")
    assert rl["prompt"][0]["content"] in body
    assert json.dumps(json.loads(rl["reward_model"]["ground_truth"]), indent=2) in body
    # The gold answer holds a ```python block: the card must fence it with a longer fence.
    assert f"````\n{sft['response']}\n````" in body


def test_verl_section_points_at_real_files_and_opgen_reward(tree: Path):
    body = (tree / "README.md").read_text()
    assert "reward.custom_reward_function.path=pkg://opgen.reward" in body
    assert "reward.custom_reward_function.name=compute_score" in body
    # and the top-level keys of verl before 0.7.1, with the reward's file path
    assert 'custom_reward_function.path=$(python -c "import opgen.reward as r; print(r.__file__)")' in body
    assert "data.messages_key=messages" in body
    mentioned = set(re.findall(r"opgen-hand/(data/[\w/.-]+\.parquet)", body))
    assert mentioned and mentioned <= set(hub.tree_files(tree))


def test_loading_snippet_names_the_repo_and_every_config(tree: Path):
    body = (tree / "README.md").read_text()
    for config in ("heldout_trees", "probe_1b", "sft_eco"):
        assert f'load_dataset("org/opgen-hand", "{config}")' in body


def test_counts_histograms_and_hashes(tree: Path):
    body = (tree / "README.md").read_text()
    manifest = json.loads((tree / "manifest.json").read_text())
    for info in manifest["splits"].values():
        for f in info["files"]:
            assert f"`{f['sha256']}`" in body, f["path"]
    assert hashlib.sha256((tree / "manifest.json").read_bytes()).hexdigest() in body
    # heldout_trees_d1-8 has 12 rows: 6 of depth 1 and 6 of depth 2, drawn as equal full bars
    section = body.split("### `heldout_trees` / `heldout_trees_d1_8` — 12 rows")[1].split("###")[0]
    bars = re.findall(r"^\s+(\d+)\s+(\d+)\s+(█+)$", section, re.M)
    assert [(d, n) for d, n, _ in bars] == [("1", "6"), ("2", "6")]
    assert all(len(b) == 40 for _, _, b in bars)
    assert "a" * 64 in body  # the recipe's sha256
    resolved = re.search(r"resolved</summary>\n\n```yaml\n(.*?)```", body, re.S).group(1)
    assert yaml.safe_load(resolved) == manifest["recipes"][0]["resolved"]


def test_describe_knows_the_study_families():
    assert card.describe("sft_c4b")[1] == "SFT cell sft-c4b-s1"
    assert card.describe("sft_c4")[1] == "SFT cell sft-c4-s1"
    assert card.describe("heldout_chains")[1].startswith("eval/heldout_chains_d1-20.parquet")
    assert card.describe("my_own_family") == ("", "")


@pytest.mark.parametrize("text", ["plain", "```python\nx\n```", "````\n`````", ""])
def test_fence_is_longer_than_any_backtick_run_inside(text: str):
    fenced = card._fence(text)
    outer = re.match(r"`+", fenced).group(0)
    inner = max((len(m) for m in re.findall(r"`+", text)), default=0)
    assert len(outer) > inner and len(outer) >= 3
    assert fenced.endswith("\n" + outer)


def test_unknown_family_gets_a_generic_description(tmp_path: Path):
    build = make_build(tmp_path / "build", [("only", "my-family", "rl", 3, 1)])
    out = tmp_path / "tree"
    hub.write_tree(build, out, "org/x")
    meta, body = _split_card((out / "README.md").read_text())
    assert [c["config_name"] for c in meta["configs"]] == ["my_family"]
    assert "**`my_family`** (family `my-family`): program rows (rl): write a standalone main_solution" in body
    assert meta["pretty_name"] == "opgen hand"


def test_a_split_description_in_the_recipe_describes_its_config(tmp_path: Path):
    build = make_build(tmp_path / "build", [("only", "my-family", "rl", 3, 1)])
    manifest = json.loads((build / "manifest.json").read_text())
    manifest["recipes"][0]["resolved"]["splits"] = {"only": {"description": "rows for a side study"}}
    (build / "manifest.json").write_text(json.dumps(manifest))
    hub.write_tree(build, tmp_path / "tree", "org/x")
    assert "**`my_family`** (family `my-family`): rows for a side study." in (tmp_path / "tree/README.md").read_text()


def test_huggingface_hub_reads_the_card_metadata(tree: Path):
    from huggingface_hub import DatasetCard

    data = DatasetCard.load(tree / "README.md").data.to_dict()
    assert [c["config_name"] for c in data["configs"]] == ["heldout_trees", "probe_1b", "sft_eco"]
    assert data["license"] == "cc-by-4.0" and data["pretty_name"] == "Hand-made opgen build"


@pytest.fixture(scope="module")
def real_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("real-card")
    out = root / "tree"
    hub.write_tree(real_build(root), out, "org/opgen-e2e")
    return out


def test_real_build_card_shows_one_real_row_per_format(real_tree: Path):
    body = (real_tree / "README.md").read_text()
    plan = hub.plan(real_tree.parent / "build")
    headings = re.findall(r"^### (rl|sft) · (\w+) · prompt `(\w+)` → answer `(\w+)`(.*)$", body, re.M)
    formats = {(s.kind, s.mode, s.prompt_format, s.answer_format) for s in plan.splits}
    # every format once, and probe 1b's prefixed rows as a format of their own
    assert sorted(h[:4] for h in headings) == sorted([*formats, ("rl", "program", "closed_book", "ra")])
    assert [h[4] for h in headings].count(" · teacher-forced prefix") == 1
    for s in plan.splits:
        row = _first_row(real_tree, s.repo_paths()[0])
        if s.kind == "sft":
            assert row["response"].rstrip("\n") in body  # the gold RA answer, inside a longer fence
        prefix = row["extra_info"]["assistant_prefix"]
        if prefix:  # probe 1b: the teacher-forced prefix is shown
            assert prefix.rstrip("\n") in body
    forward = _first_row(real_tree, "data/codeio_forward/test-00000-of-00001.parquet")  # its only eval split
    assert forward["prompt"][0]["content"].rstrip("\n") in body


def test_real_build_card_descriptions_and_verl_roles(real_tree: Path):
    body = (real_tree / "README.md").read_text()
    # a family the study does not name is described by its recipe's split description; known ones by the study
    assert "**`codeio_forward`** (family `codeio_forward`): forward prediction over the held-out operators." in body
    assert "definition-load probe" in body
    # the sft split has role train; every rl split is evaluation data
    assert "data.train_files=[<your RL pool>]" in body
    assert re.search(r"verl.trainer.sft_trainer \\\n  data.train_files=\[opgen-e2e/data/sft_eco/train-00000-of-", body)
    assert "split pairs checked" in body and "allowed by the recipe" in body


def test_prefixed_example_is_found_deep_in_a_later_shard(tmp_path: Path):
    # 2 shards of 6,000 rows; the first prefixed row is 11,000: shard 2, past the first 4,096-row batch
    build = make_build(tmp_path / "build", [("probe_1b", "probe_1b", "rl", 12000, 2)], prefix_from=11000)
    hub.write_tree(build, tmp_path / "tree", "org/x")
    body = (tmp_path / "tree/README.md").read_text()
    assert "From config `probe_1b`, split `probe_1b`, row 0:" in body
    assert "From config `probe_1b`, split `probe_1b`, row 11000:" in body
    assert "probe_1b row 11000: write main_solution" in body
    assert "Recall func_3: sort the characters (row 11000)" in body
