"""Atoms and compounds of a row: the one definition (docs/splits.md).

A row's programs are typed trees (:mod:`opgen.expr`). Their **nodes** are labelled:

- a library call ``func_N`` → ``"func_N"``, a method ``(e).upper()`` → ``".upper"``,
  a concatenation ``(a + b)`` → ``"+"`` (these are the *operator* nodes);
- with ``leaves`` on, the input ``x`` → ``"x"`` and a literal → ``"lit:short"`` (under 8
  characters) or ``"lit:long"`` (its kind, never its text).

**Atoms** are the labels of a row's nodes (with ``inputs`` on, also ``"input:<class>"`` for each
task's input length class). **Compounds** are connected fragments of two to ``max_size`` nodes
of one tree, written with argument positions: the edge ``func_5(func_3(x))`` is the compound
``func_5(func_3)``; ``func_12(x, func_3(x))`` has ``func_12(_,func_3)`` (``_`` marks an argument
not in the fragment); with ``max_size: 3``, ``func_5(func_3(func_1(x, 2)))`` also has
``func_5(func_3(func_1))``. Parameters are not nodes.

Weights follow DBCA (Keysers et al., ICLR 2020, section 2.1): an atom or compound counts at most
once per row (its weight in a row is at most 1). A compound occurrence ``g`` that lies inside a
bigger occurrence ``g'`` (of compound ``G'``) in the same row is discounted by how often its
compound occurs only as part of ``G'`` in the whole collection: ``w(G, row) = max over g of
(1 - max over g' ⊃ g of P(G' | G))``, with ``P(G' | G)`` the share of ``G``'s occurrences that lie
inside an occurrence of ``G'``. With the default ``max_size: 2`` (edges), no compound lies inside
a bigger one and every present compound weighs 1.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opgen import expr as E
from opgen.errors import OpgenError
from opgen.ops import STUDY, OperatorLibrary

# Literals at least this long are "long" (probe 1g's long literal first arguments start at 8).
LONG_LITERAL = 8
# Input length classes (``inputs: true``): the upper bounds of each class, the last open-ended.
INPUT_CLASSES = ((3, "0-3"), (10, "4-10"), (50, "11-50"), (None, "51+"))
MAX_SIZE_LIMIT = 4


class CompoundError(ValueError, OpgenError):
    """A compound spec that cannot be used; the message names the field."""

    exit_code = 1


@dataclass(frozen=True)
class CompoundSpec:
    """What counts as an atom and a compound (the recipe's ``split.compounds``, docs/splits.md)."""

    max_size: int = 2  # nodes in the largest compound: 2 = parent→child edges
    leaves: bool = False  # x and literal kinds are nodes (atoms, and ends of compounds)
    inputs: bool = False  # each task's input length class is an atom

    def __post_init__(self) -> None:
        if not 2 <= self.max_size <= MAX_SIZE_LIMIT:
            raise CompoundError(f"compounds.max_size: {self.max_size} is not in 2..{MAX_SIZE_LIMIT}")

    def as_dict(self) -> dict[str, Any]:
        return {"max_size": self.max_size, "leaves": self.leaves, "inputs": self.inputs}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any] | None, where: str = "compounds") -> CompoundSpec:
        raw = dict(raw or {})
        unknown = sorted(set(raw) - {"max_size", "leaves", "inputs"})
        if unknown:
            raise CompoundError(f"{where}.{unknown[0]}: unknown key (known: inputs, leaves, max_size)")
        try:
            return cls(**raw)
        except CompoundError as exc:
            raise CompoundError(f"{where}.{str(exc).split('.', 1)[1]}") from None


DEFAULT = CompoundSpec()


def label(node: E.Expr) -> str:
    """A node's label (see the module docstring)."""
    if isinstance(node, E.Call):
        return node.op
    if isinstance(node, E.Method):
        return "." + node.name
    if isinstance(node, E.Concat):
        return "+"
    if isinstance(node, E.Var):
        return "x"
    if isinstance(node, E.Lit):
        return "lit:long" if len(node.value) >= LONG_LITERAL else "lit:short"
    raise E.ExprError(f"not an expression node: {node!r}")


def input_class(x: str) -> str:
    n = len(x)
    for bound, name in INPUT_CLASSES:
        if bound is None or n <= bound:
            return "input:" + name
    raise AssertionError("the last class is open-ended")


def _is_node(e: E.Expr, spec: CompoundSpec) -> bool:
    return spec.leaves or isinstance(e, (E.Call, E.Method, E.Concat))


# An occurrence: (compound text, the ids of its nodes in the row, a frozenset)
Occurrence = tuple[str, frozenset[int]]


