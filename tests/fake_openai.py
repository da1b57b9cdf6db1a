"""A tiny OpenAI-compatible chat server on 127.0.0.1 for the openai backend's tests (stdlib only).

Its answer is a pure function of the request (so tests know what each row must get back), it
records every request body and header, and it can be told to fail: a list of statuses (429, 5xx,
"drop" to close the connection without answering, "sleep:S" to answer only after S seconds) is
served to the first requests in arrival order. ``fail_when(body)`` may return a fault for any
request (e.g. 429 for every request about one row), ``"garbage"`` answers 200 with a body that is
not JSON, ``"die"`` shuts the whole server down (connections refused from then on), and ``key``
makes it require ``Authorization: Bearer <key>`` (401 otherwise). ``GET /v1/models`` lists the
model, as vLLM's server does.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ANSWER_TOKENS = 7


def answer(body: dict, j: int = 0) -> str:
    """What the server answers to ``body``'s sample ``j``: a digest of the conversation."""
    blob = json.dumps(body["messages"], sort_keys=True).encode("utf-8")
    return f"ans-{hashlib.sha256(blob).hexdigest()[:10]}-{j}"


def prompt_tokens(body: dict) -> int:
    return sum(len(m["content"].split()) for m in body["messages"])


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def _authorized(self) -> bool:
        server = self.server.fake  # type: ignore[attr-defined]
        if server.key is not None and self.headers.get("Authorization") != f"Bearer {server.key}":
            self._send(401, {"error": {"message": "invalid api key"}})
            return False
        return True

    def _dead(self) -> bool:
        server = self.server.fake  # type: ignore[attr-defined]
        if server.dead:  # "die": even kept-alive connections get no answer any more
            self.close_connection = True
            self.connection.shutdown(2)
        return server.dead

    def do_GET(self):
        server = self.server.fake  # type: ignore[attr-defined]
        if self._dead():
            return
        with server.lock:
            server.gets += 1
        if not self._authorized():
            return
        if self.path != "/v1/models":
            return self._send(404, {"error": f"no route {self.path}"})
        self._send(200, {"object": "list", "data": [{"id": server.model, "object": "model"}]})

    def do_POST(self):
        server = self.server.fake  # type: ignore[attr-defined]
        if self._dead():
            return
        length = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(length))
        with server.lock:
            fault = server.faults.pop(0) if server.faults else None
            server.bodies.append(body)
            server.headers.append(dict(self.headers))
        if fault is None and server.fail_when is not None:  # outside the lock: it may wait
            fault = server.fail_when(body)
        if not self._authorized():
            return
        if self.path != "/v1/chat/completions":
            return self._send(404, {"error": f"no route {self.path}"})
        if fault == "die":
            server.dead = True
            self.close_connection = True
            self.connection.shutdown(2)
            threading.Thread(target=server.stop, daemon=True).start()
            return
        if fault == "garbage":
            data = b"<html>bad gateway</html>"
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if fault == "drop":
            self.close_connection = True
            self.connection.shutdown(2)
            return
        if fault is not None and fault.startswith("sleep:"):
            time.sleep(float(fault.split(":", 1)[1]))
        elif fault is not None:
            status = int(fault)
            extra = {"Retry-After": "0"} if status == 429 else {}
            return self._send(status, {"error": {"message": f"injected {status}"}}, extra)
        if body.get("model") != server.model:
            return self._send(404, {"error": {"message": f"model {body.get('model')!r} not served"}})
        # answers arrive out of order: each waits a little, by its content
        time.sleep(int(answer(body)[4], 16) * 0.002)
        n = body.get("n", 1)
        budget = body.get("max_tokens") or body.get("max_completion_tokens") or 1 << 20  # verifiers sends none
        tokens = min(ANSWER_TOKENS, budget)
        say = server.reply or answer
        choices = [{"index": j, "message": {"role": "assistant", "content": say(body, j)},
                    "finish_reason": "length" if budget <= ANSWER_TOKENS else "stop"}
                   for j in reversed(range(n))]  # in any order: the client sorts by index
        if body.get("stream"):  # server-sent events, as OpenAI streams a completion (verifiers asks for one)
            return self._stream(server.model, choices, prompt_tokens(body), tokens * n)
        self._send(200, {"id": "x", "object": "chat.completion", "model": server.model, "choices": choices,
                         "usage": {"prompt_tokens": prompt_tokens(body), "completion_tokens": tokens * n,
                                   "total_tokens": prompt_tokens(body) + tokens * n}})

    def _stream(self, model, choices, prompt, completion):
        events = [{"id": "x", "object": "chat.completion.chunk", "model": model,
                   "choices": [{"index": c["index"], "delta": {"role": "assistant", "content": c["message"]["content"]},
                                "finish_reason": None}]} for c in choices]
        events += [{"id": "x", "object": "chat.completion.chunk", "model": model,
                    "choices": [{"index": c["index"], "delta": {}, "finish_reason": c["finish_reason"]}]}
                   for c in choices]
        events.append({"id": "x", "object": "chat.completion.chunk", "model": model, "choices": [],
                       "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                 "total_tokens": prompt + completion}})
        data = "".join(f"data: {json.dumps(e)}\n\n" for e in events).encode() + b"data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send(self, status, obj, headers=None):
        data = json.dumps(obj).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)


class FakeServer:
    def __init__(self, model: str = "served-model"):
        self.model = model
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.faults: list[str] = []
        self.fail_when = None  # body -> fault or None
        self.reply = None  # (body, j) -> the answer, instead of answer()'s digest (a scripted model)
        self.key: str | None = None
        self.gets = 0
        self.dead = False
        self.lock = threading.Lock()
        self._stopped = False
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.fake = self  # type: ignore[attr-defined]
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> FakeServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the listening socket: later connections are refused."""
        with self.lock:
            if self._stopped:
                return
            self._stopped = True
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    def __exit__(self, *exc) -> None:
        self.stop()
