"""A checkpoint sweep over a pool of engine replicas: one pull queue of (model, data, chunk) units.

The driver (this process) reads the data, cuts every pass (model x data file, plain or
decomposed) into length-aware chunks (`chunks.make_chunks`) and keeps up to ``depth`` chunks in
flight per replica; a replica that finishes one is handed the next, preferably of the model it
has loaded (a replica switches models in place, `ReplicaWorker`). Each finished chunk is written
durably before anything else happens (`chunks.ChunkStore`), so a lost replica, node or driver
costs only the chunks in flight: a lost replica's chunks go back to the queue for the others,
and a rerun with ``--resume`` generates only rows in no chunk and no generations file. A chunk is
given again once: one in flight when a second replica is lost (a chunk that kills whatever runs
it, e.g. out of memory) stops the sweep with :class:`ChunkLost` naming it.

Scoring is pipelined chunk by chunk: each chunk, once stored, is graded by the pool's `Grader`
(one warm sandbox, on CPUs, beside the replicas) while the replicas go on generating; rows an
earlier run left (``--resume``) are graded as the pass starts. When a pass has all its chunks, its
generations file is assembled (byte-identical to the local loop's) and the grader writes the
pass's report from its spooled records in row order and its running counters (`Grader`, what
`score_files` writes: the same scores.jsonl, summary.json, summary.csv and plots). So the replicas wait on
scoring only for the last chunk's grades and the last report. metrics.json is written when all of
a model's passes are scored, with the same content as `evaluate_model`'s.

Pools: `InProcessPool` (replicas in threads of this process; tests, and the reference for
opgen.distributed.ray_executor.RayPool, whose replicas are Ray actors).
"""

from __future__ import annotations

import heapq
import os
import re
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opgen import faults
from opgen.errors import OpgenError
from opgen.files import write_json_atomic
from opgen.infer.backends import make_backend
from opgen.infer.base import Backend, EngineOptions, Generation, Request, Sampling
from opgen.infer.chunks import ChunkStore, chunk_name, indexed_lines, make_chunks
from opgen.infer.evaluate import (
    EvalConfig,
    begin_pass,
    data_name,
    load_data,
    loop_batch_size,
    metrics_header,
    note_subset,
    pass_result,
    passes,
    rollup,
)
from opgen.infer.run import RESUME_FIELDS, Plan, Row, RunStats, batch_lines, check_done, read_log
from opgen.library import LibraryMismatch
from opgen.score import inputs, report
from opgen.score.inputs import Row as ScoredRow
from opgen.score.metrics import DEFAULT_DEFS
from opgen.score.report import TIMEOUT_S, Report
from opgen.score.sandbox import Sandbox
from opgen.score.settings import GradeSettings

if TYPE_CHECKING:
    from opgen.score.metrics import MetricDefs

class ReplicaLost(RuntimeError, OpgenError):
    """A replica died (its process, actor or node); its chunks in flight are lost, not failed."""

    exit_code = 1


class AllReplicasLost(RuntimeError, OpgenError):
    exit_code = 1


class ChunkLost(RuntimeError, OpgenError):
    """A chunk was in flight on two replicas that were lost (it is not given a third)."""

    exit_code = 1


class InjectedFault(RuntimeError, OpgenError):
    exit_code = 1


# ---------------------------------------------------------------- what a replica runs

@dataclass(frozen=True)
class Task:
    """One chunk for a replica: its requests, batch by batch, as the local loop would send them."""

    model: str
    data_name: str  # backend.begin_data (replay picks its file by it)
    batches: list[list[Request]]
    sampling: Sampling


@dataclass
class TaskResult:
    gens: list[list[Generation]]
    seconds: float  # generating
    load_seconds: float = 0.0  # starting (or switching to) the model
    loaded: bool = False  # this task (re)loaded the model


