"""Scoring as a stream (issue 32 item 1): the same report as before streaming, whatever the chunk size,
the row order of the responses or the order a sweep's chunks are graded in; nothing written by a run
that fails or is stopped mid-stream, and a rerun completes it.

The reports of before are tests/data/score_golden (tests/score_golden.py wrote them with commit
29f8497's in-memory scorer). What changed since on purpose is undone before comparing
(:func:`as_before`): intervals per sample (``--interval samples`` gives the old ones), empty roll-ups
null (they read 0.0), the arity figures told apart (the old ``arity`` counted a dropped and an added
parameter alike), exact means (the old pass@k and mean_score summed floats in row order: the last
digit may differ).
"""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from score_golden import FILES, GOLDEN, normalized

from opgen.score import metrics as M
from opgen.score import report as R

SAMPLES = M.MetricDefs(interval="samples")
NEW_KEYS = {"by_row", "added", "added_rate", "interval", "interval_method", "arity_dropped", "arity_added",
            "arity_added_rate", "arity_ci"}


def _score(name: str, out: Path, **kw) -> dict:
    folder = GOLDEN / name
    kw.setdefault("plots", False)
    kw.setdefault("metric_defs", SAMPLES)
    return R.score_files(folder / "data.parquet", folder / "responses.jsonl", out, **kw)


def as_before(summary: dict) -> dict:
    """A summary in the shape of the in-memory scorer's (see the module's docstring)."""
    def undo(node, key=""):
        if isinstance(node, dict):
            if "written" in node and "arity" in node and "rate" in node:  # an arity cell: dropped + added
                arity = node["arity"] + node.get("added", 0)
                lo, hi = M.wilson(arity, node["written"])
                node = {**node, "arity": arity, "rate": arity / node["written"] if node["written"] else 0.0,
                        "ci_low": lo, "ci_high": hi}
            if "arity_rate" in node and "needed" in node:  # a recall_by_op entry
                node = {**node, "arity_rate": node["arity"] / node["written"] if node["written"] else 0.0}
            if node.get("n") == 0 and "acc" in node:
                node = {**node, "acc": 0.0, "ci_low": 0.0, "ci_high": 1.0}
            return {k: undo(v, k) for k, v in node.items() if k not in NEW_KEYS}
        if isinstance(node, list):
            return [undo(v) for v in node]
        return node

    out = undo(summary)
    # retries (a response graded again after the process under it died) came later than 29f8497: none here
    assert out.pop("retries") == 0
    if out["missing_import"]["rate"] is None:
        out["missing_import"]["rate"] = 0.0
    return out


def _approx_means(summary: dict) -> dict:
    return {**summary, "mean_score": pytest.approx(summary["mean_score"], abs=1e-12),
            "pass_at_k": {k: pytest.approx(v, abs=1e-12) for k, v in summary["pass_at_k"].items()}}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in ("heldout_trees", "groups") else n
                                  for n in FILES])
