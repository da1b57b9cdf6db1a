"""Atoms and compounds of a row: the one definition (docs/splits.md, "Atoms and compounds").

A row's programs are typed trees (:mod:`opgen.expr`). Their **nodes** are labelled:

- a library call ``func_N`` → ``"func_N"``, a method ``(e).upper()`` → ``".upper"``,
  a concatenation ``(a + b)`` → ``"+"`` (these are the *operator* nodes);
- with ``leaves`` on, the input ``x`` → ``"x"`` and a literal → ``"lit:short"`` (under 8
  characters) or ``"lit:long"`` (its kind, never its text).

**Atoms** are the labels of a row's nodes (with ``inputs`` on, also ``"input:<class>"`` for each
task's input length class; with ``params`` on, each parameterised call's parameters, ``func_1=2``,
``func_13='-'``, ``func_5=text``; with ``depths`` on, each task's depth, ``depth:3``).
**Compounds** are connected fragments of two to ``max_size`` nodes of one tree, written with
argument positions (argument slots): the edge ``func_5(func_3(x))`` is the compound
``func_5(func_3)``; ``func_12(x, func_3(x))`` has ``func_12(_,func_3)`` (``_`` marks an argument
not in the fragment); ``func_5(func_3(func_1(x, 2)))`` also has ``func_5(func_3(func_1))`` (three
nodes, the default ``max_size``).

Weights follow DBCA (Keysers et al., ICLR 2020, section 2.1): an occurrence ``g`` of compound ``G``
that lies inside a bigger occurrence ``g'`` (of compound ``G'``) in the same row is discounted by
how often ``G`` occurs as part of ``G'`` in the whole collection: its weight is
``1 - max over g' ⊃ g of P(G' | G)``, with ``P(G' | G)`` the share of ``G``'s occurrences that lie
inside an occurrence of ``G'``. Counting (``compounds_per``): per row (the paper's ``w(G, u)``, the
largest weight of ``G``'s occurrences in sample ``u``: a row adds at most 1 per compound; the
default), or per occurrence (every occurrence adds its weight). Atoms (``atoms_per``) count per
occurrence (every node: the paper's atom distribution counts rule applications; the default) or
once per row.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opgen import expr
from opgen.errors import OpgenError
from opgen.ops import STUDY, OperatorLibrary

# Literals at least this long are "long" (probe 1g's long literal first arguments start at 8).
LONG_LITERAL = 8
# Input length classes (``inputs: true``): the upper bounds of each class, the last open-ended.
INPUT_CLASSES = ((3, "0-3"), (10, "4-10"), (50, "11-50"), (None, "51+"))
MAX_SIZE_LIMIT = 4
COUNTS = ("occurrence", "row")  # how atoms and compounds are counted (CompoundSpec.atoms_per / compounds_per)


class CompoundError(ValueError, OpgenError):
    """A compound spec that cannot be used; the message names the field."""

    exit_code = 1


@dataclass(frozen=True)
class CompoundSpec:
    """What counts as an atom and a compound, and how they are counted (the recipe's
    ``split.compounds``, docs/splits.md)."""

    max_size: int = 3  # nodes in the largest compound (2: parent→child edges only)
    leaves: bool = False  # x and literal kinds are nodes (atoms, and ends of compounds)
    inputs: bool = False  # each task's input length class is an atom
    params: bool = False  # each parameterised call's parameters are an atom (func_1=2)
    depths: bool = False  # each task's depth is an atom (depth:3): D_A's bound then holds depths alike too
    atoms_per: str = "occurrence"  # an atom adds 1 per node ("occurrence") or per row holding it ("row")
    compounds_per: str = "row"  # a compound adds its largest weight in a row ("row") or every occurrence's

    def __post_init__(self) -> None:
        if not 2 <= self.max_size <= MAX_SIZE_LIMIT:
            raise CompoundError(f"compounds.max_size: {self.max_size} is not in 2..{MAX_SIZE_LIMIT}")
        for key in ("atoms_per", "compounds_per"):
            if getattr(self, key) not in COUNTS:
                raise CompoundError(f"compounds.{key}: {getattr(self, key)!r} is not one of {', '.join(COUNTS)}")

    def as_dict(self) -> dict[str, Any]:
        return {"max_size": self.max_size, "leaves": self.leaves, "inputs": self.inputs, "params": self.params,
                "depths": self.depths, "atoms_per": self.atoms_per, "compounds_per": self.compounds_per}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any] | None, where: str = "compounds") -> CompoundSpec:
        raw = dict(raw or {})
        known = sorted(cls().as_dict())
        unknown = sorted(set(raw) - set(known))
        if unknown:
            raise CompoundError(f"{where}.{unknown[0]}: unknown key (known: {', '.join(known)})")
        try:
            return cls(**raw)
        except CompoundError as exc:
            raise CompoundError(f"{where}.{str(exc).split('.', 1)[1]}") from None

    def describe(self) -> str:
        """The spec in words, as reports name it."""
        base = "parent→child edges" if self.max_size == 2 else f"connected fragments of 2 to {self.max_size} nodes"
        extra = [k for k in ("leaves", "inputs", "params", "depths") if getattr(self, k)]
        return (f"{base} with argument slots, DBCA weights; compounds per {self.compounds_per}, atoms per "
                f"{self.atoms_per}" + (f"; {', '.join(extra)} as atoms" if extra else ""))


# The default spec of a split (its search and certificate, opgen split-stats; docs/splits.md says why).
DEFAULT = CompoundSpec()
# Every build's per-split histograms in the manifest and opgen stats: edges, each atom and compound
# once per row, which the builder counts as it generates rows (Tally) instead of reading them back.
EDGES = CompoundSpec(max_size=2, atoms_per="row")


def label(node: expr.Expr) -> str:
    """A node's label (see the module docstring)."""
    if isinstance(node, expr.Call):
        return node.op
    if isinstance(node, expr.Method):
        return "." + node.name
    if isinstance(node, expr.Concat):
        return "+"
    if isinstance(node, expr.Var):
        return "x"
    if isinstance(node, expr.Lit):
        return "lit:long" if len(node.value) >= LONG_LITERAL else "lit:short"
    raise expr.ExprError(f"not an expression node: {node!r}")


