"""`opgen eval`: one run per --out at a time, and no answered row lost (issue #24, items 1 and 2).

Against the fake OpenAI-compatible server: a row the server never answers (429 or garbage until
the retries run out) costs only itself, a server that dies mid-run costs only what was in flight,
both are retried by --resume, and a resumed file equals an uninterrupted one. Unreachable servers
and refused credentials fail before the first request.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
import tiny_model as tm
from eval_helpers import read_jsonl
from fake_openai import FakeServer

from opgen import outdir

MODEL = "served-model"


def _rows(path: Path, n: int) -> Path:
    """n program rows with distinct prompts (the server's faults pick rows by prompt)."""
    return tm.write_rows(path, [tm.program_row(i, "func_3(x)", f"word{i}") for i in range(n)])


def _about(body: dict, i: int) -> bool:
    return f"word{i}'" in body["messages"][-1]["content"] or f'word{i}"' in body["messages"][-1]["content"]


def _eval(cli, runner, out: Path, url: str, data: Path, *extra: str):
    return runner.invoke(cli, ["eval", "--backend", "openai", "--model", MODEL, "--base-url", url, "--data", str(data),
                               "--out", str(out), "--no-score", "--quiet", "--max-new-tokens", "64", *extra])


@pytest.fixture
def server():
    with FakeServer(MODEL) as srv:
        yield srv


@pytest.fixture
def no_sleep(monkeypatch):
    """The backoff recorded instead of slept (tests never time anything)."""
    waits: list[float] = []
    monkeypatch.setattr("opgen.infer.openai_backend._sleep", waits.append)
    return waits


def test_a_second_eval_into_a_locked_out_refuses_at_once(cli, runner, server, tmp_path):
    data = _rows(tmp_path / "d.parquet", 4)
    out = tmp_path / "out"
    with outdir.Lock(out):  # another eval holds it
        r = _eval(cli, runner, out, server.url, data, "--resume")
    assert r.exit_code == 1 and "another opgen eval" in r.output and "pid" in r.output, r.output
    assert server.bodies == [] and not out.exists()


def test_two_evals_at_once_one_refuses_and_the_other_completes(cli, runner, server, tmp_path):
    data = _rows(tmp_path / "d.parquet", 30)
    out = tmp_path / "out"
    started = threading.Event()
    release = threading.Event()

    def slow(body):  # the first eval waits here until the second one has been refused
        started.set()
        release.wait(20)
        return None

    server.fail_when = slow
    first = subprocess.Popen([sys.executable, "-m", "opgen", "eval", "--backend", "openai", "--model", MODEL,
                              "--base-url", server.url, "--data", str(data), "--out", str(out), "--no-score",
                              "--quiet", "--max-new-tokens", "64", "--batch-size", "8"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert started.wait(60)
        asked = len(server.bodies)
        second = _eval(cli, runner, out, server.url, data, "--resume")
        during = len(server.bodies) - asked  # the first's first batch still arriving; none of the second's
    finally:
        release.set()
        server.fail_when = None
        text, _ = first.communicate(timeout=120)
    assert second.exit_code == 1 and "another opgen eval" in second.output, second.output
    assert during < 8
    assert first.returncode == 0 and "30 rows" in text, text
    assert [r["index"] for r in read_jsonl(out / MODEL / "d_generations.jsonl")] == list(range(30))


@pytest.mark.slow
def test_a_row_that_keeps_failing_costs_only_itself_and_resume_retries_it(cli, runner, server, tmp_path, no_sleep):
    data = _rows(tmp_path / "d.parquet", 100)
    # row 37: 429 until the retries run out; row 61: 200 with a body that is not JSON; the rest
    # answered at the second attempt (429 half the time)
    seen: dict[str, int] = {}
    lock = threading.Lock()

    def faults(body):
        key = body["messages"][-1]["content"]
        with lock:
            seen[key] = seen.get(key, 0) + 1
        if _about(body, 37):
            return "429"
        if _about(body, 61):
            return "garbage"
        return "429" if seen[key] == 1 else None

    server.fail_when = faults
    out = tmp_path / "out"
    r = _eval(cli, runner, out, server.url, data, "--retries", "2")
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert "2 of 100 rows failed (row 37:" in r.output and "--resume" in r.output, r.output
    gen = out / MODEL / "d_generations.jsonl"
    lines = read_jsonl(gen)
    answered = [x["index"] for x in lines if "response" in x]
    assert len(answered) == 98 and 37 not in answered and 61 not in answered
    assert {x["index"] for x in lines if "failed" in x} == {37, 61}
    assert not (out / MODEL / "metrics.json").exists()
    # resumed against a healthy server: only the failed rows are asked again
    server.fail_when = None
    before = len(server.bodies)
    r = _eval(cli, runner, out, server.url, data, "--resume")
    assert r.exit_code == 0, r.output
    assert len(server.bodies) - before == 2
    # and the file is the one an uninterrupted run writes (row order, no failed lines)
    assert _eval(cli, runner, tmp_path / "clean", server.url, data).exit_code == 0
    assert gen.read_bytes() == (tmp_path / "clean" / MODEL / "d_generations.jsonl").read_bytes()


def test_a_server_dying_mid_run_keeps_every_answered_row(cli, runner, tmp_path, no_sleep):
    data = _rows(tmp_path / "d.parquet", 40)
    out = tmp_path / "out"
    with FakeServer(MODEL) as srv:
        count = [0]
        lock = threading.Lock()

        def die_at_25(body):
            with lock:
                count[0] += 1
                return "die" if count[0] == 25 else None

        srv.fail_when = die_at_25
        r = _eval(cli, runner, out, srv.url, data, "--batch-size", "10", "--concurrency", "2", "--retries", "1")
    assert r.exit_code == 1 and "Traceback" not in r.output and "--resume" in r.output, r.output
    gen = out / MODEL / "d_generations.jsonl"
    answered = {x["index"] for x in read_jsonl(gen) if "response" in x}
    # two batches, and the third's rows answered before the death (one more may have been in flight)
    assert set(range(20)) <= answered and 24 <= len(answered) <= 25
    with FakeServer(MODEL) as srv:  # the same server back at another port
        r = _eval(cli, runner, out, srv.url, data, "--resume")
        assert r.exit_code == 0, r.output
        assert len(srv.bodies) == 40 - len(answered)
        assert _eval(cli, runner, tmp_path / "clean", srv.url, data).exit_code == 0
    assert gen.read_bytes() == (tmp_path / "clean" / MODEL / "d_generations.jsonl").read_bytes()


def test_an_unreachable_server_fails_before_any_retry(cli, runner, tmp_path, no_sleep):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = _rows(tmp_path / "d.parquet", 3)
    r = _eval(cli, runner, tmp_path / "out", f"http://127.0.0.1:{port}/v1", data)  # default --retries 6
    assert r.exit_code == 1 and "cannot reach" in r.output and "ConnectionRefusedError" in r.output, r.output
    assert no_sleep == []  # no backoff at all before the message
    assert not (tmp_path / "out" / MODEL / "d_generations.jsonl").exists()


def test_refused_credentials_fail_before_the_first_request(cli, runner, server, tmp_path, monkeypatch):
    server.key = "sk-right"
    data = _rows(tmp_path / "d.parquet", 3)
    monkeypatch.setenv("MY_KEY", "sk-wrong")
    r = _eval(cli, runner, tmp_path / "out", server.url, data, "--api-key-env", "MY_KEY")
    assert r.exit_code == 1 and "refuses the credentials" in r.output and "HTTP 401" in r.output, r.output
    assert server.bodies == []  # nothing was asked (nor paid for)
    monkeypatch.setenv("MY_KEY", "sk-right")
    assert _eval(cli, runner, tmp_path / "out", server.url, data, "--api-key-env", "MY_KEY").exit_code == 0


def test_eval_refuses_a_folder_it_did_not_write(cli, runner, server, tmp_path):
    out = tmp_path / "project"
    out.mkdir()
    (out / "notes.md").write_text("mine")
    (out / "src").mkdir()
    data = _rows(tmp_path / "d.parquet", 2)
    r = _eval(cli, runner, out, server.url, data)
    assert r.exit_code == 1 and "notes.md" in r.output and "opgen eval does not write" in r.output, r.output
    assert sorted(p.name for p in out.iterdir()) == ["notes.md", "src"] and server.bodies == []
    # its own folder, again: fine
    assert _eval(cli, runner, tmp_path / "o", server.url, data).exit_code == 0
    assert _eval(cli, runner, tmp_path / "o", server.url, data, "--resume").exit_code == 0
