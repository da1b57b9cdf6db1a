"""``opgen serve``: a stateless HTTP service of tasks and grades (docs/integrations.md).

    POST /tasks    {"recipe", "split", "n", "seed", "offset", "options"} -> {"rows": [...], "next_offset"}
    POST /score    {"items": [{"ground_truth", "response", "extra_info"}], policy, group, mode} -> grades
    POST /reward   OpenRLHF's --remote_rm_url: {"query", "prompts", "labels"} -> {"rewards", ...}
    POST /curriculum/tasks, /curriculum/report   rows from a curriculum's state; rewards in (opgen.curriculum)
    GET  /health   {"status": "ok", "version", "isolation"}
    GET  /metrics  Prometheus text: requests by route and status, graded responses, seconds

Grades come from :func:`opgen.reward.compute_score_batch` in the process-wide sandbox, the scorer
and isolation ``opgen score`` uses. ``/tasks`` rows are the rows of ``opgen build RECIPE --only
SPLIT --seed SEED``: rows ``[offset, offset + n)`` of that split, so consecutive offsets of one seed
never repeat a row, and any server gives the same rows for the same request. Nothing unbounded is
accepted: the body's bytes, a batch's length and each response's characters have limits
(:class:`Limits`); a request over one gets 413, a malformed one 400/415/422, each with a message.
Starlette and uvicorn are the optional ``serve`` extra. For scale the same app runs as a Ray Serve
deployment (:func:`ray_deployment`, ``opgen serve --ray``): one app, two hosts.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from opgen.choices import GRADE_CHOICES
from opgen.errors import OpgenError
from opgen.integrations.common import AdapterError
from opgen.library import LibraryError

# The grading options a request may set (strings): GradeSettings's text options (opgen.choices);
# grade_batch builds the GradeSettings record from them.
SETTINGS = tuple(GRADE_CHOICES)


@dataclass(frozen=True)
class Limits:
    """Everything a request may ask for, at most."""

    max_body_bytes: int = 16 << 20
    max_batch: int = 4096  # responses per /score or /reward request
    max_response_chars: int = 100_000  # per response (about 25,000 tokens)
    max_tasks: int = 512  # rows per /tasks request
    max_offset: int = 65_536  # offset + n of a /tasks request
    concurrent_grading: int = 4  # grading requests in flight; others wait their turn
    task_cache: int = 32  # built /tasks prefixes kept (recipe, split, seed, options)


class HTTPError(OpgenError):
    exit_code = 1

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class Service:
    """The app's state: limits, the metrics counters, the /tasks cache. Holds no session."""

    def __init__(self, limits: Limits | None = None, allow_weak_sandbox: bool | None = None):
        self.limits = limits or Limits()
        self.allow_weak_sandbox = allow_weak_sandbox
        self.requests: Counter[tuple[str, int]] = Counter()
        self.graded = 0
        self.seconds: Counter[str] = Counter()
        self.started = time.time()
        self._lock = threading.Lock()
        self._build_lock = threading.Lock()  # opgen.build keeps process-wide state: one build at a time
        self._cache: OrderedDict[str, list[dict]] = OrderedDict()
        self._grading = asyncio.Semaphore(self.limits.concurrent_grading)
        self.curriculum: Any = None  # an opgen.curriculum.Curriculum, when served with one

    # ---------------------------------------------------------------- grading

    def _settings(self, body: Mapping) -> dict:
        if "library" in body:  # a request names no code to load (docs/security.md)
            raise HTTPError(422, "library: a request names no library; the server grades with the one it was started "
                                 "with (OPGEN_LIBRARY) or finds a ground truth's by its digest in its library store")
        out: dict[str, Any] = {k: body[k] for k in SETTINGS if k in body}
        for k, v in out.items():
            if not isinstance(v, str):
                raise HTTPError(422, f"{k}: a string, not {type(v).__name__}")
        if self.allow_weak_sandbox is not None:
            out["allow_weak_sandbox"] = self.allow_weak_sandbox
        return out

    def _check_batch(self, n: int, what: str) -> None:
        if n > self.limits.max_batch:
            raise HTTPError(413, f"{what}: {n} items, more than the limit of {self.limits.max_batch}")

    def _check_text(self, text: object, where: str) -> None:
        if not isinstance(text, str):
            raise HTTPError(422, f"{where}: a string, not {type(text).__name__}")
        if len(text) > self.limits.max_response_chars:
            raise HTTPError(413, f"{where}: {len(text)} characters, more than the limit of "
                                 f"{self.limits.max_response_chars}")

    def score(self, body: Mapping) -> dict:
        from opgen.integrations.common import completion_text, grade_batch

        items = body.get("items")
        if not isinstance(items, list):
            raise HTTPError(422, "items: a list of {ground_truth, response, extra_info} objects is required")
        self._check_batch(len(items), "items")
        truths, texts, extras = [], [], []
        for i, it in enumerate(items):
            if not isinstance(it, dict):
                raise HTTPError(422, f"items[{i}]: an object, not {type(it).__name__}")
            gt = it.get("ground_truth")
            if not isinstance(gt, (str, dict)):
                raise HTTPError(422, f"items[{i}].ground_truth: a JSON string or object is required")
            raw = it.get("response")
            if not isinstance(raw, (str, list)):
                raise HTTPError(422, f"items[{i}].response: a string or a list of messages is required")
            text = completion_text(raw, f"items[{i}].response")
            self._check_text(text, f"items[{i}].response")
            extra = it.get("extra_info") or {}
            if not isinstance(extra, dict):
                raise HTTPError(422, f"items[{i}].extra_info: an object, not {type(extra).__name__}")
            truths.append(gt)
            texts.append(text)
            extras.append(extra)
        grades = grade_batch(truths, texts, extras, **self._settings(body))
        self.graded += len(grades)
        return {"scores": [g["score"] for g in grades], "grades": grades}

    def reward(self, body: Mapping) -> dict:
        from opgen.integrations import openrlhf

        query = body.get("query")
        if isinstance(query, list):
            self._check_batch(len(query), "query")
            for i, q in enumerate(query):
                self._check_text(q, f"query[{i}]")
        out = openrlhf.rewards(body, **self._settings(body))
        self.graded += len(out["rewards"])
        return out

    # ---------------------------------------------------------------- tasks

    def tasks(self, body: Mapping) -> dict:
        recipe, split = body.get("recipe"), body.get("split")
        if not isinstance(recipe, (str, dict)):
            raise HTTPError(422, "recipe: a bundled recipe's name or a recipe object is required")
        if isinstance(recipe, str) and ("/" in recipe or recipe.endswith((".yaml", ".yml"))):
            raise HTTPError(422, f"recipe: {recipe!r}: a bundled recipe's name (files are not served)")
        if isinstance(recipe, dict):
            for name, spec in (recipe.get("splits") or {}).items():
                if isinstance(spec, dict) and ":" in str(spec.get("generator", "")):
                    # an import path would make the server import whatever module a client names
                    raise HTTPError(422, f"recipe.splits.{name}.generator: a registered generator's name "
                                         "(import paths are not served)")
        n, seed, offset = body.get("n", 16), body.get("seed", 0), body.get("offset", 0)
        for name, v in (("n", n), ("seed", seed), ("offset", offset)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise HTTPError(422, f"{name}: a non-negative integer, not {v!r}")
        if not 1 <= n <= self.limits.max_tasks:
            raise HTTPError(413 if n > self.limits.max_tasks else 422,
                            f"n: between 1 and {self.limits.max_tasks}, not {n}")
        if offset + n > self.limits.max_offset:
            raise HTTPError(413, f"offset + n: {offset + n}, more than the limit of {self.limits.max_offset}")
        options = body.get("options") or {}
        if not isinstance(options, dict):
            raise HTTPError(422, "options: an object of the split generator's options")
        rows = self._rows(recipe, split, seed, options, offset + n)
        got = rows[offset:offset + n]
        return {"rows": got, "offset": offset, "next_offset": offset + len(got), "exhausted": len(got) < n}

    def _rows(self, recipe: str | dict, split: Any, seed: int, options: dict, size: int) -> list[dict]:
        from opgen import api
        from opgen.recipe import RecipeError

        try:
            loaded = api.load_recipe(recipe, seed)
        except (RecipeError, TypeError, ValueError) as exc:
            raise HTTPError(422, f"recipe: {exc}") from None
        names = [s.name for s in loaded.splits]
        if split is None and len(names) == 1:
            split = names[0]
        if split not in names:
            raise HTTPError(422, f"split: recipe {loaded.name!r} has splits {', '.join(names)}; got {split!r}")
        raw = json.loads(json.dumps(loaded.raw))
        if options:
            raw["splits"][split]["options"] = {**(raw["splits"][split].get("options") or {}), **options}
        raw["seed"] = seed
        key = json.dumps([raw, split], sort_keys=True)
        with self._build_lock:
            with self._lock:
                cached = self._cache.get(key)
                if cached is not None and len(cached) >= size:
                    self._cache.move_to_end(key)
                    return cached
            try:
                ds = api.create_dataset(raw if options else loaded, split, size=size, seed=seed)
            except (RecipeError, ValueError, KeyError) as exc:
                raise HTTPError(422, f"recipe {loaded.name!r}, split {split!r}: {exc}") from None
            rows = ds.to_pylist()
        with self._lock:
            self._cache[key] = rows
            self._cache.move_to_end(key)
            while len(self._cache) > self.limits.task_cache:
                self._cache.popitem(last=False)
        return rows

    # ---------------------------------------------------------------- curriculum

    def _curriculum(self):
        if self.curriculum is None:
            raise HTTPError(404, "this server runs no curriculum (start it with opgen serve --curriculum FILE)")
        return self.curriculum

    def curriculum_tasks(self, body: Mapping) -> dict:
        cur = self._curriculum()
        n = body.get("n", 16)
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= self.limits.max_tasks:
            raise HTTPError(422, f"n: between 1 and {self.limits.max_tasks}, not {n!r}")
        with self._lock:  # one reward stream, one order
            try:
                rows = cur.next_rows(n)
            except RuntimeError as exc:
                raise HTTPError(409, str(exc)) from None
            return {"rows": rows, "state": cur.state()}

    def curriculum_report(self, body: Mapping) -> dict:
        cur = self._curriculum()
        reports = body.get("reports")
        if not isinstance(reports, list):
            raise HTTPError(422, "reports: a list of {bucket, reward, row_id} objects is required")
        self._check_batch(len(reports), "reports")
        for i, r in enumerate(reports):
            if not isinstance(r, dict) or not isinstance(r.get("bucket"), str) or \
                    not isinstance(r.get("reward"), (int, float)) or isinstance(r.get("reward"), bool):
                raise HTTPError(422, f"reports[{i}]: an object with bucket (a string) and reward (a number)")
            if r["bucket"] not in cur.buckets:
                raise HTTPError(422, f"reports[{i}].bucket: unknown bucket {r['bucket']!r}")
            if not 0.0 <= float(r["reward"]) <= 1.0:
                raise HTTPError(422, f"reports[{i}].reward: in [0, 1], not {r['reward']!r}")
        with self._lock:
            state = cur.state()
            for r in reports:
                rid = r.get("row_id")
                state = cur.report(r["bucket"], float(r["reward"]), None if rid is None else str(rid))
            return {"state": state}

    # ---------------------------------------------------------------- health, metrics

    def health(self) -> dict:
        from opgen import __version__
        from opgen.score.sandbox import shared

        level = shared(allow_weak_sandbox=self.allow_weak_sandbox).level
        return {"status": "ok", "version": __version__, "isolation": level, "limits": asdict(self.limits),
                "uptime_s": round(time.time() - self.started, 3)}

    def metrics(self) -> str:
        lines = ["# HELP opgen_requests_total Requests by route and HTTP status.",
                 "# TYPE opgen_requests_total counter"]
        for (route, status), v in sorted(self.requests.items()):
            lines.append(f'opgen_requests_total{{route="{route}",status="{status}"}} {v}')
        lines += ["# HELP opgen_graded_total Responses graded.", "# TYPE opgen_graded_total counter",
                  f"opgen_graded_total {self.graded}",
                  "# HELP opgen_request_seconds_total Seconds spent serving, by route.",
                  "# TYPE opgen_request_seconds_total counter"]
        for route, v in sorted(self.seconds.items()):
            lines.append(f'opgen_request_seconds_total{{route="{route}"}} {v:.6f}')
        if self.curriculum is not None:
            lines += ["# TYPE opgen_curriculum_level gauge"]
            for b, st in sorted(self.curriculum.state()["buckets"].items()):
                lines.append(f'opgen_curriculum_level{{bucket="{b}"}} {st["level"]}')
        return "\n".join(lines) + "\n"


async def _body(request: Any, limit: int) -> Any:
    ctype = request.headers.get("content-type", "")
    if ctype.split(";")[0].strip() != "application/json":
        raise HTTPError(415, f"content-type must be application/json, got {ctype or 'none'}")
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            declared_n = int(declared)
        except ValueError:
            raise HTTPError(400, "content-length is not an integer") from None
        if declared_n > limit:
            raise HTTPError(413, f"body of {declared_n} bytes, more than the limit of {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPError(413, f"body over the limit of {limit} bytes")
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks))
    except (UnicodeDecodeError, ValueError) as exc:
        raise HTTPError(400, f"body is not JSON: {exc}") from None


