"""Co-occurrence packing and matched-stream planning: which tasks share a row, and in which order.

Packing puts several *independent* tasks (no data flow between them) into one prompt and one
answer, so that each definition is recalled next to others. Everything here works on task indices
and operator labels, never on rendered text, and draws its randomness only from an :class:`Rng`
handed in, so a plan is a pure function of its key.

Two guarantees the study relies on:

- a packing plan uses every task exactly once, every group's width lies in the asked range, and
  no operator appears twice in one group (otherwise its definition would be recalled once for
  two tasks and the group would load fewer definitions than its width says);
- a matched-stream plan gives step ``s`` of the isolated stream and step ``s`` of the grouped
  stream exactly the same task multiset, in the row order a trainer with shuffling off consumes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from opgen.errors import OpgenError
from opgen.rng import Rng
from opgen.tasks import Task

# How many fresh attempts a step's packing gets before the plan is declared impossible. Largest-
# first assignment only fails when one operator dominates a step, which a retry reshuffles away.
_ATTEMPTS = 64


class PackError(ValueError, OpgenError):
    """A packing that cannot be done: widths that cannot sum to the count, too few distinct operators."""

    exit_code = 1


class WidthError(PackError):
    """No widths in the asked range add up to the task count: retrying cannot help."""


# ---------------------------------------------------------------- widths


def _reachable(m: int, lo: int, hi: int, groups: int | None = None) -> bool:
    """Whether ``m`` tasks split into groups of width lo..hi (exactly ``groups`` of them if given)."""
    if m == 0:
        return groups in (None, 0)
    if groups is not None:
        return groups * lo <= m <= groups * hi
    # some g with g*lo <= m <= g*hi: the smallest g that reaches m with width hi
    g = -(-m // hi)
    return g * lo <= m


def plan_widths(n: int, lo: int, hi: int, rng: Rng, groups: int | None = None) -> list[int]:
    """Widths in ``lo..hi`` summing to ``n`` (exactly ``groups`` widths when given), drawn uniformly
    among the widths that keep the rest reachable — so no short leftover group at the end."""
    if not 1 <= lo <= hi:
        raise WidthError(f"group widths must satisfy 1 <= lo <= hi, got {lo}..{hi}")
    if not _reachable(n, lo, hi, groups):
        what = f"{groups} groups" if groups is not None else "groups"
        raise WidthError(f"{n} tasks cannot be split into {what} of width {lo}..{hi}")
    widths: list[int] = []
    left, left_groups = n, groups
    while left > 0:
        rest_groups = None if left_groups is None else left_groups - 1
        options = [w for w in range(lo, min(hi, left) + 1) if _reachable(left - w, lo, hi, rest_groups)]
        w = options[rng.below(len(options))]
        widths.append(w)
        left -= w
        left_groups = rest_groups
    return widths


# ---------------------------------------------------------------- groups


def assign_groups(labels: Sequence[str], widths: Sequence[int], rng: Rng) -> list[tuple[int, ...]]:
    """Partition task indices ``0..len(labels)-1`` into groups of the given widths, no label twice
    in a group. Returns the groups in the order of ``widths``, each group's members shuffled.

    Widest groups are filled first, each from the labels with the most tasks left (ties broken at
    random): that greedy order succeeds whenever any assignment does, as in the Gale-Ryser
    construction of a bipartite graph with given degrees.
    """
    if sum(widths) != len(labels):
        raise PackError(f"widths sum to {sum(widths)} but there are {len(labels)} tasks")
    queues: dict[str, list[int]] = {}
    for i, label in enumerate(labels):
        queues.setdefault(label, []).append(i)
    # Sorted label order: the plan must not depend on the order tasks happened to arrive in.
    names = sorted(queues)
    for name in names:
        queues[name] = rng.shuffled(queues[name])
    order = sorted(range(len(widths)), key=lambda g: (-widths[g], g))
    out: list[tuple[int, ...] | None] = [None] * len(widths)
    for g in order:
        w = widths[g]
        live = [name for name in names if queues[name]]
        if len(live) < w:
            raise PackError(f"a group of width {w} needs {w} distinct operators, only {len(live)} have tasks left")
        ties = {name: rng.word() for name in live}
        chosen = sorted(live, key=lambda name: (-len(queues[name]), ties[name]))[:w]
        out[g] = tuple(rng.shuffled([queues[name].pop() for name in chosen]))
    return [g for g in out if g is not None]


def pack(labels: Sequence[str], lo: int, hi: int, rng: Rng, groups: int | None = None) -> list[tuple[int, ...]]:
    """A full packing plan: widths in lo..hi, every task once, distinct labels per group, groups in
    random order. A failed assignment is retried from a derived stream, so the plan stays a pure
    function of ``rng``'s key."""
    last: PackError | None = None
    for attempt in range(_ATTEMPTS):
        r = rng.derive("pack", attempt)
        try:
            widths = plan_widths(len(labels), lo, hi, r, groups)
            return assign_groups(labels, widths, r)
        except WidthError:
            raise
        except PackError as exc:
            last = exc
    raise PackError(f"no packing after {_ATTEMPTS} attempts: {last}")


