"""The sweep driver behind `opgen eval --executor ray`, with replicas in threads (no Ray needed):
pull queue, length-aware chunks, durable chunk files, lost replicas, resume, pipelined scoring.
The same driver over Ray actors is tested in tests/test_ray_executor.py (marker ray)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tiny_model as tm

from opgen import expr, faults
from opgen.distributed import driver as dist
from opgen.infer.base import EngineOptions, Sampling
from opgen.infer.chunks import CHUNKS_DIR, ChunkStore, make_chunks, row_cost
from opgen.infer.evaluate import EvalConfig, evaluate_model
from opgen.infer.run import read_log, read_rows
from opgen.score.settings import GradeSettings

DATA = ("trees", "more")


def _model(tmp_path: Path, name: str, salt: str, n: int) -> Path:
    """A replay "model": a folder of <data>_responses.jsonl, its answers depending on ``salt``."""
    folder = tmp_path / "models" / name
    folder.mkdir(parents=True)
    for dn in DATA:
        lines = []
        for i in range(n):
            e = tm.TREES[i % len(tm.TREES)][0]
            text = tm.ra_answer(e) if (i + len(salt)) % 3 else f"{salt} wrong {i}"
            lines.append(json.dumps({"index": i, "response": text, "finish_reason": "stop" if i % 4 else "length",
                                     "prompt_tokens": 10 + i, "completion_tokens": 5 + i}) + "\n")
        (folder / f"{dn}_responses.jsonl").write_text("".join(lines), encoding="utf-8")
        recalls = [json.dumps({"index": i, "recalls": [
            {"op": op, "response": f" {salt} recalls {op}"}
            for op in expr.ops_used(expr.parse(tm.TREES[i % len(tm.TREES)][0]))]}) + "\n" for i in range(n)]
        (folder / f"{dn}_decomposed_responses.jsonl").write_text("".join(recalls), encoding="utf-8")
    return folder


@pytest.fixture
def sweep(tmp_path):
    n = 14
    data = [tm.write_trees(tmp_path / f"{dn}.parquet", n=n) for dn in DATA]
    models = [_model(tmp_path, "ckpt_step1", "a", n), _model(tmp_path, "ckpt_step2", "bb", n)]
    return {"data": data, "models": models, "names": [m.name for m in models], "n": n}


def _cfg(**kw) -> EvalConfig:
    base = dict(backend="replay", sampling=Sampling(), batch_size=2, progress=False, score=False)
    base.update(kw)
    return EvalConfig(**base)


def _pool(k: int) -> dist.InProcessPool:
    return dist.InProcessPool([dist.ReplicaWorker("replay", EngineOptions()) for _ in range(k)])


def _run(sweep, out: Path, cfg: EvalConfig, replicas: int = 2, chunk_rows: int = 4):
    pool = _pool(replicas)
    try:
        return dist.evaluate_sweep(sweep["models"], sweep["names"], sweep["data"], out, cfg, pool,
                                   chunk_rows=chunk_rows, executor="threads")
    finally:
        pool.close()


def _local(sweep, out: Path, cfg: EvalConfig) -> list[dict]:
    return [evaluate_model(m, name, sweep["data"], out, cfg) for m, name in zip(sweep["models"], sweep["names"])]


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*_generations*")) if p.is_file()}


def _metrics(out: Path, name: str) -> dict:
    """metrics.json less what differs between any two runs (timings) and the output folder's name."""
    m = json.loads((out / name / "metrics.json").read_text().replace(str(out), "OUT"))
    for entry in m["data"].values():
        for part in (entry, entry.get("decomposed") or {}):
            if "run" in part:
                part["run"].pop("seconds")
                part["run"].pop("rows_per_s")
    return m


def _reports(out: Path) -> dict[str, bytes]:
    """Every score artifact (scores.jsonl, summary.json/csv, plots), the output folder's name masked."""
    return {str(p.relative_to(out)): p.read_bytes().replace(str(out).encode(), b"OUT")
            for name in ("scores.jsonl", "summary.json", "summary.csv", "*.png")
            for p in sorted(out.glob(f"*/*/{name}"))}


