"""Generators: a recipe split's options → one :class:`opgen.tasks.Item` per row index.

A generator is a :class:`Generator` subclass registered by name with :func:`register_generator`:
each bundled module registers its classes when it is imported, and :data:`BUNDLED` names those
modules (a new bundled generator: one file here calling ``register_generator`` and one entry in
``BUNDLED``); the compositional splits' ``mcd_side`` is registered by its kind
(opgen.splits.kinds.mcd). The protocol is in docs/contracts.md ("Generators") and docs/recipes.md
("Adding a generator").
"""

from __future__ import annotations

import copy
import hashlib
import importlib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from opgen import ops, schemacheck
from opgen import rng as R
from opgen.errors import OpgenError
from opgen.ops import STUDY, OperatorLibrary
from opgen.rng import LOWERCASE, Rng, input_side, side_of
from opgen.tasks import Item


class GeneratorError(ValueError, OpgenError):
    """A split whose options are wrong or whose constraints cannot be met; the message names where."""

    exit_code = 1


class Unsatisfiable(GeneratorError):
    """A split asks for rows no draw can give: refused up front where that can be computed (an output
    cap below every input, trees too large to draw at that depth), else raised when a row's bounded
    search ends (``max_attempts`` candidates, or a candidate past its size bound). The message names
    the split, the row or option and what was tried; nothing is written. ``opgen serve`` answers it
    with a 4xx: it is the request's recipe, not the server, that cannot be met."""


@dataclass(frozen=True)
class Context:
    """What a generator knows beyond its options (everything that names a row, and the build's sets)."""

    digest: str  # the split's recipe digest: changes whenever anything that shapes its rows changes
    split: str
    seed: int
    role: str = "eval"
    where: str = ""  # "<recipe file>: splits.<name>.options" — prefix for error messages
    op_sets: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # the recipe's operator library (opgen.library): every operator a generator draws comes from it
    library: OperatorLibrary = STUDY


