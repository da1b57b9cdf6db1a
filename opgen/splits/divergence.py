"""Divergence between two collections of rows (DBCA, Keysers et al., ICLR 2020, section 2.1).

With P and Q the normalized weighted histograms of train and eval, the Chernoff coefficient is
``C_α(P‖Q) = Σ_k p_k^α q_k^(1-α)`` (1 for equal distributions, 0 for disjoint supports); atom
divergence is ``D_A = 1 - C_0.5(F_A(train) ‖ F_A(eval))`` and compound divergence
``D_C = 1 - C_0.1(F_C(train) ‖ F_C(eval))``. α = 0.1 for compounds makes D_C small whenever eval's
compounds are mostly seen in training, however their frequencies differ.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opgen.splits import compounds

ATOM_ALPHA = 0.5
COMPOUND_ALPHA = 0.1


def chernoff(p: Mapping[str, float], q: Mapping[str, float], alpha: float) -> float:
    """``Σ p_k^α q_k^(1-α)`` over the normalized ``p`` and ``q`` (unnormalized weights in).

    An empty histogram has no distribution: the coefficient of two empty ones is 1 (nothing
    differs), of one empty and one not 0."""
    sp, sq = sum(p.values()), sum(q.values())
    if sp <= 0 and sq <= 0:
        return 1.0
    if sp <= 0 or sq <= 0:
        return 0.0
    total = 0.0
    for k in sorted(set(p) & set(q)):
        a, b = p[k] / sp, q[k] / sq
        if a > 0 and b > 0:
            total += a ** alpha * b ** (1 - alpha)
    return min(1.0, total)


def atom_divergence(train: Mapping[str, float], eval_: Mapping[str, float]) -> float:
    return _clean(1.0 - chernoff(train, eval_, ATOM_ALPHA))


def compound_divergence(train: Mapping[str, float], eval_: Mapping[str, float]) -> float:
    return _clean(1.0 - chernoff(train, eval_, COMPOUND_ALPHA))


def _clean(d: float) -> float:
    # float sums of equal distributions land a few ulps off 0; the measure is in [0, 1]
    return 0.0 if abs(d) < 1e-12 else max(0.0, min(1.0, d))


def compare(train: Sequence[compounds.RowUnits], eval_: Sequence[compounds.RowUnits],
            spec: compounds.CompoundSpec = compounds.DEFAULT) -> dict[str, Any]:
    """D_A, D_C and the held-out compounds (in eval, weight 0 in train) of two collections of rows.

    The compound discount (max_size > 2) is taken over both collections together, as DBCA does
    over its whole dataset."""
    cond = compounds.conditional([*train, *eval_]) if compounds.needs_discount(spec) else None
    ta, tc = compounds.histograms(train, spec, cond)
    ea, ec = compounds.histograms(eval_, spec, cond)
    held = sorted(k for k in ec if tc.get(k, 0) <= 0)
    held_set = set(held)
    eval_with = sum(1 for r in eval_ if held_set.intersection(r.compounds))
    train_with = sum(1 for r in train if held_set.intersection(r.compounds))
    unseen_atoms = sorted(k for k in ea if k not in ta)
    return {
        "compounds_spec": spec.as_dict(),
        "train_rows": len(train), "eval_rows": len(eval_),
        "atom_divergence": round(atom_divergence(ta, ea), 6),
        "compound_divergence": round(compound_divergence(tc, ec), 6),
        "atoms": {"train": len(ta), "eval": len(ea), "eval_unseen_in_train": unseen_atoms},
        "compounds": {"train": len(tc), "eval": len(ec), "heldout": len(held)},
        "heldout_compounds": held,
        "heldout_share_of_eval_rows": round(eval_with / len(eval_), 6) if eval_ else 0.0,
        "train_rows_with_heldout_compound": train_with,
    }
