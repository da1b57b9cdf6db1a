"""Build: recipes → every split as verl parquet in DIR, plus ``manifest.json``.

A row is a pure function of (resolved recipe, split, row index), yet duplicates are judged across
the whole build. Three phases keep both, independent of the number of workers:

1. **produce** (parallel over shards): row ``i`` takes its first candidate ``j`` that meets the
   generator's own constraints and is new within its shard, and is rendered into a staged
   (uncompressed Arrow) shard — or straight into parquet for a shard phase 2 can never change (the
   build's first, or one of a split with ``unique: none``); the worker returns each row's keys
   (unique key, prompt and program hashes) and measures. A build with fewer shards than workers
   draws each shard in pieces of whole row groups, one per worker, each as if it were the shard's
   first; the main process keeps a piece that repeats no key of the pieces before it (it is then
   exactly what one worker would have drawn: see ``_joined``) and draws any other again, after them.
2. **resolve** (main process, sequential: splits in recipe order, shards and rows in order): a row
   whose unique key an earlier shard or split already holds draws candidates ``j+1, j+2, …`` from
   ``Rng(digest, split, i, j)`` until one is new. Only these rows change; the pass is cheap.
   Shards are fixed by ``shard_rows``, never by the worker count.
3. **finish** (parallel over shards): each staged shard is written as parquet, redrawn rows
   swapped in, row groups of a fixed size (so either way a file's bytes are those of its final
   rows), and hashed.

Everything is written into the sibling staging directory ``DIR.opgen-new-<pid>`` (shards under
its ``.opgen-build.tmp/`` until the build and its leakage check succeeded, ``manifest.json``
last), which then replaces DIR whole (opgen.outdir: lock, ownership, atomic swap), so an
interrupted build leaves the previous build or the new one, never a mix.
"""

from __future__ import annotations

import gc
import heapq
import os
import shutil
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pyarrow as pa

from opgen import content, expr, faults, formats, leakage, manifest, ops, opwatch, outdir, write
from opgen.errors import USAGE, OpgenError
from opgen.generate import Generator, GeneratorError, Unsatisfiable
from opgen.library import LibraryError, LibraryMismatch, StoreWarning, canonical_text, ref_of, store
from opgen.ops import OperatorLibrary
from opgen.recipe import Recipe, RecipeError, SplitConfig, build_generator
from opgen.rows import Facts, RowBuffer, RowSpec
from opgen.splits import compounds

if TYPE_CHECKING:
    from opgen.workers import Pool


class BuildError(RuntimeError, OpgenError):
    """A build that cannot finish (constraints that cannot be met, leakage); nothing final is written."""

    exit_code = 1


class OnlyError(BuildError):
    """``only`` (``--only``) cannot be honoured: it names no split of the recipes, or the output holds
    a build of other recipes, seed or limit that it would update in place."""

    exit_code = USAGE


class SignalAfterSwap:
    """Mixed into the SIGINT/SIGTERM exceptions that arrived during a build's final swap: they are
    acted on after it, so ``out`` already holds the new build (manifest included)."""

    out: Path


class InterruptedAfterSwap(SignalAfterSwap, KeyboardInterrupt):
    """A Ctrl-C that came during the final swap (see :class:`SignalAfterSwap`)."""

    def __init__(self, out: Path) -> None:
        super().__init__(str(out))
        self.out = out


class TerminatedAfterSwap(SignalAfterSwap, outdir.Terminated):
    """A SIGTERM that came during the final swap (see :class:`SignalAfterSwap`)."""

    def __init__(self, out: Path) -> None:
        super().__init__(str(out))
        self.out = out


@dataclass(frozen=True)
class Plan:
    """One split to build: its recipe and generator, how many rows, and its shards (``units``:
    indices into the build's list of :class:`Unit`; ``names``: their file names, in order)."""

    cfg: SplitConfig
    recipe: Recipe
    gen: Generator
    spec: RowSpec
    rows: int
    units: tuple[int, ...]
    names: tuple[str, ...]
    # The spec of the atom/compound histograms the shards count as they generate (the manifest's
    # splits.<name>.compounds); None: they are read back from the written rows after the build (a
    # split recipe, whose certificate checks the rows themselves, or a spec with discounts).
    tally: compounds.CompoundSpec | None = None


@dataclass(frozen=True)
class Unit:
    """One shard: rows ``start:stop`` of plan ``plan``, written to ``tmp`` until the build succeeds;
    phase 1 draws it in pieces of ``piece`` rows (:class:`Piece`; 0: at once) when there are more
    workers than shards."""

    plan: int
    shard: int
    start: int
    stop: int
    tmp: Path
    piece: int = 0  # a multiple of write.ROW_GROUP_ROWS

    def pieces(self) -> list[tuple[int, int]]:
        """The rows of each piece phase 1 draws: whole row groups (the last may be short), so the
        row groups, hence the file's bytes, are those of the shard drawn at once."""
        size = self.piece or max(1, self.stop - self.start)
        return [(a, min(a + size, self.stop)) for a in range(self.start, self.stop, size)] or [(self.start, self.stop)]


class Piece(NamedTuple):
    """Phase 1's work on piece ``index`` of shard ``uid`` (rows ``start:stop``). ``taken``: the unique
    keys of the shard's rows before it, or None to draw it as if it were the shard's first."""

    uid: int
    part: int
    start: int
    stop: int
    taken: np.ndarray | None = None


def _no_tick(n: int) -> None:
    return None


@dataclass(frozen=True)
class Shards:
    """What a shard worker needs: the build's plans and shards, the process to signal at a fault
    point, and where produced rows are counted (a progress bar, or a counter shared by the pool).

    Installed in the building process before its workers fork (inherited, never pickled: the
    generators stay put); a worker that was not forked from it (a Ray task) rebuilds it (``adopt``).
    """

    plans: tuple[Plan, ...]
    units: tuple[Unit, ...]
    main_pid: int | None = None  # None: a fault point signals the worker itself
    tick: Callable[[int], None] = _no_tick


_SHARDS: Shards | None = None  # this process's build (see Shards); the one piece of state the phases share


def current() -> Shards:
    """The build this process is running shards of (set by ``build`` or ``adopt``)."""
    if _SHARDS is None:
        raise RuntimeError("no build is under way in this process (opgen.build.build or adopt sets one up)")
    return _SHARDS


@contextmanager
def _installed(shards: Shards) -> Iterator[None]:
    global _SHARDS
    previous, _SHARDS = _SHARDS, shards
    try:
        yield
    finally:
        _SHARDS = previous


class _SharedTick:
    """Rows produced, counted across the worker pool (an ``mp.Value`` the workers inherit)."""

    def __init__(self, counter: Any) -> None:
        self.counter = counter

    def __call__(self, n: int) -> None:
        with self.counter.get_lock():
            self.counter.value += n