class ReplicaWorker:
    """Holds one backend; loads another model in place when a task asks for one."""

    def __init__(self, backend: str, engine: EngineOptions, openai=None):
        self.kind = backend
        self.engine = engine
        self.openai = openai
        self.backend: Backend | None = None
        self.model: str | None = None

    def run(self, task: Task) -> TaskResult:
        t0 = time.perf_counter()
        loads = False
        # one engine per model, as evaluate_model keeps one for all its passes (a decomposed
        # pass only adds stop strings, which go with each request)
        if self.backend is None or self.model != task.model:
            self.close()
            self.backend = make_backend(self.kind, Path(task.model), task.sampling, self.engine, openai=self.openai)
            self.model = task.model
            loads = True
        t1 = time.perf_counter()
        self.backend.begin_data(task.data_name)
        gens = [self.backend.generate(batch, task.sampling) if batch else [] for batch in task.batches]
        return TaskResult(gens, time.perf_counter() - t1, t1 - t0, loads)

    def close(self) -> None:
        if self.backend is not None:
            self.backend.close()
        self.backend = None
        self.model = None


class Grader:
    """Grades a sweep's chunks as they come in, with one warm sandbox, and writes a pass's report
    once all its chunks are graded. Each chunk's records go to the pass's spool (a temporary file)
    and its running counters (`report.Report`) as it is graded, in whatever order chunks come;
    `finish` writes the spooled lines in row order into the staged report and the summary beside
    them: what `score_files` writes for the whole file, holding no pass's records in memory.

    The pools run its calls one at a time, in the order they were submitted: a pass's `finish`,
    submitted after its last chunk's `grade`, comes after every grade of that pass."""

    def __init__(self, workers: int, settings: GradeSettings, plots: bool = True,
                 metric_defs: MetricDefs | None = None):
        self.settings, self.plots = settings, plots
        self.metric_defs = metric_defs or DEFAULT_DEFS
        self.box = Sandbox(workers=workers, timeout_s=TIMEOUT_S)
        self._passes: dict[str, _PassReport] = {}
        try:  # the plotting library loads now, while the replicas generate, not in the sweep's tail
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot
        except ImportError:
            pass

    def _pass(self, key: str, settings: GradeSettings) -> _PassReport:
        """The pass ``key`` being graded with ``settings`` (its rows' library): every chunk of one
        file names one library."""
        p = self._passes.get(key)
        if p is None:
            p = self._passes[key] = _PassReport(Report(settings, self.metric_defs))
        elif p.report.settings.library.digest != settings.library.digest:
            had, got = p.report.settings.library, settings.library
            raise LibraryMismatch(f"{key}: a chunk names operator library {got.name!r} (digest {got.digest[:12]}), "
                                  f"another than the chunks before it ({had.name!r}, digest {had.digest[:12]}); "
                                  "one file, one library")
        return p

    def grade(self, key: str, data: str, n_rows: int, rows: dict, text: str, source: str) -> float:
        """Grade one chunk's lines ``text`` (rows ``rows`` of the ``n_rows`` of ``data``) into the
        pass ``key``'s spool and counters. Returns the seconds it took."""
        t0 = time.perf_counter()
        answers = inputs.parse_responses(text, n_rows, source)
        if not set(answers) <= set(rows):
            raise RuntimeError(f"{source}: rows {sorted(set(answers) - set(rows))[:5]} were not sent with the chunk")
        pairs = [(rows[i], answers[i]) for i in sorted(answers)]
        # the rows' library (the one given, else the study's or the user's store's), before grading
        settings = inputs.check_truths(Path(data), ((row.position, row.ground_truth) for row, _ in pairs),
                                       self.settings)
        p = self._pass(key, settings)
        # As many grading processes as sandbox workers: the CPUs this grader was given.
        lines = [p.report.add(row, grades) for row, grades in
                 report.graded(pairs, self.box, data=Path(data), settings=settings, processes=self.box.workers)]
        if pairs:
            p.spool.append(pairs[0][0].position, pairs[-1][0].position, b"".join(lines))
        p.answered += len(answers)
        p.jobs += 1
        return time.perf_counter() - t0

    def finish(self, key: str, jobs: int, data: str, n_rows: int, responses: str, out: str) -> tuple[dict, float]:
        """Write the report of the pass ``key`` (graded in ``jobs`` calls of `grade`) into ``out``."""
        t0 = time.perf_counter()
        p = self._passes.pop(key, None)
        if p is None:  # a pass with no row to grade: its report says so

            p = _PassReport(Report(self.settings, self.metric_defs))
        try:
            if p.jobs != jobs:
                raise RuntimeError(f"{key}: {p.jobs} chunks graded, {jobs} expected")
            with report.staged(Path(out)) as stage:
                with report.ScoresFile(stage) as fh:
                    p.spool.write_sorted(fh)
                summary = p.report.finish(stage, plots=self.plots, n_rows=n_rows, answered=p.answered,
                                          data=Path(data), responses=Path(responses), isolation=self.box.level)
        finally:
            p.spool.close()
        return summary, time.perf_counter() - t0

    def close(self) -> None:
        for p in self._passes.values():
            p.spool.close()
        self._passes = {}
        self.box.close()