def input_class(x: str) -> str:
    n = len(x)
    for bound, name in INPUT_CLASSES:
        if bound is None or n <= bound:
            return "input:" + name
    raise AssertionError("the last class is open-ended")


def _is_node(e: expr.Expr, spec: CompoundSpec) -> bool:
    return spec.leaves or isinstance(e, (expr.Call, expr.Method, expr.Concat))


# An occurrence: (compound text, the ids of its nodes in the row, a frozenset)
Occurrence = tuple[str, frozenset[int]]
Fragment = tuple[str, frozenset[int], int]  # (text, node ids, size)


def _numbered(tree: expr.Expr, spec: CompoundSpec, base: int) -> tuple[list[expr.Expr], list[list[int | None]]]:
    """The tree's nodes in pre-order, numbered from ``base`` by position (never by object: a generator
    may share one subtree object between two places), and each node's children's numbers (None for a
    child that is no node)."""
    nodes: list[expr.Expr] = []
    kids: list[list[int | None]] = []

    def visit(e: expr.Expr) -> int:
        me = len(nodes)
        nodes.append(e)
        kids.append([])
        kids[me] = [visit(k) + base if _is_node(k, spec) else None for k in expr.children(e)]
        return me

    if _is_node(tree, spec):
        visit(tree)
    return nodes, kids


def occurrences(trees: Sequence[expr.Expr], spec: CompoundSpec = DEFAULT) -> tuple[list[str], list[Occurrence]]:
    """A row's atom labels (with repeats) and compound occurrences, over all of its trees."""
    if spec.max_size == 2:
        return _edge_occurrences(trees, spec)
    return _fragment_occurrences(trees, spec)


def _edge_occurrences(trees: Sequence[expr.Expr], spec: CompoundSpec) -> tuple[list[str], list[Occurrence]]:
    """``_fragment_occurrences`` for two-node compounds (edges), without enumerating fragments: the
    builder measures every row with it (tests/test_splits.py ties the two)."""
    atoms: list[str] = []
    found: list[Occurrence] = []
    for base, kids, labels in _labelled(trees, spec, atoms):
        for i, slots in enumerate(kids):
            for pos, k in enumerate(slots):
                if k is not None:
                    parts = ["_"] * len(slots)
                    parts[pos] = labels[k - base]
                    found.append((f"{labels[i]}({','.join(parts)})", frozenset((base + i, k))))
    return atoms, found