@dataclass(frozen=True)
class ShardFacts:
    """Phase 1's account of one shard, a column per fact (row ``r`` of the shard at index ``r``);
    phase 2 returns a copy with its redrawn rows' facts swapped in (``_apply``).

    Programs: a row has one or more program keys; ``prog`` holds them all and ``prog_rows[n]`` is
    the shard row of ``prog[n]``."""

    ukey: np.ndarray  # uint64: the key duplicates are judged by (unique: task or program)
    pkey: np.ndarray  # uint64: the prompt's key (the leakage check's)
    prog: np.ndarray  # uint64
    prog_rows: np.ndarray  # int32
    depth: np.ndarray  # int16
    k: np.ndarray  # int16
    opmask: np.ndarray  # ops.MASK_DTYPE: the operators a row uses
    composed: np.ndarray  # ops.MASK_DTYPE: those in a composed task
    out_len: np.ndarray  # int32
    unchanged: np.ndarray  # int32
    identity: np.ndarray  # int32
    target_chars: np.ndarray  # int32
    conditions: Counter[str]  # a probe's conditions: rows per condition
    condition_of: dict[int, str]  # shard row -> its condition (rows with one)
    attempt: np.ndarray  # int32: the candidate j each row took
    rejections: Counter[str]  # candidates phase 1 rejected, by reason
    content: str | None  # the content digest of the rows, when phase 1 wrote the final parquet
    tally: compounds.Tally | None = None  # the rows' atoms and compounds (Plan.tally), as phase 1 drew them


class FinishTask(NamedTuple):
    """Phase 3's work on one shard: its redrawn rows as (shard row, candidate), in row order."""

    uid: int
    patches: list[tuple[int, int]]
    was: Sequence[int] = ()  # the candidate each redrawn row had in phase 1 (its counts are swapped out)


class Finished(NamedTuple):
    """A shard as written: its file's sha256 and size, and its content digest (None when phase 1
    wrote it and computed the digest then: ``ShardFacts.content``)."""

    uid: int
    sha256: str
    bytes: int
    content: str | None
    tally: compounds.Tally | None = None  # phase 3's change to the shard's tally: redrawn rows out, their redraws in


class Resolved(NamedTuple):
    """Phase 2's outcome: the redrawn rows per shard, the rejections per plan, every shard's facts."""

    patches: dict[int, list[tuple[int, int]]]
    rejections: list[Counter[str]]
    shards: list[ShardFacts]


def _shard_facts(facts: list[Facts], attempts: list[int], rejections: Counter[str],
                 digest: str | None, tally: compounds.Tally | None = None,
                 mask_dtype: str = ops.MASK_DTYPE) -> ShardFacts:
    if facts:
        (ukey, pkey, prog_keys, depth, k, opmask, composed, out_len, condition, unchanged, identity,
         target_chars) = zip(*facts)
    else:
        ukey = pkey = prog_keys = depth = k = opmask = composed = out_len = condition = ()
        unchanged = identity = target_chars = ()
    if all(len(p) == 1 for p in prog_keys):
        prog = [p[0] for p in prog_keys]
        prog_rows = np.arange(len(prog), dtype=np.int32)
    else:
        prog = [key for p in prog_keys for key in p]
        prog_rows = np.repeat(np.arange(len(prog_keys), dtype=np.int32), [len(p) for p in prog_keys])
    return ShardFacts(
        ukey=np.array(ukey, dtype=np.uint64),
        pkey=np.array(pkey, dtype=np.uint64),
        prog=np.array(prog, dtype=np.uint64),
        prog_rows=prog_rows.astype(np.int32),
        depth=np.array(depth, dtype=np.int16),
        k=np.array(k, dtype=np.int16),
        opmask=np.array(opmask, dtype=mask_dtype),
        composed=np.array(composed, dtype=mask_dtype),
        out_len=np.array(out_len, dtype=np.int32),
        unchanged=np.array(unchanged, dtype=np.int32),
        identity=np.array(identity, dtype=np.int32),
        target_chars=np.array(target_chars, dtype=np.int32),
        conditions=Counter(c for c in condition if c),
        condition_of={i: c for i, c in enumerate(condition) if c},
        attempt=np.array(attempts, dtype=np.int32),
        rejections=rejections,
        content=digest,
        tally=tally,
    )


def _produce(task: int | Piece) -> ShardFacts:
    # Rows allocate millions of small objects (trees, tuples, strings), and operators make cycles
    # (func_23's recursive helper closes over itself, one cycle a call): ~200,000 unreachable
    # objects per 20,000 rows of depth 1-8. The young generation is collected as it fills (its
    # garbage freed while still in cache, and no pile of it at the shard's end), but the older ones
    # are never rescanned while the shard runs: each full pass would walk every object the build
    # keeps (10-15% of a build when the collector ran after every shard, 35-50% left to itself).
    # What the shard promoted is collected once at its end, so a shard costs the same whatever
    # was built before it (benchmarks/bench_build.py --scale).
    young, *older = gc.get_threshold()
    gc.set_threshold(young, *(1 << 30 for _ in older))
    try:
        if isinstance(task, Piece):
            return _produce_rows(task.uid, task.start, task.stop, task.part, task.taken)
        unit = current().units[task]
        return _produce_rows(task, unit.start, unit.stop)
    finally:
        gc.set_threshold(young, *older)
        if gc.isenabled():
            gc.collect(1)