def create_app(service: Service | None = None):
    """The Starlette app (``service``: limits and state; a fresh one by default)."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, PlainTextResponse
    from starlette.routing import Route

    svc = service or Service()

    def endpoint(route: str, fn, *, body: bool = True, grading: bool = False, text: bool = False):
        async def handler(request):
            t0 = time.perf_counter()
            status = 200
            try:
                payload = await _body(request, svc.limits.max_body_bytes) if body else None
                if body and not isinstance(payload, dict):
                    raise HTTPError(422, "the body must be a JSON object")
                if grading:
                    async with svc._grading:
                        result = await asyncio.to_thread(fn, payload)
                else:
                    result = await asyncio.to_thread(fn, payload) if body else fn()
                response = PlainTextResponse(result) if text else JSONResponse(result)
            except HTTPError as exc:
                status = exc.status
                response = JSONResponse({"error": exc.message}, status_code=status)
            except (AdapterError, LibraryError, TypeError) as exc:  # LibraryError: a row's library is not had
                status = 422
                response = JSONResponse({"error": str(exc)}, status_code=status)
            except Exception as exc:  # a fault of the server's, not the request's: say so, keep serving
                status = 500
                response = JSONResponse({"error": f"internal error: {type(exc).__name__}: {exc}"},
                                        status_code=status)
            with svc._lock:
                svc.requests[(route, status)] += 1
                svc.seconds[route] += time.perf_counter() - t0
            return response

        return handler

    routes = [
        Route("/tasks", endpoint("/tasks", svc.tasks), methods=["POST"]),
        Route("/score", endpoint("/score", svc.score, grading=True), methods=["POST"]),
        Route("/reward", endpoint("/reward", svc.reward, grading=True), methods=["POST"]),
        Route("/curriculum/tasks", endpoint("/curriculum/tasks", svc.curriculum_tasks), methods=["POST"]),
        Route("/curriculum/report", endpoint("/curriculum/report", svc.curriculum_report), methods=["POST"]),
        Route("/health", endpoint("/health", svc.health, body=False), methods=["GET"]),
        Route("/metrics", endpoint("/metrics", svc.metrics, body=False, text=True), methods=["GET"]),
    ]
    app = Starlette(routes=routes)
    app.state.service = svc
    return app


def run(host: str = "127.0.0.1", port: int = 8000, limits: Limits | None = None,
        allow_weak_sandbox: bool | None = None, log_level: str = "warning", curriculum: Any = None) -> None:
    """Serve until interrupted (uvicorn, one process; the sandbox pool grades concurrently)."""
    import uvicorn

    from opgen.score.sandbox import shared

    app = build_app(limits, allow_weak_sandbox, curriculum)  # starts the sandbox, and fails now if it cannot
    print(f"opgen serve: http://{host}:{port} (isolation {shared(allow_weak_sandbox=allow_weak_sandbox).level})",
          flush=True)
    uvicorn.run(app, host=host, port=port, log_level=log_level,
                limit_concurrency=256, timeout_keep_alive=5)


# ---------------------------------------------------------------- Ray Serve: the same app, another host

#: Replicas a Ray deployment may ask for, at most (each holds a sandbox pool).
MAX_REPLICAS = 32
#: Requests one replica works on at once, and requests Ray Serve queues per deployment before it
#: answers 503: with the app's own limits, nothing unbounded is accepted on this host either.
RAY_MAX_ONGOING = 64
RAY_MAX_QUEUED = 256


def build_app(limits: Limits | None = None, allow_weak_sandbox: bool | None = None, curriculum: Any = None):
    """:func:`create_app` on a fresh :class:`Service`, with the sandbox started first (so a host that
    cannot isolate fails at start-up, not at the first grade). Both hosts build their app here."""
    from opgen.score.sandbox import shared

    shared(allow_weak_sandbox=allow_weak_sandbox)
    service = Service(limits, allow_weak_sandbox)
    service.curriculum = curriculum
    return create_app(service)


def ray_deployment(*, replicas: int = 1, limits: Limits | None = None, allow_weak_sandbox: bool | None = None):
    """The app of :func:`create_app` as a Ray Serve deployment (an ``Application`` for ``serve.run``):
    each replica builds the same Starlette app (:func:`build_app`) at start, so every route, limit,
    validation and the scorer are the plain server's. ``replicas``: 1 to :data:`MAX_REPLICAS`. A
    curriculum is one reward stream, so it is served by the plain server only."""
    if not isinstance(replicas, int) or isinstance(replicas, bool) or not 1 <= replicas <= MAX_REPLICAS:
        raise ValueError(f"replicas: between 1 and {MAX_REPLICAS}, not {replicas!r}")
    from ray import serve

    def app_builder():
        return build_app(limits, allow_weak_sandbox)

    deployment = serve.deployment(serve.ingress(app_builder)(), name="opgen", num_replicas=replicas,
                                  max_ongoing_requests=RAY_MAX_ONGOING, max_queued_requests=RAY_MAX_QUEUED)
    return deployment.bind()


def run_ray(host: str = "127.0.0.1", port: int = 8000, *, replicas: int = 1, limits: Limits | None = None,
            allow_weak_sandbox: bool | None = None, num_cpus: int | None = None, stop: Any = None) -> None:
    """Serve :func:`ray_deployment` through Ray Serve's HTTP proxy on 127.0.0.1:``port``, on a local
    Ray cluster started here (bound to 127.0.0.1), until interrupted (or ``stop``, a
    ``threading.Event``, is set); Ray is shut down on the way out."""
    import ray
    from ray import serve

    if host not in ("127.0.0.1", "localhost"):
        raise ValueError(f"--host {host}: the Ray deployment serves on 127.0.0.1 only")
    app = ray_deployment(replicas=replicas, limits=limits, allow_weak_sandbox=allow_weak_sandbox)
    import os

    # logical CPUs: at least one per replica (a replica asks Ray for one), so every replica is placed
    cpus = num_cpus or max(os.cpu_count() or 1, replicas)
    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(app, name="opgen", route_prefix="/")
        print(f"opgen serve --ray: http://127.0.0.1:{port} ({replicas} replica{'s' if replicas != 1 else ''})",
              flush=True)
        try:
            while not (stop is not None and stop.is_set()):
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()
