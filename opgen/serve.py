"""``opgen serve``: an HTTP service of tasks, grades, a curriculum and multi-turn episodes (docs/integrations.md).

    POST /tasks    {"recipe", "split", "n", "seed", "offset", "options"} -> {"rows": [...], "next_offset"}
    POST /score    {"items": [{"ground_truth", "response", "extra_info"}], policy, group, mode} -> grades
    POST /reward   OpenRLHF's remote reward: {"query", "prompts", "labels"} -> {"rewards", ...}
    POST /curriculum/tasks, /curriculum/report; GET/POST /curriculum/state   (opgen.curriculum)
    POST /episodes, /episodes/{id}/step; GET /episodes/{id}                  (opgen.episode)
    WS   /openenv/ws   OpenEnv's reset/step/state over one WebSocket per episode
    GET  /health, /metrics

Grades come from :func:`opgen.reward.compute_score_batch` in the process-wide sandbox, the scorer
and isolation ``opgen score`` uses. ``/tasks`` rows are the rows of ``opgen build RECIPE --only
SPLIT --seed SEED``, built in a worker process under a deadline (:mod:`opgen.taskbuild`).

Every request is an attacker's until shown otherwise: the body's bytes, its JSON nesting, a batch's
length and each response's characters have limits (:class:`Limits`), unknown fields are refused,
a recipe object may not name a library, a file or an import path, and the connection itself has
read deadlines and a per-client cap (:func:`guarded_protocol`). A request over a limit gets 413,
a malformed one 400/415/422, each with a message; a server bound to anything but loopback requires
a bearer token.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import json
import secrets
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from opgen import __version__
from opgen.choices import GRADE_CHOICES
from opgen.errors import USAGE, OpgenError
from opgen.integrations.common import AdapterError, completion_text, grade_batch

# The grading options a request may set (strings): GradeSettings's text options (opgen.choices).
SETTINGS = tuple(GRADE_CHOICES)
#: The environment variable that holds the bearer token (``opgen serve --token``).
TOKEN_ENV = "OPGEN_SERVE_TOKEN"


@dataclass(frozen=True)
class Limits:
    """Everything a request or a connection may ask for, at most."""

    max_body_bytes: int = 16 << 20
    max_batch: int = 4096  # responses per /score or /reward request
    max_response_chars: int = 100_000  # per response (about 25,000 tokens)
    max_tasks: int = 512  # rows per /tasks request
    max_offset: int = 65_536  # offset + n of a /tasks request (the rows built)
    concurrent_grading: int = 4  # grading requests in flight; others wait their turn
    task_cache_bytes: int = 256 << 20  # built /tasks rows kept, in bytes of JSON
    task_timeout_s: float = 60.0  # one build, at most (then 413, and the build worker is replaced)
    max_json_depth: int = 64  # nesting of a request body
    header_timeout_s: float = 10.0  # from connecting (or the last response) to a request's last header
    body_timeout_s: float = 60.0  # from the last header to the body's last byte
    max_connections: int = 1024
    max_connections_per_client: int = 64  # by client address
    max_episodes: int = 4096  # open episodes (the least recently used is closed)
    episode_idle_s: float = 900.0  # an episode untouched this long is closed


class ServeError(ValueError, OpgenError):
    """A server that must not start as asked (a public address without a token)."""

    exit_code = USAGE


class HTTPError(OpgenError):
    exit_code = 1

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the server on this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def fields(body: Mapping, allowed: tuple[str, ...], where: str = "body") -> None:
    unknown = sorted(map(str, set(body) - set(allowed)))
    if unknown:
        raise HTTPError(422, f"{where}: unknown fields {', '.join(unknown)} (known: {', '.join(allowed)})")


def count_n(value: Any, most: int) -> int:
    """A request's ``n``, the same check on every route: 422 when not an integer of at least 1,
    413 when over the limit."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise HTTPError(422, f"n: an integer between 1 and {most}, not {value!r}")
    if value > most:
        raise HTTPError(413, f"n: {value}, more than the limit of {most} (between 1 and {most})")
    return value