@dataclass
class _PassReport:
    """One pass being graded: its counters, its spooled lines, what it has answered."""

    report: Any
    spool: Spool = field(default_factory=lambda: Spool())
    answered: int = 0
    jobs: int = 0


_KEY = re.compile(rb'\{"index": (\d+), "sample": (\d+)')


class Spool:
    """``scores.jsonl`` lines of chunks graded in any order, in an unlinked temporary file (nothing
    is left behind, whatever ends the process), and each chunk's rows and place in it;
    :meth:`write_sorted` writes them in row then sample order, as `score_files` does."""

    def __init__(self) -> None:
        self.file = tempfile.TemporaryFile(prefix="opgen-scores-")
        self.parts: list[tuple[int, int, int, int]] = []  # (first row, last row, offset, length)
        self.size = 0

    def append(self, first: int, last: int, data: bytes) -> None:
        self.file.seek(self.size)
        self.file.write(data)
        self.parts.append((first, last, self.size, len(data)))
        self.size += len(data)

    def write_sorted(self, out) -> None:
        """Chunks whose rows do not interleave are copied whole, in row order; those that interleave
        (rows a resumed run had left, graded beside new chunks) are merged line by line."""
        self.file.flush()
        fd = self.file.fileno()
        group: list[tuple[int, int, int, int]] = []
        last = -1
        for part in sorted(self.parts):
            if group and part[0] > last:
                self._write_group(fd, group, out)
                group = []
            group.append(part)
            last = max(last, part[1])
        if group:
            self._write_group(fd, group, out)

    def _write_group(self, fd: int, group: list[tuple[int, int, int, int]], out) -> None:
        if len(group) == 1:
            offset, length = group[0][2], group[0][3]
            while length:
                data = os.pread(fd, min(1 << 20, length), offset)
                if not data:
                    raise OSError(f"the scores spool ended at byte {offset}")
                out.write(data)
                offset, length = offset + len(data), length - len(data)
            return

        def keyed(part: tuple[int, int, int, int]):
            for line in _spooled_lines(fd, part[2], part[3], 1 << 14):
                m = _KEY.match(line)
                assert m is not None  # the lines are report.Report's own
                yield (int(m.group(1)), int(m.group(2))), line

        for _key, line in heapq.merge(*(keyed(p) for p in group)):
            out.write(line)

    def close(self) -> None:
        self.file.close()


def _spooled_lines(fd: int, offset: int, length: int, block: int = 1 << 20):
    """The lines of ``length`` bytes at ``offset`` of ``fd``, read ``block`` bytes at a time."""
    pos, end, buf, start = offset, offset + length, b"", 0
    while True:
        nl = buf.find(b"\n", start)
        if nl >= 0:
            yield buf[start:nl + 1]
            start = nl + 1
            continue
        if pos >= end:
            return
        data = os.pread(fd, min(block, end - pos), pos)
        if not data:
            raise OSError(f"the scores spool ended at byte {pos} of {end}")
        pos += len(data)
        buf, start = buf[start:] + data, 0


