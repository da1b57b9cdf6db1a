"""Loopback load test of `opgen serve` (127.0.0.1 only; bounded in requests and seconds).

    python benchmarks/bench_serve.py [--clients 32] [--requests 8] [--batch 64] [--max-seconds 300]

Starts a server, builds a small recipe's rows, then has ``--clients`` threads each send
``--requests`` POST /tasks and POST /score requests (``--batch`` responses each: gold answers and
wrong ones). Prints requests/s, p50/p99 latency per route, errors, /score's responses/s, and
`opgen score`'s responses/s on the same answers (one process, the same sandbox), with CPU seconds
and the load average: this machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.integration_fixtures import RECIPE, build, opgen_score, responses_for, rows_of  # noqa: E402


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(url: str, body: dict) -> tuple[int, float]:
    data = json.dumps(body).encode()
    t0 = time.perf_counter()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        status = e.code
        print(f"  {url}: HTTP {e.code}: {e.read()[:300]!r}", file=sys.stderr)
    except OSError as e:
        status = 0
        print(f"  {url}: {type(e).__name__}: {e}", file=sys.stderr)
    return status, time.perf_counter() - t0


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--requests", type=int, default=8, help="per client and route")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--max-seconds", type=float, default=300.0)
    a = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    out = build(tmp)
    rows = rows_of(out, "train") + rows_of(out, "test")
    rows = (rows * (a.batch // len(rows) + 1))[:a.batch]
    responses = responses_for(rows)
    items = [{"ground_truth": r["reward_model"]["ground_truth"], "response": x, "extra_info": r["extra_info"]}
             for r, x in zip(rows, responses)]

    port = _port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "opgen", "serve", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while True:
            try:
                urllib.request.urlopen(url + "/health", timeout=30).read()
                break
            except OSError:
                if time.time() > deadline:
                    raise SystemExit("server did not start") from None
                time.sleep(0.3)
        _post(url + "/tasks", {"recipe": RECIPE, "split": "train", "n": 4, "seed": 3})  # warm the cache
        _post(url + "/score", {"items": items})  # warm the sandbox

        lat: dict[str, list[float]] = {"/tasks": [], "/score": []}
        errors = [0]
        lock = threading.Lock()
        stop_at = time.time() + a.max_seconds

        def client(k: int) -> None:
            for i in range(a.requests):
                if time.time() > stop_at:
                    return
                for route, body in (("/tasks", {"recipe": RECIPE, "split": "train", "n": 4, "seed": 3,
                                                "offset": (k + i) % 2 * 4}),
                                    ("/score", {"items": items})):
                    status, dt = _post(url + route, body)
                    with lock:
                        lat[route].append(dt)
                        errors[0] += status != 200

        cpu0 = os.times()
        t0 = time.perf_counter()
        threads = [threading.Thread(target=client, args=(k,)) for k in range(a.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        cpu1 = os.times()
    finally:
        server.terminate()
        server.wait(timeout=30)

    n = sum(len(v) for v in lat.values())
    print(f"load average before/after: {os.getloadavg()}")
    print(f"{a.clients} clients, {n} requests in {wall:.1f} s: {n / wall:.1f} requests/s, {errors[0]} errors "
          f"(client CPU {cpu1.user - cpu0.user + cpu1.system - cpu0.system:.1f} s)")
    for route, v in lat.items():
        print(f"  {route}: {len(v)} requests, p50 {1000 * statistics.median(v):.0f} ms, "
              f"p99 {1000 * _pct(v, 0.99):.0f} ms")
    served = len(lat["/score"]) * len(items)
    print(f"  /score: {served / wall:.1f} responses/s (shared with /tasks)")

    # opgen score on the same answers, repeated to the same count, one process
    import pyarrow as pa
    import pyarrow.parquet as pq

    reps = max(1, min(len(lat["/score"]), 16))
    big = rows * reps
    data = tmp / "bench.parquet"
    first = json.loads((out / "manifest.json").read_text())["splits"]["train"]["files"][0]["path"]
    pq.write_table(pa.Table.from_pylist(big, schema=pq.read_schema(out / first)), data)
    t0 = time.perf_counter()
    c0 = os.times()
    opgen_score(tmp, data, responses * reps, name="bench")
    dt = time.perf_counter() - t0
    c1 = os.times()
    print(f"opgen score: {len(big)} responses in {dt:.1f} s: {len(big) / dt:.1f} responses/s "
          f"(child CPU {c1.children_user - c0.children_user + c1.children_system - c0.children_system:.1f} s)")


if __name__ == "__main__":
    main()