def _produce_rows(uid: int, start: int, stop: int, piece: int | None = None,
                  taken: np.ndarray | None = None) -> ShardFacts:
    """Rows ``start:stop`` of shard ``uid`` (all of them, or its piece ``piece`` after rows whose keys
    are ``taken``)."""
    shards = current()
    unit = shards.units[uid]
    plan = shards.plans[unit.plan]
    _worker_fault(shards, unit)
    gen = plan.gen
    gen.rejections = Counter()
    buf = RowBuffer(plan.spec)
    facts: list[Facts] = []
    attempts: list[int] = []
    # Duplicates inside this shard are redrawn here at once; the main process then only judges
    # each row against earlier shards and splits (a subset of the keys, so still no duplicates).
    seen: set[int] = set() if taken is None else set(taken.tolist())
    # A shard that can never hold a row redrawn in phase 2 (the build's first, or a split without
    # duplicate checks) is encoded as parquet here at once. Any other goes to an uncompressed Arrow
    # stream first, and parquet is encoded once, in phase 3, with the redrawn rows swapped in:
    # cheaper than decoding and re-encoding a parquet shard.
    pool = pa.default_memory_pool()
    digest = None
    final = _final_in_produce(shards, uid)
    tally = compounds.Tally(plan.tally) if plan.tally is not None else None
    put: Callable[[pa.Table], None]
    if final:
        writer = write.open_writer(unit.tmp, buf.schema)
        digest = content.Digest()  # of the rows as written: the file is never read back

        def put(table: pa.Table) -> None:
            write.write_chunk(writer, table)
            assert digest is not None
            digest.update(table)
    else:
        sink = pa.OSFile(_staged(unit, piece), "wb")
        writer = pa.ipc.new_stream(sink, buf.schema)
        put = writer.write_table
    c0 = c1 = start
    try:
        with expr.recursion_headroom():
            for c0 in range(start, stop, write.ROW_GROUP_ROWS):
                buf.clear()
                c1 = min(c0 + write.ROW_GROUP_ROWS, stop)
                for i, (j, item) in enumerate(gen.first_valid_many(c0, c1), c0):
                    f = buf.add(i, item, seen)
                    while f is None:
                        gen.rejections["avoided" if buf.avoided else "duplicate"] += 1
                        if not gen.REDRAWABLE:
                            raise BuildError(_no_redraw(plan, i))
                        if j + 1 >= gen.max_attempts:
                            raise BuildError(_exhausted(plan, i))
                        j, item = gen.first_valid(i, j + 1)
                        f = buf.add(i, item, seen)
                    attempts.append(j)
                    facts.append(f)
                    if tally is not None:
                        tally.add_item(item)
                table = buf.table()
                buf.clear()  # the rows' texts, now copied into the table
                put(table)
                del table
                pool.release_unused()
                shards.tick(c1 - c0)
    except BaseException as exc:
        _blame(plan, exc, range(c0, c1))
        raise
    finally:
        writer.close()
        if not final:
            sink.close()
    faults.signal_at("produced", shards.main_pid)
    return _shard_facts(facts, attempts, gen.rejections, digest.hexdigest() if digest is not None else None, tally,
                        plan.recipe.library.mask_dtype)


