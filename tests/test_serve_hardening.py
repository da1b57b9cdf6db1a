"""`opgen serve` under attack, on 127.0.0.1 with bounded counts and times (issue 31 item 5).

Each test is an attack that worked on the server before it was hardened: a recipe object naming a
library (executed before the 422), idle and trickling connections (300 idle sockets made /health
answer 503 for everyone; one byte every 2 s kept a connection open forever), a build whose options
no draw can satisfy (the server computed it in its own process), a 100,000-deep body (500), a
server bound off loopback without a token. A sentinel file proves a library never ran.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from integration_fixtures import RECIPE
from test_serve import start_server as _start
from user_libraries import SIX


def request(url: str, body=None, *, method: str = "POST", headers: dict | None = None, timeout: float = 60.0,
            source: str | None = None):
    """(status, JSON reply) of one request; ``source`` binds the client's address (another 127.x)."""
    import http.client

    host, port = url.removeprefix("http://").split("/")[0].split(":")
    path = "/" + url.removeprefix("http://").split("/", 1)[1]
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout,
                                      source_address=(source, 0) if source else None)
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
    reply = conn.getresponse()
    raw = reply.read()
    conn.close()
    try:
        return reply.status, json.loads(raw or b"{}")
    except ValueError:
        return reply.status, raw.decode(errors="replace")


@pytest.fixture(scope="module")
def server():
    proc, url = _start(["--header-timeout", "2", "--body-timeout", "3", "--max-connections-per-client", "16",
                        "--tasks-timeout", "4", "--max-tasks", "32"])
    yield url
    proc.terminate()
    proc.wait(timeout=30)


def test_a_recipe_objects_library_is_refused_before_anything_loads_it(server, tmp_path):
    sentinel = tmp_path / "ran"
    lib = tmp_path / "evil.yaml"  # a valid library whose first source writes the sentinel when executed
    lib.write_text(SIX.replace("          def rev(s):", f"          import pathlib\n"
                               f"          pathlib.Path({str(sentinel)!r}).write_text('x')\n          def rev(s):", 1))
    for recipe, field in (({**RECIPE, "library": str(lib)}, "recipe.library"),
                          ({**RECIPE, "library": "os:system"}, "recipe.library"),
                          ({**RECIPE, "splits": {"train": {**RECIPE["splits"]["train"], "library": str(lib)}}},
                           "recipe.splits.train.library"),
                          ({**RECIPE, "leakage": {"avoid_programs": [str(lib)]}}, "avoid_programs")):
        status, reply = request(server + "/tasks", {"recipe": recipe, "split": "train", "n": 1})
        assert status == 422 and field in reply["error"], reply
    assert not sentinel.exists()


def test_300_idle_connections_do_not_starve_another_client_and_are_closed_at_the_deadline(server):
    host, port = server.removeprefix("http://").split(":")
    idle = []
    try:
        for _ in range(300):
            s = socket.socket()
            s.settimeout(10)
            s.bind(("127.0.0.1", 0))
            s.connect((host, int(port)))
            s.sendall(b"GET /health HTTP/1.1\r\n")  # half a request, never finished
            idle.append(s)
        t0 = time.monotonic()
        status, body = request(server + "/health", method="GET", source="127.0.0.2", timeout=10)
        assert status == 200 and body["status"] == "ok"
        # every idle socket is closed by the server: over the per-client cap at once, the rest at the deadline
        closed = 0
        for s in idle:
            try:
                closed += s.recv(1) == b""
            except ConnectionResetError:
                closed += 1
            except TimeoutError:  # still open after the deadline: counted as not closed
                pass
        assert closed == 300 and time.monotonic() - t0 < 10
    finally:
        for s in idle:
            s.close()
    assert request(server + "/health", method="GET")[0] == 200