def _whole(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise HTTPError(422, f"{name}: a non-negative integer, not {value!r}")
    return value


def served_recipe(recipe: Any) -> None:
    """Refuse, before anything loads it, a recipe that would make the server load code or files:
    a path, a ``library:``, a generator import path, a ``leakage.avoid_programs`` file."""
    if isinstance(recipe, str):
        if "/" in recipe or "\\" in recipe or recipe.endswith((".yaml", ".yml")):
            raise HTTPError(422, f"recipe: {recipe!r}: a bundled recipe's name (files are not served)")
        return
    if not isinstance(recipe, dict):
        raise HTTPError(422, "recipe: a bundled recipe's name or a recipe object is required")
    if recipe.get("library", "study") != "study":
        raise HTTPError(422, "recipe.library: a served recipe uses the study's operators (libraries are loaded "
                             "only from the server's own command line)")
    splits = recipe.get("splits")
    for name, spec in (splits.items() if isinstance(splits, dict) else ()):
        if isinstance(spec, dict) and ":" in str(spec.get("generator", "")):
            # an import path would make the server import whatever module a client names
            raise HTTPError(422, f"recipe.splits.{name}.generator: a registered generator's name "
                                 "(import paths are not served)")
        if isinstance(spec, dict) and spec.get("library", "study") != "study":
            raise HTTPError(422, f"recipe.splits.{name}.library: libraries are not served")
    leak = recipe.get("leakage")
    for a in (leak.get("avoid_programs") or [] if isinstance(leak, dict) else []):
        if not isinstance(a, str) or "/" in a or "\\" in a or a.endswith((".yaml", ".yml")):
            raise HTTPError(422, f"recipe.leakage.avoid_programs: {a!r}: bundled recipe names only "
                                 "(files are not served)")


def _depth_ok(value: Any, most: int) -> bool:
    stack = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if d > most:
            return False
        if isinstance(v, dict):
            stack.extend((x, d + 1) for x in v.values() if isinstance(x, (dict, list)))
        elif isinstance(v, list):
            stack.extend((x, d + 1) for x in v if isinstance(x, (dict, list)))
    return True


def parse_json(data: bytes | str, limits: Limits) -> Any:
    """A request's JSON: 400 when it is not JSON or nests deeper than ``limits.max_json_depth``."""
    try:
        value = json.loads(data)
    except RecursionError:
        raise HTTPError(400, f"body nests deeper than {limits.max_json_depth} levels") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise HTTPError(400, f"body is not JSON: {exc}") from None
    if not _depth_ok(value, limits.max_json_depth):
        raise HTTPError(400, f"body nests deeper than {limits.max_json_depth} levels")
    return value


class Service:
    """The app's state: limits, the token, metrics counters, the /tasks cache and build worker, the
    curriculum and the open episodes."""

    def __init__(self, limits: Limits | None = None, allow_weak_sandbox: bool | None = None,
                 token: str | None = None, curriculum: Any = None, save: Callable[[dict], None] | None = None):
        from opgen.score.cache import BoundedCache
        from opgen.taskbuild import Builder

        self.limits = limits or Limits()
        self.allow_weak_sandbox = allow_weak_sandbox
        self.token = token or None
        self.requests: Counter[tuple[str, int]] = Counter()
        self.graded = 0
        self.seconds: Counter[str] = Counter()
        self.started = time.time()
        self._lock = threading.Lock()
        self._cache: BoundedCache[str, list[bytes]] = BoundedCache(self.limits.task_cache_bytes)
        self.builder = Builder(self.limits.task_timeout_s)
        self._grading = asyncio.Semaphore(self.limits.concurrent_grading)
        self.curriculum = curriculum  # an opgen.curriculum.Curriculum, when served with one
        self._save = save  # persists the curriculum's state (opgen serve --curriculum)
        self._curriculum_lock = threading.Lock()
        self.episodes: OrderedDict[str, tuple[float, Any]] = OrderedDict()
        self._episodes_lock = threading.Lock()
        self._openenv_sessions: Counter[str] = Counter()

    def close(self) -> None:
        self.builder.close()

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
        fields(body, ("items", *SETTINGS))
        items = body.get("items")
        if not isinstance(items, list):
            raise HTTPError(422, "items: a list of {ground_truth, response, extra_info} objects is required")
        self._check_batch(len(items), "items")
        truths, texts, extras = [], [], []
        for i, it in enumerate(items):
            if not isinstance(it, dict):
                raise HTTPError(422, f"items[{i}]: an object, not {type(it).__name__}")
            fields(it, ("ground_truth", "response", "extra_info", "data_source"), f"items[{i}]")
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

        fields(body, ("query", "prompts", "labels", *SETTINGS))
        query = body.get("query")
        if isinstance(query, list):
            self._check_batch(len(query), "query")
            for i, q in enumerate(query):
                self._check_text(q, f"query[{i}]")
        out = openrlhf.rewards(body, **self._settings(body))
        self.graded += len(out["rewards"])
        return out

    # ---------------------------------------------------------------- tasks

    def tasks(self, body: Mapping) -> bytes:
        fields(body, ("recipe", "split", "n", "seed", "offset", "options"))
        recipe, split = body.get("recipe"), body.get("split")
        served_recipe(recipe)  # a name or an object, or 422
        assert isinstance(recipe, (str, dict))
        n = count_n(body.get("n", 16), self.limits.max_tasks)
        seed, offset = _whole("seed", body.get("seed", 0)), _whole("offset", body.get("offset", 0))
        if offset + n > self.limits.max_offset:
            raise HTTPError(413, f"offset + n: {offset + n}, more than the limit of {self.limits.max_offset}")
        options = {} if body.get("options") is None else body["options"]
        if not isinstance(options, dict):
            raise HTTPError(422, "options: an object of the split generator's options")
        rows = self.rows(recipe, split, seed, options, offset + n)
        got = rows[offset:offset + n]
        tail = {"offset": offset, "next_offset": offset + len(got), "exhausted": len(got) < n}
        return b'{"rows": [' + b", ".join(got) + b"], " + json.dumps(tail).encode()[1:]

    def rows(self, recipe: str | dict, split: Any, seed: int, options: dict, size: int) -> list[bytes]:
        """Rows ``[0, size)`` of the split (each as JSON bytes), from the cache or the build worker."""
        from opgen import api
        from opgen.recipe import RecipeError
        from opgen.taskbuild import BuildRefused

        served_recipe(recipe)
        try:
            loaded = api.load_recipe(recipe, seed)
        except (RecipeError, TypeError, ValueError, KeyError, RecursionError) as exc:
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
        cached = self._cache.get(key)
        if cached is not None and len(cached) >= size:
            return cached
        try:
            rows = self.builder.rows(raw, split, seed, size)
        except BuildRefused as exc:
            raise HTTPError(exc.status, f"recipe {loaded.name!r}, split {split!r}: {exc}") from None
        self._cache.put(key, rows, sum(len(r) for r in rows) + len(key) + 64 * len(rows))
        return rows

    # ---------------------------------------------------------------- curriculum

    def _curriculum(self) -> Any:
        if self.curriculum is None:
            raise HTTPError(404, "this server runs no curriculum (start it with opgen serve --curriculum FILE)")
        return self.curriculum

    def _saved(self, cur: Any) -> None:
        if self._save is not None:
            self._save(cur.export())

    def curriculum_tasks(self, body: Mapping) -> dict:
        from opgen.curriculum import CurriculumError

        cur = self._curriculum()
        fields(body, ("n",))
        n = count_n(body.get("n", 16), self.limits.max_tasks)
        with self._curriculum_lock:  # one reward stream, one order
            try:
                rows = cur.next_rows(n)
            except CurriculumError as exc:
                raise HTTPError(422, str(exc)) from None
            self._saved(cur)  # before the rows leave: a restart serves what comes after them
            return {"rows": rows, "state": cur.state()}

    def curriculum_report(self, body: Mapping) -> dict:
        from opgen.curriculum import CurriculumError, ReportedTwice, UnservedRow

        cur = self._curriculum()
        fields(body, ("reports",))
        reports = body.get("reports")
        if not isinstance(reports, list):
            raise HTTPError(422, "reports: a list of {row, reward} objects is required")
        self._check_batch(len(reports), "reports")
        pairs = []
        for i, r in enumerate(reports):
            if not isinstance(r, dict):
                raise HTTPError(422, f"reports[{i}]: an object with row (extra_info.curriculum_row) and reward")
            fields(r, ("row", "reward"), f"reports[{i}]")
            pairs.append((r.get("row"), r.get("reward")))
        with self._curriculum_lock:
            try:
                state = cur.report_many(pairs)
            except ReportedTwice as exc:
                raise HTTPError(409, str(exc)) from None
            except (UnservedRow, CurriculumError) as exc:
                raise HTTPError(422, str(exc)) from None
            self._saved(cur)
            return {"state": state}

    def curriculum_state(self, body: Mapping | None = None) -> dict:
        """GET: the whole state (:meth:`Curriculum.export`); POST: replace it by the body."""
        from opgen.curriculum import CurriculumError

        cur = self._curriculum()
        with self._curriculum_lock:
            if body is not None:
                try:
                    cur.restore(body, "body")
                except CurriculumError as exc:
                    raise HTTPError(422, str(exc)) from None
                self._saved(cur)
            return cur.export()

    # ---------------------------------------------------------------- episodes

    def open_episode(self, body: Mapping) -> dict:
        from opgen.episode import Episode, EpisodeError, EpisodeSettings, sandbox_grader

        fields(body, ("recipe", "split", "seed", "index", "options", "row", "settings"))
        try:
            settings = EpisodeSettings.of(body.get("settings"))
        except EpisodeError as exc:
            raise HTTPError(422, str(exc)) from None
        row = self.episode_row(body)
        try:
            episode = Episode(row, settings, grader=sandbox_grader(self.allow_weak_sandbox))
        except (EpisodeError, AdapterError) as exc:
            raise HTTPError(422, str(exc)) from None
        eid = secrets.token_urlsafe(12)
        now = time.monotonic()
        with self._episodes_lock:
            self._expire_episodes(now)
            self.episodes[eid] = (now, episode)
            while len(self.episodes) > self.limits.max_episodes:
                self.episodes.popitem(last=False)
        return {"episode": eid, "messages": episode.messages, **episode.state()}

    def episode_row(self, body: Mapping) -> dict:
        """The row an episode plays: ``row`` as given, or row ``index`` of ``recipe``'s ``split``
        (the rows of /tasks)."""
        if body.get("row") is not None:
            if any(k in body for k in ("recipe", "split", "index", "options")):
                raise HTTPError(422, "row: give a row, or recipe/split/index, not both")
            row = body["row"]
            if not isinstance(row, dict):
                raise HTTPError(422, "row: an object with prompt, reward_model.ground_truth and extra_info")
            return row
        recipe = body.get("recipe", "rl-r1")
        if not isinstance(recipe, (str, dict)):
            raise HTTPError(422, "recipe: a bundled recipe's name or a recipe object is required")
        index = _whole("index", body.get("index", 0))
        if index + 1 > self.limits.max_offset:
            raise HTTPError(413, f"index: {index}, beyond the limit of {self.limits.max_offset - 1}")
        options = {} if body.get("options") is None else body["options"]
        if not isinstance(options, dict):
            raise HTTPError(422, "options: an object of the split generator's options")
        split = body.get("split", "train" if recipe == "rl-r1" else None)
        rows = self.rows(recipe, split, _whole("seed", body.get("seed", 0)), options, index + 1)
        if index >= len(rows):
            raise HTTPError(422, f"index: {index}, but the split has {len(rows)} rows")
        return json.loads(rows[index])

    def _episode(self, eid: str) -> Any:
        with self._episodes_lock:
            self._expire_episodes(time.monotonic())
            hit = self.episodes.get(eid)
            if hit is None:
                raise HTTPError(404, f"episode {eid!r}: no such open episode (closed after "
                                     f"{self.limits.episode_idle_s:g} s idle, or never opened)")
            self.episodes[eid] = (time.monotonic(), hit[1])
            self.episodes.move_to_end(eid)
            return hit[1]

    def _expire_episodes(self, now: float) -> None:
        while self.episodes:
            eid, (seen, _) = next(iter(self.episodes.items()))
            if now - seen <= self.limits.episode_idle_s:
                break
            del self.episodes[eid]

    def episode_step(self, body: Mapping, eid: str) -> dict:
        from opgen.episode import EpisodeError

        fields(body, ("response",))
        episode = self._episode(eid)
        text = body.get("response")
        self._check_text(text, "response")
        try:
            out = episode.step(text)
        except EpisodeError as exc:
            raise HTTPError(409 if episode.done else 422, str(exc)) from None
        self.graded += 1
        return {**out, "messages": episode.messages}

    def episode_state(self, eid: str) -> dict:
        episode = self._episode(eid)
        return {"episode": eid, "messages": episode.messages, **episode.state()}

    # ---------------------------------------------------------------- health, metrics

    def health(self) -> dict:
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
        lines += ["# TYPE opgen_task_cache_bytes gauge", f"opgen_task_cache_bytes {self._cache.bytes}",
                  "# TYPE opgen_builds_killed_total counter", f"opgen_builds_killed_total {self.builder.killed}",
                  "# TYPE opgen_episodes_open gauge", f"opgen_episodes_open {len(self.episodes)}"]
        if self.curriculum is not None:
            lines += ["# TYPE opgen_curriculum_high gauge"]
            for b, st in sorted(self.curriculum.state()["buckets"].items()):
                lines.append(f'opgen_curriculum_high{{bucket="{b}"}} {st["window"][1]}')
        return "\n".join(lines) + "\n"


async def _body(request: Any, limits: Limits) -> Any:
    ctype = request.headers.get("content-type", "")
    if ctype.split(";")[0].strip() != "application/json":
        raise HTTPError(415, f"content-type must be application/json, got {ctype or 'none'}")
    limit = limits.max_body_bytes
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
    return parse_json(b"".join(chunks), limits)


def _authorized(svc: Service, headers: Mapping) -> bool:
    if svc.token is None:
        return True
    got = str(headers.get("authorization", ""))
    return got.startswith("Bearer ") and hmac.compare_digest(got[7:].encode(), svc.token.encode())


def create_app(service: Service | None = None):
    """The Starlette app (``service``: limits and state; a fresh one by default)."""
    from starlette.applications import Starlette
    from starlette.requests import ClientDisconnect
    from starlette.responses import JSONResponse, PlainTextResponse, Response
    from starlette.routing import Route, WebSocketRoute

    svc = service or Service()

    def endpoint(route: str, fn, *, body: bool = True, grading: bool = False, text: bool = False,
                 params: tuple[str, ...] = ()):
        async def handler(request):
            t0 = time.perf_counter()
            status = 200
            try:
                if not _authorized(svc, request.headers):
                    raise HTTPError(401, "a bearer token is required (Authorization: Bearer TOKEN)")
                args = [request.path_params[p] for p in params]
                if body:
                    payload = await _body(request, svc.limits)
                    if not isinstance(payload, dict):
                        raise HTTPError(422, "the body must be a JSON object")
                    args.insert(0, payload)
                if grading:
                    async with svc._grading:
                        result = await asyncio.to_thread(fn, *args)
                else:
                    result = await asyncio.to_thread(fn, *args)
                if isinstance(result, bytes):
                    response = Response(result, media_type="application/json")
                else:
                    response = PlainTextResponse(result) if text else JSONResponse(result)
            except HTTPError as exc:
                status = exc.status
                response = JSONResponse({"error": exc.message}, status_code=status)
                if status == 401:
                    response.headers["WWW-Authenticate"] = "Bearer"
            except ClientDisconnect:
                status = 499  # the client left (or was cut off at a read deadline): nobody to answer
                response = Response(status_code=400)
            except (AdapterError, TypeError, ValueError, RecursionError) as exc:
                status = 422
                response = JSONResponse({"error": f"{type(exc).__name__}: {exc}"[:2000]}, status_code=status)
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
        Route("/curriculum/state", endpoint("/curriculum/state", svc.curriculum_state, body=False), methods=["GET"]),
        Route("/curriculum/state", endpoint("/curriculum/state", svc.curriculum_state), methods=["POST"]),
        Route("/episodes", endpoint("/episodes", svc.open_episode), methods=["POST"]),
        Route("/episodes/{eid}/step", endpoint("/episodes/step", svc.episode_step, grading=True, params=("eid",)),
              methods=["POST"]),
        Route("/episodes/{eid}", endpoint("/episodes", svc.episode_state, body=False, params=("eid",)),
              methods=["GET"]),
        WebSocketRoute("/openenv/ws", _openenv(svc)),
        Route("/health", endpoint("/health", svc.health, body=False), methods=["GET"]),
        Route("/metrics", endpoint("/metrics", svc.metrics, body=False, text=True), methods=["GET"]),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app):
        try:
            yield
        finally:
            svc.close()  # a build in progress ends now, so the server stops at once

    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.service = svc
    return app


