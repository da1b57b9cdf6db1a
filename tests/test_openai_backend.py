"""`opgen eval --backend openai` against a fake OpenAI-compatible server on 127.0.0.1 (stdlib only).

What a real `vllm serve` answers is checked in tests/test_eval_vllm.py (marker vllm); here the
client's own behaviour: request bodies, ordering, continuation, retries, timeouts, errors.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tiny_model as tm
from eval_helpers import read_jsonl
from fake_openai import ANSWER_TOKENS, FakeServer, answer, prompt_tokens

from opgen.infer.base import BackendError, Request, Sampling
from opgen.infer.openai_backend import OpenAIBackend, OpenAIOptions

MODEL = "served-model"


@pytest.fixture
def server():
    with FakeServer(MODEL) as srv:
        yield srv


def _eval(cli, runner, out: Path, urls, *data: Path, extra=()):
    args = ["eval", "--backend", "openai", "--model", MODEL, "--out", str(out), "--no-score", "--quiet",
            "--max-new-tokens", "64", *extra]
    for u in urls:
        args += ["--base-url", u]
    for d in data:
        args += ["--data", str(d)]
    return runner.invoke(cli, args)


def _backend(url, **kw) -> OpenAIBackend:
    opts = OpenAIOptions(base_urls=(url,) if isinstance(url, str) else tuple(url), **kw)
    backend = OpenAIBackend(MODEL, Sampling(max_new_tokens=64), opts)
    backend.waits = []
    backend.sleep = backend.waits.append  # record the backoff instead of sleeping
    return backend


def _requests(k: int) -> list[Request]:
    return [Request(str(i), (("user", f"question number {i}"),)) for i in range(k)]


def test_cli_writes_rows_in_order_with_explicit_sampling_and_counts(cli, runner, server, tmp_path):
    trees = tm.write_trees(tmp_path / "trees.parquet", n=12)
    res = _eval(cli, runner, tmp_path / "out", [server.url], trees, extra=("--concurrency", "4"))
    assert res.exit_code == 0, res.output
    lines = read_jsonl(tmp_path / "out" / MODEL / "trees_generations.jsonl")
    assert [r["index"] for r in lines] == list(range(12))
    by_prompt = {json.dumps(b["messages"], sort_keys=True): b for b in server.bodies}
    from opgen.infer.run import read_rows

    for row, rec in zip(read_rows(trees), lines):
        body = by_prompt[json.dumps([{"role": r, "content": c} for r, c in row.messages], sort_keys=True)]
        assert rec["response"] == answer(body)
        assert rec["prompt_tokens"] == prompt_tokens(body)
        assert rec["completion_tokens"] == ANSWER_TOKENS and rec["finish_reason"] == "stop"
    for body in server.bodies:
        assert (body["model"], body["n"], body["temperature"], body["top_p"], body["max_tokens"]) == \
            (MODEL, 1, 0.0, 1.0, 64)
        assert "seed" not in body and "continue_final_message" not in body and "add_generation_prompt" not in body
    metrics = json.loads((tmp_path / "out" / MODEL / "metrics.json").read_text())
    assert metrics["backend"] == "openai" and metrics["data"]["trees"]["generation"]["truncated_rows"] == 0


def test_truncation_seed_and_samples_are_recorded(cli, runner, server, tmp_path):
    trees = tm.write_trees(tmp_path / "trees.parquet", n=3)
    res = _eval(cli, runner, tmp_path / "out", [server.url], trees,
                extra=("--max-new-tokens", "5", "--n", "3", "--temperature", "0.7", "--top-p", "0.9",
                       "--seed", "11"))
    assert res.exit_code == 0, res.output
    lines = read_jsonl(tmp_path / "out" / MODEL / "trees_generations.jsonl")
    for rec in lines:
        assert rec["finish_reasons"] == ["length"] * 3
        assert [r.rsplit("-", 1)[1] for r in rec["responses"]] == ["0", "1", "2"]  # by choice index
        # usage is a total over the choices: per-sample counts are not known
        assert rec["completion_tokens"] == [-1, -1, -1]
    assert all((b["n"], b["temperature"], b["top_p"], b["max_tokens"], b["seed"]) == (3, 0.7, 0.9, 5, 11)
               for b in server.bodies)
    metrics = json.loads((tmp_path / "out" / MODEL / "metrics.json").read_text())
    assert metrics["data"]["trees"]["generation"]["truncated_rows"] == 3


def test_assistant_prefix_is_sent_for_continuation(cli, runner, server, tmp_path):
    from opgen.infer.run import read_rows

    prefixed = tm.write_prefixed(tmp_path / "prefixed.parquet")
    res = _eval(cli, runner, tmp_path / "out", [server.url], prefixed)
    assert res.exit_code == 0, res.output
    rows = read_rows(prefixed)
    assert len(server.bodies) == len(rows)
    prefixes = sorted(b["messages"][-1]["content"] for b in server.bodies)
    assert prefixes == sorted(r.assistant_prefix for r in rows)
    for body in server.bodies:
        assert body["messages"][-1]["role"] == "assistant"
        assert body["continue_final_message"] is True and body["add_generation_prompt"] is False


def test_429_5xx_and_dropped_connections_are_retried_with_exponential_backoff(server):
    server.faults = ["500", "502", "drop", "503"]
    backend = _backend(server.url, concurrency=1)
    gens = backend.generate(_requests(2), Sampling(max_new_tokens=64))
    assert [g.key for g in gens] == ["0", "1"]
    assert backend.waits == [0.5, 1.0, 2.0, 4.0]
    assert backend.stats["retries"] == 4
    server.faults = ["429"]  # Retry-After: 0 is honoured
    backend = _backend(server.url, concurrency=1)
    backend.generate(_requests(1), Sampling(max_new_tokens=64))
    assert backend.waits == [0.0]


def test_backoff_is_capped(server):
    server.faults = ["503"] * 4
    backend = _backend(server.url, concurrency=1, backoff_s=1.0, backoff_max_s=3.0)
    backend.generate(_requests(1), Sampling(max_new_tokens=64))
    assert backend.waits == [1.0, 2.0, 3.0, 3.0]


def test_retries_run_out_with_a_clear_error(server):
    server.faults = ["503"] * 3
    backend = _backend(server.url, concurrency=1, retries=2)
    with pytest.raises(BackendError, match=r"row 0: .* failed 3 times, last: HTTP 503"):
        backend.generate(_requests(1), Sampling(max_new_tokens=64))


def test_a_slow_answer_times_out_and_is_retried(server):
    server.faults = ["sleep:1.5"]
    backend = _backend(server.url, concurrency=1, timeout_s=0.3)
    gens = backend.generate(_requests(1), Sampling(max_new_tokens=64))
    assert gens[0].responses[0].startswith("ans-") and backend.stats["retries"] == 1
    server.faults = ["sleep:1.5"]
    backend = _backend(server.url, concurrency=1, timeout_s=0.3, retries=0)
    with pytest.raises(BackendError, match="row 0: .*failed 1 times.*timed out"):
        backend.generate(_requests(1), Sampling(max_new_tokens=64))


def test_a_refused_request_fails_at_once_naming_the_row(cli, runner, server, tmp_path):
    server.faults = ["400"]
    backend = _backend(server.url, concurrency=1)
    with pytest.raises(BackendError, match="row 0: HTTP 400"):
        backend.generate(_requests(1), Sampling(max_new_tokens=64))
    assert backend.waits == []
    # through the CLI: a model the server does not serve
    trees = tm.write_trees(tmp_path / "trees.parquet", n=2)
    res = runner.invoke(cli, ["eval", "--backend", "openai", "--model", "other", "--base-url", server.url,
                              "--data", str(trees), "--out", str(tmp_path / "out"), "--no-score", "--quiet"])
    assert res.exit_code == 1 and "HTTP 404" in res.output and "not served" in res.output
    assert "Traceback" not in res.output


def test_unreachable_server_is_a_clear_failure(cli, runner, tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    trees = tm.write_trees(tmp_path / "trees.parquet", n=1)
    res = _eval(cli, runner, tmp_path / "out", [f"http://127.0.0.1:{port}/v1"], trees, extra=("--retries", "0"))
    assert res.exit_code == 1 and "ConnectionRefusedError" in res.output


@pytest.mark.slow
def test_several_servers_share_the_work_and_order_is_kept(cli, runner, tmp_path):
    trees = tm.write_trees(tmp_path / "trees.parquet", n=24)
    with FakeServer(MODEL) as a, FakeServer(MODEL) as b:
        res = _eval(cli, runner, tmp_path / "two", [a.url, b.url], trees, extra=("--concurrency", "2"))
        assert res.exit_code == 0, res.output
        assert a.bodies and b.bodies and len(a.bodies) + len(b.bodies) == 24
    with FakeServer(MODEL) as c:
        assert _eval(cli, runner, tmp_path / "one", [c.url], trees, extra=("--concurrency", "1")).exit_code == 0
    assert (tmp_path / "two" / MODEL / "trees_generations.jsonl").read_bytes() == \
        (tmp_path / "one" / MODEL / "trees_generations.jsonl").read_bytes()


def test_api_key_comes_from_the_named_variable(cli, runner, server, tmp_path, monkeypatch):
    trees = tm.write_trees(tmp_path / "trees.parquet", n=1)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert _eval(cli, runner, tmp_path / "a", [server.url], trees).exit_code == 0
    assert "Authorization" not in server.headers[-1]
    monkeypatch.setenv("MY_KEY", "sk-test")
    assert _eval(cli, runner, tmp_path / "b", [server.url], trees, extra=("--api-key-env", "MY_KEY")).exit_code == 0
    assert server.headers[-1]["Authorization"] == "Bearer sk-test"
    res = _eval(cli, runner, tmp_path / "c", [server.url], trees, extra=("--api-key-env", "UNSET_KEY_VAR"))
    assert res.exit_code == 1 and "UNSET_KEY_VAR is not set" in res.output


def test_base_url_is_checked(cli, runner, tmp_path):
    trees = tm.write_trees(tmp_path / "trees.parquet", n=1)
    res = _eval(cli, runner, tmp_path / "out", ["ftp://x"], trees)
    assert res.exit_code == 2 and "not an http(s) URL" in res.output
    res = _eval(cli, runner, tmp_path / "out", [], trees)
    assert res.exit_code == 2 and "needs --base-url" in res.output
    res = runner.invoke(cli, ["eval", "--backend", "replay", "--model", str(tmp_path / "missing"),
                              "--data", str(trees), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "does not exist" in res.output


def test_resume_keeps_rows_and_asks_only_for_the_rest(cli, runner, server, tmp_path):
    trees = tm.write_trees(tmp_path / "trees.parquet", n=6)
    assert _eval(cli, runner, tmp_path / "out", [server.url], trees, extra=("--limit", "4")).exit_code == 0
    asked = len(server.bodies)
    res = _eval(cli, runner, tmp_path / "out", [server.url], trees, extra=("--resume",))
    assert res.exit_code == 0, res.output
    assert (asked, len(server.bodies)) == (4, 6)
    assert [r["index"] for r in read_jsonl(tmp_path / "out" / MODEL / "trees_generations.jsonl")] == list(range(6))


def test_ray_options_need_the_ray_executor(cli, runner, tmp_path):
    trees = tm.write_trees(tmp_path / "trees.parquet", n=1)
    res = _eval(cli, runner, tmp_path / "out", ["http://127.0.0.1:9/v1"], trees, extra=("--replicas", "2"))
    assert res.exit_code == 2 and "--replicas: only with --executor ray" in res.output


def test_chat_template_kwargs_are_sent_with_every_request(cli, runner, server, tmp_path):
    trees = tm.write_trees(tmp_path / "trees.parquet", n=3)
    prefixed = tm.write_prefixed(tmp_path / "prefixed.parquet", n=2)
    res = _eval(cli, runner, tmp_path / "out", [server.url], trees, prefixed,
                extra=("--chat-template-kwarg", "enable_thinking=false", "--chat-template-kwarg", "depth=2"))
    assert res.exit_code == 0, res.output
    assert len(server.bodies) == 5
    assert all(b["chat_template_kwargs"] == {"depth": 2, "enable_thinking": False} for b in server.bodies)
    assert sum(b.get("continue_final_message") is True for b in server.bodies) == 2  # prefix rows still continue
    settings = json.loads((tmp_path / "out" / MODEL / "trees_generations.settings.json").read_text())
    assert settings["chat_template_kwargs"] == {"depth": 2, "enable_thinking": False}
    res = _eval(cli, runner, tmp_path / "plain", [server.url], trees)
    assert res.exit_code == 0 and all("chat_template_kwargs" not in b for b in server.bodies[5:])
