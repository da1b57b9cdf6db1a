"""`opgen serve` as a user runs it: a real server on 127.0.0.1, real HTTP requests (bounded).

/score and /reward must give `opgen score`'s scores for the same rows and responses; /tasks the
rows of `opgen build`; every bad request a 4xx with a message, and nothing over the limits accepted.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from integration_fixtures import RECIPE, rows_of

from opgen.integrations import openrlhf


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url: str, body, *, ctype: str = "application/json", timeout: float = 120.0):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": ctype}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def get(url: str):
    with urllib.request.urlopen(url, timeout=60) as r:
        return r.status, r.read().decode()


def start_server(args: list[str], env: dict | None = None):
    """``opgen serve ARGS`` on a free 127.0.0.1 port, once it answers: (process, base URL)."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "opgen", "serve", "--port", str(port), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **(env or {})})
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while True:
        try:
            with urllib.request.urlopen(url + "/health", timeout=5):
                break
        except urllib.error.HTTPError:
            break  # answering (401 with a token)
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                raise RuntimeError("opgen serve did not start: " + (proc.stdout.read() if proc.stdout else "")) \
                    from None
            time.sleep(0.3)
    return proc, url


@pytest.fixture(scope="module")
def curriculum_log(tmp_path_factory):
    return tmp_path_factory.mktemp("cur") / "state.jsonl"


@pytest.fixture(scope="module")
def server(curriculum_log):
    import yaml

    config = curriculum_log.parent / "curriculum.yaml"
    config.write_text(yaml.safe_dump({
        "settings": {"tau_num": 2, "tau_acc": 0.9, "width": 1},
        "buckets": {"trees": {"recipe": RECIPE, "split": "train",
                              "ladder": [{"depths": [1], "per_depth": 6}, {"depths": [3], "per_depth": 6}]}}}))
    proc, url = start_server(["--max-batch", "64", "--max-body-mb", "1", "--max-response-chars", "20000",
                              "--max-tasks", "32", "--curriculum", str(config), "--curriculum-log",
                              str(curriculum_log)])
    yield url
    proc.terminate()
    proc.wait(timeout=30)


def test_health_binds_loopback_and_reports_full_isolation(server):
    status, text = get(server + "/health")
    body = json.loads(text)
    assert status == 200 and body["status"] == "ok" and body["isolation"] == "full"
    assert body["limits"]["max_batch"] == 64


def test_score_equals_opgen_score(server, graded):
    rows, responses, scores, _ = graded
    items = [{"ground_truth": r["reward_model"]["ground_truth"], "response": x, "extra_info": r["extra_info"]}
             for r, x in zip(rows, responses)]
    status, body = post(server + "/score", {"items": items})
    assert status == 200, body
    assert body["scores"] == scores and [g["acc"] for g in body["grades"]] == [float(s == 1.0) for s in scores]
    # conversational responses grade the same
    chat = [{**it, "response": [{"role": "assistant", "content": it["response"]}]} for it in items]
    assert post(server + "/score", {"items": chat})[1]["scores"] == scores


def test_reward_speaks_openrlhfs_remote_rm_protocol(server, graded):
    rows, responses, scores, _ = graded
    prompts = [f"<|im_start|>user\n{r['prompt'][0]['content']}<|im_end|>\n<|im_start|>assistant\n" for r in rows]
    payload = {"query": [p + x for p, x in zip(prompts, responses)], "prompts": prompts,
               "labels": [openrlhf.label(r) for r in rows]}
    status, body = post(server + "/reward", payload)
    assert status == 200, body
    assert body["rewards"] == scores == body["scores"] and len(body["extra_logs"]["acc"]) == len(rows)
    # a bare ground truth as the label, and no prompts (query is the response)
    plain = {"query": responses, "labels": [r["reward_model"]["ground_truth"] for r in rows]}
    assert post(server + "/reward", plain)[1]["rewards"] == scores


