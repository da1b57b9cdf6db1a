"""Many rows' atoms and compounds as flat arrays: the fast twin of opgen.splits.compounds for
measures over many subsets of one collection (the mcd search, random-split baselines).

A :class:`Table` holds, per row, its atoms with their counts and its compound occurrences with, for
each occurrence, the compounds of the bigger occurrences of the same row that contain it. From
those, :meth:`Table.compound_weights` computes DBCA's weights with P(G'|G) taken over any subset of
the rows (numpy reductions, no Python loop over rows), and :meth:`Table.divergences` measures two
subsets as opgen.splits.divergence.compare does over their RowUnits (the discount over both
together): tests/test_split_table.py ties the two.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from opgen.rng import Rng
from opgen.splits import compounds
from opgen.splits import divergence as D


@dataclass(frozen=True)
class Weights:
    """Per-row weights in CSR form: row r's entries are ``cols[indptr[r]:indptr[r + 1]]``."""

    indptr: np.ndarray
    rows: np.ndarray  # the row of each entry (int64)
    cols: np.ndarray  # int64
    w: np.ndarray  # float64
    width: int  # the vocabulary's size

    def hist(self, member: np.ndarray) -> np.ndarray:
        """The summed weights per column of the rows where ``member`` (bool per row) holds."""
        at = member[self.rows]
        return np.bincount(self.cols[at], weights=self.w[at], minlength=self.width)

    def row_totals(self, n: int) -> np.ndarray:
        return np.bincount(self.rows, weights=self.w, minlength=n)