def _fragment_occurrences(trees: Sequence[expr.Expr], spec: CompoundSpec) -> tuple[list[str], list[Occurrence]]:
    """Every connected fragment of 2 to ``spec.max_size`` nodes, each node's fragments grown from its
    children's (bottom-up: pre-order numbers children after their parent)."""
    atoms: list[str] = []
    found: list[Occurrence] = []
    for base, kids, labels in _labelled(trees, spec, atoms):
        tops: list[list[Fragment]] = [[] for _ in labels]
        for i in range(len(labels) - 1, -1, -1):
            tops[i] = _grown(labels[i], base + i, [None if k is None else tops[k - base] for k in kids[i]],
                             spec.max_size)
        for frags in tops:
            found += [(text, members) for text, members, size in frags if size >= 2]
    return atoms, found


def _labelled(trees: Sequence[expr.Expr], spec: CompoundSpec,
              atoms: list[str]) -> Iterator[tuple[int, list[list[int | None]], list[str]]]:
    """Each tree's first number, its nodes' children's numbers and its nodes' labels, numbered on from
    tree to tree; every label is added to ``atoms`` (the atoms of the rows, per occurrence)."""
    base = 0
    for tree in trees:
        nodes, kids = _numbered(tree, spec, base)
        labels = [label(n) for n in nodes]
        atoms += labels
        yield base, kids, labels
        base += len(nodes)


def _grown(own: str, me: int, kids: Sequence[list[Fragment] | None], max_size: int) -> list[Fragment]:
    """The fragments topped at a node labelled ``own`` (number ``me``) from its children's fragments,
    up to ``max_size`` nodes; size 1 (the node alone) included."""
    options: list[list[Fragment]] = []
    for frags in kids:
        choice: list[Fragment] = [("_", frozenset(), 0)]
        if frags is not None:
            choice += [f for f in frags if f[2] < max_size]
        options.append(choice)
    out: list[Fragment] = []

    def grow(k: int, parts: list[str], members: frozenset[int], size: int) -> None:
        if k == len(options):
            text = own if size == 1 else f"{own}({','.join(parts)})"
            out.append((text, members | {me}, size))
            return
        for text, kid_members, kid_size in options[k]:
            if size + kid_size <= max_size:
                grow(k + 1, parts + [text], members | kid_members, size + kid_size)

    grow(0, [], frozenset(), 1)
    return out


def _edge_texts(trees: Sequence[expr.Expr], leaves: bool) -> tuple[set[str], set[str]]:
    """A row's distinct atom labels and two-node compound texts: what :func:`row_units` gives for
    a spec of edges, without the occurrences' node sets (the builder's tally reads only these)."""
    atoms: set[str] = set()
    comps: set[str] = set()
    ops_types = (expr.Call, expr.Method, expr.Concat)
    for tree in trees:
        for n in expr.walk(tree):
            if not (leaves or isinstance(n, ops_types)):
                continue
            own = label(n)
            atoms.add(own)
            kids = expr.children(n)
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


@dataclass(frozen=True)
class RowUnits:
    """One row's atoms (with how often each occurs) and compound occurrences (before the collection's
    discount)."""

    atoms: tuple[str, ...]  # distinct, sorted
    occurrences: tuple[Occurrence, ...]
    atom_counts: tuple[int, ...] = ()  # occurrences of each atom, aligned with ``atoms`` (empty: 1 each)

    @property
    def compounds(self) -> tuple[str, ...]:
        return tuple(sorted({c for c, _ in self.occurrences}))

    def atom_weights(self, spec: CompoundSpec) -> dict[str, float]:
        """Each atom's weight in the row: its occurrences (``atoms_per: occurrence``) or 1."""
        if spec.atoms_per == "row" or not self.atom_counts:
            return dict.fromkeys(self.atoms, 1.0)
        return {a: float(n) for a, n in zip(self.atoms, self.atom_counts)}