def _worker_fault(shards: Shards, unit: Unit) -> None:
    """Test-only (opgen.faults): a shard's worker process signals itself as a shard task starts,
    ``shard-worker`` once a build (the first to create a marker in the staging directory),
    ``shard-worker-always`` every time. Never the building process itself (one worker)."""
    if shards.main_pid == os.getpid():
        return
    faults.signal_at("shard-worker-always")
    if faults.value("shard-worker") is not None:
        try:
            os.close(os.open(unit.tmp.parent / ".shard-fault", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        faults.signal_at("shard-worker")


def _blame(plan: Plan, exc: BaseException, rows: Sequence[int], start: int = 0) -> None:
    """When an operator of ``plan``'s library caused ``exc``, raise an :class:`opgen.opwatch.OperatorFault`
    naming it, its input, the split and the row, found by drawing ``rows`` again (each from candidate
    ``start``) under the replay profiler; otherwise return (the caller re-raises ``exc``)."""
    at = [rows[0]] if rows else [0]

    def again() -> None:
        buf = RowBuffer(plan.spec)
        with expr.recursion_headroom():
            for i in rows:
                at[0] = i
                buf.add(i, plan.gen.first_valid(i, start)[1])

    library = plan.recipe.library
    fault = opwatch.name_fault(exc, opwatch.codes_of(library), again, library.name)
    if fault is not None:
        raise fault.at(f"{plan.cfg.where}: row {at[0]}") from None


def _final_in_produce(shards: Shards, uid: int) -> bool:
    unit = shards.units[uid]
    return not unit.piece and (uid == 0 or shards.plans[unit.plan].cfg.unique == "none")


def _staged(unit: Unit, piece: int | None = None) -> str:
    return str(unit.tmp) + (".arrow" if piece is None else f".{piece}.arrow")


def _phase_1_tasks(units: Sequence[Unit]) -> list[int | Piece]:
    """A shard (its index), or its pieces."""
    tasks: list[int | Piece] = []
    for uid, unit in enumerate(units):
        if not unit.piece:
            tasks.append(uid)
        else:
            tasks += [Piece(uid, k, a, b) for k, (a, b) in enumerate(unit.pieces())]
    return tasks


def _joined(pool: Pool | None, units: Sequence[Unit], plans: Sequence[Plan], tasks: Sequence[int | Piece],
            produced: Sequence[ShardFacts]) -> list[ShardFacts]:
    """Phase 1's account of each shard, its pieces joined in order.

    Each piece was drawn as if it were its shard's first: its rows skipped only candidates that
    repeat a key of its own earlier rows. When none of its rows holds a key of the shard's earlier
    pieces, it is exactly what one worker drawing the whole shard would have drawn: the same
    candidates were rejected for the same reasons, and each row's choice is new among all earlier
    rows. A piece that repeats such a key is drawn again after them (``taken``), in order, so the
    shard's rows, rejections and files are the same for any number of workers."""
    parts: dict[int, list[tuple[Piece, ShardFacts]]] = {}
    out: list[ShardFacts | None] = [None] * len(units)
    for task, res in zip(tasks, produced):
        if isinstance(task, Piece):
            parts.setdefault(task.uid, []).append((task, res))
        else:
            out[task] = res
    for uid, pieces in parts.items():
        pieces.sort(key=lambda p: p[0].part)
        checked = plans[units[uid].plan].cfg.unique != "none"
        taken = np.empty(0, dtype=np.uint64)
        kept = []
        for piece, res in pieces:
            if checked and piece.part and leakage.member(res.ukey, taken).any():
                res = _run(pool, _produce, [piece._replace(taken=taken)], None)[0]
            kept.append(res)
            if checked:
                taken = leakage.sorted_union(taken, res.ukey)
        out[uid] = _join(kept, [p.start - units[uid].start for p, _ in pieces])
    assert all(r is not None for r in out)
    return [r for r in out if r is not None]


def _join(pieces: list[ShardFacts], offsets: list[int]) -> ShardFacts:
    """One shard's facts from its pieces' (rows ``offsets[k]:`` of the shard are piece ``k``'s)."""
    first = pieces[0]
    columns = {f.name: np.concatenate([getattr(p, f.name) for p in pieces]) for f in fields(ShardFacts)
               if isinstance(getattr(first, f.name), np.ndarray) and f.name != "prog_rows"}
    tally = None
    if first.tally is not None:
        tally = compounds.Tally(first.tally.spec)
        for p in pieces:
            assert p.tally is not None
            tally.merge(p.tally)
    return ShardFacts(
        **columns,
        prog_rows=np.concatenate([p.prog_rows + np.int32(off) for p, off in zip(pieces, offsets)]).astype(np.int32),
        conditions=sum((p.conditions for p in pieces), Counter()),
        condition_of={off + i: c for p, off in zip(pieces, offsets) for i, c in p.condition_of.items()},
        rejections=sum((p.rejections for p in pieces), Counter()),
        content=None,
        tally=tally,
    )


def finish_tasks(produced: Sequence[ShardFacts], resolved: Resolved) -> list[FinishTask]:
    """Phase 3's work, one task per shard: its redrawn rows and the candidates they had in phase 1."""
    tasks = []
    for uid in range(len(produced)):
        patches = resolved.patches.get(uid, [])
        tasks.append(FinishTask(uid, patches, [int(produced[uid].attempt[local]) for local, _ in patches]))
    return tasks


def _finish(task: FinishTask) -> Finished:
    shards = current()
    uid, patches, was = task
    unit = shards.units[uid]
    plan = shards.plans[unit.plan]
    digest = delta = None
    if not _final_in_produce(shards, uid):
        delta = compounds.Tally(plan.tally) if patches and plan.tally is not None else None
        digest = _encode(unit, plan, patches, was, delta)
    else:
        assert not patches, "the build's first shard and shards without duplicate checks are never redrawn"
    # Arrow's allocator keeps freed buffers for reuse; handing them back after each shard keeps a
    # build's peak memory that of one shard, not a slowly rising one.
    pa.default_memory_pool().release_unused()
    return Finished(uid, write.sha256_of(unit.tmp), unit.tmp.stat().st_size, digest, delta)


def _encode(unit: Unit, plan: Plan, patches: list[tuple[int, int]], was: Sequence[int] = (),
            delta: compounds.Tally | None = None) -> str:
    """A staged shard as parquet, with its redrawn rows swapped in; returns its content digest.
    ``delta`` (the shard's tally change) counts each redrawn row out (its phase-1 candidate, ``was``)
    and its redraw in."""
    digest = content.Digest()
    replacement = None
    where: dict[int, int] = {}
    if patches:
        buf = RowBuffer(plan.spec)
        try:
            with expr.recursion_headroom():
                for n, (local, j) in enumerate(patches):
                    got, item = plan.gen.first_valid(unit.start + local, j)
                    assert got == j, "a redrawn candidate must be reproducible"
                    buf.add(unit.start + local, item)
                    if delta is not None:
                        got, old = plan.gen.first_valid(unit.start + local, was[n])
                        assert got == was[n], "a phase-1 candidate must be reproducible"
                        delta.add_item(old, -1)
                        delta.add_item(item)
        except BaseException as exc:
            _blame(plan, exc, [unit.start + patches[n][0]], patches[n][1])
            raise
        replacement = buf.table()
        where = {local: k for k, (local, _) in enumerate(patches)}
    pool = pa.default_memory_pool()
    staged = [_staged(unit)] if not unit.piece else [_staged(unit, k) for k in range(len(unit.pieces()))]
    writer = None
    offset = 0
    try:
        for path in staged:  # the shard's rows in order (its pieces', one after another)
            # Read batch by batch into the heap (a memory map would leave the whole staged shard resident).
            with pa.OSFile(path) as source:
                reader = pa.ipc.open_stream(source)
                if writer is None:
                    writer = write.open_writer(unit.tmp, reader.schema)
                for batch in reader:
                    table = pa.Table.from_batches([batch])
                    n = table.num_rows
                    inside = [] if replacement is None else \
                        sorted((local - offset, k) for local, k in where.items() if offset <= local < offset + n)
                    if inside:  # zero-copy slices around the redrawn rows, copied once into one chunk
                        pieces: list[pa.Table] = []
                        at = 0
                        assert replacement is not None
                        for row, k in inside:
                            pieces += [table.slice(at, row - at), replacement.slice(k, 1)]
                            at = row + 1
                        pieces.append(table.slice(at))
                        table = pa.concat_tables(pieces).combine_chunks()
                    write.write_chunk(writer, table)
                    digest.update(table)
                    offset += n
                    del table, batch
                    pool.release_unused()
    finally:
        if writer is not None:
            writer.close()
    for path in staged:
        os.remove(path)
    return digest.hexdigest()


def _run(pool: Pool | None, fn: Callable[[Any], Any], args: Sequence[Any], bar: Any, mapper: Any = None,
         counter: Any = None, sizes: Sequence[int] | None = None) -> list[Any]:
    """``[fn(a) for a in args]``: here, in the worker pool (its rows counted in ``counter``) or by ``mapper``.

    With ``sizes``, the pool is handed the largest first (the longest-processing-time rule: the
    eval suite's two chain splits are half its work; in build order one worker ended last with
    a chain split alone). The results come back in ``args``' order either way."""
    if mapper is not None:  # another executor runs the shards (opgen.distributed.ray_executor.BuildMapper)
        return list(mapper(fn, list(args), bar))
    if pool is None:
        return [fn(a) for a in args]
    order = sorted(range(len(args)), key=lambda k: -sizes[k]) if sizes is not None else None

    def poll() -> None:
        if bar is not None:
            bar.update(counter.value - bar.n)

    got = pool.map(fn, args, order, _describe_task, poll)
    poll()
    return got


def _describe_task(task: int | Piece | FinishTask) -> str:
    """A shard task as a dead worker's error names it."""
    shards = current()
    unit = shards.units[task if isinstance(task, int) else task.uid]
    plan = shards.plans[unit.plan]
    phase = "writing" if isinstance(task, FinishTask) else "producing"
    start, stop = (task.start, task.stop) if isinstance(task, Piece) else (unit.start, unit.stop)
    return (f"{plan.cfg.where}: {phase} shard {unit.shard + 1} of {len(plan.units)} (rows {start:,}-"
            f"{stop - 1:,})")


def plan_build(recipes: list[Recipe], only: tuple[str, ...] = (), limit: int | None = None,
               seed: int | None = None) -> list[Plan]:
    plans: list[Plan] = []
    names: dict[str, str] = {}
    n_units = 0
    check_one_library(recipes)
    for recipe in recipes:
        for cfg in recipe.splits:
            if only and cfg.name not in only:
                continue
            if cfg.name in names:
                raise BuildError(f"split {cfg.name!r} is defined by both {names[cfg.name]} and {recipe.path}")
            names[cfg.name] = recipe.path
            gen = build_generator(cfg, recipe)
            avoid = None
            if recipe.avoid and cfg.role == "eval":  # opt-in: replays the named training recipes
                try:
                    avoid = leakage.training_programs(recipe.avoid, seed, recipe.library)
                except (RecipeError, GeneratorError) as exc:
                    raise BuildError(f"{recipe.path}: leakage.avoid_programs: {exc}") from None
            rows = gen.count() if limit is None else min(gen.count(), limit)
            spec = RowSpec(split=cfg.name, family=cfg.family, kind=cfg.kind, prompt_format=cfg.prompt_format,
                           answer_format=cfg.answer_format, recipe=recipe.name, unique=cfg.unique,
                           data_source=cfg.data_source, avoid=avoid, ability=cfg.ability,
                           prompt_template=cfg.prompt_template, library=recipe.library,
                           library_tag=library_tag(recipe))
            # Shards are fixed by shard_rows, never by who builds them.
            n_shards = max(1, -(-rows // cfg.shard_rows))
            # a split recipe's rows are read back for its certificate, which checks the rows themselves
            tally = None if recipe.split is not None else compounds.EDGES
            plans.append(Plan(cfg, recipe, gen, spec, rows, tuple(range(n_units, n_units + n_shards)),
                              tuple(write.shard_names(cfg.name, n_shards)), tally))
            n_units += n_shards
    if only:
        missing = sorted(set(only) - set(names))
        if missing:
            known = ", ".join(s.name for r in recipes for s in r.splits)
            raise OnlyError(f"--only names no split of these recipes: {', '.join(missing)} (splits: {known})")
    return plans


def check_one_library(recipes: Sequence[Recipe]) -> None:
    """All recipes of one build use one operator library (equal digests), else
    :class:`opgen.library.LibraryMismatch`."""
    for recipe in recipes[1:]:
        first = recipes[0]
        if recipe.library.digest != first.library.digest:
            raise LibraryMismatch(
                f"{recipe.path}: library {recipe.library.name!r} (digest {recipe.library.digest[:12]}) is not the "
                f"library of {first.path} ({first.library.name!r}, digest {first.library.digest[:12]}); one build "
                "uses one operator library (build them apart, or give both the same with --library)")


def library_tag(recipe: Recipe) -> str:
    """The member a non-study library's ground truth ends with (its name and digest: opgen.library.Ref);
    "" for the study's (rows as they were)."""
    lib = recipe.library
    if lib.is_study:
        return ""
    return formats.library_member(ref_of(lib).as_json())


def adopt(recipes: list[Recipe], only: tuple[str, ...], limit: int | None, tmp_dir: Path,
          seed: int | None = None) -> None:
    """Set up this process's plans and shards as ``build`` does: for a worker that was not forked
    from the building process (a Ray task), before it runs ``_produce`` or ``_finish``."""
    global _SHARDS
    plans = plan_build(recipes, only, limit, seed)
    _SHARDS = Shards(tuple(plans), tuple(_layout(plans, tmp_dir)))


def build(recipes: list[Recipe], out: Path, *, workers: int = 1, only: tuple[str, ...] = (),
          limit: int | None = None, seed: int | None = None, progress: bool = False, force: bool = False,
          mapper: Any = None, op_budget: float = opwatch.OP_BUDGET_S) -> dict[str, Any]:
    """Build every split of ``recipes`` into ``out``; return the manifest (also written to out/manifest.json).

    ``out`` is replaced whole (see opgen.outdir); with ``only``, the other splits of a previous build
    of the same recipes, seed and limit are kept and the manifest is updated in place.
    ``mapper(fn, args, bar) -> [fn(a) for a in args]`` runs the shard phases elsewhere instead of
    the worker pool (``mapper.stage(tmp_dir, seed, op_budget)`` is called first; its workers call
    ``adopt``); the files are the same either way.

    The library's operators run under an operator watch (opgen.opwatch): one that raises
    ``SystemExit`` or ``KeyboardInterrupt``, calls ``os._exit``, returns a non-str or runs past
    ``op_budget`` seconds in one call stops the build with an ``OperatorFault`` naming it, its input,
    the split and the row. A worker process that dies runs its shard once more in a fresh one, then
    fails the build naming the shard. Either way ``out`` is left as it was.

    A SIGINT or SIGTERM that arrives during the final swap is acted on after it, as
    :class:`InterruptedAfterSwap` or :class:`TerminatedAfterSwap` (``out`` then holds this build).
    """
    t0 = time.perf_counter()
    library = recipes[0].library if recipes else ops.STUDY
    out = Path(os.path.abspath(out))
    if out.is_symlink():
        out = out.resolve()
    with opwatch.watch(opwatch.codes_of(library), op_budget):
        plans = plan_build(recipes, only, limit, seed)
        # the build folder's copy of its library, made before any work (a library no file can state fails here)
        library_text = None if library.is_study else canonical_text(library)
        try:
            man = _build_into(out, recipes, plans, workers, only, limit, seed, progress, force, mapper, op_budget,
                              library_text, t0)
        except outdir.OutputError as exc:
            raise BuildError(str(exc)) from None
        except OSError as exc:
            where = exc.filename or out
            raise BuildError(f"{where}: {exc.strerror or exc}; nothing was written to {out}") from None
    seconds = time.perf_counter() - t0
    _register(library, out)
    man["_seconds"] = seconds  # for the summary only; not in the file
    return man


def _build_into(out: Path, recipes: list[Recipe], plans: list[Plan], workers: int, only: tuple[str, ...],
                limit: int | None, seed: int | None, progress: bool, force: bool, mapper: Any, op_budget: float,
                library_text: str | None, t0: float) -> dict[str, Any]:
    """``build`` under the output directory's lock: staged, checked, swapped in."""
    outdir.check_writable(out)
    with outdir.Lock(out):
        outdir.recover(out)
        previous = outdir.check_owner(out, force)
        keep = _kept_splits(previous, recipes, only, limit, seed, force, out)
        # Rendering sample rows costs up to 0.2 s; only a tight disk is worth it.
        if outdir.free_bytes(out) < QUICK_BYTES_PER_ROW * sum(p.rows for p in plans):
            outdir.check_space(out, estimate_bytes(plans))
        stage = outdir.stage_path(out)
        shutil.rmtree(stage, ignore_errors=True)
        try:
            stage.mkdir()
            tmp_dir = stage / write.TMP_DIR
            tmp_dir.mkdir()
            shards = Shards(tuple(plans), tuple(_layout(plans, tmp_dir, 1 if mapper else workers)), os.getpid())
            if mapper is not None:
                mapper.stage(tmp_dir, seed, op_budget)
            kept = None
            if keep:
                assert previous is not None  # --only: the kept splits' files, for split certificates
                kept = {n: [out / f["path"] for f in previous["splits"][n]["files"]] for n in keep}
            man = _build(recipes, shards, stage, tmp_dir, 1 if mapper else workers, limit, seed,
                         progress, t0, mapper, previous if keep else None, kept)
            if keep:
                assert previous is not None
                man = _merge(man, previous, keep, out, stage, recipes)
            man.pop("_seconds")
            if library_text is not None:
                write.atomic_write_text(stage / outdir.LIBRARY_FILE, library_text)
            write.atomic_write_text(stage / "manifest.json", manifest.dumps(man))
            _swap(stage, out)
        except BaseException:
            shutil.rmtree(stage, ignore_errors=True)
            raise
    return man


def _register(library: OperatorLibrary, out: Path) -> None:
    """The user's build registers the library it was given in their store (opgen.library.store), so
    every command finds the rows' library by digest from anywhere. A store that cannot be written
    is said, not fatal: the build is complete."""
    try:
        store.add(library)
    except LibraryError as exc:
        warnings.warn(f"{exc}; the build in {out} is complete, but to grade or check its rows elsewhere register "
                      f"its library: opgen ops add {out / outdir.LIBRARY_FILE}", StoreWarning, stacklevel=3)


def _swap(stage: Path, out: Path) -> None:
    """The final swap; a Ctrl-C or SIGTERM is taken after it, not inside it, and says the swap was done."""
    swapped = False
    try:
        with outdir.signals_held():
            outdir.swap(stage, out)
            swapped = True
    except KeyboardInterrupt:
        if not swapped:
            raise
        raise InterruptedAfterSwap(out) from None
    except outdir.Terminated:
        if not swapped:
            raise
        raise TerminatedAfterSwap(out) from None


def _layout(plans: list[Plan], tmp_dir: Path, workers: int = 1) -> list[Unit]:
    """Every plan's shards, in order (their number and rows: ``plan_build``'s). With fewer shards
    than ``workers``, phase 1 draws each in pieces, one per worker (never a file's bytes)."""
    units: list[Unit] = []
    for p_idx, plan in enumerate(plans):
        size = plan.cfg.shard_rows
        for s, (uid, name) in enumerate(zip(plan.units, plan.names)):
            assert uid == len(units)
            units.append(Unit(p_idx, s, s * size, min((s + 1) * size, plan.rows), tmp_dir / (name + ".tmp")))
    if len(units) < workers:  # one piece per worker, in whole row groups
        groups = write.ROW_GROUP_ROWS
        units = [replace(u, piece=-(-(u.stop - u.start) // (workers * groups)) * groups) for u in units]
        units = [u if len(u.pieces()) > 1 else replace(u, piece=0) for u in units]
    return units


SAMPLE_ROWS = 64
QUICK_BYTES_PER_ROW = 64 << 10  # far above any bundled recipe's peak (3.3 KiB a row at most): no estimate needed
# parquet (zstd, dictionaries) over in-memory Arrow, a generous bound: measured 14.6-30x smaller on
# the bundled recipes (docs/recipes.md, "Output directory")
PARQUET_SHRINK = 4


def estimate_bytes(plans: list[Plan]) -> int:
    """Peak disk use of a build, from 64 rows of each split (evenly spaced) rendered as Arrow, scaled.

    A shard phase 2 may change is staged as uncompressed Arrow until phase 3 encodes it (the
    build's first shard and those of ``unique: none`` splits go straight to parquet); the staged
    shards and the parquet files coexist at worst. Generous on purpose: parquet is taken as a
    quarter of Arrow, a tenth or less in practice."""
    staged = parquet = 0.0
    uid = 0
    for plan in plans:
        n = min(plan.rows, SAMPLE_ROWS)
        size = plan.cfg.shard_rows
        per_row = 0.0
        if n:
            buf = RowBuffer(plan.spec)
            with expr.recursion_headroom():
                i = 0
                try:
                    for k in range(n):  # spread over the split: depths and lengths change along it
                        i = k * plan.rows // n
                        buf.add(i, plan.gen.first_valid(i, 0)[1])
                    per_row = buf.table().nbytes / n
                except GeneratorError:
                    pass  # the build itself reports it
                except BaseException as exc:
                    _blame(plan, exc, [i])
                    raise
        for s in range(len(plan.units)):
            rows = min((s + 1) * size, plan.rows) - s * size
            if not (uid == 0 or plan.cfg.unique == "none"):
                staged += rows * per_row
            parquet += rows * per_row / PARQUET_SHRINK
            uid += 1
    return int(staged + parquet) + (1 << 20)


def _kept_splits(previous: dict[str, Any] | None, recipes: list[Recipe], only: tuple[str, ...], limit: int | None,
                 seed: int | None, force: bool, out: Path) -> list[str]:
    """With --only, the previous build's splits to keep (its recipes, seed and limit must be these)."""
    if not only or previous is None:
        return []
    same = ([(r["sha256"], r["resolved"]) for r in previous.get("recipes", [])]
            == [(r.sha256, r.resolved()) for r in recipes] and previous.get("limit") == limit)
    if not same:
        if force:
            return []
        names = ", ".join(r.get("name", "?") for r in previous.get("recipes", [])) or "unknown recipes"
        raise OnlyError(f"{out}: holds a build of {names} (seed {previous.get('seed')}, limit "
                         f"{previous.get('limit')}); --only updates a build of the same recipes, seed and limit "
                         f"in place, so it refuses this one (pass --force to replace it with only "
                         f"{', '.join(only)})")
    return [name for name in previous["splits"] if name not in only]


def _merge(man: dict[str, Any], previous: dict[str, Any], keep: list[str], out: Path, stage: Path,
           recipes: list[Recipe]) -> dict[str, Any]:
    """--only: the previous build's other splits (files hard-linked into the staging directory, entries
    kept) around the rebuilt ones; the leakage report keeps the previous pairs among kept splits."""
    for name in keep:
        for f in previous["splits"][name]["files"]:
            src, dst = out / f["path"], stage / f["path"]
            try:
                os.link(src, dst)
            except OSError:
                shutil.copy2(src, dst)
    order = [s.name for r in recipes for s in r.splits]
    built = set(man["splits"])
    merged = dict(man)
    merged["splits"] = {n: (man["splits"][n] if n in built else previous["splits"][n])
                        for n in order if n in built or n in keep}
    old, new = previous.get("leakage", {}), man["leakage"]

    def kept(pair_or_v: Any) -> bool:
        names = pair_or_v if isinstance(pair_or_v, list) else [pair_or_v["split"], pair_or_v["train_split"]]
        return not (set(names) & built)

    pairs = [p for p in old.get("checked_pairs", []) if kept(p)] + new["checked_pairs"]
    violations = [v for v in old.get("violations", []) if kept(v)] + new["violations"]
    roles = {n: s["role"] for n, s in merged["splits"].items()}
    unchecked = [[e, t] for e in merged["splits"] for t in merged["splits"]
                 if roles[e] == "eval" and roles[t] == "train" and [e, t] not in pairs]
    merged["leakage"] = {**new, "ok": all(v["allowed"] for v in violations), "checked_pairs": pairs,
                         "violations": violations, "unchecked_pairs": unchecked}
    # split certificates: re-made (or kept, marked) for recipes with a rebuilt split; the others' stay
    old_certs, new_certs = previous.get("split_certificates") or {}, man.get("split_certificates") or {}
    certs = {r.name: new_certs.get(r.name, old_certs.get(r.name)) for r in recipes}
    certs = {k: v for k, v in certs.items() if v is not None}
    if certs:
        merged["split_certificates"] = certs
    else:
        merged.pop("split_certificates", None)
    return merged


def _build(recipes: list[Recipe], shards: Shards, out: Path, tmp_dir: Path, workers: int, limit: int | None,
           seed: int | None, progress: bool, t0: float, mapper: Any = None, previous: dict[str, Any] | None = None,
           kept: dict[str, list[Path]] | None = None) -> dict[str, Any]:
    plans, units = shards.plans, shards.units
    resolved, finished = _phases(shards, workers, progress, mapper)
    results = resolved.shards
    sections: dict[str, dict[str, Any]] = {}
    keys = []
    for p_idx, plan in enumerate(plans):
        sections[plan.cfg.name], split_keys = _section(plan, shards, results, finished, resolved.rejections[p_idx])
        keys.append(split_keys)

    library = recipes[0].library if recipes else ops.STUDY
    heldout = tuple(sorted({o for r in recipes for o in r.heldout_ops}, key=library.position.__getitem__))
    allow = tuple(sorted({a for r in recipes for a in r.allow}))
    report = leakage.check(keys, heldout, allow, library)
    if not report["ok"]:
        raise BuildError("leakage check failed (the recipe may allow it explicitly under leakage.allow):\n  "
                         + "\n  ".join(leakage.describe(report)))
    man = manifest.manifest(recipes, seed, sections, report, limit)
    # atoms and compounds of every row, and each split recipe's certificate, read from the written rows
    from opgen.splits import certificate

    tallies: dict[str, compounds.Tally] = {}
    for plan in plans:
        if plan.tally is not None:
            total = tallies[plan.cfg.name] = compounds.Tally(plan.tally)
            for uid in plan.units:
                for part in (results[uid].tally, finished[uid].tally):
                    if part is not None:
                        total.merge(part)
    try:
        certificate.annotate(man, recipes, {plan.cfg.name: [units[uid].tmp for uid in plan.units] for plan in plans},
                             tallies, previous, kept)
    except (certificate.SplitError, certificate.rows.SplitRowsError) as exc:
        raise BuildError(str(exc)) from None
    for cls in sorted({type(plan.gen) for plan in plans}, key=lambda c: c.__name__):
        summary = cls.summarize_build(sections) if cls.BUILD_KEY else None
        if summary is not None:
            man[cls.BUILD_KEY] = summary

    for plan in plans:
        for name, uid in zip(plan.names, plan.units):
            os.replace(units[uid].tmp, out / name)
        sections[plan.cfg.name]["content_sha256"] = content.combine(
            _content(results[uid], finished[uid]) for uid in plan.units)
    shutil.rmtree(tmp_dir, ignore_errors=True)
    man["_seconds"] = time.perf_counter() - t0  # for the summary only; not in the file
    return man


def _phases(shards: Shards, workers: int, progress: bool, mapper: Any) -> tuple[Resolved, list[Finished]]:
    """Phases 1-3 over every shard: here, in a pool of ``workers`` forked processes, or by ``mapper``."""
    units = shards.units
    tasks = _phase_1_tasks(units)  # a shard, or its pieces
    n_workers = max(1, min(workers, len(tasks)))
    counter = None
    if n_workers > 1:
        import multiprocessing as mp  # 3 ms of start-up a one-worker build does not pay (tests/test_build.py)

        counter = mp.get_context("fork").Value("q", 0)
        shards = replace(shards, tick=_SharedTick(counter))
    with _installed(shards), _pool(n_workers) as pool:  # installed before the fork: the workers inherit it
        bar = None
        if progress:  # tqdm costs 20 ms of start-up; a build without a bar never imports it
            from tqdm import tqdm

            bar = tqdm(total=sum(p.rows for p in shards.plans), desc="generate", unit="row", file=sys.stderr,
                       dynamic_ncols=True)
        here = replace(shards, tick=bar.update) if pool is None and bar is not None else shards
        with _installed(here):
            try:
                drawn: list[ShardFacts] = _run(pool, _produce, tasks, bar, mapper, counter, [_rows(t) for t in tasks])
                produced = _joined(pool, units, shards.plans, tasks, drawn)
            except Unsatisfiable:  # named, its class kept (opgen serve answers it with a 4xx)
                raise
            except GeneratorError as exc:
                raise BuildError(str(exc)) from None
            finally:
                if bar is not None:
                    bar.close()
            resolved = _resolve(shards.plans, units, produced)
            finished: list[Finished] = _run(pool, _finish, finish_tasks(produced, resolved), None, mapper)
    return resolved, finished


def _rows(task: int | Piece) -> int:
    if isinstance(task, Piece):
        return task.stop - task.start
    unit = current().units[task]
    return unit.stop - unit.start


@contextmanager
def _pool(n: int) -> Iterator[Pool | None]:
    """The build's ``n`` worker processes (None for one: the shards run in this process). A shard
    whose worker died, and died again in a fresh one, stops the build (``BuildError``)."""
    if n <= 1:
        yield None
        return
    from opgen.workers import Pool, WorkerDied  # multiprocessing: as in _phases

    with Pool(n) as pool:
        try:
            yield pool
        except WorkerDied as exc:
            raise BuildError(f"{exc}; the build stopped, and left its output directory as it was") from None


def _section(plan: Plan, shards: Shards, results: list[ShardFacts], finished: list[Finished],
             rejections: Counter[str]) -> tuple[dict[str, Any], leakage.SplitKeys]:
    """One split's manifest section (all but ``content_sha256``) and its keys for the leakage check."""
    units = shards.units
    res = [results[uid] for uid in plan.units]
    cat = {name: np.concatenate([getattr(r, name) for r in res]) for name in
           ("pkey", "depth", "k", "opmask", "composed", "out_len", "unchanged", "identity", "target_chars")}
    prog = np.concatenate([r.prog for r in res])
    prog_rows = np.concatenate([r.prog_rows.astype(np.int64) + units[uid].start for r, uid in zip(res, plan.units)])
    conditions: Counter[str] = sum((r.conditions for r in res), Counter())
    files = []
    for name, uid in zip(plan.names, plan.units):
        f, unit = finished[uid], units[uid]
        files.append({"path": name, "rows": unit.stop - unit.start, "sha256": f.sha256, "bytes": f.bytes})
    section = manifest.split_section(plan.cfg, plan.rows, files, cat["depth"], cat["k"], cat["opmask"], conditions,
                                     cat["out_len"], rejections, formats.mode_of(plan.cfg.prompt_format),
                                     plan.recipe.library)
    condition_of = {}
    for r, uid in zip(res, plan.units):
        condition_of.update({units[uid].start + i: c for i, c in r.condition_of.items()})
    section.update(manifest.fidelity_sections(cat["unchanged"], cat["identity"], cat["target_chars"], condition_of,
                                              prog,
                                              prog_rows))
    section["digest"] = plan.cfg.digest
    section["built_with"] = [p.cfg.name for p in shards.plans]
    extra = plan.gen.manifest_section(plan.rows)
    if extra is not None:
        section[getattr(plan.gen, "MANIFEST_KEY", "plan")] = extra
    return section, leakage.SplitKeys(plan.cfg.name, plan.cfg.role, cat["pkey"], prog, prog_rows, cat["composed"],
                                      plan.cfg.recipe, cat["depth"][prog_rows], cat["opmask"][prog_rows])


def _content(produced: ShardFacts, finished: Finished) -> str:
    """A shard's content digest: phase 1's when it wrote the final parquet, else phase 3's."""
    digest = produced.content or finished.content
    assert digest is not None, "every shard's rows are digested in phase 1 or phase 3"
    return digest


def _resolve(plans: Sequence[Plan], units: Sequence[Unit], results: list[ShardFacts]) -> Resolved:
    """Phase 2: cross-build duplicates, judged in a fixed order (patches: {unit: [(local row, attempt)]}).

    The rule is sequential (row i may not repeat the final key of any earlier row of the build), but
    only rows that hit an earlier shard's key are visited: shards arrive free of inner duplicates,
    and the keys of finished shards are kept as one sorted array (8 bytes a row, not a Python set).
    """
    seen = np.empty(0, dtype=np.uint64)
    patches: dict[int, list[tuple[int, int]]] = {}
    totals = []
    final = list(results)
    for plan in plans:
        gen = plan.gen
        gen.rejections = Counter()
        unit_rejections: Counter[str] = Counter()
        for uid in plan.units:
            res = results[uid]
            unit_rejections.update(res.rejections)
            if plan.cfg.unique == "none":
                continue
            heap = np.flatnonzero(leakage.member(res.ukey, seen)).tolist()
            if heap:
                redrawn = _redraw_unit(plan, units[uid], res, seen, heap)
                patches[uid] = sorted((local, j) for local, (j, _) in redrawn.items())
                res = final[uid] = _apply(res, {local: f for local, (_, f) in redrawn.items()})
            seen = leakage.sorted_union(seen, res.ukey)
        totals.append(unit_rejections + gen.rejections)
    return Resolved(patches, totals, final)


def _redraw_unit(plan: Plan, unit: Unit, res: ShardFacts, seen: np.ndarray,
                 heap: list[int]) -> dict[int, tuple[int, Facts]]:
    keys = res.ukey.tolist()
    pos = {key: local for local, key in enumerate(keys)}
    redrawn: dict[int, tuple[int, Facts]] = {}
    new_keys: set[int] = set()
    heapq.heapify(heap)
    while heap:
        local = heapq.heappop(heap)
        if local in redrawn:
            continue

        def taken(key: int, local: int = local) -> bool:
            if key in new_keys:
                return True
            p = pos.get(key)
            if p is not None and p < local and p not in redrawn:
                return True
            at = int(np.searchsorted(seen, np.uint64(key)))
            return at < seen.size and int(seen[at]) == key

        plan.gen.rejections["duplicate"] += 1
        j, facts = _redraw(plan, unit.start + local, int(res.attempt[local]) + 1, taken)
        redrawn[local] = (j, facts)
        new_keys.add(facts.ukey)
        later = pos.get(facts.ukey)
        if later is not None and later > local and later not in redrawn:
            heapq.heappush(heap, later)  # its key is now an earlier row's
    return redrawn


def _redraw(plan: Plan, i: int, start: int, taken: Callable[[int], bool]) -> tuple[int, Facts]:
    gen = plan.gen
    if not gen.REDRAWABLE:
        raise BuildError(_no_redraw(plan, i))
    buf = RowBuffer(plan.spec)
    j = start
    stop = start + gen.max_attempts
    with expr.recursion_headroom():
        while j < stop:
            try:
                j, item = gen.first_valid(i, j)
                facts = buf.add(i, item)
            except Unsatisfiable:
                raise
            except GeneratorError as exc:
                raise BuildError(str(exc)) from None
            except BaseException as exc:
                _blame(plan, exc, [i], j)
                raise
            if facts is None:  # shares a program of a training recipe the recipe avoids
                gen.rejections["avoided"] += 1
                j += 1
                continue
            if not taken(facts.ukey):
                return j, facts
            gen.rejections["duplicate"] += 1
            j += 1
    raise BuildError(_exhausted(plan, i))


def _exhausted(plan: Plan, i: int) -> str:
    cfg = plan.cfg
    what = "programs" if cfg.unique == "program" else "tasks"
    return (f"{cfg.where}: row {i}: {plan.gen.max_attempts} candidates repeat earlier rows of the build "
            f"(unique: {cfg.unique}); the split asks for more distinct {what} than its options can make "
            f"({plan.rows} rows requested). Ask for fewer rows, widen the options, or "
            + ("set unique: task" if cfg.unique == "program" else "set unique: none (rows may then repeat)"))


def _no_redraw(plan: Plan, i: int) -> str:
    cfg = plan.cfg
    return (f"{cfg.where}: row {i} repeats an earlier row of the build (unique: {cfg.unique}) and generator "
            f"{cfg.generator!r} plans its rows, so it cannot redraw; use unique: none or make the plan distinct")


_PATCHED = ("ukey", "pkey", "depth", "k", "opmask", "composed", "out_len", "unchanged", "identity", "target_chars")


def _apply(res: ShardFacts, redrawn: dict[int, Facts]) -> ShardFacts:
    """``res`` with the facts of its redrawn rows swapped in (a copy: ``res`` is left as it was)."""
    columns = {name: getattr(res, name).copy() for name in _PATCHED}
    conditions = Counter(res.conditions)
    condition_of = dict(res.condition_of)
    for local, f in redrawn.items():
        for name in _PATCHED:
            columns[name][local] = getattr(f, name)
        old = condition_of.pop(local, "")
        if old:
            conditions[old] -= 1
        if f.condition:
            conditions[f.condition] += 1
            condition_of[local] = f.condition
    keep = ~leakage.member(res.prog_rows, np.array(sorted(redrawn), dtype=np.int32))
    extra_keys = [k for local in sorted(redrawn) for k in redrawn[local].prog_keys]
    extra_rows = [local for local in sorted(redrawn) for _ in redrawn[local].prog_keys]
    return replace(res, **columns, conditions=conditions, condition_of=condition_of,
                   prog=np.concatenate([res.prog[keep], np.array(extra_keys, dtype=np.uint64)]),
                   prog_rows=np.concatenate([res.prog_rows[keep], np.array(extra_rows, dtype=np.int32)]))