def _fragments(e: E.Expr, spec: CompoundSpec, ids: dict[int, int]) -> list[tuple[str, frozenset[int], int]]:
    """Every connected fragment whose top node is ``e``, up to ``spec.max_size`` nodes:
    (text, node ids, size). Size-1 fragments (the node alone) are included."""
    me = ids[id(e)]
    own = label(e)
    options: list[list[tuple[str, frozenset[int], int]]] = []
    for kid in E.children(e):
        choice: list[tuple[str, frozenset[int], int]] = [("_", frozenset(), 0)]
        if _is_node(kid, spec):
            choice += [f for f in _fragments(kid, spec, ids) if f[2] < spec.max_size]
        options.append(choice)
    out: list[tuple[str, frozenset[int], int]] = []

    def grow(k: int, parts: list[str], nodes: frozenset[int], size: int) -> None:
        if k == len(options):
            text = own if size == 1 else f"{own}({','.join(parts)})"
            out.append((text, nodes | {me}, size))
            return
        for text, kid_nodes, kid_size in options[k]:
            if size + kid_size <= spec.max_size:
                grow(k + 1, parts + [text], nodes | kid_nodes, size + kid_size)

    grow(0, [], frozenset(), 1)
    return out


def occurrences(trees: Sequence[E.Expr], spec: CompoundSpec = DEFAULT) -> tuple[list[str], list[Occurrence]]:
    """A row's atom labels (with repeats) and compound occurrences, over all of its trees."""
    if spec.max_size == 2:
        return _edge_occurrences(trees, spec.leaves)
    return _fragment_occurrences(trees, spec)


def _edge_occurrences(trees: Sequence[E.Expr], leaves: bool) -> tuple[list[str], list[Occurrence]]:
    """``_fragment_occurrences`` for two-node compounds (edges), without enumerating fragments: the
    builder measures every row with it (tests/test_splits.py ties the two)."""
    atoms: list[str] = []
    found: list[Occurrence] = []
    ops_types = (E.Call, E.Method, E.Concat)
    ids: dict[int, int] = {}
    for tree in trees:
        nodes = [n for n in E.walk(tree) if leaves or isinstance(n, ops_types)]
        for n in nodes:
            ids[id(n)] = len(ids)
        for n in nodes:
            own = label(n)
            atoms.append(own)
            kids = E.children(n)
            for pos, kid in enumerate(kids):
                if leaves or isinstance(kid, ops_types):
                    parts = ["_"] * len(kids)
                    parts[pos] = label(kid)
                    found.append((f"{own}({','.join(parts)})", frozenset((ids[id(n)], ids[id(kid)]))))
    return atoms, found


def _edge_texts(trees: Sequence[E.Expr], leaves: bool) -> tuple[set[str], set[str]]:
    """A row's distinct atom labels and two-node compound texts: what :func:`row_units` gives for
    a spec of edges, without the occurrences' node sets (the builder's tally reads only these)."""
    atoms: set[str] = set()
    comps: set[str] = set()
    ops_types = (E.Call, E.Method, E.Concat)
    for tree in trees:
        for n in E.walk(tree):
            if not (leaves or isinstance(n, ops_types)):
                continue
            own = label(n)
            atoms.add(own)
            kids = E.children(n)
            if len(kids) == 1:
                if leaves or isinstance(kids[0], ops_types):
                    comps.add(f"{own}({label(kids[0])})")
                continue
            for pos, kid in enumerate(kids):
                if leaves or isinstance(kid, ops_types):
                    parts = ["_"] * len(kids)
                    parts[pos] = label(kid)
                    comps.add(f"{own}({','.join(parts)})")
    return atoms, comps


def _fragment_occurrences(trees: Sequence[E.Expr], spec: CompoundSpec) -> tuple[list[str], list[Occurrence]]:
    atoms: list[str] = []
    found: list[Occurrence] = []
    ids: dict[int, int] = {}
    for tree in trees:
        nodes = [n for n in E.walk(tree) if _is_node(n, spec)]
        for n in nodes:
            ids[id(n)] = len(ids)
        for n in nodes:
            atoms.append(label(n))
            for text, members, size in _fragments(n, spec, ids):
                if size >= 2:
                    found.append((text, members))
    return atoms, found


@dataclass(frozen=True)
class RowUnits:
    """One row's weighted atoms and compound occurrences (before the collection's discount)."""

    atoms: tuple[str, ...]  # distinct, sorted
    occurrences: tuple[Occurrence, ...]

    @property
    def compounds(self) -> tuple[str, ...]:
        return tuple(sorted({c for c, _ in self.occurrences}))


def row_units(trees: Sequence[E.Expr], inputs: Sequence[str] = (), spec: CompoundSpec = DEFAULT) -> RowUnits:
    """The atoms and compounds of a row made of ``trees`` (one per task) with those ``inputs``."""
    atoms, found = occurrences(trees, spec)
    if spec.inputs:
        atoms += [input_class(x) for x in inputs]
    return RowUnits(tuple(sorted(set(atoms))), tuple(found))


def edges(tree: E.Expr) -> set[tuple[str, int, str]]:
    """The parent→child edges of a tree between operator nodes: (parent, argument position, child).

    The held-out rules of systematicity splits are stated over these; the compound text of an
    edge is :func:`edge_text` of it."""
    out: set[tuple[str, int, str]] = set()
    for n in E.walk(tree):
        if isinstance(n, (E.Call, E.Method, E.Concat)):
            for pos, kid in enumerate(E.children(n)):
                if isinstance(kid, (E.Call, E.Method, E.Concat)):
                    out.add((label(n), pos, label(kid)))
    return out


