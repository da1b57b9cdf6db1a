"""Ray as the executor of `opgen eval` (and of `opgen build` shards): replicas as Ray actors.

Each replica is one actor holding one engine (`driver.ReplicaWorker`), placed in its own
bundle of a placement group (``replica_gpus`` GPUs: one, or one tensor-parallel group, always on
one node) so replicas never share a GPU unless told to (fractional ``replica_gpus``). Replicas
are independent engines: there is no coupled data parallelism whose ranks hang when one
finishes early. Scoring runs in one grader actor (`driver.Grader`, its warm sandbox's
``--workers`` processes) on the driver's node, where the generations files and reports are written
(nothing needs a shared filesystem except the model weights on every node). It asks Ray for no CPU:
its sandbox processes are outside Ray's count anyway, and a grader waiting for a CPU the replicas
hold would grade nothing until generation ends (the tail this pipelining removes).

Without ``address`` a local cluster is started on 127.0.0.1 only and stopped at the end.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from opgen import opwatch
from opgen.distributed.driver import Grader, ReplicaLost, ReplicaWorker, Task
from opgen.errors import OpgenError
from opgen.infer.backends import backend_spec
from opgen.infer.base import BackendError, EngineOptions
from opgen.infer.config import RayOptions  # defined with the other option records; read from here too
from opgen.score.sandbox import Sandbox, SandboxError

PLACEMENT_TIMEOUT_S = 120


class RayError(RuntimeError, OpgenError):
    """Ray is missing, the cluster cannot be reached, or it cannot hold the replicas asked for."""

    exit_code = 1


# the driver's settings of these reach every replica, on any node (VLLM_BATCH_INVARIANT=1 among
# them); secrets (an API key, HF_TOKEN) are not sent through Ray: set them where the nodes start
FORWARDED_ENV = ("VLLM_",)


def replica_env() -> dict[str, str]:
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(FORWARDED_ENV)}


def import_ray():
    try:
        import ray
    except ImportError as exc:
        raise RayError(f"--executor ray needs the ray package (pip install 'opgen[ray]'): {exc}") from None
    return ray


def init(ray, opts: RayOptions) -> bool:
    """Connect to (or start) a cluster; True when this call started it (and must stop it)."""
    if ray.is_initialized():
        return False
    if opts.address:
        try:
            ray.init(address=opts.address, log_to_driver=False)
        except Exception as exc:
            raise RayError(f"could not connect to the Ray cluster at {opts.address}: {exc}") from None
        return True
    ray.init(num_cpus=opts.num_cpus or os.cpu_count() or 1, include_dashboard=False, log_to_driver=False,
             _node_ip_address="127.0.0.1", object_store_memory=256 * 2 ** 20)
    return True


def _close_and_kill(ray, actors: Sequence, timeout: float) -> None:
    """Ask each actor to close (waiting ``timeout`` seconds at most), then kill it; an actor already
    dead is no error."""
    if not actors:
        return
    try:
        ray.wait([a.close.remote() for a in actors], num_returns=len(actors), timeout=timeout)
    except Exception:
        pass
    for actor in actors:
        try:
            ray.kill(actor, no_restart=True)
        except Exception:
            pass


class RayPool:
    """The `driver` pool interface over Ray actors."""

    def __init__(self, backend: str, engine: EngineOptions, opts: RayOptions, openai=None):
        ray = self.ray = import_ray()
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

        self._remove_pg = remove_placement_group
        self.started = init(ray, opts)
        self.pg = None
        self.actors: list = []
        try:
            cluster_gpus = ray.cluster_resources().get("GPU", 0)
            spec = backend_spec(backend)
            gpus = opts.replica_gpus
            if gpus is None:
                gpus = float(engine.tensor_parallel_size) if (cluster_gpus and spec.gpu) else 0.0
            urls: Sequence[str | None] = [None]
            if spec.servers and openai is not None:
                urls = openai.base_urls
            n = opts.replicas
            if n is None:
                if spec.servers:
                    n = len(urls)
                elif gpus:
                    n = max(1, int(cluster_gpus // gpus))
                else:
                    n = 1
            bundle = {"CPU": opts.replica_cpus} | ({"GPU": gpus} if gpus else {})
            self.pg = placement_group([dict(bundle) for _ in range(n)], strategy="PACK")
            ready, _ = ray.wait([self.pg.ready()], timeout=PLACEMENT_TIMEOUT_S)
            if not ready:
                raise RayError(f"the cluster cannot place {n} replicas of {bundle} within {PLACEMENT_TIMEOUT_S} s "
                               f"(it has {ray.cluster_resources()}); ask for fewer --replicas")
            actor_cls = ray.remote(max_restarts=0, max_task_retries=0)(ReplicaWorker)
            for i in range(n):
                replica_openai = openai
                if spec.servers and openai is not None:
                    # one server per replica: the pull queue balances the servers
                    replica_openai = type(openai)(**{**openai.__dict__, "base_urls": (urls[i % len(urls)],)})
                strategy = PlacementGroupSchedulingStrategy(self.pg, placement_group_bundle_index=i)
                self.actors.append(actor_cls.options(
                    num_cpus=opts.replica_cpus, num_gpus=gpus, scheduling_strategy=strategy,
                    runtime_env={"env_vars": replica_env()},
                ).remote(backend, engine, replica_openai))
            self.replicas = list(range(n))
            self.replica_gpus = gpus
            node = ray.get_runtime_context().get_node_id()
            self._score_strategy = NodeAffinitySchedulingStrategy(node_id=node, soft=False)
        except BaseException:
            self.close()
            raise
        self._owner: dict = {}
        self.grader = None

    def submit(self, rid: int, task: Task):
        ref = self.actors[rid].run.remote(task)
        self._owner[ref] = rid
        return ref

    def start_grader(self, *args) -> None:
        cls = self.ray.remote(max_restarts=0, max_task_retries=0)(Grader)
        self.grader = cls.options(num_cpus=0, scheduling_strategy=self._score_strategy).remote(*args)

    def grade(self, method: str, *args):
        """A call of the grader actor (one at a time, in the order submitted: Ray's for one caller)."""
        return getattr(self.grader, method).remote(*args)

    def wait(self, handles):
        done, _ = self.ray.wait(list(handles), num_returns=1)
        return done

    def get(self, handle):
        exc_types = self.ray.exceptions
        rid = self._owner.pop(handle, None)
        try:
            return self.ray.get(handle)
        except (exc_types.RayActorError, exc_types.ActorDiedError) as exc:
            if rid is None:
                raise RuntimeError(f"the grader actor died ({type(exc).__name__}); the generations are kept: "
                                   f"rerun with --resume") from None
            raise ReplicaLost(f"replica {rid} died: {type(exc).__name__}") from None
        except exc_types.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, BaseException):
                if isinstance(cause, BackendError):
                    raise BackendError(str(cause)) from None
                raise cause from None
            raise

    def kill(self, rid: int) -> None:
        self.ray.kill(self.actors[rid], no_restart=True)

    def close(self) -> None:
        self.release()
        if self.grader is not None:
            try:
                self.ray.wait([self.grader.close.remote()], timeout=30)
                self.ray.kill(self.grader, no_restart=True)
            except Exception:
                pass
            self.grader = None
        if self.started and self.ray.is_initialized():
            self.ray.shutdown()
            self.started = False

    def release(self) -> None:
        """Stop the replicas and free their placement group (scoring tasks may then use it)."""
        # let each engine shut down (vLLM's engine core is a process of its own)
        _close_and_kill(self.ray, self.actors, timeout=60)
        self.actors = []
        if self.pg is not None:
            try:
                self._remove_pg(self.pg)
            except Exception:
                pass
            self.pg = None