# ---------------------------------------------------------------- pools

class InProcessPool:
    """Replicas as threads of this process (one task at a time each, like an actor)."""

    def __init__(self, workers: Sequence[ReplicaWorker]):
        self.workers = list(workers)
        self.replicas = list(range(len(self.workers)))
        self._threads = [ThreadPoolExecutor(1, thread_name_prefix=f"replica{i}") for i in self.replicas]
        self._scoring = ThreadPoolExecutor(1, thread_name_prefix="scoring")
        self._grader: Grader | None = None
        self._dead: set[int] = set()
        self._owner: dict[Future, int] = {}
        self._lock = threading.Lock()

    def submit(self, rid: int, task: Task) -> Future:
        fut = self._threads[rid].submit(self.workers[rid].run, task)
        self._owner[fut] = rid
        return fut

    def start_grader(self, *args) -> None:
        self._grader = Grader(*args)

    def grade(self, method: str, *args) -> Future:
        """A call of the grader, run after those submitted before it."""
        return self._scoring.submit(getattr(self._grader, method), *args)

    def wait(self, handles: Sequence[Future]) -> list[Future]:
        done, _ = futures_wait(list(handles), return_when=FIRST_COMPLETED)
        return [h for h in handles if h in done]

    def get(self, handle: Future):
        rid = self._owner.pop(handle, None)
        if rid is not None and rid in self._dead:
            handle.exception()  # let it finish; its result is lost with the replica
            raise ReplicaLost(f"replica {rid} was killed")
        return handle.result()

    def kill(self, rid: int) -> None:
        self._dead.add(rid)

    def release(self) -> None:
        """Generation is over: free the replicas (scoring may go on)."""
        for w in self.workers:
            w.close()

    def close(self) -> None:
        for ex in self._threads:
            ex.shutdown(wait=True)
        self._scoring.shutdown(wait=True, cancel_futures=True)  # after an error: no grading left to wait for
        if self._grader is not None:
            self._grader.close()
            self._grader = None
        for w in self.workers:
            w.close()


# ---------------------------------------------------------------- the driver

@dataclass
class _Pass:
    model_idx: int
    data: Path
    suffix: str
    plan: Plan
    rows: list[Row]
    gen_path: Path
    store: ChunkStore
    stats: RunStats
    remaining: int = 0
    first_submit: float | None = None
    last_done: float = 0.0
    result: dict | None = None
    scored: bool = False
    kept: tuple[set[int], set[int]] = (set(), set())  # rows an earlier run left: in the file, in chunks
    grade_jobs: int = 0  # chunks handed to the grader
    only: set[int] | None = None

    @property
    def key(self) -> str:
        return f"{self.model_idx}/{data_name(self.data)}{self.suffix}"


@dataclass
class _Unit:
    pass_: _Pass
    rows: list[list[Row]]  # batches
    reqs: list[list[list[Request]]]  # per batch, per row
    name: str
    seq: int = 0  # its place in the queue as planned (1, 2, ...)
    lost_on: list[int] = field(default_factory=list)  # the replicas lost while they ran it

    @property
    def n_rows(self) -> int:
        return sum(len(b) for b in self.rows)


@dataclass
class ReplicaStats:
    chunks: int = 0
    rows: int = 0
    busy_s: float = 0.0
    load_s: float = 0.0
    loads: int = 0
    lost: bool = False
    model: int | None = None