def test_streaming_writes_the_report_the_in_memory_scorer_wrote(name, tmp_path):
    golden = GOLDEN / name
    summary = _score(name, tmp_path / "out", chunk=3)
    old_lines = gzip.decompress((golden / "scores.jsonl.gz").read_bytes()).decode().splitlines()
    new_lines = (tmp_path / "out" / "scores.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(new_lines) == len(old_lines)
    for old, new in zip(old_lines, new_lines):  # fields graders add later are allowed, nothing else moves
        old_rec, new_rec = json.loads(old), json.loads(new)
        assert [k for k in new_rec if k in old_rec] == list(old_rec)
        assert {k: new_rec[k] for k in old_rec} == old_rec
        if list(new_rec) == list(old_rec):
            assert new == old
    old_summary = json.loads((golden / "summary.json").read_text(encoding="utf-8"))
    written = normalized(json.loads((tmp_path / "out" / "summary.json").read_text(encoding="utf-8")))
    assert normalized(summary) == {**written, "plots": []}
    assert as_before(written) == _approx_means(old_summary)
    # the CSV of that summary, as the old scorer wrote it
    before = as_before(written)
    for d in before["recall_by_op"].values():
        d["arity_dropped"], d["arity_ci"] = d["arity"], list(M.wilson(d["arity"], d["written"]))
    csv_old = (golden / "summary.csv").read_text(encoding="utf-8").splitlines()
    csv_new = R.summary_csv({**before, "pass_at_k": old_summary["pass_at_k"]}).splitlines()
    assert csv_new == csv_old


@pytest.mark.slow
def test_the_report_is_the_same_for_every_chunk_size_plots_included(tmp_path):
    pytest.importorskip("matplotlib")
    outs = []
    for chunk in (1, 2, 7, R.CHUNK):
        out = tmp_path / f"c{chunk}"
        _score("heldout_trees", out, chunk=chunk, plots=True, metric_defs=M.DEFAULT_DEFS)
        outs.append({p.name: p.read_bytes() for p in out.iterdir() if p.name != "summary.json"}
                    | {"summary.json": json.loads((out / "summary.json").read_text())})
    assert set(outs[0]) == {"scores.jsonl", "summary.json", "summary.csv", *R.PLOTS}
    assert all(o == outs[0] for o in outs[1:])


@pytest.mark.slow
def test_responses_in_any_order_give_the_report_of_responses_in_row_order(tmp_path):
    lines = (GOLDEN / "heldout_trees" / "responses.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    random.Random(3).shuffle(lines)
    shuffled = tmp_path / "shuffled.jsonl"
    shuffled.write_text("".join(lines), encoding="utf-8")
    data = GOLDEN / "heldout_trees" / "data.parquet"
    R.score_files(data, GOLDEN / "heldout_trees" / "responses.jsonl", tmp_path / "a", plots=False, chunk=4)
    R.score_files(data, shuffled, tmp_path / "b", plots=False, chunk=4)
    assert (tmp_path / "a" / "scores.jsonl").read_bytes() == (tmp_path / "b" / "scores.jsonl").read_bytes()
    a, b = (json.loads((tmp_path / x / "summary.json").read_text()) for x in "ab")
    assert {**a, "responses_path": ""} == {**b, "responses_path": ""}


def _report(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def _litter(parent: Path, name: str) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(name + ".opgen-") and
                  not p.name.endswith(".opgen-lock"))


def test_a_failure_mid_stream_leaves_the_old_report_whole(tmp_path, monkeypatch):
    out = tmp_path / "out"
    _score("native", out)
    before = _report(out)
    calls = []
    real = R.grade_many

    def failing(items, **kw):
        calls.append(len(items))
        if len(calls) == 3:
            from opgen.score.sandbox import SandboxError

            raise SandboxError("a sandbox worker died (injected)")
        return real(items, **kw)

    monkeypatch.setattr(R, "grade_many", failing)
    with pytest.raises(Exception, match="injected"):
        _score("forward", out, chunk=1)
    assert len(calls) >= 3  # it failed mid-stream, after chunks were graded and written
    assert _report(out) == before
    assert _litter(tmp_path, "out") == []


@pytest.mark.slow
def test_a_score_stopped_mid_stream_leaves_the_old_report_and_a_rerun_completes_it(tmp_path):
    golden = GOLDEN / "heldout_trees"
    out = tmp_path / "out"
    # opgen's command line with chunks of two responses (many chunk boundaries before the stop)
    small_chunks = ("import sys; from opgen.score import report; report.CHUNK = 2; from opgen.cli import main; "
                    "sys.argv = ['opgen', *sys.argv[1:]]; main()")
    argv = [sys.executable, "-c", small_chunks, "score", "--data", str(golden / "data.parquet"), "--responses",
            str(golden / "responses.jsonl"), "--out", str(out), "--no-plots", "--no-progress"]
    first = subprocess.run([*argv[:-6], "--data", str(GOLDEN / "forward" / "data.parquet"), "--responses",
                            str(GOLDEN / "forward" / "responses.jsonl"), *argv[-4:]], capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    before = _report(out)
    stopped = subprocess.run(argv, capture_output=True, text=True,
                             env={**os.environ, "OPGEN_FAULT": "scored-row-9:TERM"})
    assert stopped.returncode == 143, stopped.stderr
    assert "terminated" in stopped.stderr and "as it was" in stopped.stderr and "Traceback" not in stopped.stderr
    assert _report(out) == before and _litter(tmp_path, "out") == []
    again = subprocess.run(argv, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    reference = tmp_path / "reference"
    R.score_files(golden / "data.parquet", golden / "responses.jsonl", reference, plots=False)
    assert (out / "scores.jsonl").read_bytes() == (reference / "scores.jsonl").read_bytes()


@pytest.mark.slow
def test_the_sweep_grader_writes_score_files_report_from_chunks_graded_in_any_order(tmp_path):
    """The Ray scorer's grader (driver.Grader: chunks spooled, merged at the end) against score_files,
    with chunks that interleave (rows a resumed run left beside new ones) and come out of order."""
    import pyarrow.parquet as pq

    from opgen.distributed.driver import Grader
    from opgen.score.inputs import Row
    from opgen.score.settings import GradeSettings

    golden = GOLDEN / "heldout_trees"
    data, responses = golden / "data.parquet", golden / "responses.jsonl"
    table = pq.read_table(data).to_pylist()
    rows = {i: Row(i, r["reward_model"]["ground_truth"], r["data_source"] or "", r["extra_info"])
            for i, r in enumerate(table)}
    lines = {json.loads(x)["index"]: x + "\n" for x in responses.read_text(encoding="utf-8").splitlines()}
    kept = [i for i in sorted(lines) if i % 3 == 0]  # one interleaving chunk
    rest = [i for i in sorted(lines) if i % 3]
    chunks = [kept] + [rest[k:k + 4] for k in range(0, len(rest), 4)]
    random.Random(5).shuffle(chunks)
    grader = Grader(2, GradeSettings(), plots=False)
    try:
        for chunk in chunks:
            grader.grade("p", str(data), len(table), {i: rows[i] for i in chunk}, "".join(lines[i] for i in chunk),
                         "chunk")
        summary, _ = grader.finish("p", len(chunks), str(data), len(table), str(responses), str(tmp_path / "ray"))
    finally:
        grader.close()
    local = R.score_files(data, responses, tmp_path / "local", plots=False)
    assert (tmp_path / "ray" / "scores.jsonl").read_bytes() == (tmp_path / "local" / "scores.jsonl").read_bytes()
    assert summary == local
    assert (tmp_path / "ray" / "summary.csv").read_bytes() == (tmp_path / "local" / "summary.csv").read_bytes()


def test_a_responses_file_that_changes_while_it_is_scored_is_refused(tmp_path, monkeypatch):
    from opgen.score import inputs as I

    golden = GOLDEN / "forward"
    responses = tmp_path / "r.jsonl"
    responses.write_text((golden / "responses.jsonl").read_text(encoding="utf-8"), encoding="utf-8")
    real = I.Responses.__init__

    def then_changed(self, *a, **kw):  # checked as it was, then rewritten before the grading pass
        real(self, *a, **kw)
        responses.write_text('{"index": 0, "response": "x"}\n', encoding="utf-8")

    monkeypatch.setattr(I.Responses, "__init__", then_changed)
    with pytest.raises(I.ScoreInputError, match="changed while it was read"):
        R.score_files(golden / "data.parquet", responses, tmp_path / "out", plots=False)
    assert not (tmp_path / "out").exists()