# ---------------------------------------------------------------- opgen build's shards as Ray tasks

_ADOPTED: object = None  # (build token) this worker process has set up


# A shard task rewrites its own staged file from the start, so a retry after its worker died is
# safe; Ray retries it this many times (on a worker crash, not on an error of opgen's).
SHARD_RETRIES = 3


class TaskLost(RayError):
    """A task's worker died more often than its retries allow."""


def _shard(state: tuple, fn, arg):
    global _ADOPTED
    from opgen import build

    token, recipes, only, limit, tmp_dir, seed, op_budget = state
    if _ADOPTED != token:
        build.adopt(recipes, only, limit, tmp_dir, seed)
        _ADOPTED = token
    # the operator watch of the building process (opgen.build.build), here in the Ray worker
    with opwatch.watch(opwatch.codes_of(recipes[0].library), op_budget):
        return fn(arg)


class BuildMapper:
    """``opgen build``'s shard phases as Ray tasks (one CPU each). Each worker rebuilds the plans
    from the recipes (``build.adopt``); the staged shards go to the build's staging directory beside
    ``OUT``, so on several nodes ``--out`` must be on a filesystem they share."""

    def __init__(self, recipes, only: tuple[str, ...], limit: int | None, out, opts: RayOptions):
        import uuid

        ray = self.ray = import_ray()
        self.started = init(ray, opts)
        self.token, self.recipes, self.only, self.limit = uuid.uuid4().hex, list(recipes), tuple(only), limit
        self.state = None
        # a shard is idempotent: a worker that dies (OOM killer, kill -9, a lost node) is retried
        self.task = ray.remote(num_cpus=1, max_retries=SHARD_RETRIES, retry_exceptions=False)(_shard)

    def stage(self, tmp_dir, seed: int | None, op_budget: float) -> None:
        """Called by ``build.build`` once it knows where this build stages its shards."""
        self.state = self.ray.put((self.token, self.recipes, self.only, self.limit, tmp_dir, seed, op_budget))

    def __call__(self, fn, args: list, bar) -> list:
        from opgen import build

        refs = [self.task.remote(self.state, fn, a) for a in args]
        index = {ref: i for i, ref in enumerate(refs)}
        out: list = [None] * len(refs)
        pending = list(refs)
        while pending:
            done, pending = self.ray.wait(pending, num_returns=1)
            for ref in done:
                i = index[ref]
                try:
                    out[i] = self.ray.get(ref)
                except self.ray.exceptions.RayTaskError as exc:
                    cause = getattr(exc, "cause", None)
                    if isinstance(cause, BaseException):
                        raise cause from None
                    raise
                except self.ray.exceptions.RayError as exc:  # WorkerCrashedError, NodeDiedError, ...
                    raise TaskLost(f"shard task {i + 1} of {len(refs)}: its Ray worker died {SHARD_RETRIES + 1} "
                                   f"times ({type(exc).__name__}), more than the {SHARD_RETRIES} retries a shard "
                                   f"gets; the build was stopped and its output directory left as it was") from None
                if bar is not None and isinstance(args[i], int):
                    unit = build.current().units[args[i]]
                    bar.update(unit.stop - unit.start)
        return out

    def close(self) -> None:
        if self.started and self.ray.is_initialized():
            self.ray.shutdown()
            self.started = False