def test_tasks_are_the_built_rows_in_disjoint_pages(server, graded, tmp_path):
    _, _, _, out = graded
    built = rows_of(out, "test")
    page1 = post(server + "/tasks", {"recipe": RECIPE, "split": "test", "n": 4, "seed": 3})
    assert page1[0] == 200, page1
    page2 = post(server + "/tasks", {"recipe": RECIPE, "split": "test", "n": 4, "seed": 3, "offset": 4})[1]
    assert page1[1]["rows"] + page2["rows"] == built  # 6 rows: the second page has 2 and says so
    assert page1[1]["next_offset"] == 4 and page2["exhausted"] and page2["next_offset"] == 6
    other = post(server + "/tasks", {"recipe": RECIPE, "split": "test", "n": 4, "seed": 4})[1]["rows"]
    assert other != page1[1]["rows"]
    # a harder difficulty: the generator's own options
    deep = post(server + "/tasks", {"recipe": RECIPE, "split": "test", "n": 3, "seed": 3,
                                    "options": {"depths": [4], "per_depth": 3}})[1]["rows"]
    assert [r["extra_info"]["depth"] for r in deep] == [4, 4, 4]


@pytest.mark.parametrize(("path", "body", "ctype", "status", "message"), [
    ("/score", b"{not json", "application/json", 400, "not JSON"),
    ("/score", b"{}", "text/plain", 415, "application/json"),
    ("/score", b"[1, 2]", "application/json", 422, "JSON object"),
    ("/score", {"items": "x"}, "application/json", 422, "items"),
    ("/score", {"items": [{"ground_truth": "{}", "response": "x"}]}, "application/json", 422, "ground_truth[0]"),
    ("/score", {"items": [{"ground_truth": 3, "response": "x"}]}, "application/json", 422, "items[0].ground_truth"),
    ("/score", {"items": [{"ground_truth": "{\"ref_output\": 1}", "response": 5}]}, "application/json", 422,
     "items[0].response"),
    ("/score", {"items": [{"ground_truth": "{\"ref_output\": 1}", "response": "x"}] * 65}, "application/json",
     413, "limit of 64"),
    ("/score", {"items": [{"ground_truth": "{\"ref_output\": 1}", "response": "x" * 20001}]}, "application/json",
     413, "20001 characters"),
    ("/score", {"items": [], "policy": "nope"}, "application/json", 422, "policy"),
    ("/reward", {"query": ["a"], "labels": []}, "application/json", 422, "labels"),
    ("/reward", {"query": ["a"] * 65, "labels": ["{}"] * 65}, "application/json", 413, "limit of 64"),
    ("/tasks", {"recipe": "no-such-recipe", "split": "x"}, "application/json", 422, "recipe"),
    ("/tasks", {"recipe": "/etc/passwd", "split": "x"}, "application/json", 422, "files are not served"),
    ("/tasks", {"recipe": RECIPE, "split": "nope"}, "application/json", 422, "has splits train, test"),
    ("/tasks", {"recipe": {**RECIPE, "splits": {"x": {**RECIPE["splits"]["test"], "generator": "os:system"}}},
                "split": "x"}, "application/json", 422, "import paths are not served"),
    ("/tasks", {"recipe": RECIPE, "split": "test", "n": 33}, "application/json", 413, "between 1 and 32"),
    ("/tasks", {"recipe": RECIPE, "split": "test", "n": -1}, "application/json", 422, "between 1 and 32"),
    ("/tasks", {"recipe": RECIPE, "split": "test", "n": 0}, "application/json", 422, "between 1 and 32"),
    ("/curriculum/tasks", {"n": 0}, "application/json", 422, "between 1 and 32"),
    ("/curriculum/tasks", {"n": 33}, "application/json", 413, "between 1 and 32"),
    ("/tasks", {"recipe": RECIPE, "split": "test", "offset": -1}, "application/json", 422, "offset"),
    ("/tasks", {"recipe": RECIPE, "split": "test", "offset": 70000}, "application/json", 413, "offset + n"),
    ("/tasks", {"recipe": RECIPE, "split": "test", "options": {"depths": "deep"}}, "application/json", 422,
     "options.depths"),
])
def test_bad_requests_get_a_4xx_with_a_message(server, path, body, ctype, status, message):
    got, reply = post(server + path, body, ctype=ctype)
    assert got == status, reply
    assert message in reply["error"], reply