class Generator:
    """Base class: options resolved against ``DEFAULTS``, checked against ``OPTIONS_SCHEMA``.

    Subclasses implement ``count()`` and ``candidate(i, j)``; ``candidate`` returns ``None`` for a
    candidate that breaks a local constraint, after counting the reason in ``self.rejections``.
    """

    NAME = ""
    VERSION = 1
    DEFAULTS: dict[str, Any] = {}
    OPTIONS_SCHEMA: dict[str, Any] = {"type": "object"}
    # Pool-based generators plan rows up front; drawing "the next candidate" cannot change a row,
    # so the builder fails on a duplicate instead of redrawing.
    REDRAWABLE = True
    # Where the build stores ``manifest_section(rows)`` (when it returns a dict) in the split's
    # manifest entry: e.g. a shared pool's task hash or per-step hashes of matched streams.
    MANIFEST_KEY = "plan"
    # Whether the rows depend on the split's role: a generator that draws its inputs on the role's
    # side (``side_input``) says so, and the recipe digest then names the role.
    SIDED = False
    # Whether the generator draws its operators from the recipe's library (``ctx.library``), so a
    # recipe naming another library may use it; the others know the study's operators by name.
    ANY_LIBRARY = False

    def __init__(self, options: Mapping[str, Any], ctx: Context):
        self.options = dict(options)
        self.ctx = ctx
        self.side = side_of(ctx.role)  # the input side this split draws (opgen.rng.input_side)
        self.rejections: Counter[str] = Counter()
        self.max_attempts = int(self.options.get("max_attempts", 1000))

    # ---------------------------------------------------------------- options

    @classmethod
    def resolve(cls, options: Mapping[str, Any] | None, where: str = "") -> dict[str, Any]:
        """Defaults filled in, then checked: errors name ``where`` plus the path inside the options."""
        merged = copy.deepcopy(cls.DEFAULTS)
        merged.update(copy.deepcopy(dict(options or {})))
        schema = cls.options_schema()
        if schemacheck.surely_valid(schema, merged):
            return merged
        # jsonschema only for options the fast check cannot vouch for: it words the errors
        errors = sorted(schemacheck.validator(schema).iter_errors(merged), key=lambda e: list(e.path))
        if errors:
            err = errors[0]
            path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.path)
            raise GeneratorError(f"{where}{path}: {err.message}")
        return merged

    @classmethod
    def options_schema(cls) -> dict[str, Any]:
        """``OPTIONS_SCHEMA`` with what every generator accepts (``max_attempts``), no other key."""
        schema: dict[str, Any] = {"type": "object", "additionalProperties": False,
                  "properties": {"max_attempts": {"type": "integer", "minimum": 1}}}
        return {**schema, **cls.OPTIONS_SCHEMA,
                "properties": {**schema["properties"], **cls.OPTIONS_SCHEMA.get("properties", {})}}

    def op_set(self, spec: Any, key: str) -> tuple[str, ...]:
        lib = self.ctx.library
        try:
            ids = lib.resolve_set(spec)
        except (ValueError, KeyError) as exc:
            raise GeneratorError(f"{self.ctx.where}.{key}: {exc}") from None
        if not ids:  # a named set the library does not fill (a list names at least one operator)
            what = {"train": "train", "heldout": "held-out"}.get(spec, "")
            have = ", ".join(f"{name} ({len(members)})" for name, members in
                             (("train", lib.train_ids), ("heldout", lib.heldout_ids)) if members)
            raise self.fail(key, f"library {lib.name!r} has no {what + ' ' if what else ''}operators "
                                 f"(its sets: {have or 'none'}); name a set it has, or a list of its operator ids")
        return ids

    def fail(self, key: str, message: str) -> GeneratorError:
        return GeneratorError(f"{self.ctx.where}.{key}: {message}" if key else f"{self.ctx.where}: {message}")

    # ---------------------------------------------------------------- protocol

    def count(self) -> int:
        raise NotImplementedError

    def candidate(self, i: int, j: int) -> Item | None:
        raise NotImplementedError

    def rng(self, i: int, j: int) -> Rng:
        """``Rng(digest, split, i, j)``: the stream of candidate ``j`` of row ``i``."""
        maker = self.__dict__.get("_rng_maker")
        if maker is None:
            maker = self._rng_maker = rng_maker(self.ctx.digest, self.ctx.split)
        return maker(i, j)

    def first_valid(self, i: int, start: int = 0) -> tuple[int, Item]:
        """The first candidate ``j >= start`` of row ``i`` that meets the local constraints."""
        candidate = self.candidate
        for j in range(start, start + self.max_attempts):
            found = candidate(i, j)
            if found is not None:
                return j, found
            if not self.REDRAWABLE:
                break
        raise self.no_candidate(i, start)

    def first_valid_many(self, start: int, stop: int) -> list[tuple[int, Item]]:
        """``[first_valid(i) for i in range(start, stop)]``; a generator may draw them in bulk."""
        return [self.first_valid(i) for i in range(start, stop)]

    def no_candidate(self, i: int, start: int = 0) -> Unsatisfiable:
        """The error of row ``i`` whose search from candidate ``start`` ended. Its rejections are
        counted again over its first candidates (``self.rejections`` holds every row's): the cost is
        paid once, when the build stops, never while rows are drawn."""
        tried = self.max_attempts if self.REDRAWABLE else 1  # a planned row has one candidate
        n = min(tried, REJECTIONS_SHOWN)
        mine = self.row_rejections(i, start, n)
        seen = ", ".join(f"{k}: {v:,}" for k, v in sorted(mine.items())) or "none counted"
        culprits = [REJECTION_OPTION[k] for k, _ in mine.most_common() if k in REJECTION_OPTION]
        loosen = ", ".join(dict.fromkeys(culprits)) or "the options"
        return Unsatisfiable(
            f"{self.ctx.where or f'split {self.ctx.split!r}'}: row {i}{self.row_context(i)}: no candidate met the "
            f"constraints in {tried:,} attempt{'' if tried == 1 else 's'} "
            f"({'max_attempts' if self.REDRAWABLE else 'a planned row has one candidate'}); rejections among its "
            f"first {n:,} candidate{'' if n == 1 else 's'}: {seen}; loosen {loosen}, or ask for fewer rows")

    def row_rejections(self, i: int, start: int, n: int) -> Counter[str]:
        """What rejected candidates ``start .. start + n - 1`` of row ``i`` (drawn again, counted apart)."""
        saved, self.rejections = self.rejections, Counter()
        try:
            for j in range(start, start + n):
                self.candidate(i, j)
        except GeneratorError:  # a candidate past a size bound: what was counted until then
            pass
        finally:
            mine, self.rejections = self.rejections, saved
        return mine

    def row_context(self, i: int) -> str:
        """What an error about row ``i`` adds after the row (a depth, a condition), e.g. ``", depth 40"``."""
        return ""

    def item(self, i: int) -> Item:
        return self.first_valid(i)[1]

    def side_input(self, draw):
        """``draw`` (``rng -> str``) restricted to inputs on this split's side: ``rng -> str | None``.

        An input of the other side is drawn again from the same stream (counted as ``input_side``
        in the rejections); None after ``MAX_SIDE_DRAWS`` draws (an alphabet and length range with
        almost no string on this side), which rejects the candidate.
        """
        want = self.side

        def drawn(rng: Rng) -> str | None:
            for _ in range(MAX_SIDE_DRAWS):
                x = draw(rng)
                if input_side(x) == want:
                    return x
                self.rejections["input_side"] += 1
            return None

        return drawn

    def manifest_section(self, rows: int) -> dict[str, Any] | None:
        """Facts about the whole split for the manifest (``rows``: the rows built, after --limit)."""
        return None

    # Facts that span several splits of one build (matched streams compared step by step): the
    # build calls ``summarize_build(sections)`` once per generator class it used and stores a
    # non-None result in the manifest under ``BUILD_KEY``.
    BUILD_KEY = ""

    @classmethod
    def summarize_build(cls, sections: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
        return None


# ---------------------------------------------------------------- shared sampling helpers

# Draws of an input before a candidate is given up for want of one on its split's side: each draw
# lands on a side with probability ~1/2, so 64 misses happen once in 2**64 with lowercase inputs.
MAX_SIDE_DRAWS = 64


def side_text(rng: Rng, lo: int, hi: int, side: int, alphabet: str = LOWERCASE) -> str:
    """``rng.text(lo, hi, alphabet)`` drawn again until the text is on ``side`` (the pools' and
    probes' inputs; a generator's own draws use ``Generator.side_input``, which counts them)."""
    for _ in range(MAX_SIDE_DRAWS):
        x = rng.text(lo, hi, alphabet)
        if input_side(x) == side:
            return x
    raise GeneratorError(f"no input of {lo}-{hi} characters over {alphabet!r} on side {side} "
                         f"in {MAX_SIDE_DRAWS} draws")


def rng_maker(*prefix: object):
    """A fast constructor of ``Rng(*prefix, i, j)``: the prefix is hashed once, not once per row.

    It reproduces :func:`opgen.rng.key_of` from a copied hasher state; a self-check against
    ``Rng`` itself guards against that module changing, falling back to plain ``Rng`` if so.
    """
    def slow(i: int, j: int) -> Rng:
        return Rng(*prefix, i, j)

    try:
        base = hashlib.blake2b(digest_size=32, person=b"opgen-rng")
        for part in prefix:
            base.update(R._encode(part))

        def encode(n: int) -> bytes:  # R._encode of an int, inlined (checked below)
            raw = str(n).encode()
            return b"i" + len(raw).to_bytes(8, "little") + raw

        small = tuple(encode(j) for j in range(64))  # most rows need candidates 0, 1, 2
        last: list = [None, None]  # (i, hasher after i): candidates of one row share it
        new, unpack, blake2b, zero = Rng.__new__, R._WORDS.unpack, hashlib.blake2b, (0).to_bytes(8, "little")

        def fast(i: int, j: int) -> Rng:
            if last[0] != i:
                hi = base.copy()
                hi.update(encode(i))
                last[0], last[1] = i, hi
            h = last[1].copy()
            h.update(small[j] if j < 64 else encode(j))
            r = new(Rng)
            # Every candidate reads at least one word: its first block is made here, as
            # ``Rng.word`` would make it (checked below), without a method call.
            r._key = key = h.digest()
            r._buf, r._counter, r._pos = unpack(blake2b(zero, key=key, digest_size=64).digest()), 1, 0
            return r

        for i, j in ((7, 3), (7, 4), (123456789, 0), (5, 70)):
            a, b = fast(i, j), slow(i, j)
            if [a.word() for _ in range(20)] != [b.word() for _ in range(20)]:
                return slow
        return fast
    except (AttributeError, TypeError):
        return slow


def sample_params(op: ops.Operator, rng: Rng) -> tuple[int | str, ...]:
    if not op.params:
        return ()
    out: list[int | str] = []
    for p in op.params:
        if p.kind == "int":
            out.append(rng.integer(p.lo, p.hi))
        elif p.kind == "choice":
            out.append(rng.choice(p.choices))
        else:
            out.append(text(rng, p.lo, p.hi, LOWERCASE))
    return tuple(out)


_TEXT_DRAWERS: dict[tuple[int, int, str], Any] = {}


def text(rng: Rng, lo: int, hi: int, alphabet: str = LOWERCASE) -> str:
    """A string of ``lo``..``hi`` characters from ``alphabet``, exactly uniform like ``Rng.text``."""
    return text_drawer(lo, hi, alphabet)(rng)


def text_drawer(lo: int, hi: int, alphabet: str = LOWERCASE):
    """``rng -> text(rng, lo, hi, alphabet)`` with everything that depends on the range made once.

    One unbiased draw below ``span * len(alphabet) ** hi`` is read as mixed-radix digits (length,
    then characters, three at a time through a table of every three-character string), instead of
    one 64-bit word per character: generation spends much of its time drawing inputs and literals.
    Falls back to ``Rng.text`` when that number exceeds 64 bits.
    """
    key = (lo, hi, alphabet)
    draw = _TEXT_DRAWERS.get(key)
    if draw is not None:
        return draw
    a = len(alphabet)
    span = hi - lo + 1
    m = span * a ** hi
    if m > 1 << 64 or a > 64:
        def draw(rng: Rng) -> str:
            return rng.text(lo, hi, alphabet)
    else:
        triples = tuple(alphabet[d % a] + alphabet[d // a % a] + alphabet[d // (a * a)] for d in range(a ** 3))
        limit = (1 << 64) - ((1 << 64) % m)  # rng.below(m), inlined with its rejection limit
        cube = a * a * a

        def draw(rng: Rng) -> str:
            w = rng.word()
            while w >= limit:
                w = rng.word()
            v, extra = divmod(w % m, span)
            n = lo + extra
            out = []
            for _ in range(n // 3):
                v, d = divmod(v, cube)
                out.append(triples[d])
            for _ in range(n % 3):
                v, c = divmod(v, a)
                out.append(alphabet[c])
            return "".join(out)

    _TEXT_DRAWERS[key] = draw
    return draw


def text_vectorizer(lo: int, hi: int, alphabet: str = LOWERCASE):
    """``text_drawer``'s draw for many first words at once (a numpy uint64 array), or None when
    the alphabet or the range needs another path (non-ASCII letters, over 64 bits).

    Returns ``(flat, begins, lengths, ok)``: row r's text is ``flat[begins[r]:begins[r] + lengths[r]]``
    where ``ok[r]``; a word the drawer would reject (it then reads the next one) has ``ok`` False.
    The same mixed-radix digits as ``text_drawer``, least significant first.
    """
    a = len(alphabet)
    span = hi - lo + 1
    m = span * a ** hi
    if m >= 1 << 64 or a > 64 or not alphabet.isascii():
        return None
    import numpy as np

    u = np.uint64
    limit = (1 << 64) - ((1 << 64) % m)
    letters = np.frombuffer(alphabet.encode("ascii"), dtype=np.uint8)
    positions = np.arange(hi)

    def draw(words):
        ok = words < u(limit) if limit < 1 << 64 else np.ones(len(words), dtype=bool)
        q = words % u(m)
        lengths = (q % u(span)).astype(np.int64) + lo
        v = q // u(span)
        digits = np.empty((len(words), hi), dtype=np.uint8)
        for p in range(hi):
            digits[:, p] = letters[(v % u(a)).astype(np.intp)]
            v //= u(a)
        flat = digits[positions[None, :] < lengths[:, None]].tobytes().decode("ascii")
        ends = np.cumsum(lengths)
        return flat, (ends - lengths).tolist(), lengths.tolist(), ok.tolist()

    return draw


# require_effect (issue 18 item 6): every operator call must change its argument. Off by default and
# read with .get, so recipes without it keep their digests and rows.
REQUIRE_EFFECT = {"type": "boolean", "description": "reject candidates in which an operator call returns its "
                  "first argument unchanged (counted as no_effect)"}


def effect_ok(gen: Generator, item: Item | None) -> Item | None:
    """``item`` when ``require_effect`` is off or every call of every task changes its argument."""
    if item is None or not gen.options.get("require_effect", False):
        return item
    from opgen.generate.measure import task_unchanged_calls

    for t in item.tasks:
        if task_unchanged_calls(t):  # the generator's own count where it noted one
            gen.rejections["no_effect"] += 1
            return None
    return item


# Candidates of a row whose rejections an Unsatisfiable message counts (drawn again when it is raised).
REJECTIONS_SHOWN = 100
# The option a rejection reason answers to, named when a row's search gives up (Unsatisfiable).
REJECTION_OPTION = {
    "output_too_long": "max_output_chars", "no_x": "require_x", "no_operator_call": "require_call",
    "no_effect": "require_effect", "split": "the recipe's split: (what it holds out)",
}  # input_side counts redraws of an input within a candidate (about half of all draws): no culprit


def check_cap(gen: Generator, input_key: str = "input_len", cap_key: str = "max_output_chars") -> None:
    """Refuse up front a cap below every input: each candidate's input is checked against the cap
    first, so no draw could pass (Unsatisfiable, naming both options)."""
    lo = gen.options[input_key][0]
    cap = gen.options[cap_key]
    if lo > cap:
        raise Unsatisfiable(f"{gen.ctx.where}.{cap_key}: {cap} is below every input ({input_key} "
                            f"{list(gen.options[input_key])}): each candidate's input alone is over the cap, so no "
                            f"row can be drawn; raise {cap_key} to at least {lo} or shorten {input_key}")


LENGTH_RANGE = {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 2, "maxItems": 2}
OP_ID = {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"}  # an operator id: any library's (a Python name)
OP_SET = {"oneOf": [{"enum": ["train", "heldout", "all"]}, {"type": "array", "items": OP_ID, "minItems": 1}]}


def check_range(gen: Generator, key: str) -> tuple[int, int]:
    lo, hi = gen.options[key]
    if lo > hi:
        raise gen.fail(key, f"range [{lo}, {hi}] is empty (expected [lo, hi] with lo <= hi)")
    return lo, hi


# The options of an InputGenerator, for its own DEFAULTS and OPTIONS_SCHEMA.
INPUT_DEFAULTS = {"input_len": [3, 10], "alphabet": LOWERCASE, "max_output_chars": 1000}
INPUT_OPTIONS = {
    "input_len": LENGTH_RANGE, "alphabet": {"type": "string", "minLength": 1},
    "max_output_chars": {"type": "integer", "minimum": 1}, "require_effect": REQUIRE_EFFECT,
}


class InputGenerator(Generator):
    """A generator whose tasks run on one input ``x`` drawn on the split's side, with operators of
    the recipe's library (atomic, chains, trees): the options in ``INPUT_OPTIONS``."""

    SIDED = True
    ANY_LIBRARY = True

    def input_drawer(self):
        """``rng -> x | None`` (``side_input`` of a text of ``input_len`` over ``alphabet``), after
        checking ``input_len`` and ``max_output_chars`` (``check_cap``); sets ``in_lo``, ``in_hi``
        and ``max_len``."""
        self.in_lo, self.in_hi = check_range(self, "input_len")
        check_cap(self)
        self.max_len = self.options["max_output_chars"]
        return self.side_input(text_drawer(self.in_lo, self.in_hi, self.options["alphabet"]))


# ---------------------------------------------------------------- registry

# The bundled generator modules (each registers its classes when imported), in this order.
BUNDLED = ("atomic", "cells", "chains", "probes", "trees")
_REGISTRY: dict[str, type[Generator]] = {}
_BUNDLED_LOADED = False


def registry() -> dict[str, type[Generator]]:
    """Generator name → class: the bundled modules' (imported on first use) and every class
    registered since."""
    global _BUNDLED_LOADED
    if not _BUNDLED_LOADED:
        _BUNDLED_LOADED = True  # first: the modules call register_generator while they load
        for name in BUNDLED:
            importlib.import_module(f"{__name__}.{name}")
    return _REGISTRY


def register_generator(cls: type[Generator], name: str | None = None) -> type[Generator]:
    """Make a user's generator class nameable by recipes (``generator: <name>``); returns ``cls``,
    so it also works as a class decorator. ``name`` defaults to ``cls.NAME``.

    Registering the same class twice is a no-op; a name already taken by another class (a bundled
    generator or another user's) is refused. A recipe may instead name the class by import path,
    ``generator: "package.module:ClassName"``, which imports and registers it on first use (what
    ``opgen build`` needs: it never runs the user's registration code).
    """
    if not (isinstance(cls, type) and issubclass(cls, Generator)):
        raise TypeError(f"register_generator needs a subclass of opgen.generate.Generator, got {cls!r}")
    name = name or cls.NAME
    if not name or not isinstance(name, str):
        raise ValueError(f"{cls.__qualname__}: give a name (or set NAME on the class)")
    reg = registry()
    if name in reg and reg[name] is not cls:
        raise ValueError(f"generator {name!r} is already registered ({reg[name].__module__}.{reg[name].__qualname__})")
    reg[name] = cls
    return cls


def _import_generator(path: str) -> type[Generator]:
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise GeneratorError(f"generator {path!r}: an import path is 'package.module:ClassName'")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the user's module: any error while importing it is theirs to see
        raise GeneratorError(f"generator {path!r}: cannot import {module_name!r} "
                             f"({type(exc).__name__}: {exc})") from None
    cls: Any = module
    for part in attr.split("."):
        cls = getattr(cls, part, None)
        if cls is None:
            raise GeneratorError(f"generator {path!r}: module {module_name!r} has no {attr!r}")
    if not (isinstance(cls, type) and issubclass(cls, Generator)):
        raise GeneratorError(f"generator {path!r} is not a subclass of opgen.generate.Generator")
    return register_generator(cls, path)


def get(name: str) -> type[Generator]:
    reg = registry()
    if name not in reg:
        if ":" in name:
            return _import_generator(name)
        raise GeneratorError(f"unknown generator {name!r} (known: {', '.join(sorted(reg))}; a generator of "
                             f"your own: register_generator(cls) or 'package.module:ClassName')")
    return reg[name]


# ---------------------------------------------------------------- rows per depth

DEPTH_PLAN_SCHEMA = {
    "depths": {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 1},
    "per_depth": {"type": ["integer", "null"], "minimum": 1},
    "rows": {"type": ["integer", "null"], "minimum": 1},
}


class DepthPlan:
    """Which depth row ``i`` has: blocks of ``per_depth`` rows in ``depths`` order, or ``rows`` rows
    cycling through ``depths`` (row i has depth ``depths[i % len(depths)]``)."""

    def __init__(self, gen: Generator):
        self.depths = tuple(gen.options["depths"])
        self.per_depth = gen.options.get("per_depth")
        rows = gen.options.get("rows")
        if (self.per_depth is None) == (rows is None):
            raise gen.fail("", "give exactly one of per_depth (rows per depth) or rows (total, depths cycled)")
        self.total = self.per_depth * len(self.depths) if self.per_depth is not None else rows

    def context(self, i: int) -> str:
        """Row ``i`` in an error message: ``", depth 40"``."""
        return f", depth {self.depth(i)}"

    def depth(self, i: int) -> int:
        if self.per_depth is not None:
            return self.depths[i // self.per_depth]
        return self.depths[i % len(self.depths)]
