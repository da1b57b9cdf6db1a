"""`opgen eval/build --executor ray` on a real local Ray cluster (127.0.0.1 only, started and stopped
by each command): 2 models x 2 files with the hf backend on the tiny model across 2 replicas equal
the local run; a replica killed after its first chunk, and a driver stopped mid-sweep then resumed
on one replica, give the same files; a ray build equals a local build byte for byte.

Marker ray (venv: scripts/setup-ray.sh). Generations are short (8 tokens) and the weights random.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tiny_model as tm

from opgen import faults

pytestmark = pytest.mark.ray

MAX_NEW = 8


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tm.require("ray")
    tm.require("torch")
    tm.require("transformers")
    import torch
    from transformers import AutoModelForCausalLM

    base = tmp_path_factory.getbasetemp()
    first = tm.build(base / "tiny-model")
    work = tmp_path_factory.mktemp("ray")
    models = []
    # two "checkpoints" that answer differently (the tiny model's random weights answer one token
    # to everything; strong noise on every matrix changes that)
    for step, noise in ((10, 0.0), (20, 5.0)):
        target = work / "ckpts" / f"run_step{step}"
        model = AutoModelForCausalLM.from_pretrained(str(first), dtype=torch.float32)
        g = torch.Generator().manual_seed(step)
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() == 2:
                    p.add_(noise * p.std() * torch.randn(p.shape, generator=g))
        model.save_pretrained(target)
        for f in first.iterdir():
            if f.name.startswith("tokenizer") or f.name in ("special_tokens_map.json", "chat_template.jinja"):
                (target / f.name).write_bytes(f.read_bytes())
        models.append(target)
    data = [tm.write_trees(work / "trees.parquet", n=6), tm.write_prefixed(work / "prefixed.parquet", n=3)]
    local = work / "local"
    res = _eval(models, data, local)
    assert res.exit_code == 0, res.output
    return {"models": models, "data": data, "local": local, "work": work}


def _eval(models, data, out: Path, *extra: str):
    from click.testing import CliRunner
    from opgen.cli import cli

    args = ["eval", "--backend", "hf", "--out", str(out), "--max-new-tokens", str(MAX_NEW), "--dtype", "float32",
            "--hf-batch-size", "2", "--quiet", *extra]
    for m in models:
        args += ["--model", str(m)]
    for d in data:
        args += ["--data", str(d)]
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def _ray(setup, out: Path, *extra: str, replicas: int = 2):
    return _eval(setup["models"], setup["data"], out, "--executor", "ray", "--replicas", str(replicas),
                 "--ray-num-cpus", "2", "--chunk-rows", "2", *extra)


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*_generations.jsonl"))}


def _metrics(out: Path, name: str) -> dict:
    m = json.loads((out / name / "metrics.json").read_text().replace(str(out), "OUT"))
    for entry in m["data"].values():
        entry["run"].pop("seconds")
        entry["run"].pop("rows_per_s")
    return m


def test_two_replicas_equal_the_local_run(setup):
    out = setup["work"] / "two"
    res = _ray(setup, out)
    assert res.exit_code == 0, res.output
    local = setup["local"]
    assert _files(out) == _files(local)
    assert len(_files(out)) == 4
    a, b = (out / "run_step10" / "trees_generations.jsonl").read_text(), \
        (out / "run_step20" / "trees_generations.jsonl").read_text()
    assert a != b  # two models, really
    for name in ("run_step10", "run_step20"):
        assert _metrics(out, name) == _metrics(local, name)
        for data in ("trees", "prefixed"):  # graded chunk by chunk, reported as score_files reports
            for f in ("scores.jsonl", "summary.csv", "accuracy_vs_depth.png", "recall_heatmap.png"):
                assert (out / name / data / f).read_bytes() == (local / name / data / f).read_bytes(), f
            assert (out / name / data / "summary.json").read_text().replace(str(out), "OUT") == \
                (local / name / data / "summary.json").read_text().replace(str(local), "OUT")
    assert (out / "sweep.csv").read_text() == (local / "sweep.csv").read_text()
    report = json.loads((out / "ray_report.json").read_text())
    assert report["rows_generated"] == 2 * 9 and all(r["chunks"] > 0 for r in report["replicas"])
    assert report["chunks_graded"] == report["chunks"] and report["scoring_s"] > 0
    assert "replicas waited on scoring" in res.output


def test_a_replica_killed_after_its_first_chunk_changes_nothing(setup, monkeypatch):
    monkeypatch.setenv(faults.ENV, "kill-replica-after:1")
    out = setup["work"] / "killed"
    res = _ray(setup, out, "--no-score")
    assert res.exit_code == 0, res.output
    assert _files(out) == _files(setup["local"])
    report = json.loads((out / "ray_report.json").read_text())
    assert [r["lost"] for r in report["replicas"]].count(True) == 1 and report["chunks_redone"] >= 1


def test_a_stopped_sweep_resumed_on_one_replica_gives_the_same_files(setup, monkeypatch):
    from opgen.infer.chunks import CHUNKS_DIR

    out = setup["work"] / "resumed"
    monkeypatch.setenv(faults.ENV, "abort-after:3")
    res = _ray(setup, out, "--no-score")
    assert res.exit_code == 1 and "stopped after 3 chunks" in res.output
    assert list((out / CHUNKS_DIR).rglob("*.jsonl")) or list(out.rglob("*_generations.jsonl"))
    monkeypatch.delenv(faults.ENV)
    res = _ray(setup, out, "--no-score", "--resume", replicas=1)
    assert res.exit_code == 0, res.output
    assert _files(out) == _files(setup["local"])
    metrics = [json.loads((out / n / "metrics.json").read_text()) for n in ("run_step10", "run_step20")]
    skipped = sum(e["run"]["skipped"] for m in metrics for e in m["data"].values())
    assert skipped >= 3 * 2  # three chunks of at least one 2-row batch were not generated again
    report = json.loads((out / "ray_report.json").read_text())
    assert report["rows_generated"] == 2 * 9 - skipped


def _built_locally_and_on_ray(tmp: Path, recipe: Path, workers: int, pattern: str) -> list[Path]:
    """``recipe`` built into tmp/local on ``workers`` local workers and into tmp/ray under
    ``--executor ray``: the files matching ``pattern`` (relative paths), the same names and bytes on both."""
    from click.testing import CliRunner
    from opgen.cli import cli

    runner = CliRunner()
    local = runner.invoke(cli, ["build", str(recipe), "--out", str(tmp / "local"), "--workers", str(workers),
                                "--no-progress"], catch_exceptions=False)
    assert local.exit_code == 0, local.output
    ray = runner.invoke(cli, ["build", str(recipe), "--out", str(tmp / "ray"), "--no-progress",
                              "--executor", "ray", "--ray-num-cpus", "2"], catch_exceptions=False)
    assert ray.exit_code == 0, ray.output
    files = sorted(p.relative_to(tmp / "local") for p in (tmp / "local").rglob(pattern) if p.is_file())
    assert files == sorted(p.relative_to(tmp / "ray") for p in (tmp / "ray").rglob(pattern) if p.is_file())
    for f in files:
        assert (tmp / "ray" / f).read_bytes() == (tmp / "local" / f).read_bytes(), f
    return files


def test_ray_build_equals_local_build_byte_for_byte(tmp_path):
    """The determinism recipe of test_build: several shards, and rows redrawn across them."""
    tm.require("ray")
    from det_recipe import det_recipe

    recipe = tmp_path / "det.yaml"
    recipe.write_text(det_recipe())
    files = _built_locally_and_on_ray(tmp_path, recipe, 2, "*")
    assert len([f for f in files if f.name.startswith("atoms")]) == 5  # 3,000 rows in shards of 700


def test_ray_build_of_a_user_library_equals_local_build(tmp_path):
    """A user's YAML library crosses to the Ray workers (the pickled recipe carries it by value,
    its operators rebuilt from their sources): a cell and an atomic split, byte-equal to local."""
    tm.require("ray")
    import user_libraries as U

    U.write_six(tmp_path)
    recipe = tmp_path / "six-cells.yaml"
    recipe.write_text("name: six-ray\nseed: 2\nlibrary: six.yaml\nsplits:\n"
                      "  atoms: {generator: atomic, role: train, shard_rows: 40, options: {per_op: 30}}\n"
                      "  cell: {generator: sft_cell, role: train, unique: none, shard_rows: 40,\n"
                      "         options: {atomic: {pool: p, per_op: 10}, width: [1, 3]}}\n")
    files = _built_locally_and_on_ray(tmp_path, recipe, 1, "*.parquet")
    assert len(files) > 2  # several shards: several Ray tasks
    man = json.loads((tmp_path / "ray" / "manifest.json").read_text())
    assert man["library"]["name"] == "six" and man["library"]["file"] == "library.yaml"
    assert (tmp_path / "ray" / "library.yaml").read_bytes() == (tmp_path / "local" / "library.yaml").read_bytes()


def test_ray_score_equals_local_score(tmp_path):
    """Sandbox actors (two of one worker) grade exactly as the local sandbox does."""
    tm.require("ray")
    from click.testing import CliRunner
    from opgen.cli import cli

    data = tm.write_trees(tmp_path / "trees.parquet", n=12)
    lines = []
    for i in range(12):
        e = tm.TREES[i % len(tm.TREES)][0]
        good = tm.ra_answer(e)
        lines.append({"index": i, "responses": [good, good.replace(f"return {e}", "return x[::-1]"),
                                                "while True: pass"]})
    responses = tmp_path / "responses.jsonl"
    responses.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    runner = CliRunner()
    common = ["score", "--data", str(data), "--responses", str(responses), "--no-plots", "--timeout", "0.5"]
    local = runner.invoke(cli, [*common, "--out", str(tmp_path / "local"), "--workers", "2"], catch_exceptions=False)
    assert local.exit_code == 0, local.output
    ray = runner.invoke(cli, [*common, "--out", str(tmp_path / "ray"), "--workers", "1", "--executor", "ray",
                              "--ray-num-cpus", "2", "--sandbox-actors", "2"], catch_exceptions=False)
    assert ray.exit_code == 0, ray.output
    assert (tmp_path / "ray" / "scores.jsonl").read_bytes() == (tmp_path / "local" / "scores.jsonl").read_bytes()
    assert json.loads((tmp_path / "ray" / "summary.json").read_text()) == \
        json.loads((tmp_path / "local" / "summary.json").read_text())
    assert "accuracy 0.3333" in ray.output


def test_ray_score_streamed_in_small_chunks_equals_local_score(tmp_path, monkeypatch):
    """The Ray scorer through score_files' stream: chunks of three responses, rows of one to three
    samples, the realistic mix of answers; the same rows and summary as the local sandbox."""
    tm.require("ray")
    from click.testing import CliRunner
    from opgen.cli import cli

    from opgen.score import report

    monkeypatch.setattr(report, "CHUNK", 3)
    data = tm.write_trees(tmp_path / "trees.parquet", n=18)
    lines = []
    for i in range(18):
        e = tm.TREES[i % len(tm.TREES)][0]
        good = tm.ra_answer(e)
        samples = [good, good.replace("def func_1(s, n):", "def func_1(s):"), "no answer"][: 1 + i % 3]
        lines.append({"index": i, "responses": samples})
    responses = tmp_path / "responses.jsonl"
    responses.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    runner = CliRunner()
    common = ["score", "--data", str(data), "--responses", str(responses), "--no-plots"]
    local = runner.invoke(cli, [*common, "--out", str(tmp_path / "local")], catch_exceptions=False)
    assert local.exit_code == 0, local.output
    ray = runner.invoke(cli, [*common, "--out", str(tmp_path / "ray"), "--workers", "1", "--executor", "ray",
                              "--ray-num-cpus", "2", "--sandbox-actors", "2"], catch_exceptions=False)
    assert ray.exit_code == 0, ray.output
    assert (tmp_path / "ray" / "scores.jsonl").read_bytes() == (tmp_path / "local" / "scores.jsonl").read_bytes()
    a, b = (json.loads((tmp_path / x / "summary.json").read_text()) for x in ("local", "ray"))
    assert {**a, "responses_path": ""} == {**b, "responses_path": ""}
    assert a["samples_per_row"] == {"min": 1, "max": 3} and "by_row" in a["overall"]


def test_ray_replicas_balance_several_openai_servers(tmp_path):
    """One replica per --base-url, fed by the same pull queue; the files equal one server's."""
    tm.require("ray")
    from click.testing import CliRunner
    from fake_openai import FakeServer
    from opgen.cli import cli

    data = tm.write_trees(tmp_path / "trees.parquet", n=16)
    common = ["eval", "--backend", "openai", "--model", "served", "--data", str(data), "--no-score", "--quiet",
              "--batch-size", "2", "--max-new-tokens", "32"]
    with FakeServer("served") as a, FakeServer("served") as b, FakeServer("served") as c:
        res = CliRunner().invoke(cli, [*common, "--out", str(tmp_path / "ray"), "--base-url", a.url, "--base-url",
                                       b.url, "--executor", "ray", "--ray-num-cpus", "2", "--chunk-rows", "2"],
                                 catch_exceptions=False)
        assert res.exit_code == 0, res.output
        assert a.bodies and b.bodies and len(a.bodies) + len(b.bodies) == 16
        res = CliRunner().invoke(cli, [*common, "--out", str(tmp_path / "local"), "--base-url", c.url],
                                 catch_exceptions=False)
        assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "ray" / "ray_report.json").read_text())
    assert len(report["replicas"]) == 2
    assert _files(tmp_path / "ray") == _files(tmp_path / "local")


