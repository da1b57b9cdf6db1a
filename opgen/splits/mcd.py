"""Maximum-compound-divergence splits (DBCA, Keysers et al., ICLR 2020): the search and its pool.

From a pool of distinct rows, choose ``train_rows`` and ``eval_rows`` so that compound divergence
D_C is as large as the search finds (or reaches a target) while atom divergence D_A stays at most
the bound. Every search starts from a random split (the first rows of one seeded permutation of the
pool) and measures the split it returns as the certificate will, from the selected rows alone
(opgen.splits.table: DBCA's discount over train and eval together).

- ``exchange`` (the default): moves rows between train, eval and the rest of the pool in batches.
  Each round computes, for every row at once, the exact change of D_C and D_A if that row alone
  moved (numpy reductions over the pool's (row, compound) weights), pairs the best moves out of a
  side with the best moves into it (sizes stay fixed), applies them, and keeps the batch when D_C
  rose (toward the target, if any) with D_A within the bound; the batch grows after a success and
  halves after a failure, and D_A's weight in the ranking doubles when a batch broke the bound.
  It stops when no batch of one pair helps, at the target, or after ``rounds``. The held-out
  compounds H are then the compounds of eval rows that no training row holds.
- ``greedy``: grows a set H of held-out compounds; train rows hold none of H, eval rows are the
  rows that hold one (topped up with other rows while H is small); each round tries ``candidates``
  compounds (a seeded sample) and adds the one that raises D_C most within the bound.
- ``anneal``: the greedy rounds, then ``steps`` simulated-annealing moves on H.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from opgen import expr
from opgen.errors import OpgenError
from opgen.ops import STUDY, OperatorLibrary
from opgen.rng import Rng
from opgen.splits import compounds, divergence
from opgen.splits import table as T

DEFAULT_ATOM_BOUND = 0.02
DEFAULT_CANDIDATES = 48
DEFAULT_ROUNDS = 200
SEARCHES = ("exchange", "greedy", "anneal")
DEFAULT_SEARCH = "exchange"
DEFAULT_STEPS = 1000  # annealing moves after the greedy rounds
DEFAULT_TEMPERATURE = 0.005  # the starting temperature, in units of D_C; cooled linearly to 0
ANNEAL_KEYS = ("steps", "temperature")  # config fields of the annealed search alone


class McdError(ValueError, OpgenError):
    """A pool from which no split meets the bound (or the sizes); the message says which."""

    exit_code = 1


@dataclass(frozen=True)
class Selection:
    train: tuple[int, ...]  # pool indices, in the order the rows are written
    eval: tuple[int, ...]
    heldout: tuple[str, ...]  # the compounds of H (the search's held-out set)
    atom_divergence: float  # of the selected rows, measured as the certificate measures them
    compound_divergence: float
    baseline: Mapping[str, Any]  # random splits of the pool at the same sizes (opgen.splits.table.random_baseline)
    rounds: int
    method: str = DEFAULT_SEARCH
    anneal_steps: int = 0  # annealing moves tried (method "anneal")
    anneal_accepted: int = 0  # of which accepted
    target: float | None = None  # the D_C the search stopped at (exchange), if it was given one


def search(units: Sequence[compounds.RowUnits] | T.Table, train_rows: int, eval_rows: int, seed_parts: Sequence[object],
           spec: compounds.CompoundSpec = compounds.DEFAULT, max_atom_divergence: float = DEFAULT_ATOM_BOUND,
           candidates: int = DEFAULT_CANDIDATES, rounds: int = DEFAULT_ROUNDS, method: str = DEFAULT_SEARCH,
           steps: int = DEFAULT_STEPS, temperature: float = DEFAULT_TEMPERATURE,
           target: float | None = None, baseline: Mapping[str, Any] | None = None,
           strata: Sequence[int] | None = None) -> Selection:
    """The search (module docstring) over ``units`` (a pool's rows, or their :class:`~T.Table`).
    ``target``: the exchange search stops once D_C reaches it (the divergence sweep's levels);
    ``baseline``: the pool's random splits at these sizes when known (else measured, seeded by
    ``seed_parts``); ``strata``: a class per row (its depth) that the exchange search moves rows
    within, so train and eval keep the class counts of the random split it starts from."""
    if method not in SEARCHES:
        raise McdError(f"search: {method!r} is not a search (known: {', '.join(SEARCHES)})")
    table = units if isinstance(units, T.Table) else T.Table.of(units, spec)
    n = table.n
    if train_rows + eval_rows > n:
        raise McdError(f"the pool has {n} rows; train_rows {train_rows} + eval_rows {eval_rows} do not fit")
    rng = Rng("opgen-split", "mcd", *seed_parts)
    perm = np.array(rng.shuffled(range(n)), dtype=np.int64)
    # the search ranks rows by the pool's discount (P(G'|G) over the whole pool), then measures its
    # split as the certificate does (over the selected rows)
    comps = table.compound_weights()
    atoms = table.atom_weights()
    start_train, start_eval = perm[:train_rows], perm[train_rows:train_rows + eval_rows]
    r_da = T.divergence(atoms.hist(table.member(start_train)), atoms.hist(table.member(start_eval)),
                        divergence.ATOM_ALPHA)
    if r_da > max_atom_divergence and method != "exchange":  # the exchange search first brings it within
        raise McdError(f"even a random split of this pool has atom divergence {r_da:.4f}, above "
                       f"max_atom_divergence {max_atom_divergence}; use a larger pool or a looser bound")
    accepted = 0
    if method == "exchange":
        classes = None if strata is None else np.asarray(strata, dtype=np.int64)
        train, ev, done = _exchange(comps, atoms, perm, train_rows, eval_rows, max_atom_divergence, rounds, target,
                                    classes)
        held = _unseen(table, train, ev)
    else:
        (train, ev), held, done, accepted = _greedy(table, comps, atoms, perm, train_rows, eval_rows,
                                                    max_atom_divergence, candidates, rounds, rng,
                                                    steps if method == "anneal" else 0, temperature)
    da, dc = table.divergences(train, ev)
    if baseline is None:
        baseline = T.random_baseline(table, train_rows, eval_rows, seed_parts)
    return Selection(tuple(int(i) for i in train), tuple(int(i) for i in ev), held, round(da, 6), round(dc, 6),
                     baseline, done, method, steps if method == "anneal" else 0, accepted,
                     target if method == "exchange" else None)


def _unseen(table: T.Table, train: np.ndarray, ev: np.ndarray) -> tuple[str, ...]:
    """The compounds some eval row holds and no training row does (at any weight)."""
    have = table.presence()
    seen_train = have.hist(table.member(train)) > 0
    seen_eval = have.hist(table.member(ev)) > 0
    return tuple(sorted(table.comp_vocab[c] for c in np.flatnonzero(seen_eval & ~seen_train)))


# ---------------------------------------------------------------- exchange


def _move_deltas(w: T.Weights, hist: tuple[np.ndarray, np.ndarray], alpha: float, frm: int, to: int,
                 totals: np.ndarray) -> np.ndarray:
    """For every row: the change of ``1 - C_alpha(train‖eval)`` if that row alone moved from side
    ``frm`` to side ``to`` (1 train, 2 eval, 0 neither), exact (each entry's term recomputed)."""
    p, q = hist
    sp, sq = float(p.sum()), float(q.sum())
    base = float(np.sum(p ** alpha * q ** (1 - alpha)))
    pc, qc = p[w.cols], q[w.cols]
    sign_p = (frm == 1) * -1 + (to == 1) * 1
    sign_q = (frm == 2) * -1 + (to == 2) * 1
    pn, qn = np.maximum(pc + sign_p * w.w, 0.0), np.maximum(qc + sign_q * w.w, 0.0)
    term = pn ** alpha * qn ** (1 - alpha) - pc ** alpha * qc ** (1 - alpha)
    ds = np.bincount(w.rows, weights=term, minlength=totals.size)
    spn, sqn = sp + sign_p * totals, sq + sign_q * totals
    with np.errstate(divide="ignore", invalid="ignore"):
        new_c = (base + ds) / (np.maximum(spn, 0.0) ** alpha * np.maximum(sqn, 0.0) ** (1 - alpha))
    old = 1.0 - base / (sp ** alpha * sq ** (1 - alpha)) if sp > 0 and sq > 0 else 0.0
    out = (1.0 - new_c) - old
    out[~np.isfinite(out) | (spn <= 0) | (sqn <= 0)] = -np.inf
    return out


def _exchange(comps: T.Weights, atoms: T.Weights, perm: np.ndarray, train_rows: int, eval_rows: int,
              bound: float, rounds: int, target: float | None,
              strata: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    n = perm.size
    classes = np.zeros(n, dtype=np.int64) if strata is None else strata
    side = np.zeros(n, dtype=np.int8)
    side[perm[:train_rows]] = 1
    side[perm[train_rows:train_rows + eval_rows]] = 2
    rank = np.empty(n, dtype=np.int64)
    rank[perm] = np.arange(n)  # ties go to the earlier row of the seeded permutation
    c_tot, a_tot = comps.row_totals(n), atoms.row_totals(n)

    def hists(w: T.Weights) -> tuple[np.ndarray, np.ndarray]:
        return w.hist(side == 1), w.hist(side == 2)

    hc, ha = hists(comps), hists(atoms)
    if T.divergence(*ha, divergence.ATOM_ALPHA) > bound:
        hc, ha = _within_bound(comps, atoms, side, classes, rank, a_tot, bound, min(train_rows, eval_rows), hists)
    dc = T.divergence(*hc, divergence.COMPOUND_ALPHA)
    batch, weight, done = max(1, min(train_rows, eval_rows) // 20), 1.0, 0
    for done in range(1, rounds + 1):
        if target is not None and dc >= target:
            done -= 1
            break
        best: tuple[float, np.ndarray, np.ndarray, int, int] | None = None
        for frm, to in ((1, 0), (2, 0), (1, 2)):
            # a row out of ``frm`` into ``to``, paired with a row back: the sides keep their sizes
            out = _ranked(comps, atoms, hc, ha, c_tot, a_tot, frm, to, weight, side, rank)
            back = _ranked(comps, atoms, hc, ha, c_tot, a_tot, to, frm, weight, side, rank)
            pairs = _paired(out, back, classes, rank, batch)
            if pairs is not None and (best is None or pairs[0] > best[0]):
                best = (*pairs, frm, to)
        if best is None:
            if batch == 1:
                done -= 1
                break
            batch = max(1, batch // 2)
            continue
        _, rows_out, rows_back, frm, to = best
        side[rows_out], side[rows_back] = to, frm
        hc2, ha2 = hists(comps), hists(atoms)
        dc2, da2 = T.divergence(*hc2, divergence.COMPOUND_ALPHA), T.divergence(*ha2, divergence.ATOM_ALPHA)
        over = target is not None and dc2 > target + TARGET_SLACK and batch > 1
        if dc2 > dc + 1e-12 and da2 <= bound and not over:
            hc, ha, dc = hc2, ha2, dc2
            batch = min(batch * 2, max(1, min(train_rows, eval_rows) // 4))
            continue
        side[rows_out], side[rows_back] = frm, to  # undo
        if da2 > bound:
            weight *= 2
        if batch == 1 and not over:
            done -= 1
            break
        batch = max(1, batch // 2)
    train, ev = np.flatnonzero(side == 1), np.flatnonzero(side == 2)
    return train[np.argsort(rank[train])], ev[np.argsort(rank[ev])], done


def _within_bound(comps: T.Weights, atoms: T.Weights, side: np.ndarray, classes: np.ndarray, rank: np.ndarray,
                  a_tot: np.ndarray, bound: float, smaller: int,
                  hists: Any) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """A random start whose D_A breaks the bound, brought within it by the moves that lower D_A most
    (``side`` changed in place); an McdError when they cannot. Returns the new histograms."""
    ha: tuple[np.ndarray, np.ndarray] = hists(atoms)
    da = T.divergence(ha[0], ha[1], divergence.ATOM_ALPHA)
    batch = max(1, smaller // 20)
    for _ in range(REPAIR_ROUNDS):
        if da <= bound:
            return hists(comps), ha
        best: tuple[float, np.ndarray, np.ndarray, int, int] | None = None
        for frm, to in ((1, 0), (2, 0), (1, 2)):
            out = _ranked_atoms(atoms, ha, a_tot, frm, to, side, rank)
            back = _ranked_atoms(atoms, ha, a_tot, to, frm, side, rank)
            pairs = _paired(out, back, classes, rank, batch)
            if pairs is not None and (best is None or pairs[0] > best[0]):
                best = (*pairs, frm, to)
        if best is None:
            break
        _, rows_out, rows_back, frm, to = best
        side[rows_out], side[rows_back] = to, frm
        ha2: tuple[np.ndarray, np.ndarray] = hists(atoms)
        da2 = T.divergence(ha2[0], ha2[1], divergence.ATOM_ALPHA)
        if da2 < da - 1e-12:
            ha, da, batch = ha2, da2, min(batch * 2, max(1, smaller // 4))
            continue
        side[rows_out], side[rows_back] = frm, to
        if batch == 1:
            break
        batch = max(1, batch // 2)
    if da <= bound:
        return hists(comps), ha
    raise McdError(f"even a random split of this pool has atom divergence above max_atom_divergence {bound}, and "
                   f"moving rows brought it down to {da:.4f} only; use a larger pool or a looser bound")


# Rounds the exchange search may spend bringing a random start's D_A within the bound.
REPAIR_ROUNDS = 200


def _ranked_atoms(atoms: T.Weights, ha: tuple[np.ndarray, np.ndarray], a_tot: np.ndarray, frm: int, to: int,
                  side: np.ndarray, rank: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows of side ``frm`` whose move to ``to`` lowers D_A most, best first (as :func:`_ranked`)."""
    rows = np.flatnonzero(side == frm)
    if rows.size == 0:
        return rows, np.zeros(0)
    score = np.round(-_move_deltas(atoms, ha, divergence.ATOM_ALPHA, frm, to, a_tot)[rows], 12)
    ok = np.isfinite(score)
    rows, score = rows[ok], score[ok]
    order = np.lexsort((rank[rows], -score))
    return rows[order], score[order]


def _paired(out: tuple[np.ndarray, np.ndarray], back: tuple[np.ndarray, np.ndarray], classes: np.ndarray,
            rank: np.ndarray, batch: int) -> tuple[float, np.ndarray, np.ndarray] | None:
    """Up to ``batch`` (row out, row back) pairs of one class each (the best out with the best back of
    its class, and so on), those whose summed gains are positive, best first: (total gain, outs, backs)."""
    gains, outs, backs = [], [], []
    for c in np.unique(classes[out[0]]):
        o, b = out[0][classes[out[0]] == c], back[0][classes[back[0]] == c]
        k = min(batch, o.size, b.size)
        if k:
            gains.append(out[1][classes[out[0]] == c][:k] + back[1][classes[back[0]] == c][:k])
            outs.append(o[:k])
            backs.append(b[:k])
    if not gains:
        return None
    gain, o_all, b_all = np.concatenate(gains), np.concatenate(outs), np.concatenate(backs)
    order = np.lexsort((rank[o_all], -gain))[:batch]
    order = order[gain[order] > 0]
    if not order.size:
        return None
    return float(gain[order].sum()), o_all[order], b_all[order]


# How far past a target D_C a batch may take the split before the batch is halved (the sweep's levels).
TARGET_SLACK = 0.02


def _ranked(comps: T.Weights, atoms: T.Weights, hc: tuple[np.ndarray, np.ndarray], ha: tuple[np.ndarray, np.ndarray],
            c_tot: np.ndarray, a_tot: np.ndarray, frm: int, to: int, weight: float, side: np.ndarray,
            rank: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows of side ``frm`` best moved to ``to`` (gain in D_C less ``weight`` times any rise of D_A),
    best first (ties: earlier in the permutation), with their scores; scores rounded so that the
    order does not hang on the last bits of a sum."""
    rows = np.flatnonzero(side == frm)
    if rows.size == 0:
        return rows, np.zeros(0)
    gain_c = _move_deltas(comps, hc, divergence.COMPOUND_ALPHA, frm, to, c_tot)[rows]
    gain_a = _move_deltas(atoms, ha, divergence.ATOM_ALPHA, frm, to, a_tot)[rows]
    score = np.round(gain_c - weight * np.maximum(gain_a, 0.0), 12)
    ok = np.isfinite(score)
    rows, score = rows[ok], score[ok]
    order = np.lexsort((rank[rows], -score))
    return rows[order], score[order]


# ---------------------------------------------------------------- greedy and annealed searches over H


def _greedy(table: T.Table, comps: T.Weights, atoms: T.Weights, perm: np.ndarray, train_rows: int, eval_rows: int,
            bound: float, candidates: int, rounds: int, rng: Rng, steps: int,
            temperature: float) -> tuple[tuple[np.ndarray, np.ndarray], tuple[str, ...], int, int]:
    n = perm.size
    rank = np.empty(n, dtype=np.int64)
    rank[perm] = np.arange(n)
    # pool positions (in permutation order) holding each compound, at any weight: a held-out
    # compound may not appear in a training row at all
    have = table.presence()
    vocab_n = len(table.comp_vocab)
    order = np.lexsort((rank[have.rows], have.cols))
    cols_sorted, pos_sorted = have.cols[order], rank[have.rows][order]
    bounds = np.searchsorted(cols_sorted, np.arange(vocab_n + 1))
    holders = [pos_sorted[bounds[c]:bounds[c + 1]] for c in range(vocab_n)]

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
        t, e = table.member(train), table.member(ev)
        return (T.divergence(atoms.hist(t), atoms.hist(e), divergence.ATOM_ALPHA),
                T.divergence(comps.hist(t), comps.hist(e), divergence.COMPOUND_ALPHA))

    has_p = np.zeros(n, dtype=bool)
    start = pick(has_p)
    assert start is not None
    best = (start, *score(*start))
    held: list[int] = []
    done = 0
    for done in range(1, rounds + 1):
        taken = set(held)
        pool_ids = [c for c in range(vocab_n) if c not in taken]
        tried = rng.derive("round", done).sample(pool_ids, min(candidates, len(pool_ids)))
        found = None
        for c in sorted(tried):
            trial = has_p.copy()
            trial[holders[c]] = True
            chosen = pick(trial)
            if chosen is None:
                continue
            da, dc = score(*chosen)
            if da <= bound and dc > (found[3] if found else best[2]) + 1e-12:
                found = (c, trial, chosen, dc, da)
        if found is None:
            done -= 1
            break
        c, has_p, chosen, dc, da = found
        held.append(c)
        best = (chosen, da, dc)
    best_held, accepted = list(held), 0
    if steps > 0:
        best, best_held, accepted = _anneal(pick, score, holders, n, vocab_n, held, best,
                                            rng.derive("anneal"), steps, temperature, bound)
    return best[0], tuple(sorted(table.comp_vocab[c] for c in best_held)), done, accepted


def _anneal(pick: Any, score: Any, holders: Sequence[np.ndarray], n: int, vocab_n: int, held: Sequence[int],
            best: Any, arng: Rng, steps: int, temperature: float, bound: float) -> tuple[Any, list[int], int]:
    """Simulated annealing on H from the greedy's: (best, its H, moves accepted). Each move adds a
    compound outside H, removes one, or swaps one for another (drawn from the seeded stream), and
    is accepted when D_A stays within the bound and D_C rises, or falls by δ with probability
    exp(−δ / T), T cooled linearly from ``temperature`` to 0; the best split seen is kept."""
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


def section(pool_rows: int, s: Selection) -> dict[str, Any]:
    """What a selection claims, as the manifest's ``mcd`` section and the certificate read it."""
    return {"pool_rows": pool_rows, "train_rows": len(s.train), "eval_rows": len(s.eval),
            "heldout_compounds": list(s.heldout), "atom_divergence": s.atom_divergence,
            "compound_divergence": s.compound_divergence, "baseline": dict(s.baseline), "rounds": s.rounds,
            "search": s.method,
            **({"anneal_steps": s.anneal_steps, "anneal_accepted": s.anneal_accepted} if s.method == "anneal" else {}),
            **({"target_compound_divergence": s.target} if s.target is not None else {})}


def random_split(n: int, train_rows: int, eval_rows: int, seed_parts: Sequence[object]) -> tuple[list[int], list[int]]:
    """The search's starting split: the first rows of the same seeded permutation."""
    perm = Rng("opgen-split", "mcd", *seed_parts).shuffled(range(n))
    return perm[:train_rows], perm[train_rows:train_rows + eval_rows]


# ---------------------------------------------------------------- the pool and the search, cached


def _canon(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


# One pool at a time (a pool can be large): its items and its table, reused by every search over it
# (the train and eval splits of a build, the splits of a divergence sweep).
_POOL: dict[tuple[str, int, str], tuple[list[Any], T.Table]] = {}
_SELECTIONS: dict[tuple[str, int, str], Selection] = {}
_BASELINES: dict[tuple[int, int], Mapping[str, Any]] = {}  # the pool's random splits per (train, eval) sizes
_SELECTIONS_KEPT = 64


def pool(config: Mapping[str, Any], seed: int, where: str = "",
         lib: OperatorLibrary = STUDY) -> tuple[list[Any], T.Table]:
    """The pool's items (distinct programs, in draw order) and their table under the config's
    compound spec; cached per (pool, spec, seed, library). ``lib``: the recipe's operator library."""
    from opgen import generate

    spec = compounds.CompoundSpec.from_dict(config.get("compounds"))
    key = (_canon({"pool": config["pool"], "compounds": spec.as_dict()}), seed, "" if lib.is_study else lib.digest)
    if key in _POOL:
        return _POOL[key]
    pool_cfg = config["pool"]
    try:
        cls = generate.get(pool_cfg["generator"])
        opts = cls.resolve({**pool_cfg.get("options", {})}, f"{where}split.pool.options")
    except generate.GeneratorError as exc:
        raise McdError(str(exc)) from None
    if not lib.is_study and not getattr(cls, "ANY_LIBRARY", False):
        raise McdError(f"{where}split.pool.generator: {pool_cfg['generator']!r} draws the study's own operators only "
                       f"(library {lib.name!r} is not the study's)")
    # another library's pool is another pool: its digest names the library (the study's stays as it was)
    digest = "opgen-split-pool:" + _canon({"pool": pool_cfg, "version": cls.VERSION,
                                           **({} if lib.is_study else {"library": lib.digest})})
    ctx = generate.Context(digest=digest, split="mcd-pool", seed=seed, role="train", where=f"{where}split.pool.options",
                           op_sets={"train": lib.train_ids, "heldout": lib.heldout_ids, "all": lib.ids}, library=lib)
    try:
        gen = cls(opts, ctx)
    except generate.GeneratorError as exc:
        raise McdError(str(exc)) from None
    want = pool_cfg["rows"]
    items: list[Any] = []
    seen: set[str] = set()
    i = 0
    total = gen.count()
    with expr.recursion_headroom():
        while len(items) < want and i < total:
            stop = min(total, i + max(want - len(items), 256))
            try:
                got = gen.first_valid_many(i, stop)
            except generate.GeneratorError as exc:
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
        table = T.Table.of((compounds.row_units([t.program for t in it.tasks], [t.input for t in it.tasks], spec)
                            for it in items), spec)
    _POOL.clear()
    _SELECTIONS.clear()
    _BASELINES.clear()
    _POOL[key] = (items, table)
    return items, table


def _depths(items: Sequence[Any]) -> list[int]:
    """Each pool row's depth (its deepest task's): the classes the exchange search keeps matched."""
    with expr.recursion_headroom():
        return [max(expr.depth(t.program) for t in it.tasks) for it in items]


def _pool_baseline(config: Mapping[str, Any], seed: int, table: T.Table) -> Mapping[str, Any]:
    """Random splits of the pool at the config's sizes: one measure for every search over the pool
    (the splits of a divergence sweep share it), seeded by the pool and the sizes."""
    sizes = (config["train_rows"], config["eval_rows"])
    if sizes not in _BASELINES:
        _BASELINES[sizes] = T.random_baseline(table, *sizes, (seed, _canon(config["pool"]), *sizes))
    return _BASELINES[sizes]


def pool_and_selection(config: Mapping[str, Any], seed: int, where: str = "",
                       lib: OperatorLibrary = STUDY) -> tuple[list[Any], Selection]:
    """The pool's items and the search's selection; cached per (config, seed, library), so the train
    and eval splits of one build share the work. ``lib``: the recipe's operator library."""
    items, table = pool(config, seed, where, lib)
    key = (_canon(config), seed, "" if lib.is_study else lib.digest)
    sel = _SELECTIONS.get(key)
    if sel is None:
        method = config.get("search", DEFAULT_SEARCH)
        # the annealed search is seeded by its greedy config: it starts from the very split the greedy
        # search of the same recipe reaches, so its D_C is never below it
        seeded = {**{k: v for k, v in config.items() if k not in ANNEAL_KEYS},
                  **({"search": "greedy"} if method == "anneal" else {})}
        sel = search(table, config["train_rows"], config["eval_rows"], (seed, _canon(seeded)), table.spec,
                     config.get("max_atom_divergence", DEFAULT_ATOM_BOUND),
                     config.get("candidates", DEFAULT_CANDIDATES), config.get("rounds", DEFAULT_ROUNDS), method,
                     config.get("steps", DEFAULT_STEPS), config.get("temperature", DEFAULT_TEMPERATURE),
                     config.get("target_compound_divergence"), _pool_baseline(config, seed, table),
                     _depths(items) if method == "exchange" and config.get("match_depths", True) else None)
        if len(_SELECTIONS) >= _SELECTIONS_KEPT:
            _SELECTIONS.clear()
        _SELECTIONS[key] = sel
    return items, sel
