"""`opgen serve --ray`: the same app as a Ray Serve deployment (marker ``ray``; scripts/setup-ray.sh).

A real local Ray cluster on 127.0.0.1 serves the app through Ray Serve's HTTP proxy, next to the
plain server with the same limits: the same requests must get the same bodies (rows, grades) and
every bad request the same 4xx with the same message.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import tiny_model as tm

pytestmark = pytest.mark.ray

LIMITS = ["--max-batch", "64", "--max-body-mb", "1", "--max-response-chars", "20000", "--max-tasks", "32"]


def _start(args: list[str], deadline_s: float):
    from test_serve import _free_port, get

    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "opgen", "serve", "--port", str(port), *LIMITS, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + deadline_s
    while True:
        try:
            if get(url + "/health")[0] == 200:
                return proc, url
        except OSError:
            pass
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            raise RuntimeError(f"opgen serve {' '.join(args)} did not start: "
                               + (proc.stdout.read() if proc.stdout else ""))
        time.sleep(0.5)


@pytest.fixture(scope="module")
def servers():
    tm.require("ray")
    tm.require("ray.serve")
    tm.require("starlette")
    plain, plain_url = _start([], 120)
    ray_proc, ray_url = _start(["--ray", "--replicas", "2"], 300)
    yield plain_url, ray_url
    for proc in (ray_proc, plain):
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_health_through_the_serve_proxy(servers):
    import json

    from test_serve import get

    plain, ray = servers
    a, b = json.loads(get(plain + "/health")[1]), json.loads(get(ray + "/health")[1])
    assert b["status"] == "ok" and b["isolation"] == a["isolation"] == "full"
    assert b["limits"] == a["limits"] and b["limits"]["max_batch"] == 64 and b["version"] == a["version"]


def test_tasks_and_score_bodies_equal_the_plain_servers(servers, graded):
    from integration_fixtures import RECIPE
    from test_serve import post

    plain, ray = servers
    rows, responses, _, _ = graded
    items = [{"ground_truth": r["reward_model"]["ground_truth"], "response": x, "extra_info": r["extra_info"]}
             for r, x in zip(rows, responses)]
    requests = [("/tasks", {"recipe": RECIPE, "split": "test", "n": 4, "seed": 3}),
                ("/tasks", {"recipe": RECIPE, "split": "test", "n": 4, "seed": 3, "offset": 4}),
                ("/tasks", {"recipe": RECIPE, "split": "train", "n": 3, "seed": 5, "options": {"depths": [2]}}),
                ("/score", {"items": items}),
                ("/score", {"items": items[:5], "policy": "output_structure"})]
    for path, body in requests:
        a, b = post(plain + path, body), post(ray + path, body)
        assert a[0] == 200 and b == a, (path, a, b)
    scores = post(ray + "/score", {"items": items})[1]["scores"]
    assert 1.0 in scores and 0.0 in scores


@pytest.mark.parametrize(("path", "body", "ctype", "status"), [
    ("/score", b"{not json", "application/json", 400),
    ("/score", b"{}", "text/plain", 415),
    ("/score", {"items": "x"}, "application/json", 422),
    ("/score", {"items": [{"ground_truth": "{\"ref_output\": 1}", "response": "x"}] * 65}, "application/json", 413),
    ("/score", {"items": [{"ground_truth": "{\"ref_output\": 1}", "response": "x" * 20001}]}, "application/json",
     413),
    ("/score", {"items": [], "policy": "nope"}, "application/json", 422),
    ("/tasks", {"recipe": "/etc/passwd", "split": "x"}, "application/json", 422),
    ("/tasks", {"recipe": "rl-r1", "split": "train", "n": 33}, "application/json", 413),
    ("/curriculum/tasks", {"n": 1}, "application/json", 404),
])
def test_bad_requests_get_the_same_4xx(servers, path, body, ctype, status):
    from test_serve import post

    plain, ray = servers
    a, b = post(plain + path, body, ctype=ctype), post(ray + path, body, ctype=ctype)
    assert a[0] == status and b == a, (a, b)
    assert b[1]["error"]


def test_the_ray_deployment_refuses_what_it_cannot_bound():
    tm.require("ray.serve")
    from opgen.serve import MAX_REPLICAS, ray_deployment

    for bad in (0, MAX_REPLICAS + 1, True):
        with pytest.raises(ValueError, match="replicas"):
            ray_deployment(replicas=bad)
    got = subprocess.run([sys.executable, "-m", "opgen", "serve", "--ray", "--host", "0.0.0.0"],
                         capture_output=True, text=True, timeout=120)
    assert got.returncode == 2 and "127.0.0.1 only" in got.stderr