def labels_of(tasks: Sequence[Task]) -> list[str]:
    """A task's packing label: its operators (atomic tasks: the one operator)."""
    return ["+".join(sorted(t.ops)) for t in tasks]


# ---------------------------------------------------------------- streams and hashes


def epoch_stream(n: int, total: int, rng: Rng) -> list[int]:
    """``total`` indices into a pool of ``n``: epoch after epoch, each epoch a fresh permutation, so
    no index repeats before every index was used once."""
    if n <= 0:
        raise PackError("cannot stream from an empty pool")
    out: list[int] = []
    epoch = 0
    while len(out) < total:
        out.extend(rng.derive("epoch", epoch).shuffled(range(n)))
        epoch += 1
    return out[:total]


def multiset_hash(identities: Iterable[str]) -> str:
    """sha256 over the sorted task identities: equal multisets, equal hash, whatever the order."""
    h = hashlib.sha256()
    for ident in sorted(identities):
        data = ident.encode("utf-8")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


# A row of a stream: ("atomic", (pool index,)), ("group", (pool indices...)) or ("comp", (pool index,)).
Entry = tuple[str, tuple[int, ...]]


@dataclass(frozen=True)
class MatchedPlan:
    """Both streams of the matched-SFT contrast, step by step."""

    steps: int
    atomic_per_step: int
    grouped_rows_per_step: int
    comps_per_step: int
    isolated: tuple[Entry, ...]
    grouped: tuple[Entry, ...]

    def rows_per_step(self, stream: str) -> int:
        return (self.atomic_per_step if stream == "isolated" else self.grouped_rows_per_step) + self.comps_per_step

    def entries(self, stream: str) -> tuple[Entry, ...]:
        if stream not in ("isolated", "grouped"):
            raise ValueError(f"unknown stream {stream!r} (isolated or grouped)")
        return self.isolated if stream == "isolated" else self.grouped

    def step_tasks(self, stream: str, step: int) -> list[tuple[str, int]]:
        """The (pool, index) task references that step ``step`` of ``stream`` trains on."""
        per = self.rows_per_step(stream)
        out: list[tuple[str, int]] = []
        for kind, idx in self.entries(stream)[step * per:(step + 1) * per]:
            pool = "comp" if kind == "comp" else "atomic"
            out.extend((pool, i) for i in idx)
        return out


def plan_matched(
    atomic_labels: Sequence[str],
    n_comps: int,
    rng: Rng,
    *,
    steps: int = 400,
    atomic_per_step: int = 48,
    grouped_rows_per_step: int = 20,
    comps_per_step: int = 76,
    width: tuple[int, int] = (2, 4),
) -> MatchedPlan:
    """Plan the isolated and grouped streams over an atomic pool (``atomic_labels``: one packing
    label per pool task) and a composition pool of ``n_comps`` tasks.

    Both streams read the same epoch-ordered slices of both pools, ``atomic_per_step`` atomic and
    ``comps_per_step`` composition tasks per step; only the atomic side's packing differs. Rows of
    a step are shuffled together (atomic and compositions interleaved) and steps follow each other,
    so a trainer whose batch is one step's rows and which does not shuffle sees the planned steps.
    """
    lo, hi = width
    if not _reachable(atomic_per_step, lo, hi, grouped_rows_per_step):
        raise WidthError(
            f"{atomic_per_step} atomic tasks per step cannot fill {grouped_rows_per_step} groups of width {lo}..{hi}")
    atomic = epoch_stream(len(atomic_labels), steps * atomic_per_step, rng.derive("atomic-stream"))
    comps = epoch_stream(n_comps, steps * comps_per_step, rng.derive("comp-stream")) if comps_per_step else []
    isolated: list[Entry] = []
    grouped: list[Entry] = []
    for s in range(steps):
        step_atomic = atomic[s * atomic_per_step:(s + 1) * atomic_per_step]
        step_comps = [("comp", (c,)) for c in comps[s * comps_per_step:(s + 1) * comps_per_step]]
        r = rng.derive("step", s)
        groups = pack([atomic_labels[i] for i in step_atomic], lo, hi, r.derive("groups"), grouped_rows_per_step)
        iso_rows = [("atomic", (i,)) for i in step_atomic] + step_comps
        grp_rows = [("group", tuple(step_atomic[j] for j in g)) for g in groups] + step_comps
        isolated.extend(r.derive("order", "isolated").shuffled(iso_rows))
        grouped.extend(r.derive("order", "grouped").shuffled(grp_rows))
    return MatchedPlan(steps, atomic_per_step, grouped_rows_per_step, comps_per_step,
                       tuple(isolated), tuple(grouped))