# ---------------------------------------------------------------- OpenEnv: reset / step / state over a WebSocket

#: Seconds an OpenEnv session may stay silent before the server closes it.
OPENENV_IDLE_S = 300.0
#: OpenEnv sessions (WebSockets) one client address may hold at once.
OPENENV_PER_CLIENT = 16


def _openenv(svc: Service):
    """OpenEnv's WebSocket protocol (openenv-core 0.3's ``EnvClient``: ``{"type": "reset"|"step"|
    "state"|"close", "data"}`` in, ``{"type": "observation"|"state"|"error", "data"}`` out), one
    episode per connection: ``reset`` opens one (its data: :meth:`Service.open_episode`'s body),
    ``step`` plays ``{"response"}``, ``state`` reads it."""
    from starlette.websockets import WebSocketDisconnect

    async def handler(ws):
        client = ws.client.host if ws.client else "?"
        if not _authorized(svc, ws.headers):
            await ws.close(code=1008)
            return
        with svc._lock:
            if svc._openenv_sessions[client] >= OPENENV_PER_CLIENT:
                refused = True
            else:
                refused = False
                svc._openenv_sessions[client] += 1
        if refused:
            await ws.close(code=1013)
            return
        await ws.accept()
        eid: str | None = None
        try:
            while True:
                try:
                    raw = await asyncio.wait_for(ws.receive_text(), timeout=OPENENV_IDLE_S)
                except asyncio.TimeoutError:
                    break
                if len(raw) > svc.limits.max_body_bytes:
                    await ws.send_json({"type": "error", "data": {"message": "message over the body limit",
                                                                  "code": "VALIDATION_ERROR"}})
                    continue
                reply, eid, stop = await _openenv_reply(svc, raw, eid)
                if stop:
                    break
                await ws.send_json(reply)
        except WebSocketDisconnect:
            pass
        finally:
            with svc._lock:
                svc._openenv_sessions[client] -= 1
            with contextlib.suppress(Exception):
                await ws.close()

    return handler