class Table:
    """Rows' atoms and compound occurrences (see the module docstring); build with :meth:`of`."""

    def __init__(self, spec: compounds.CompoundSpec, n: int, atom_vocab: list[str], comp_vocab: list[str],
                 a_row: np.ndarray, a_col: np.ndarray, a_cnt: np.ndarray,
                 o_row: np.ndarray, o_comp: np.ndarray, p_occ: np.ndarray, p_big: np.ndarray):
        self.spec, self.n = spec, n
        self.atom_vocab, self.comp_vocab = atom_vocab, comp_vocab
        self.a_row, self.a_col, self.a_cnt = a_row, a_col, a_cnt
        self.o_row, self.o_comp = o_row, o_comp
        self.p_occ, self.p_big = p_occ, p_big

    @classmethod
    def of(cls, units: Iterable[compounds.RowUnits], spec: compounds.CompoundSpec) -> Table:
        """The table of ``units`` (any iterable: a pool's rows are measured one by one, not kept)."""
        atom_ids: dict[str, int] = {}
        comp_ids: dict[str, int] = {}
        a_row: list[int] = []
        a_col: list[int] = []
        a_cnt: list[int] = []
        o_row: list[int] = []
        o_comp: list[int] = []
        p_occ: list[int] = []
        p_big: list[int] = []
        n = 0
        discount = compounds.needs_discount(spec)
        for r, u in enumerate(units):
            n = r + 1
            counts = u.atom_counts or (1,) * len(u.atoms)
            for a, k in zip(u.atoms, counts):
                a_row.append(r)
                a_col.append(atom_ids.setdefault(a, len(atom_ids)))
                a_cnt.append(k)
            base = len(o_row)
            for text, _ in u.occurrences:
                o_row.append(r)
                o_comp.append(comp_ids.setdefault(text, len(comp_ids)))
            if discount:
                for k, sup in enumerate(compounds._supers(u)):
                    for big in sup:
                        p_occ.append(base + k)
                        p_big.append(comp_ids.setdefault(big, len(comp_ids)))
        i64 = np.int64
        return cls(spec, n, list(atom_ids), list(comp_ids), np.array(a_row, i64), np.array(a_col, i64),
                   np.array(a_cnt, np.float64), np.array(o_row, i64), np.array(o_comp, i64), np.array(p_occ, i64),
                   np.array(p_big, i64))

    # ------------------------------------------------------------ weights

    def atom_weights(self) -> Weights:
        w = self.a_cnt if self.spec.atoms_per == "occurrence" else np.ones_like(self.a_cnt)
        return _csr(self.a_row, self.a_col, w, self.n, len(self.atom_vocab))

    def compound_weights(self, within: np.ndarray | None = None) -> Weights:
        """Every row's compound weights, with P(G'|G) taken over the rows where ``within`` (bool per
        row; None: all rows) holds: :func:`opgen.splits.compounds.compound_weights` of each row."""
        width = len(self.comp_vocab)
        occ_w = np.ones(self.o_row.size, dtype=np.float64)
        if self.p_occ.size:
            in_occ = np.ones(self.o_row.size, dtype=bool) if within is None else within[self.o_row]
            total = np.bincount(self.o_comp[in_occ], minlength=width)
            small = self.o_comp[self.p_occ]
            key = small * width + self.p_big
            counted = key[in_occ[self.p_occ]]
            keys, inside = np.unique(counted, return_counts=True)
            p = np.zeros(key.size, dtype=np.float64)
            if keys.size:
                at = np.searchsorted(keys, key)
                at[at == keys.size] = 0
                denom = total[small]
                ok = (keys[at] == key) & (denom > 0)
                p[ok] = inside[at[ok]] / denom[ok]
            top = np.zeros(self.o_row.size, dtype=np.float64)
            np.maximum.at(top, self.p_occ, p)
            occ_w = 1.0 - top
        key = self.o_row * width + self.o_comp
        order = np.argsort(key, kind="stable")
        key_sorted, w_sorted = key[order], occ_w[order]
        starts = np.flatnonzero(np.concatenate(([True], key_sorted[1:] != key_sorted[:-1]))) if key.size else \
            np.zeros(0, dtype=np.int64)
        if self.spec.compounds_per == "occurrence":
            w = np.add.reduceat(w_sorted, starts) if starts.size else w_sorted
        else:
            w = np.maximum.reduceat(w_sorted, starts) if starts.size else w_sorted
        uniq = key_sorted[starts]
        keep = w > 0
        return _csr(uniq[keep] // width, uniq[keep] % width, w[keep], self.n, width)

    def presence(self) -> Weights:
        """Which compounds each row holds (at any weight), as weights of 1."""
        width = len(self.comp_vocab)
        uniq = np.unique(self.o_row * width + self.o_comp)
        return _csr(uniq // width, uniq % width, np.ones(uniq.size), self.n, width)

    # ------------------------------------------------------------ measures

    def divergences(self, train: Sequence[int] | np.ndarray, evals: Sequence[int] | np.ndarray) -> tuple[float, float]:
        """(D_A, D_C) of the rows ``train`` against ``evals``, the discount over both together."""
        t, e = self.member(train), self.member(evals)
        atoms = self.atom_weights()
        comps = self.compound_weights(t | e if compounds.needs_discount(self.spec) else None)
        return (divergence(atoms.hist(t), atoms.hist(e), D.ATOM_ALPHA),
                divergence(comps.hist(t), comps.hist(e), D.COMPOUND_ALPHA))

    def member(self, rows: Sequence[int] | np.ndarray) -> np.ndarray:
        out = np.zeros(self.n, dtype=bool)
        out[np.asarray(rows, dtype=np.int64)] = True
        return out


def _csr(rows: np.ndarray, cols: np.ndarray, w: np.ndarray, n: int, width: int) -> Weights:
    order = np.lexsort((cols, rows))
    rows, cols, w = rows[order].astype(np.int64), cols[order].astype(np.int64), w[order].astype(np.float64)
    indptr = np.concatenate(([0], np.cumsum(np.bincount(rows, minlength=n)))).astype(np.int64)
    return Weights(indptr, rows, cols, w, width)


def divergence(p: np.ndarray, q: np.ndarray, alpha: float) -> float:
    """``1 - C_alpha(P‖Q)`` of two unnormalized histograms over one vocabulary (divergence.chernoff's
    conventions: two empty ones differ by 0, one empty one by 1)."""
    sp, sq = float(p.sum()), float(q.sum())
    if sp <= 0 or sq <= 0:
        return 0.0 if sp <= 0 and sq <= 0 else 1.0
    both = (p > 0) & (q > 0)
    c = float(np.sum((p[both] / sp) ** alpha * (q[both] / sq) ** (1 - alpha)))
    d = 1.0 - min(1.0, c)
    return 0.0 if abs(d) < 1e-12 else max(0.0, min(1.0, d))


# Random splits a baseline averages over (docs/splits.md, "The certificate").
BASELINE_SEEDS = 5


def random_baseline(table: Table, train_rows: int, eval_rows: int, seed_parts: Sequence[object],
                    rows: Sequence[int] | None = None, seeds: int = BASELINE_SEEDS) -> dict[str, Any]:
    """D_A and D_C of ``seeds`` random splits of ``rows`` (default: every row of the table) into
    ``train_rows`` and ``eval_rows``, measured as :meth:`Table.divergences` measures any split: their
    mean, standard deviation, least and greatest."""
    pool = list(range(table.n)) if rows is None else list(rows)
    das, dcs = [], []
    for s in range(seeds):
        order = Rng("opgen-split", "baseline", *seed_parts, s).shuffled(pool)
        da, dc = table.divergences(order[:train_rows], order[train_rows:train_rows + eval_rows])
        das.append(da)
        dcs.append(dc)
    return {"seeds": seeds, "pool_rows": len(pool), "train_rows": train_rows, "eval_rows": eval_rows,
            "atom_divergence": spread(das), "compound_divergence": spread(dcs)}


def spread(values: Sequence[float]) -> dict[str, float]:
    a = np.array(values, dtype=np.float64)
    return {"mean": round(float(a.mean()), 6), "std": round(float(a.std()), 6),
            "min": round(float(a.min()), 6), "max": round(float(a.max()), 6)}