class _LoggingPool(dist.InProcessPool):
    """Records the driver's calls, in order: ("submit", pass) and ("grade"/"finish", pass)."""

    def __init__(self, workers):
        super().__init__(workers)
        self.log: list[tuple[str, str]] = []

    def submit(self, rid, task):
        self.log.append(("submit", f"{task.model}/{task.data_name}"))
        return super().submit(rid, task)

    def grade(self, method, key, *args):
        self.log.append((method, key))
        return super().grade(method, key, *args)


def test_chunks_are_whole_batches_balanced_by_prompt_length(tmp_path):
    rows = read_rows(tm.write_trees(tmp_path / "t.parquet", n=40))
    long = [r.__class__(r.index, ((r.messages[0][0], r.messages[0][1] * 3),), "", r.ground_truth, r.extra_info,
                        r.sha) if r.index >= 20 else r for r in rows]
    chunks = make_chunks(long, batch_size=2, chunk_rows=4)
    assert [r.index for c in chunks for b in c for r in b] == list(range(40))
    assert all(len(b) == 2 for c in chunks for b in c)  # the local loop's batches, intact
    sizes = [sum(len(b) for b in c) for c in chunks]
    short_chunks = [s for c, s in zip(chunks, sizes) if c[-1][-1].index < 20]
    long_chunks = [s for c, s in zip(chunks, sizes) if c[0][0].index >= 20]
    assert min(short_chunks) > max(long_chunks)  # long prompts: fewer rows per chunk
    costs = [sum(row_cost(r) for b in c for r in b) for c in chunks[:-1]]
    assert max(costs) < 2 * min(costs)
    assert make_chunks(long, 2, 4) == chunks  # deterministic
    assert make_chunks([], 2, 8) == []


@pytest.mark.slow
def test_two_replicas_equal_the_local_run(sweep, tmp_path):
    local = tmp_path / "local"
    _local(sweep, local, _cfg(score=True))
    metrics, report = _run(sweep, tmp_path / "dist", _cfg(score=True))
    assert _files(tmp_path / "dist") == _files(local)
    for name in sweep["names"]:
        assert _metrics(tmp_path / "dist", name) == _metrics(local, name)
        assert (tmp_path / "dist" / name / "trees" / "scores.jsonl").read_bytes() == \
            (local / name / "trees" / "scores.jsonl").read_bytes()
    assert not (tmp_path / "dist" / CHUNKS_DIR).exists() or not any((tmp_path / "dist" / CHUNKS_DIR).rglob("*.jsonl"))
    reports = _reports(tmp_path / "dist")
    assert reports == _reports(local) and len(reports) == 2 * 2 * 5  # 2 models x 2 files, plots included
    info = report.to_dict()
    assert info["rows_generated"] == 2 * 2 * sweep["n"]
    assert info["chunks_graded"] == info["chunks"] and info["scoring_s"] > 0
    assert all(r["chunks"] > 0 for r in info["replicas"])  # both replicas pulled work
    assert 0 <= info["replicas_waiting_on_scoring_share"] <= 1


def test_one_and_three_replicas_write_the_same_files(sweep, tmp_path):
    _run(sweep, tmp_path / "one", _cfg(decomposed=True), replicas=1)
    _run(sweep, tmp_path / "three", _cfg(decomposed=True), replicas=3, chunk_rows=2)
    assert _files(tmp_path / "one") == _files(tmp_path / "three")
    assert any("decomposed" in k for k in _files(tmp_path / "one"))


def test_a_replica_switches_models_in_place_and_prefers_its_own(sweep, tmp_path):
    _, report = _run(sweep, tmp_path / "out", _cfg(), replicas=1)
    assert report.replicas[0].loads == 2  # one load per model, not one per chunk


def test_a_killed_replica_loses_only_its_chunks_in_flight(sweep, tmp_path, monkeypatch):
    local = tmp_path / "local"
    _local(sweep, local, _cfg())
    monkeypatch.setenv(faults.ENV, "kill-replica-after:1")
    _, report = _run(sweep, tmp_path / "dist", _cfg())
    assert _files(tmp_path / "dist") == _files(local)
    assert [r.lost for r in report.replicas].count(True) == 1
    assert report.chunks_redone >= 1


def test_every_replica_lost_stops_with_the_chunks_kept(sweep, tmp_path, monkeypatch):
    monkeypatch.setenv(faults.ENV, "kill-replica-after:1")
    with pytest.raises(dist.AllReplicasLost, match="rerun with --resume"):
        _run(sweep, tmp_path / "out", _cfg(), replicas=1)
    assert list((tmp_path / "out" / CHUNKS_DIR).rglob("*.jsonl"))