async def _openenv_reply(svc: Service, raw: str, eid: str | None) -> tuple[dict, str | None, bool]:
    """The reply to one OpenEnv message, the session's episode id after it, and whether to close."""
    try:
        message = parse_json(raw, svc.limits)
        if not isinstance(message, dict):
            raise HTTPError(422, "a message is a JSON object with type and data")
        kind, data = message.get("type"), message.get("data") or {}
        if not isinstance(data, dict):
            raise HTTPError(422, "data: an object")
        if kind == "close":
            return {}, eid, True
        if kind == "reset":
            opened = await asyncio.to_thread(svc.open_episode, data)
            return {"type": "observation", "data": {"observation": _observation(opened, None), "reward": None,
                                                    "done": False}}, opened["episode"], False
        if kind == "step":
            if eid is None:
                raise HTTPError(409, "step before reset")
            async with svc._grading:
                out = await asyncio.to_thread(svc.episode_step, data, eid)
            return {"type": "observation", "data": {"observation": _observation(out, out), "reward": out["reward"],
                                                    "done": out["done"]}}, eid, False
        if kind == "state":
            state = svc.episode_state(eid) if eid is not None else {}
            return {"type": "state", "data": {"episode_id": eid, "step_count": state.get("turn", 0),
                                              **{k: v for k, v in state.items() if k != "messages"}}}, eid, False
        raise HTTPError(422, f"unknown message type {kind!r} (reset, step, state, close)")
    except (HTTPError, TypeError, ValueError) as exc:
        text = exc.message if isinstance(exc, HTTPError) else str(exc)
        return {"type": "error", "data": {"message": text, "code": "EXECUTION_ERROR"}}, eid, False


