"""An OpenAI-compatible chat endpoint: `vllm serve`, SGLang, or a hosted API, over plain HTTP.

Pure standard library (``http.client``): one keep-alive connection per worker thread, at most
``concurrency`` requests in flight per base URL, requests pulled from one queue by the threads
of every URL (several servers are load-balanced by whoever is free), results returned in request
order. 429, 5xx, timeouts and connection errors are retried with exponential backoff (a server's
``Retry-After`` is honoured); any other 4xx fails at once and names the row. A row that fails
fails alone: the others of its call are answered and returned (``PartialGeneration``), so the
loop keeps them; a server that stops accepting connections stops the call (the rows not yet
sent are failed too, without waiting out each one's retries).

Before the first request every base URL is checked once (``GET /models``, no retries): an
unreachable server or refused credentials fail at once, not after a batch's worth of backoff.

The request semantics are the vLLM backend's: chat messages, sampling parameters always sent
(``temperature``, ``top_p``, ``max_tokens``, ``n``, ``seed``, ``stop``), and a row with an
assistant prefix (probe 1b) sent as a final assistant message with vLLM's extra parameters
``add_generation_prompt: false, continue_final_message: true`` (SGLang accepts the same; a server
that does not know them either ignores them, and then answers a fresh turn, or refuses them).
``--chat-template-kwarg`` variables go as vLLM's ``chat_template_kwargs`` (SGLang's name too).
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import threading
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from opgen.infer.base import STOP, Backend, BackendError, Generation, PartialGeneration, Request, Sampling

_sleep = time.sleep  # the backoff's (tests replace it, here or per backend)
RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"


@dataclass(frozen=True)
class OpenAIOptions:
    base_urls: tuple[str, ...] = ("http://127.0.0.1:8000/v1",)
    api_key_env: str | None = None  # None: OPENAI_API_KEY if set, else no Authorization header
    concurrency: int = 8  # requests in flight per base URL
    timeout_s: float = 600.0  # per request (no streaming: the whole answer must come within it)
    retries: int = 6  # attempts after the first
    backoff_s: float = 0.5  # first wait; doubles each retry, capped at backoff_max_s
    backoff_max_s: float = 30.0
    served_model: str | None = None  # the "model" field; None: the --model value as given

    def __post_init__(self) -> None:
        if not self.base_urls:
            raise ValueError("the openai backend needs at least one --base-url")
        for url in self.base_urls:
            parts = urllib.parse.urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"--base-url {url!r} is not an http(s) URL (e.g. http://127.0.0.1:8000/v1)")
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout must be > 0, got {self.timeout_s}")
        if self.retries < 0:
            raise ValueError(f"retries must be >= 0, got {self.retries}")


def api_key(env: str | None) -> str | None:
    if env is None:
        return os.environ.get(DEFAULT_API_KEY_ENV) or None
    value = os.environ.get(env)
    if not value:
        raise BackendError(f"--api-key-env {env}: the environment variable {env} is not set")
    return value


def request_body(model: str, req: Request, sampling: Sampling,
                 chat_template_kwargs: Sequence[tuple[str, object]] = ()) -> dict:
    """The JSON body of one chat completion: every sampling parameter explicit."""
    body: dict = {
        "model": model,
        "messages": req.conversation(),
        "n": sampling.n,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "max_tokens": sampling.max_new_tokens,
    }
    if sampling.seed is not None:
        body["seed"] = sampling.seed
    if sampling.stop:
        body["stop"] = list(sampling.stop)
    if req.continues:
        body["add_generation_prompt"] = False
        body["continue_final_message"] = True
    if chat_template_kwargs:
        body["chat_template_kwargs"] = dict(chat_template_kwargs)
    return body


class _Retry(Exception):
    def __init__(self, why: str, wait: float | None = None, connection: bool = False):
        super().__init__(why)
        self.wait = wait
        self.connection = connection  # refused, reset, unreachable: no server answered at all


class _ServerGone(BackendError):
    """A request's retries ran out on connection errors: the server is not there any more."""