# ---------------------------------------------------------------- opgen score's sandbox over the cluster

class _SandboxHost:
    """A Ray actor holding one warm `opgen.score.sandbox.Sandbox` (threaded: its workers run in parallel)."""

    def __init__(self, workers: int, timeout_s: float):
        self.box = Sandbox(workers=workers, timeout_s=timeout_s)

    def level(self) -> str:
        return self.box.level

    def limits(self) -> tuple[float, int, int]:
        """What the static path reads of a sandbox (opgen.score.static.applies)."""
        return self.box.timeout_s, self.box.memory_mb, self.box.max_output

    def run_units(self, units):
        return self.box.run_units(units)

    def run_request(self, sent):
        return self.box.run_request(sent)

    def close(self) -> None:
        self.box.close()


class RaySandbox:
    """The part of the Sandbox interface the scorer uses (``workers``, ``level``, the limits the
    static path reads, ``run_units``, ``run_request``, ``close``), served by sandbox actors spread over the cluster's
    nodes: each response's units go to the actor with the fewest in flight. Grades are the local
    sandbox's (same programs, same isolated children); only where they run changes."""

    def __init__(self, workers: int, timeout_s: float, opts: RayOptions, actors: int | None = None):
        import threading

        ray = self.ray = import_ray()
        self.started = init(ray, opts)
        self.hosts: list = []
        try:
            cpus = int(ray.cluster_resources().get("CPU", 1))
            n = actors or max(1, cpus // workers)
            cls = ray.remote(max_restarts=0, max_concurrency=2 * workers)(_SandboxHost)
            self.hosts = [cls.options(num_cpus=workers, scheduling_strategy="SPREAD").remote(workers, timeout_s)
                          for _ in range(n)]
            levels = set(ray.get([h.level.remote() for h in self.hosts], timeout=PLACEMENT_TIMEOUT_S))
            limits = set(ray.get([h.limits.remote() for h in self.hosts], timeout=PLACEMENT_TIMEOUT_S))
        except BaseException:
            self.close()
            raise
        if len(levels) != 1:
            self.close()
            raise RayError(f"the sandbox actors report different isolation levels ({', '.join(sorted(levels))}): "
                           f"the nodes differ; a report must have one")
        self.level = levels.pop()
        # Without these the static path never applied under --executor ray (static.applies).
        self.timeout_s, self.memory_mb, self.max_output = (min(v) for v in zip(*limits))
        self.workers = workers * n
        self._busy = [0] * n
        self._lock = threading.Lock()

    def run_units(self, units):
        return self._call("run_units", list(units))

    def run_request(self, sent):
        """A request as the grading processes compile it (``Sandbox.run_request``: its results and the
        retries a dead worker cost), on the least busy actor."""
        return self._call("run_request", list(sent))

    def _call(self, method: str, payload: list):
        with self._lock:
            i = min(range(len(self.hosts)), key=lambda k: self._busy[k])
            self._busy[i] += 1
        try:
            return self.ray.get(getattr(self.hosts[i], method).remote(payload))
        except self.ray.exceptions.RayError as exc:
            raise SandboxError(f"sandbox actor {i} failed: {type(exc).__name__}: {exc}") from None
        finally:
            with self._lock:
                self._busy[i] -= 1

    def close(self) -> None:
        _close_and_kill(self.ray, self.hosts, timeout=30)
        self.hosts = []
        if self.started and self.ray.is_initialized():
            self.ray.shutdown()
            self.started = False

    def __enter__(self) -> RaySandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