def _observation(episode: Mapping, step: Mapping | None) -> dict:
    """The observation OpenEnv returns: the conversation so far, the last user turn as ``prompt``."""
    messages = list(episode.get("messages") or [])
    return {"messages": messages, "prompt": messages[-1]["content"] if messages else "",
            "feedback": None if step is None else step.get("feedback"),
            "score": None if step is None else step.get("score"), "turn": episode.get("turn", 0)}


def run(host: str = "127.0.0.1", port: int = 8000, limits: Limits | None = None,
        allow_weak_sandbox: bool | None = None, log_level: str = "warning", curriculum: Any = None,
        token: str | None = None, save: Callable[[dict], None] | None = None) -> None:
    """Serve until interrupted (uvicorn, one process; the sandbox pool grades concurrently). A host
    other than loopback needs ``token``."""
    import uvicorn

    from opgen.score.sandbox import shared
    from opgen.serveguard import guarded_protocol

    if not is_loopback(host) and not token:
        raise ServeError(f"--host {host} is not loopback: a bearer token is required (--token or {TOKEN_ENV})")
    limits = limits or Limits()
    app = build_app(limits, allow_weak_sandbox, curriculum, token=token, save=save)  # starts the sandbox now
    print(f"opgen serve: http://{host}:{port} (isolation {shared(allow_weak_sandbox=allow_weak_sandbox).level}"
          f"{', bearer token required' if token else ''})", flush=True)
    try:
        uvicorn.run(app, host=host, port=port, log_level=log_level, http=guarded_protocol(limits),
                    limit_concurrency=limits.max_connections + 64, timeout_keep_alive=5,
                    timeout_graceful_shutdown=5, ws_max_size=limits.max_body_bytes)
    finally:
        app.state.service.close()