def test_the_static_path_applies_with_sandbox_actors():
    """RaySandbox carries its actors' limits, so programs of library code are graded statically
    under --executor ray as they are locally (without them static.applies was always false)."""
    tm.require("ray")
    from opgen.distributed.ray_executor import RayOptions, RaySandbox
    from opgen.score import static as S
    from opgen.score.sandbox import Sandbox

    box = RaySandbox(1, 1.5, RayOptions(num_cpus=2), actors=1)
    try:
        local = Sandbox(workers=1, timeout_s=1.5)
        try:
            assert (box.timeout_s, box.memory_mb, box.max_output) == \
                (local.timeout_s, local.memory_mb, local.max_output)
        finally:
            local.close()
        assert S.applies(box)
    finally:
        box.close()


# ---------------------------------------------------------------- lost workers (issue #24, item 5)


def test_a_ray_build_survives_a_killed_shard_worker(tmp_path, monkeypatch):
    """kill -9 of one shard's worker: Ray retries the shard (idempotent) and the build is the local one."""
    tm.require("ray")
    from click.testing import CliRunner
    from opgen.cli import cli

    runner = CliRunner()
    args = ["build", "native-stage1", "--limit", "300", "--no-progress"]
    local = runner.invoke(cli, [*args, "--out", str(tmp_path / "local"), "--workers", "1"], catch_exceptions=False)
    assert local.exit_code == 0, local.output
    monkeypatch.setenv(faults.ENV, "shard-worker:KILL")
    ray = runner.invoke(cli, [*args, "--out", str(tmp_path / "ray"), "--executor", "ray", "--ray-num-cpus", "2"],
                        catch_exceptions=False)
    assert ray.exit_code == 0, ray.output
    for f in sorted((tmp_path / "local").iterdir()):
        assert (tmp_path / "ray" / f.name).read_bytes() == f.read_bytes(), f.name


def test_a_shard_whose_worker_always_dies_is_a_named_error(tmp_path, monkeypatch):
    tm.require("ray")
    from click.testing import CliRunner
    from opgen.cli import cli

    monkeypatch.setenv(faults.ENV, "shard-worker-always:KILL")
    out = tmp_path / "ray"
    r = CliRunner().invoke(cli, ["build", "native-stage1", "--limit", "50", "--no-progress", "--out", str(out),
                                 "--executor", "ray", "--ray-num-cpus", "2"], catch_exceptions=False)
    assert r.exit_code == 1 and "its Ray worker died 4 times" in r.output and "retries" in r.output, r.output
    assert "Traceback" not in r.output and not out.exists()
    assert not [p for p in tmp_path.iterdir() if ".opgen-new-" in p.name]


def test_losing_the_only_replica_before_any_chunk_says_nothing_is_stored(setup, monkeypatch):
    monkeypatch.setenv(faults.ENV, "kill-replica-after:0")
    res = _ray(setup, setup["work"] / "none", "--no-score", replicas=1)
    assert res.exit_code == 1 and "every replica was lost" in res.output, res.output
    assert "nothing of it is stored" in res.output and "finished chunks are stored" not in res.output