def test_a_trickling_client_is_cut_off(server):
    host, port = server.removeprefix("http://").split(":")
    for head in (b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n",  # headers trickle
                 b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"):
        s = socket.create_connection((host, int(port)), timeout=10)
        t0 = time.monotonic()
        s.sendall(head)
        cut = False
        for _ in range(20):  # one byte every 0.5 s, for at most 10 s
            try:
                s.sendall(b"x")
                s.settimeout(0.5)
                if s.recv(1) == b"":
                    cut = True
                    break
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                cut = True
                break
        s.close()
        assert cut and time.monotonic() - t0 < 8


SLOW = {"recipe": RECIPE, "split": "train", "n": 1, "seed": 5, "offset": 60_000,
        "options": {"depths": [3], "per_depth": 65_536}}  # 60,001 rows to build: far over a 4 s deadline


def test_options_no_draw_can_satisfy_get_a_4xx_at_once(server):
    t0 = time.monotonic()
    status, reply = request(server + "/tasks", {"recipe": RECIPE, "split": "train", "n": 1, "seed": 5,
                                                "options": {"depths": [40]}}, timeout=60)
    assert 400 <= status < 500 and "split 'train'" in reply["error"], reply
    assert time.monotonic() - t0 < 30


def test_a_build_over_its_deadline_gets_413_while_the_server_keeps_answering(server):
    got: dict = {}
    t = threading.Thread(target=lambda: got.setdefault("reply", request(server + "/tasks", SLOW, timeout=60)))
    t0 = time.monotonic()
    t.start()
    time.sleep(0.5)
    for _ in range(3):  # the server answers others while that build runs
        assert request(server + "/health", method="GET", timeout=5)[0] == 200
    t.join(60)
    status, reply = got["reply"]
    assert status == 413 and "did not finish within 4 s" in reply["error"], reply
    assert time.monotonic() - t0 < 30
    # the build worker was killed and replaced: the next build works
    status, reply = request(server + "/tasks", {"recipe": RECIPE, "split": "train", "n": 2, "seed": 5})
    assert status == 200 and len(reply["rows"]) == 2
    killed = [x for x in request(server + "/metrics", method="GET")[1].splitlines()
              if x.startswith("opgen_builds_killed_total ")]
    assert killed and int(killed[0].split()[1]) >= 1


@pytest.mark.parametrize(("body", "status", "message"), [
    (b"[" * 100_000 + b"]" * 100_000, 400, "nests deeper"),
    (b'{"items": [], "x": ' + b"[" * 80 + b"1" + b"]" * 80 + b"}", 400, "nests deeper"),
    (b'{"items": [{"ground_truth": {"tasks": null}, "response": "x"}]}', 422, "ground_truth"),
    (b'{"items": [{"ground_truth": "{}", "response": "x", "extra_info": 5}]}', 422, "extra_info"),
    (b'{"items": [], "policy": 5}', 422, "policy"),
    (b'{"items": [], "polcy": "output"}', 422, "unknown fields polcy"),
    (b'{"items": [{"ground_truth": "{}", "response": "x", "bogus": 1}]}', 422, "unknown fields bogus"),
    (b'{"query": "x", "labels": []}', 422, "query"),
    (b"\xff\xfe", 400, "not JSON"),
])
def test_malformed_deep_and_mistyped_bodies_get_a_4xx(server, body, status, message):
    path = "/reward" if b"query" in body else "/score"
    got, reply = request(server + path, body)
    assert got == status and message in reply["error"], reply


@pytest.mark.parametrize("body", [
    {"recipe": 5}, {"recipe": RECIPE, "split": 5}, {"recipe": RECIPE, "split": "train", "n": "3"},
    {"recipe": RECIPE, "split": "train", "seed": 1.5}, {"recipe": RECIPE, "split": "train", "options": []},
    {"recipe": RECIPE, "split": "train", "options": {"depths": [[1]]}},
    {"recipe": {**RECIPE, "splits": 7}, "split": "train"}, {"recipe": {**RECIPE, "seed": "x"}, "split": "train"},
    {"recipe": RECIPE, "split": "train", "extra": 1},
])
def test_wrongly_typed_task_fields_get_a_4xx_never_a_500(server, body):
    status, reply = request(server + "/tasks", body)
    assert 400 <= status < 500, reply


def test_sigterm_stops_the_server_while_a_build_runs():
    proc, url = _start(["--tasks-timeout", "120"])
    t = threading.Thread(target=lambda: request(url + "/tasks", SLOW, timeout=60), daemon=True)
    t.start()
    time.sleep(1.0)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    assert time.monotonic() - t0 < 20


def test_a_server_off_loopback_needs_a_token_and_a_token_is_checked():
    got = subprocess.run([sys.executable, "-m", "opgen", "serve", "--host", "0.0.0.0"], capture_output=True,
                         text=True, timeout=120, env={k: v for k, v in os.environ.items() if k != "OPGEN_SERVE_TOKEN"})
    assert got.returncode == 2 and "bearer token" in got.stderr, got.stderr
    proc, url = _start([], env={"OPGEN_SERVE_TOKEN": "s3cret"})
    try:
        assert request(url + "/health", method="GET")[0] == 401
        status, reply = request(url + "/score", {"items": []}, headers={"Authorization": "Bearer wrong"})
        assert status == 401 and "bearer token" in reply["error"]
        assert request(url + "/score", {"items": []}, headers={"Authorization": "Bearer s3cret"})[0] == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_task_cache_is_bounded_in_bytes():
    from opgen.serve import Limits, Service

    bound = 96 << 10  # entries of up to 6 KiB are kept: 2 rows of about 2 KB each, and the key
    svc = Service(Limits(task_cache_bytes=bound))
    try:
        for seed in range(24):  # about 24 x 5.5 KB: more than the bound
            svc.rows(RECIPE, "train", seed, {}, 2)
            assert svc._cache.bytes <= bound
        assert bound // 2 < svc._cache.bytes and len(svc._cache) < 24
    finally:
        svc.close()