# ---------------------------------------------------------------- Ray Serve: the same app, another host

#: Replicas a Ray deployment may ask for, at most (each holds a sandbox pool).
MAX_REPLICAS = 32
#: Requests one replica works on at once, and requests Ray Serve queues per deployment before it
#: answers 503: with the app's own limits, nothing unbounded is accepted on this host either.
RAY_MAX_ONGOING = 64
RAY_MAX_QUEUED = 256


def build_app(limits: Limits | None = None, allow_weak_sandbox: bool | None = None, curriculum: Any = None, *,
              token: str | None = None, save: Callable[[dict], None] | None = None):
    """:func:`create_app` on a fresh :class:`Service`, with the sandbox started first (so a host that
    cannot isolate fails at start-up, not at the first grade). Both hosts build their app here."""
    from opgen.score.sandbox import shared

    shared(allow_weak_sandbox=allow_weak_sandbox)
    service = Service(limits, allow_weak_sandbox, token=token, curriculum=curriculum, save=save)
    service.builder.start()
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
    import os

    import ray
    from ray import serve

    if host not in ("127.0.0.1", "localhost"):
        raise ValueError(f"--host {host}: the Ray deployment serves on 127.0.0.1 only")
    app = ray_deployment(replicas=replicas, limits=limits, allow_weak_sandbox=allow_weak_sandbox)

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