_TEXTS: dict[str, str] = {}  # compound and atom texts, one string object each (pools hold millions)


def _intern(text: str) -> str:
    return _TEXTS.setdefault(text, text)


def param_atom(node: expr.Call) -> str:
    """A parameterised call's parameters as one atom: ``func_1=2``, ``func_13='-'``, ``func_5=text``
    (an integer or a one-character choice by its value, a longer string by its kind)."""
    return node.op + "=" + ",".join(str(v) if isinstance(v, int) else repr(v) if len(v) <= 1 else "text"
                                    for v in node.params)


def row_units(trees: Sequence[expr.Expr], inputs: Sequence[str] = (), spec: CompoundSpec = DEFAULT) -> RowUnits:
    """The atoms and compounds of a row made of ``trees`` (one per task) with those ``inputs``."""
    atoms, found = occurrences(trees, spec)
    if spec.inputs:
        atoms += [input_class(x) for x in inputs]
    if spec.params:
        atoms += [param_atom(n) for tree in trees for n in expr.walk(tree) if isinstance(n, expr.Call) and n.params]
    if spec.depths:
        atoms += [f"depth:{expr.depth(tree)}" for tree in trees]
    counts = Counter(atoms)
    names = tuple(sorted(counts))
    return RowUnits(tuple(_intern(a) for a in names), tuple((_intern(t), m) for t, m in found),
                    tuple(counts[a] for a in names))


def edges(tree: expr.Expr) -> set[tuple[str, int, str]]:
    """The parent→child edges of a tree between operator nodes: (parent, argument position, child).

    The held-out rules of systematicity splits are stated over these; the compound text of an
    edge is :func:`edge_text` of it."""
    out: set[tuple[str, int, str]] = set()
    for n in expr.walk(tree):
        if isinstance(n, (expr.Call, expr.Method, expr.Concat)):
            for pos, kid in enumerate(expr.children(n)):
                if isinstance(kid, (expr.Call, expr.Method, expr.Concat)):
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


def compound_weights(row: RowUnits, cond: Conditional | None, per: str = "row") -> dict[str, float]:
    """The weight of every compound of the row (DBCA; see the module docstring): the largest of its
    occurrences' weights (``per`` "row", the paper's w(G, u)) or their sum ("occurrence")."""
    out: dict[str, float] = {}
    sups = _supers(row) if cond is not None else [[] for _ in row.occurrences]
    for (text, _), sup in zip(row.occurrences, sups):
        w = float(1.0 - max((cond.p(text, big) for big in sup), default=0.0) if cond is not None else 1.0)
        if per == "occurrence":
            out[text] = out.get(text, 0.0) + w
        elif w > out.get(text, -1.0):
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
        if self.spec.params or self.spec.depths or "occurrence" in (self.spec.atoms_per, self.spec.compounds_per):
            raise CompoundError("compounds: a tally counts each atom and compound once per row, without params")

    def add(self, trees: Sequence[expr.Expr], inputs: Sequence[str], sign: int = 1) -> None:
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

    def histograms(self) -> tuple[dict[str, float], dict[str, float]]:
        """What :func:`histograms` returns for the rows counted."""
        return ({k: float(v) for k, v in sorted(self.atoms.items()) if v},
                {k: float(v) for k, v in sorted(self.comps.items()) if v})


def histograms(rows: Sequence[RowUnits], spec: CompoundSpec = DEFAULT,
               cond: Conditional | None = None) -> tuple[dict[str, float], dict[str, float]]:
    """Weighted atom and compound histograms of a collection of rows (weights summed over rows).

    ``cond`` is the collection whose P(G'|G) discounts compounds (default: ``rows`` themselves,
    when ``spec`` allows compounds inside compounds)."""
    if cond is None and needs_discount(spec):
        cond = conditional(rows)
    atoms: dict[str, float] = {}
    comps: dict[str, float] = {}
    for row in rows:
        for a, n in row.atom_weights(spec).items():
            atoms[a] = atoms.get(a, 0.0) + n
        for text, w in compound_weights(row, cond, spec.compounds_per).items():
            comps[text] = comps.get(text, 0.0) + w
    return atoms, comps