def arity_of(parent: str, lib: OperatorLibrary = STUDY) -> int:
    """How many expression arguments a node labelled ``parent`` has (``lib``: the operator library)."""
    if parent == "+":
        return 2
    if parent.startswith("."):
        return 1
    return lib.get(parent).n_inputs


def edge_text(parent: str, pos: int, child: str, lib: OperatorLibrary = STUDY) -> str:
    """The compound text of an edge: ``func_12(_,func_3)`` (as :func:`row_units` writes it)."""
    parts = ["_"] * arity_of(parent, lib)
    parts[pos] = child
    return f"{parent}({','.join(parts)})"


# ---------------------------------------------------------------- weights over a collection


@dataclass
class Conditional:
    """P(G' | G) over a collection: how often compound G occurs only inside an occurrence of G'."""

    total: Counter[str]
    inside: dict[str, Counter[str]]

    def p(self, small: str, big: str) -> float:
        n = self.total.get(small, 0)
        return self.inside.get(small, Counter()).get(big, 0) / n if n else 0.0


def _supers(row: RowUnits) -> list[list[str]]:
    """For each occurrence of the row, the compounds of the row's occurrences that strictly contain it."""
    occ = row.occurrences
    out: list[list[str]] = []
    for _, nodes in occ:
        out.append(sorted({t for t, other in occ if len(other) > len(nodes) and nodes < other}))
    return out


def conditional(rows: Iterable[RowUnits]) -> Conditional:
    total: Counter[str] = Counter()
    inside: dict[str, Counter[str]] = {}
    for row in rows:
        for (text, _), sup in zip(row.occurrences, _supers(row)):
            total[text] += 1
            if sup:
                inside.setdefault(text, Counter()).update(sup)
    return Conditional(total, inside)


def compound_weights(row: RowUnits, cond: Conditional | None) -> dict[str, float]:
    """``w(G, row)`` for every compound of the row (DBCA; see the module docstring)."""
    out: dict[str, float] = {}
    sups = _supers(row) if cond is not None else [[] for _ in row.occurrences]
    for (text, _), sup in zip(row.occurrences, sups):
        w = 1.0 - max((cond.p(text, big) for big in sup), default=0.0) if cond is not None else 1.0
        w = float(w)
        if w > out.get(text, -1.0):
            out[text] = w
    return {k: v for k, v in sorted(out.items()) if v > 0}


def needs_discount(spec: CompoundSpec) -> bool:
    """Whether any compound can lie inside a bigger one (max_size above 2)."""
    return spec.max_size > 2


@dataclass
class Tally:
    """:func:`histograms` kept row by row, for a spec whose weights are all 1 (no compound inside
    another: :func:`needs_discount` false), where the histograms are sums over rows: the builder
    counts each row as it generates it (from the generator's own trees) and swaps a redrawn row's
    counts out, instead of parsing the written rows back (tests/test_split_tally.py ties the two)."""

    spec: CompoundSpec
    rows: int = 0
    atoms: Counter[str] = field(default_factory=Counter)
    comps: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        if needs_discount(self.spec):
            raise CompoundError("compounds.max_size: a tally needs compounds of two nodes (no discount)")

    def add(self, trees: Sequence[E.Expr], inputs: Sequence[str], sign: int = 1) -> None:
        """Count (``sign`` 1) or uncount (-1) one row made of ``trees`` with those ``inputs``."""
        atoms, comps = _edge_texts(trees, self.spec.leaves)
        if self.spec.inputs:
            atoms.update(input_class(x) for x in inputs)
        self.rows += sign
        for a in atoms:
            self.atoms[a] += sign
        for c in comps:
            self.comps[c] += sign

    def add_item(self, item: Any, sign: int = 1) -> None:
        """:meth:`add` of a generator's row (an :class:`opgen.tasks.Item`: its tasks' programs and inputs)."""
        self.add([t.program for t in item.tasks], [t.input for t in item.tasks], sign)

    def merge(self, other: Tally) -> None:
        self.rows += other.rows
        self.atoms.update(other.atoms)
        self.comps.update(other.comps)

    def histograms(self) -> tuple[Counter[str], dict[str, float]]:
        """What :func:`histograms` returns for the rows counted."""
        return (Counter({k: v for k, v in self.atoms.items() if v}),
                {k: float(v) for k, v in sorted(self.comps.items()) if v})


def histograms(rows: Sequence[RowUnits], spec: CompoundSpec = DEFAULT,
               cond: Conditional | None = None) -> tuple[Counter[str], dict[str, float]]:
    """Weighted atom and compound histograms of a collection of rows (weights summed over rows).

    ``cond`` is the collection whose P(G'|G) discounts compounds (default: ``rows`` themselves,
    when ``spec`` allows compounds inside compounds)."""
    if cond is None and needs_discount(spec):
        cond = conditional(rows)
    atoms: Counter[str] = Counter()
    comps: dict[str, float] = {}
    for row in rows:
        atoms.update(row.atoms)
        for text, w in compound_weights(row, cond).items():
            comps[text] = comps.get(text, 0.0) + w
    return atoms, comps
