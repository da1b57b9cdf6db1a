"""Maximum-compound-divergence splits (DBCA, Keysers et al., ICLR 2020): the search and its generator.

From a pool of distinct rows, choose ``train_rows`` and ``eval_rows`` so that compound divergence
D_C is as large as the search finds while atom divergence D_A stays at most the bound.

The search is greedy over a set H of *held-out compounds*: train rows hold no compound of H,
eval rows are the rows that hold one (topped up with other rows while H is still small). It
starts from a random split (H empty: train and eval are the first rows of one seeded permutation
of the pool, so D_C starts at that of a random split of the same sizes) and, each round, tries
``candidates`` compounds (a seeded sample) and adds the one that raises D_C most while D_A stays
within the bound and enough rows remain on both sides; it stops when no candidate helps. Every
evaluation is a few numpy reductions over the pool's (row, compound) incidence
(benchmarks/bench_split.py times a 100,000-row pool).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from opgen.errors import OpgenError
from opgen.ops import STUDY, OperatorLibrary
from opgen.rng import Rng
from opgen.splits import compounds as C
from opgen.splits import divergence as D

DEFAULT_ATOM_BOUND = 0.02
DEFAULT_CANDIDATES = 48
DEFAULT_ROUNDS = 200
SEARCHES = ("greedy", "anneal")
DEFAULT_STEPS = 1000  # annealing moves after the greedy rounds
DEFAULT_TEMPERATURE = 0.005  # the starting temperature, in units of D_C; cooled linearly to 0
ANNEAL_KEYS = ("search", "steps", "temperature")  # config fields of the annealed search alone


class McdError(ValueError, OpgenError):
    """A pool from which no split meets the bound (or the sizes); the message says which."""

    exit_code = 1


@dataclass(frozen=True)
class Selection:
    train: tuple[int, ...]  # pool indices, in the order the rows are written
    eval: tuple[int, ...]
    heldout: tuple[str, ...]  # the compounds of H (the search's held-out set)
    atom_divergence: float
    compound_divergence: float
    random_compound_divergence: float  # D_C of the search's starting (random) split
    random_atom_divergence: float
    rounds: int
    method: str = "greedy"
    anneal_steps: int = 0  # annealing moves tried (method "anneal")
    anneal_accepted: int = 0  # of which accepted


class _Incidence:
    """Rows × labels in CSR form (row r's entries at ``indptr[r]:indptr[r + 1]``), so a histogram of
    a selection of rows reads only those rows' entries."""

    def __init__(self, per_row: Sequence[Mapping[str, float]]):
        vocab = sorted({k for r in per_row for k in r})
        self.vocab = vocab
        index = {k: i for i, k in enumerate(vocab)}
        cols, w, lens = [], [], []
        for d in per_row:
            lens.append(len(d))
            for k, v in d.items():
                cols.append(index[k])
                w.append(v)
        self.indptr = np.concatenate([[0], np.cumsum(np.array(lens, dtype=np.int64))])
        self.rows = np.repeat(np.arange(len(per_row), dtype=np.int64), lens)
        self.cols = np.array(cols, dtype=np.int64)
        self.w = np.array(w, dtype=np.float64)
        self.index = index

    def hist(self, rows: np.ndarray) -> np.ndarray:
        """The summed weights of ``rows`` (indices) per label."""
        starts = self.indptr[rows]
        lens = self.indptr[rows + 1] - starts
        total = int(lens.sum())
        at = np.repeat(starts - (np.cumsum(lens) - lens), lens) + np.arange(total, dtype=np.int64)
        return np.bincount(self.cols[at], weights=self.w[at], minlength=len(self.vocab))


def _div(p: np.ndarray, q: np.ndarray, alpha: float) -> float:
    sp, sq = p.sum(), q.sum()
    if sp <= 0 or sq <= 0:
        return 0.0 if sp <= 0 and sq <= 0 else 1.0
    both = (p > 0) & (q > 0)
    c = float(np.sum((p[both] / sp) ** alpha * (q[both] / sq) ** (1 - alpha)))
    return max(0.0, min(1.0, 1.0 - c))


def search(units: Sequence[C.RowUnits], train_rows: int, eval_rows: int, seed_parts: Sequence[object],
           spec: C.CompoundSpec = C.DEFAULT, max_atom_divergence: float = DEFAULT_ATOM_BOUND,
           candidates: int = DEFAULT_CANDIDATES, rounds: int = DEFAULT_ROUNDS, method: str = "greedy",
           steps: int = DEFAULT_STEPS, temperature: float = DEFAULT_TEMPERATURE) -> Selection:
    """The search (module docstring). ``method="anneal"``: after the greedy rounds, ``steps``
    simulated-annealing moves on H (add a compound, remove one, or swap one for another, chosen by
    the seeded stream), each accepted when D_A stays within the bound and D_C rises, or falls by
    δ with probability exp(−δ / T), T cooled linearly from ``temperature`` to 0; the best split seen
    is returned, so it never falls below the greedy one."""
    if method not in SEARCHES:
        raise McdError(f"search: {method!r} is not a search (known: {', '.join(SEARCHES)})")
    n = len(units)
    if train_rows + eval_rows > n:
        raise McdError(f"the pool has {n} rows; train_rows {train_rows} + eval_rows {eval_rows} do not fit")
    cond = C.conditional(units) if C.needs_discount(spec) else None
    comps = _Incidence([C.compound_weights(u, cond) for u in units])
    atoms = _Incidence([{a: 1.0 for a in u.atoms} for u in units])
    rng = Rng("opgen-split", "mcd", *seed_parts)
    perm = np.array(rng.shuffled(range(n)), dtype=np.int64)
    rank = np.empty(n, dtype=np.int64)
    rank[perm] = np.arange(n)
    # pool positions (in permutation order) holding each compound, at any weight: a held-out
    # compound may not appear in a training row at all
    present: list[list[int]] = [[] for _ in comps.vocab]
    for r, c in zip(rank[comps.rows].tolist(), comps.cols.tolist()):
        present[c].append(r)
    holders = [np.unique(np.array(p, dtype=np.int64)) for p in present]

    def pick(has_p: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """train and eval rows for ``has_p`` (over permutation positions: the row holds a compound of
        H): train = the first train_rows rows without one in permutation order; eval = the first
        eval_rows rows with one, topped up (while H is still small) with the next rows without."""
        free = np.flatnonzero(~has_p)
        if free.size < train_rows:
            return None
        held_pos = np.flatnonzero(has_p)[:eval_rows]
        short = eval_rows - held_pos.size
        rest = free[train_rows:train_rows + short]
        if rest.size < short:
            return None
        return perm[free[:train_rows]], perm[np.sort(np.concatenate([held_pos, rest]))]

    def score(train: np.ndarray, ev: np.ndarray) -> tuple[float, float]:
        return (_div(atoms.hist(train), atoms.hist(ev), D.ATOM_ALPHA),
                _div(comps.hist(train), comps.hist(ev), D.COMPOUND_ALPHA))

    has_p = np.zeros(n, dtype=bool)
    start = pick(has_p)
    assert start is not None
    r_da, r_dc = score(*start)
    if r_da > max_atom_divergence:
        raise McdError(f"even a random split of this pool has atom divergence {r_da:.4f}, above "
                       f"max_atom_divergence {max_atom_divergence}; use a larger pool or a looser bound")
    best = (start, r_da, r_dc)
    held: list[int] = []
    done = 0
    for done in range(1, rounds + 1):
        taken = set(held)
        pool_ids = [c for c in range(len(comps.vocab)) if c not in taken]
        tried = rng.derive("round", done).sample(pool_ids, min(candidates, len(pool_ids)))
        found = None
        for c in sorted(tried):
            trial = has_p.copy()
            trial[holders[c]] = True
            chosen = pick(trial)
            if chosen is None:
                continue
            da, dc = score(*chosen)
            if da <= max_atom_divergence and dc > (found[3] if found else best[2]) + 1e-12:
                found = (c, trial, chosen, dc, da)
        if found is None:
            done -= 1
            break
        c, has_p, chosen, dc, da = found
        held.append(c)
        best = (chosen, da, dc)
    best_held, accepted = list(held), 0
    if method == "anneal" and steps > 0:
        best, best_held, accepted = _anneal(pick, score, holders, n, len(comps.vocab), held, best,
                                            rng.derive("anneal"), steps, temperature, max_atom_divergence)
    (train, ev), da, dc = best
    return Selection(tuple(int(i) for i in train), tuple(int(i) for i in ev),
                     tuple(sorted(comps.vocab[c] for c in best_held)), round(da, 6), round(dc, 6),
                     round(r_dc, 6), round(r_da, 6), done, method, steps if method == "anneal" else 0, accepted)


def _anneal(pick: Any, score: Any, holders: Sequence[np.ndarray], n: int, vocab_n: int, held: Sequence[int],
            best: Any, arng: Rng, steps: int, temperature: float, bound: float) -> tuple[Any, list[int], int]:
    """Simulated annealing on H from the greedy's (``search``'s docstring): (best, its H, moves accepted)."""
    cnt = np.zeros(n, dtype=np.int32)  # per permutation position: compounds of H the row holds
    for c in held:
        cnt[holders[c]] += 1
    current, cur_dc, best_held, accepted = list(held), best[2], list(held), 0
    for step in range(steps):
        t = temperature * (1.0 - step / steps)
        r = arng.derive(step)
        move = r.below(3) if current else 0  # 0: add, 1: remove, 2: swap
        add = drop = None
        if move != 1:
            inside = set(current)
            if len(inside) == vocab_n:
                continue
            add = r.below(vocab_n)
            while add in inside:  # uniform among the compounds outside H
                add = r.below(vocab_n)
        if move != 0:
            drop = current[r.below(len(current))]
        trial = cnt.copy()
        if add is not None:
            trial[holders[add]] += 1
        if drop is not None:
            trial[holders[drop]] -= 1
        chosen = pick(trial > 0)
        if chosen is None:
            continue
        da, dc = score(*chosen)
        if da > bound or (dc < cur_dc and not (t > 0 and r.uniform() < float(np.exp((dc - cur_dc) / t)))):
            continue
        accepted += 1
        cnt, cur_dc = trial, dc
        current = [c for c in current if c != drop] + ([add] if add is not None else [])
        if dc > best[2] + 1e-12:
            best, best_held = (chosen, da, dc), list(current)
    return best, best_held, accepted


def random_split(n: int, train_rows: int, eval_rows: int, seed_parts: Sequence[object]) -> tuple[list[int], list[int]]:
    """The search's starting split: the first rows of the same seeded permutation."""
    perm = Rng("opgen-split", "mcd", *seed_parts).shuffled(range(n))
    return perm[:train_rows], perm[train_rows:train_rows + eval_rows]


# ---------------------------------------------------------------- the generator of both sides


def _canon(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


_CACHE: dict[tuple[str, int, str], tuple[list[Any], Selection]] = {}


def pool_and_selection(config: Mapping[str, Any], seed: int, where: str = "",
                       lib: OperatorLibrary = STUDY) -> tuple[list[Any], Selection]:
    """The pool's items (distinct programs, in draw order) and the search's selection; cached per
    (config, seed, library), so the train and eval splits of one build share the work. ``lib``: the
    recipe's operator library."""
    from opgen import expr as E
    from opgen import generate as G

    key = (_canon(config), seed, "" if lib.is_study else lib.digest)
    if key in _CACHE:
        return _CACHE[key]

    pool = config["pool"]
    try:
        cls = G.get(pool["generator"])
        opts = cls.resolve({**pool.get("options", {})}, f"{where}split.pool.options")
    except G.GeneratorError as exc:
        raise McdError(str(exc)) from None
    if not lib.is_study and not getattr(cls, "ANY_LIBRARY", False):
        raise McdError(f"{where}split.pool.generator: {pool['generator']!r} draws the study's own operators only "
                       f"(library {lib.name!r} is not the study's)")
    # another library's pool is another pool: its digest names the library (the study's stays as it was)
    digest = "opgen-split-pool:" + _canon({"pool": pool, "version": cls.VERSION,
                                           **({} if lib.is_study else {"library": lib.digest})})
    ctx = G.Context(digest=digest, split="mcd-pool", seed=seed, role="train", where=f"{where}split.pool.options",
                    op_sets={"train": lib.train_ids, "heldout": lib.heldout_ids, "all": lib.ids}, library=lib)
    try:
        gen = cls(opts, ctx)
    except G.GeneratorError as exc:
        raise McdError(str(exc)) from None
    want = pool["rows"]
    items: list[Any] = []
    seen: set[str] = set()
    i = 0
    total = gen.count()
    with E.recursion_headroom():
        while len(items) < want and i < total:
            stop = min(total, i + max(want - len(items), 256))
            try:
                got = gen.first_valid_many(i, stop)
            except G.GeneratorError as exc:
                raise McdError(str(exc)) from None
            for _, item in got:
                key_ = "\x00".join(t.expr_text for t in item.tasks)
                if key_ not in seen:  # distinct programs: no program in both train and eval
                    seen.add(key_)
                    items.append(item)
                    if len(items) == want:
                        break
            i = stop
    if len(items) < want:
        raise McdError(f"{where}split.pool.rows: the pool generator gave {len(items)} distinct programs in "
                       f"{total} rows, fewer than {want}; raise its rows or widen its options")
    spec = C.CompoundSpec.from_dict(config.get("compounds"))
    units = [C.row_units([t.program for t in it.tasks], [t.input for t in it.tasks], spec) for it in items]
    # seeded by the config without the annealing fields: the annealed search starts from the very
    # split the greedy one of the same recipe reaches, so its D_C is never below it
    greedy_config = {k: v for k, v in config.items() if k not in ANNEAL_KEYS}
    sel = search(units, config["train_rows"], config["eval_rows"], (seed, _canon(greedy_config)), spec,
                 config.get("max_atom_divergence", DEFAULT_ATOM_BOUND), config.get("candidates", DEFAULT_CANDIDATES),
                 config.get("rounds", DEFAULT_ROUNDS), config.get("search", "greedy"),
                 config.get("steps", DEFAULT_STEPS), config.get("temperature", DEFAULT_TEMPERATURE))
    _CACHE.clear()  # one split at a time: a pool can be large
    _CACHE[key] = (items, sel)
    return items, sel