def test_a_body_over_the_limit_is_refused_before_it_is_read(server):
    import http.client

    host, port = server.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.putrequest("POST", "/score")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", str(2 << 20))  # declared, never sent
    conn.endheaders()
    reply = conn.getresponse()
    assert reply.status == 413 and "limit of 1048576" in json.loads(reply.read())["error"]
    conn.close()
    # chunked (no declared length): cut off once the limit is passed
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    chunks = (b"x" * 65536 for _ in range(40))
    try:
        conn.request("POST", "/score", body=chunks, headers={"Content-Type": "application/json"},
                     encode_chunked=True)
        reply = conn.getresponse()
        assert reply.status == 413 and "over the limit" in json.loads(reply.read())["error"]
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server answered 413 and closed while the client was still sending
    conn.close()


def test_metrics_count_requests_by_route_and_status(server):
    post(server + "/score", {"items": []})
    status, text = get(server + "/metrics")
    assert status == 200
    assert 'opgen_requests_total{route="/score",status="200"}' in text and "opgen_graded_total" in text


def test_curriculum_over_http_moves_with_reported_rewards_and_logs_every_step(server, curriculum_log):
    status, body = post(server + "/curriculum/tasks", {"n": 2})
    assert status == 200, body
    rows = body["rows"]
    assert [r["extra_info"]["depth"] for r in rows] == [1, 1] and body["state"]["buckets"]["trees"]["window"] == [0, 0]
    reports = [{"row": r["extra_info"]["curriculum_row"], "reward": 1.0} for r in rows]
    status, body = post(server + "/curriculum/report", {"reports": reports})
    assert status == 200 and body["state"]["buckets"]["trees"]["window"] == [1, 1], body
    harder = post(server + "/curriculum/tasks", {"n": 2})[1]["rows"]
    assert [r["extra_info"]["depth"] for r in harder] == [3, 3]
    states = [json.loads(x) for x in curriculum_log.read_text().splitlines()]
    assert [s["step"] for s in states] == [2]  # one line per report request
    row = harder[0]["extra_info"]["curriculum_row"]
    for bad, status, message in (
            ({"reports": [{"row": "trees/0/0/999", "reward": 1}]}, 422, "not a row this curriculum served"),
            ({"reports": [{"row": row, "reward": 3}]}, 422, "in [0, 1]"),
            ({"reports": [{"row": row, "reward": 1, "bucket": "trees"}]}, 422, "unknown fields bucket"),
            ({"reports": reports}, 409, "reported already"),
            ({"reports": "x"}, 422, "reports"),
            ({"reports": [], "extra": 1}, 422, "unknown fields extra")):
        got, reply = post(server + "/curriculum/report", bad)
        assert got == status and message in reply["error"], (bad, reply)
    assert 'opgen_curriculum_high{bucket="trees"} 1' in get(server + "/metrics")[1]


def test_concurrent_task_requests_all_succeed_with_the_same_rows(server):
    # opgen.build keeps process-wide state: concurrent builds once failed with HTTP 500
    from concurrent.futures import ThreadPoolExecutor

    def ask(offset: int):
        return post(server + "/tasks", {"recipe": RECIPE, "split": "train", "n": 3, "seed": 11, "offset": offset})

    with ThreadPoolExecutor(6) as pool:
        got = list(pool.map(ask, [0, 3, 0, 3, 6, 0]))
    assert [s for s, _ in got] == [200] * 6, got
    assert got[0][1]["rows"] == got[2][1]["rows"] == got[5][1]["rows"]
    pages = [r["extra_info"]["row_id"] for s, b in (got[0], got[1], got[4]) for r in b["rows"]]
    assert len(set(pages)) == 9


def test_ray_only_options_are_refused_without_ray(tmp_path):
    cur = tmp_path / "c.yaml"
    cur.write_text("buckets: {}\n")
    for args, message in ((["--replicas", "2"], "--replicas is for --ray"),
                          (["--ray", "--curriculum", str(cur)], "serve it without --ray")):
        got = subprocess.run([sys.executable, "-m", "opgen", "serve", *args], capture_output=True, text=True,
                             timeout=120)
        assert got.returncode == 2 and message in got.stderr, got.stderr