class _Fatal(Exception):
    pass


class _Client:
    """One keep-alive connection to one server, used by one thread."""

    def __init__(self, base_url: str, key: str | None, timeout: float):
        parts = urllib.parse.urlsplit(base_url)
        self.https = parts.scheme == "https"
        self.host = parts.hostname or ""
        self.port = parts.port
        self.path = parts.path.rstrip("/") + "/chat/completions"
        self.headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if key:
            self.headers["Authorization"] = f"Bearer {key}"
        self.timeout = timeout
        self.conn: http.client.HTTPConnection | None = None
        self.url = base_url

    def _connect(self) -> http.client.HTTPConnection:
        if self.conn is None:
            cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
            self.conn = cls(self.host, self.port, timeout=self.timeout)
        return self.conn

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def post(self, body: bytes) -> dict:
        try:
            conn = self._connect()
            conn.request("POST", self.path, body=body, headers=self.headers)
            resp = conn.getresponse()
            payload = resp.read()
            status = resp.status
            retry_after = resp.getheader("Retry-After")
            if resp.getheader("Connection", "").lower() == "close":
                self.close()
        except (OSError, http.client.HTTPException) as exc:  # refused, reset, timed out, bad status line
            self.close()
            gone = isinstance(exc, (ConnectionError, http.client.RemoteDisconnected)) or (
                isinstance(exc, OSError) and not isinstance(exc, TimeoutError) and exc.errno is not None)
            raise _Retry(f"{type(exc).__name__}: {exc}", connection=gone) from None
        if status in RETRY_STATUS:
            wait = None
            if retry_after is not None:
                try:
                    wait = max(0.0, float(retry_after))
                except ValueError:
                    wait = None
            raise _Retry(f"HTTP {status}: {payload[:200].decode('utf-8', 'replace')}", wait)
        if status != 200:
            raise _Fatal(f"HTTP {status} from {self.url}: {payload[:500].decode('utf-8', 'replace')}")
        try:
            obj = json.loads(payload)
        except ValueError:
            raise _Retry(f"not JSON: {payload[:200]!r}") from None
        if not isinstance(obj, dict):
            raise _Fatal(f"{self.url}: the answer is not a JSON object")
        return obj

    def check(self, timeout: float) -> None:
        """One ``GET /models``: the server is there and takes the credentials (BackendError if not)."""
        parts = urllib.parse.urlsplit(self.url)
        path = parts.path.rstrip("/") + "/models"
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        conn = cls(self.host, self.port, timeout=timeout)
        try:
            conn.request("GET", path, headers={k: v for k, v in self.headers.items() if k != "Content-Type"})
            resp = conn.getresponse()
            payload = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            raise BackendError(f"openai: cannot reach {self.url} ({type(exc).__name__}: {exc}); is the server "
                               f"running at that address? (checked before the first request)") from None
        finally:
            conn.close()
        if resp.status in (401, 403):
            raise BackendError(f"openai: {self.url} refuses the credentials (HTTP {resp.status}: "
                               f"{payload[:200].decode('utf-8', 'replace')}); set the API key's variable "
                               f"(--api-key-env, default {DEFAULT_API_KEY_ENV})")


def parse_completion(obj: dict, req: Request, n: int) -> Generation:
    """A chat completion -> a Generation, as the vLLM backend records one."""
    choices = obj.get("choices")
    if not isinstance(choices, list) or len(choices) != n:
        got = len(choices) if isinstance(choices, list) else "no"
        raise _Fatal(f"row {req.key}: {got} choices in the answer, asked for n={n}")
    ordered = sorted(choices, key=lambda c: c.get("index", 0) if isinstance(c, dict) else 0)
    texts, reasons, counts = [], [], []
    for c in ordered:
        msg = c.get("message") if isinstance(c, dict) else None
        content = msg.get("content") if isinstance(msg, dict) else None
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise _Fatal(f"row {req.key}: message.content is not a string")
        texts.append(content)
        reasons.append(str(c.get("finish_reason") or STOP))
        ids = c.get("token_ids")  # vLLM with return_token_ids: exact per-sample counts
        counts.append(len(ids) if isinstance(ids, list) else -1)
    usage = obj.get("usage")
    if not isinstance(usage, dict):
        usage = {}
    prompt_tokens = usage.get("prompt_tokens")
    completion = usage.get("completion_tokens")
    if n == 1 and counts[0] < 0 and isinstance(completion, int):
        counts[0] = completion  # usage is a total over the choices: exact only for one sample
    return Generation(req.key, texts, reasons, prompt_tokens if isinstance(prompt_tokens, int) else -1, counts)