def test_a_chunk_that_loses_a_second_replica_stops_the_sweep_naming_it(sweep, tmp_path, monkeypatch):
    """A chunk is given again once (issue 32): one in flight when a second replica is lost (a chunk that
    kills whatever runs it) is a named error, not a walk through every replica; finished chunks are kept."""
    local = tmp_path / "local"
    _local(sweep, local, _cfg())
    monkeypatch.setenv(faults.ENV, "lose-chunk:3")
    with pytest.raises(dist.ChunkLost, match=r"^chunk \S+ of 0/trees \(\d+ rows\): replicas \d and \d were lost "
                                             r"while they ran it, and it is not given a third; the \d+ chunks "
                                             r"finished in this run are stored: rerun with --resume") as info:
        _run(sweep, tmp_path / "dist", _cfg(), replicas=3, chunk_rows=2)
    assert info.value.exit_code == 1
    monkeypatch.delenv(faults.ENV)
    _run(sweep, tmp_path / "dist", _cfg(resume=True), replicas=3, chunk_rows=2)
    assert _files(tmp_path / "dist") == _files(local)


@pytest.mark.slow
def test_an_aborted_sweep_resumes_only_the_missing_rows(sweep, tmp_path, monkeypatch):
    local = tmp_path / "local"
    _local(sweep, local, _cfg(score=True))
    out = tmp_path / "dist"
    monkeypatch.setenv(faults.ENV, "abort-after:3")
    with pytest.raises(dist.InjectedFault):
        _run(sweep, out, _cfg(score=True), chunk_rows=2)
    stored = sum(len(ChunkStore(out, n, d).done()) + len(read_log(out / n / f"{d}_generations.jsonl"))
                 for n in sweep["names"] for d in DATA)
    assert stored >= 3 * 2  # three chunks of at least one batch of two
    assert list((out / CHUNKS_DIR).rglob("*.jsonl"))
    assert not any((out / n / "metrics.json").exists() for n in sweep["names"])
    monkeypatch.delenv(faults.ENV)
    metrics, report = _run(sweep, out, _cfg(score=True, resume=True))
    assert _files(out) == _files(local)
    for name in sweep["names"]:
        assert _metrics(out, name) == {**_metrics(local, name), "data": {
            dn: {**e, "run": {**e["run"], "skipped": s["run"]["skipped"], "generated": s["run"]["generated"],
                             "requests": s["run"]["requests"]}}
            for (dn, e), s in zip(_metrics(local, name)["data"].items(), _metrics(out, name)["data"].values())}}
    skipped = sum(e["run"]["skipped"] for m in metrics for e in m["data"].values())
    generated = sum(e["run"]["generated"] for m in metrics for e in m["data"].values())
    assert (skipped, generated) == (stored, 2 * 2 * sweep["n"] - stored)
    assert report.rows_generated == generated
    # the rows the stopped run left (in chunks, in files) are graded too: the same reports
    assert _reports(out) == _reports(local)


def test_resume_over_a_local_generations_file_adds_only_missing_rows(sweep, tmp_path):
    out = tmp_path / "out"
    _local(sweep, out, _cfg(limit=5))
    before = {k: v for k, v in _files(out).items() if k.endswith(".jsonl")}
    _run(sweep, out, _cfg(resume=True))
    after = _files(out)
    for k, v in before.items():
        assert after[k].startswith(v)
    fresh = tmp_path / "fresh"
    _local(sweep, fresh, _cfg())
    assert _files(out) == _files(fresh)


def test_chunks_left_beside_a_complete_file_are_not_duplicated(sweep, tmp_path, monkeypatch):
    out = tmp_path / "out"
    _run(sweep, out, _cfg())
    name = sweep["names"][0]
    gen = out / name / "trees_generations.jsonl"
    # as if the driver died after assembling the file but before removing its chunks
    store = ChunkStore(out, name, "trees")
    store.write("0000000000.jsonl", gen.read_text().splitlines(keepends=True)[:4])
    want = gen.read_bytes()
    _run(sweep, out, _cfg(resume=True))
    assert gen.read_bytes() == want