@dataclass
class SweepReport:
    executor: str
    replicas: list[ReplicaStats] = field(default_factory=list)
    wall_s: float = 0.0
    generation_s: float = 0.0  # until the last chunk came back
    scoring_tail_s: float = 0.0  # after that, waiting for scores only
    scoring_s: float = 0.0  # the grader's busy time: grading chunks and writing reports
    chunks_graded: int = 0
    rows_generated: int = 0
    chunks: int = 0
    chunks_redone: int = 0

    def to_dict(self) -> dict:
        gen = self.generation_s
        return {
            "executor": self.executor,
            "wall_s": round(self.wall_s, 3),
            "generation_s": round(gen, 3),
            "scoring_tail_s": round(self.scoring_tail_s, 3),
            "scoring_s": round(self.scoring_s, 3),
            "chunks_graded": self.chunks_graded,
            # the replicas never wait for a score while there is work; they do at the end
            "replicas_waiting_on_scoring_share": round(self.scoring_tail_s / self.wall_s, 4) if self.wall_s else 0.0,
            "rows_generated": self.rows_generated,
            "rows_per_s": round(self.rows_generated / gen, 3) if gen else None,
            "chunks": self.chunks,
            "chunks_redone": self.chunks_redone,
            "replicas": [{"replica": i, "chunks": r.chunks, "rows": r.rows, "busy_s": round(r.busy_s, 3),
                          "model_load_s": round(r.load_s, 3), "model_loads": r.loads,
                          "idle_share": round(max(0.0, 1 - (r.busy_s + r.load_s) / gen), 4) if gen else 0.0,
                          "lost": r.lost}
                         for i, r in enumerate(self.replicas)],
        }


def _plan_passes(models: Sequence[Path], names: Sequence[str], out: Path, loaded, cfg: EvalConfig,
                 chunk_rows: int) -> tuple[list[dict], list[list[_Pass]], deque[_Unit], list[_Pass]]:
    """Every model's metrics header and passes, the queue of chunks to generate and the passes
    with nothing left to generate. Clears a model's metrics.json (and, without ``--resume``, its
    generations and chunks) before anything runs."""
    batch = loop_batch_size(cfg)
    metrics: list[dict] = []
    model_passes: list[list[_Pass]] = []
    queue: deque[_Unit] = deque()
    to_assemble: list[_Pass] = []
    for mi, (model, name) in enumerate(zip(models, names)):
        model_dir = out / name
        model_dir.mkdir(parents=True, exist_ok=True)
        (model_dir / "metrics.json").unlink(missing_ok=True)
        m = metrics_header(model, name, cfg)
        metrics.append(m)
        mine: list[_Pass] = []
        for data, _, rows, suffix, plan in passes(loaded, cfg, m):
            p, pending = _open_pass(mi, model, model_dir, out, name, data, rows, suffix, plan, cfg)
            mine.append(p)
            chunks = make_chunks(pending, batch, chunk_rows)
            p.remaining = len(chunks)
            for chunk in chunks:
                queue.append(_Unit(p, chunk, [[plan.requests(r) for r in b] for b in chunk], chunk_name(chunk),
                                   len(queue) + 1))
            if not chunks:
                to_assemble.append(p)
        model_passes.append(mine)
    return metrics, model_passes, queue, to_assemble


def _open_pass(mi: int, model: Path, model_dir: Path, out: Path, name: str, data: Path, rows: list[Row],
               suffix: str, plan: Plan, cfg: EvalConfig) -> tuple[_Pass, list[Row]]:
    """A pass of one model over one data file, and its rows that neither its generations file nor
    its stored chunks hold."""
    dn = data_name(data)
    gen_path = begin_pass(model_dir, model, data, suffix, cfg)
    store = ChunkStore(out, name, dn + suffix)
    if not cfg.resume:
        gen_path.unlink(missing_ok=True)
        store.clear()
    done = read_log(gen_path, repair=True, keep=RESUME_FIELDS)
    check_done(gen_path, done, rows)
    stored = store.done()
    check_done(store.dir, stored, rows)
    pending = [r for r in rows if r.index not in done and r.index not in stored]
    p = _Pass(mi, data, suffix, plan, rows, gen_path, store,
              RunStats(rows=len(rows), skipped=len(rows) - len(pending)))
    wanted = {r.index for r in rows}
    p.kept = (set(done) & wanted, (set(stored) - set(done)) & wanted)
    return p, pending