class OpenAIBackend(Backend):
    name = "openai"

    def __init__(self, model: Path | str, sampling: Sampling, options: OpenAIOptions,
                 chat_template_kwargs: Sequence[tuple[str, object]] = ()):
        self.model = options.served_model or str(model)
        self.options = options
        self.chat_template_kwargs = tuple(chat_template_kwargs)
        self.key = api_key(options.api_key_env)
        self.sleep = _sleep  # tests may replace it
        self.stats = {"requests": 0, "retries": 0}
        self._lock = threading.Lock()
        for url in options.base_urls:  # before any work: reachable, credentials taken
            _Client(url, self.key, options.timeout_s).check(min(options.timeout_s, 10.0))

    def _ask(self, client: _Client, req: Request, sampling: Sampling) -> Generation:
        body = json.dumps(request_body(self.model, req, sampling, self.chat_template_kwargs),
                          ensure_ascii=False).encode("utf-8")
        opts = self.options
        for attempt in range(opts.retries + 1):
            try:
                obj = client.post(body)
                return parse_completion(obj, req, sampling.n)
            except _Retry as exc:
                if attempt == opts.retries:
                    cls = _ServerGone if exc.connection else BackendError
                    raise cls(f"openai: row {req.key}: {client.url} failed {attempt + 1} times, "
                              f"last: {exc}") from None
                with self._lock:
                    self.stats["retries"] += 1
                wait = exc.wait if exc.wait is not None else opts.backoff_s * (2 ** attempt)
                self.sleep(min(wait, opts.backoff_max_s))
            except _Fatal as exc:
                raise BackendError(f"openai: row {req.key}: {exc}") from None
        raise AssertionError("unreachable")

    def generate(self, requests: Sequence[Request], sampling: Sampling) -> list[Generation]:
        if not requests:
            return []
        todo: queue.SimpleQueue = queue.SimpleQueue()
        for i, req in enumerate(requests):
            todo.put((i, req))
        results: list[Generation | None] = [None] * len(requests)
        errors: dict[int, str] = {}
        gone: list[BackendError] = []
        stop = threading.Event()

        def worker(url: str) -> None:
            client = _Client(url, self.key, self.options.timeout_s)
            try:
                while True:
                    try:
                        i, req = todo.get_nowait()
                    except queue.Empty:
                        return
                    if stop.is_set():
                        errors[i] = f"openai: row {req.key}: not sent, the server stopped answering ({gone[0]})"
                        continue
                    try:
                        results[i] = self._ask(client, req, sampling)
                    except _ServerGone as exc:  # no server: the rest would each wait out their retries
                        errors[i] = str(exc)
                        gone.append(exc)
                        stop.set()
                    except BackendError as exc:  # this row alone: its neighbours go on
                        errors[i] = str(exc)
                    except Exception as exc:
                        errors[i] = f"openai: row {req.key}: {type(exc).__name__}: {exc}"
            finally:
                client.close()

        per_url = min(self.options.concurrency, len(requests))
        threads = [threading.Thread(target=worker, args=(url,), daemon=True)
                   for _ in range(per_url) for url in self.options.base_urls]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with self._lock:
            self.stats["requests"] += sum(r is not None for r in results)
        if errors:
            first = min(errors)
            raise PartialGeneration(f"{errors[first]} ({len(errors)} of {len(requests)} requests failed)",
                                    results, errors)
        return [r for r in results if r is not None]