def test_without_ray_the_ray_executor_is_a_clear_error(cli, runner, sweep, tmp_path):
    import importlib.util

    if importlib.util.find_spec("ray") is not None:
        pytest.skip("ray is installed here")
    res = runner.invoke(cli, ["eval", "--backend", "replay", "--model", str(sweep["models"][0]), "--data",
                              str(sweep["data"][0]), "--out", str(tmp_path / "out"), "--executor", "ray"])
    assert res.exit_code == 1 and "needs the ray package" in res.output and "Traceback" not in res.output
    res = runner.invoke(cli, ["build", "eval-suite", "--out", str(tmp_path / "b"), "--limit", "5",
                              "--executor", "ray"])
    assert res.exit_code == 1 and "needs the ray package" in res.output


def test_each_chunk_is_graded_as_it_arrives_and_the_report_follows_the_last(sweep, tmp_path):
    """Scoring is pipelined per chunk: a pass's chunks are graded while later chunks of the same
    pass are still being generated; its report is written once, after its last grade."""
    pool = _LoggingPool([dist.ReplicaWorker("replay", EngineOptions())])
    try:
        _, report = dist.evaluate_sweep(sweep["models"][:1], sweep["names"][:1], sweep["data"][:1],
                                        tmp_path / "out", _cfg(score=True), pool, chunk_rows=2, executor="threads")
    finally:
        pool.close()
    log = pool.log
    submits = [i for i, (kind, _) in enumerate(log) if kind == "submit"]
    grades = [i for i, (kind, _) in enumerate(log) if kind == "grade"]
    assert len(grades) == len(submits) == report.chunks >= 4  # one grade per chunk
    assert sum(g < submits[-1] for g in grades) >= len(grades) - 2  # all but the last (depth 2) before the last chunk
    assert [kind for kind, _ in log].count("finish") == 1 and log[-1][0] == "finish"
    assert report.chunks_graded == report.chunks


@pytest.mark.slow
def test_a_resume_under_a_smaller_limit_grades_the_limited_rows_as_the_local_loop(sweep, tmp_path):
    local, out = tmp_path / "local", tmp_path / "dist"
    for where in (local, out):
        _local(sweep, where, _cfg())
    _local(sweep, local, _cfg(score=True, resume=True, limit=5, grading=GradeSettings(static=False)))
    _run(sweep, out, _cfg(score=True, resume=True, limit=5, grading=GradeSettings(static=False)))
    assert _reports(out) == _reports(local)
    for name in sweep["names"]:
        assert _metrics(out, name) == _metrics(local, name)
        summary = json.loads((out / name / "trees" / "summary.json").read_text())
        assert summary["rows_answered"] == 5 and summary["static"] is False
        assert summary["responses_path"] == str(out / name / "trees_generations.jsonl")


def test_an_unreadable_ground_truth_stops_the_sweep_naming_the_row(tmp_path):
    from opgen.score.inputs import ScoreInputError

    rows = [tm.program_row(i, "func_3(x)", "ab") for i in range(4)]
    rows[3]["reward_model"]["ground_truth"] = "not json"
    data = tm.write_rows(tmp_path / "broken.parquet", rows)
    model = tmp_path / "answers.jsonl"
    model.write_text("".join(json.dumps({"index": i, "response": "x"}) + "\n" for i in range(4)))
    pool = _pool(2)
    try:
        with pytest.raises(ScoreInputError, match="broken.parquet: row 3"):
            dist.evaluate_sweep([model], ["answers"], [data], tmp_path / "out", _cfg(score=True), pool,
                                chunk_rows=2, executor="threads")
    finally:
        pool.close()
    assert not (tmp_path / "out" / "answers" / "metrics.json").exists()
    assert not (tmp_path / "out" / "answers" / "broken" / "summary.json").exists()


@pytest.mark.slow
def test_metric_definitions_reach_the_sweeps_grader_as_the_local_loops(sweep, tmp_path):
    from opgen.score.metrics import MetricDefs

    defs = MetricDefs(drift_call="every", pass_k="earliest")
    local = tmp_path / "local"
    _local(sweep, local, _cfg(score=True, metric_defs=defs))
    _run(sweep, tmp_path / "dist", _cfg(score=True, metric_defs=defs))
    assert _reports(tmp_path / "dist") == _reports(local)
    summary = json.loads((tmp_path / "dist" / sweep["names"][0] / "trees" / "summary.json").read_text())
    assert summary["metric_definitions"]["drift_call"] == "every"
    assert summary["metric_definitions"]["pass_at_k"] == "earliest"