class _Sweep:
    """The driver's state while a sweep runs: the queue, the chunks in flight, the grader's jobs."""

    def __init__(self, models: Sequence[Path], names: Sequence[str], out: Path, cfg: EvalConfig, pool,
                 report: SweepReport, metrics: list[dict], model_passes: list[list[_Pass]],
                 queue: deque[_Unit], chunk_rows: int, depth: int):
        self.models, self.names, self.out, self.cfg, self.pool = models, names, out, cfg, pool
        self.report, self.metrics, self.model_passes, self.queue = report, metrics, model_passes, queue
        self.chunk_rows, self.depth = chunk_rows, depth
        self.inflight: dict[object, tuple[int, _Unit]] = {}
        self.scoring: dict[object, tuple[str, _Pass]] = {}
        self.alive = list(pool.replicas)
        # test-only (opgen.faults): lose the replica of the N-th chunk written; stop after N chunks; lose
        # whichever replica is given the N-th chunk of the queue
        self.kill_after, self.abort_after = faults.value("kill-replica-after"), faults.value("abort-after")
        self.poison = faults.value("lose-chunk")
        self.written = 0
        self.n_rows: dict[Path, int] = {}
        self.bar = None
        self.t_gen0 = time.perf_counter()
        self.t_gen_end: float | None = None

    def rows_in(self, data: Path) -> int:
        """The data file's row count (all of them, as score_files counts them), read once."""
        if data not in self.n_rows:
            import pyarrow.parquet as pq

            self.n_rows[data] = pq.ParquetFile(data).metadata.num_rows
        return self.n_rows[data]

    def grade(self, p: _Pass, pairs: list[tuple[int, str]], source: Path) -> None:
        """Hand rows' lines (index, line) of the pass to the grader, with the scorer's view of those rows."""
        rows = {}
        for i, _ in pairs:
            if 0 <= i < len(p.rows):
                r = p.rows[i]
                rows[i] = ScoredRow(r.index, r.ground_truth, r.data_source, r.extra_info)
        h = self.pool.grade("grade", p.key, str(p.data), self.rows_in(p.data), rows,
                            "".join(line for _, line in pairs), str(source))
        self.scoring[h] = ("grade", p)
        p.grade_jobs += 1

    def grade_kept(self, p: _Pass) -> None:
        """Rows an earlier run generated (in the generations file, in chunks) are graded first."""
        in_file, in_chunks = p.kept
        sources = ([(p.gen_path, in_file)] if in_file else []) + \
            ([(f, in_chunks) for f in p.store.files()] if in_chunks else [])
        for path, want in sources:
            piece: list[tuple[int, str]] = []
            for idx, line in indexed_lines(path):
                if idx in want:
                    piece.append((idx, line))
                    if len(piece) >= self.chunk_rows:
                        self.grade(p, piece, path)
                        piece = []
            if piece:
                self.grade(p, piece, path)

    def finish_generation(self, p: _Pass) -> None:
        p.store.assemble(p.gen_path)
        p.stats.seconds = (p.last_done - p.first_submit) if p.first_submit is not None else 0.0
        p.result, p.only = pass_result(p.gen_path, p.rows, p.stats)
        if self.cfg.score:
            name = data_name(p.data) + p.suffix
            p.result["scores"] = name
            model_dir = self.out / self.names[p.model_idx]
            # after every grade of this pass (the grader runs its calls in order)
            h = self.pool.grade("finish", p.key, p.grade_jobs, str(p.data), self.rows_in(p.data),
                                str(p.gen_path), str(model_dir / name))
            self.scoring[h] = ("finish", p)
        else:
            p.scored = True
            self.model_done(p.model_idx)

    def model_done(self, mi: int) -> None:
        if not all(p.scored for p in self.model_passes[mi]):
            return
        m = self.metrics[mi]
        for p in self.model_passes[mi]:
            entry = m["data"][data_name(p.data)]
            if p.suffix:
                entry["decomposed"] = p.result
            else:
                entry.update(p.result)
        m["scope"] = rollup(m)
        write_json_atomic(self.out / self.names[mi] / "metrics.json", m)

    def pick(self, rid: int) -> _Unit | None:
        want = self.report.replicas[rid].model
        for k, unit in enumerate(self.queue):
            if unit.pass_.model_idx == want:
                del self.queue[k]
                return unit
        return self.queue.popleft() if self.queue else None

    def start(self, to_assemble: list[_Pass]) -> None:
        """The grader (rows earlier runs left are graded first), passes with nothing to generate,
        models with no pass."""
        if self.cfg.score:
            self.pool.start_grader(self.cfg.workers, self.cfg.grading, self.cfg.plots, self.cfg.metric_defs)
            for mine in self.model_passes:
                for p in mine:
                    self.grade_kept(p)
        for p in to_assemble:
            self.finish_generation(p)
        for mi, mine in enumerate(self.model_passes):
            if not mine:
                self.model_done(mi)

    def submit(self) -> None:
        """Keep up to ``depth`` chunks in flight on every live replica."""
        for rid in list(self.alive):
            while self.queue and sum(1 for r, _ in self.inflight.values() if r == rid) < self.depth:
                unit = self.pick(rid)
                if unit is None:
                    break
                p = unit.pass_
                if p.first_submit is None:
                    p.first_submit = time.perf_counter()
                task = Task(str(self.models[p.model_idx]), data_name(p.data) + p.suffix,
                            [[q for qs in b for q in qs] for b in unit.reqs], p.plan.sampling)
                self.inflight[self.pool.submit(rid, task)] = (rid, unit)
                self.report.replicas[rid].model = p.model_idx
                if unit.seq == self.poison:
                    self.pool.kill(rid)
                    break

    def scored(self, h: object) -> None:
        """A grader job came back: a chunk graded, or a pass's report written."""
        kind, p = self.scoring.pop(h)
        if kind == "grade":
            self.report.scoring_s += self.pool.get(h)
            self.report.chunks_graded += 1
            return
        summary, secs = self.pool.get(h)
        self.report.scoring_s += secs
        assert p.result is not None  # finish_generation made it before handing the pass to the grader
        p.result["summary"] = note_subset(summary, p.gen_path, p.only)
        p.scored = True
        self.model_done(p.model_idx)

    def generated(self, h: object) -> None:
        """A chunk came back: store it, hand it to the grader, count it; a lost replica's chunk
        goes back to the front of the queue."""
        rid, unit = self.inflight.pop(h)
        try:
            res: TaskResult = self.pool.get(h)
        except ReplicaLost:
            self.report.replicas[rid].lost = True
            self.report.chunks_redone += 1
            if rid in self.alive:
                self.alive.remove(rid)
            unit.lost_on.append(rid)
            if len(unit.lost_on) > 1:
                raise ChunkLost(f"chunk {unit.name} of {unit.pass_.key} ({unit.n_rows} rows): replicas "
                                f"{' and '.join(map(str, unit.lost_on))} were lost while they ran it, and it is "
                                f"not given a third; {self.kept()}") from None
            self.queue.appendleft(unit)
            if not self.alive:
                if self.written:
                    why = f"every replica was lost; {self.kept()}"
                else:
                    why = ("every replica was lost before any chunk of this run was finished, so nothing of it "
                           "is stored; rerun (with --resume, what earlier runs stored is kept)")
                raise AllReplicasLost(why) from None
            return
        p = unit.pass_
        lines: list[str] = []
        truncated = 0
        for rows, reqs, gens in zip(unit.rows, unit.reqs, res.gens):
            got, cut = batch_lines(rows, reqs, gens, p.plan, self.cfg.backend)
            lines += got
            truncated += cut
        chunk_file = p.store.write(unit.name, lines)
        if self.cfg.score:
            indices = [r.index for b in unit.rows for r in b]
            if len(indices) != len(lines):  # one line per row, in row order
                raise RuntimeError(f"{chunk_file}: {len(lines)} lines for {len(indices)} rows")
            self.grade(p, list(zip(indices, lines)), chunk_file)
        p.last_done = time.perf_counter()
        p.stats.generated += unit.n_rows
        p.stats.requests += sum(len(qs) for b in unit.reqs for qs in b)
        self._count(rid, unit, res)
        p.remaining -= 1
        if p.remaining == 0:
            self.finish_generation(p)
        self._inject_fault(rid)

    def kept(self) -> str:
        if not self.written:
            return "no chunk of this run was finished (with --resume, what earlier runs stored is kept)"
        return f"the {self.written} chunks finished in this run are stored: rerun with --resume to keep them"

    def _count(self, rid: int, unit: _Unit, res: TaskResult) -> None:
        rs = self.report.replicas[rid]
        rs.chunks += 1
        rs.rows += unit.n_rows
        rs.busy_s += res.seconds
        rs.load_s += res.load_seconds
        rs.loads += res.loaded
        self.report.chunks += 1
        self.report.rows_generated += unit.n_rows
        self.written += 1
        if self.bar is not None:
            self.bar.update(unit.n_rows)
            _postfix(self.bar, self.report, time.perf_counter() - self.t_gen0)

    def _inject_fault(self, rid: int) -> None:
        if self.written == self.kill_after:
            self.pool.kill(rid)
        if self.written == self.abort_after:
            raise InjectedFault(f"{faults.ENV}: stopped after {self.written} chunks")

    def run(self) -> None:
        """Until nothing is queued, in flight or being scored."""
        first = True
        while self.queue or self.inflight or self.scoring:
            self.submit()
            if first and self.kill_after == 0:
                for rid in list(self.alive):  # test-only: every replica lost before its first chunk
                    self.pool.kill(rid)
            first = False
            if not self.queue and not self.inflight and self.t_gen_end is None:
                self.t_gen_end = time.perf_counter()
                self.pool.release()  # generation is over: free the engines (and their GPUs) now
            handles = list(self.inflight) + list(self.scoring)
            for h in self.pool.wait(handles):
                if h in self.scoring:
                    self.scored(h)
                else:
                    self.generated(h)


