"""A tiny OpenAI-compatible chat server on 127.0.0.1 for the openai backend's tests (stdlib only).

Its answer is a pure function of the request (so tests know what each row must get back), it
records every request body and header, and it can be told to fail: a list of statuses (429, 5xx,
"drop" to close the connection without answering, "sleep:S" to answer only after S seconds) is
served to the first requests in arrival order.
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


class FakeServer:
    def __init__(self, model: str = "served-model"):
        self.model = model
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.faults: list[str] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length))
                with server.lock:
                    fault = server.faults.pop(0) if server.faults else None
                    server.bodies.append(body)
                    server.headers.append(dict(self.headers))
                if self.path != "/v1/chat/completions":
                    return self._send(404, {"error": f"no route {self.path}"})
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
                tokens = min(ANSWER_TOKENS, body["max_tokens"])
                choices = [{"index": j, "message": {"role": "assistant", "content": answer(body, j)},
                            "finish_reason": "length" if body["max_tokens"] <= ANSWER_TOKENS else "stop"}
                           for j in reversed(range(n))]  # in any order: the client sorts by index
                self._send(200, {"id": "x", "object": "chat.completion", "model": server.model, "choices": choices,
                                 "usage": {"prompt_tokens": prompt_tokens(body), "completion_tokens": tokens * n,
                                           "total_tokens": prompt_tokens(body) + tokens * n}})

            def _send(self, status, obj, headers=None):
                data = json.dumps(obj).encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> FakeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)