def evaluate_sweep(models: Sequence[Path], names: Sequence[str], data_files: Sequence[Path], out: Path,
                   cfg: EvalConfig, pool, *, chunk_rows: int = 1024, depth: int = 2,
                   executor: str = "ray") -> tuple[list[dict], SweepReport]:
    """Evaluate every model on every data file with the replicas of ``pool``; returns each model's
    metrics (as evaluate_model would) and a report of the replicas' work."""
    t_start = time.perf_counter()
    report = SweepReport(executor, [ReplicaStats() for _ in pool.replicas])
    loaded = load_data(data_files, cfg)
    metrics, model_passes, queue, to_assemble = _plan_passes(models, names, out, loaded, cfg, chunk_rows)
    total = sum(u.n_rows for u in queue)
    bar = _progress(total, f"sweep ({len(models)} model{'s' * (len(models) > 1)}, {len(pool.replicas)} replicas)"
                    if cfg.progress else None)
    sweep = _Sweep(models, names, out, cfg, pool, report, metrics, model_passes, queue, chunk_rows, depth)
    sweep.bar = bar
    try:
        sweep.start(to_assemble)
        sweep.run()
    finally:
        if bar is not None:
            bar.close()
    now = time.perf_counter()
    t_gen_end = sweep.t_gen_end
    report.generation_s = (t_gen_end or now) - sweep.t_gen0
    report.wall_s = now - t_start
    report.scoring_tail_s = now - (t_gen_end or now)
    return metrics, report


def _progress(total: int, desc: str | None):
    if desc is None or total == 0:
        return None
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit="row", file=sys.stderr, dynamic_ncols=True, mininterval=1.0)


def _postfix(bar, report: SweepReport, elapsed: float) -> None:
    parts = {}
    for i, r in enumerate(report.replicas):
        rate = r.rows / r.busy_s if r.busy_s else 0.0
        idle = max(0.0, 1 - (r.busy_s + r.load_s) / elapsed) if elapsed else 0.0
        parts[f"r{i}"] = f"{rate:.1f}/s idle {idle:.0%}" + (" lost" if r.lost else "")
    bar.set_postfix(parts, refresh=False)
