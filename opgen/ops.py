"""The operator library: 25 string operators, exactly as the benchmark defines them.

Each operator's *shown source* is the single source of truth: the callable opgen executes is
compiled from that text (all 25 sources into one namespace, so recursive operators recurse
through their ``func_N`` name). Every source is self-contained: pasted alone into a fresh
interpreter it defines a working function (imports live inside the body).
"""

from __future__ import annotations

import hashlib
import json
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Union

from opgen.errors import USAGE, OpgenError

TRAIN = "train"
HELDOUT = "heldout"
SPLITS: tuple[str, ...] = (TRAIN, HELDOUT)


@dataclass(frozen=True)
class Param:
    """A non-string parameter of an operator and the values the native generator samples."""

    name: str
    kind: str  # "int" (lo..hi inclusive), "choice" (one of choices), "letters" (lo..hi lowercase letters)
    lo: int = 0
    hi: int = 0
    choices: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.kind == "int":
            return f"{self.name} in {self.lo}..{self.hi}"
        if self.kind == "choice":
            return f"{self.name} in {{{', '.join(repr(c) for c in self.choices)}}}"
        return f"{self.name}: {self.lo}-{self.hi} lowercase letters"

    def accepts(self, value: object) -> bool:
        """Whether ``value`` has this parameter's type (domains are for sampling, not a grammar)."""
        if self.kind == "int":
            return isinstance(value, int) and not isinstance(value, bool)
        return isinstance(value, str)


# Signature kinds: the shapes of an operator's arguments, in the order the diagnosis probes them.
# "s" one string; "s,int" / "s,str" a string and an int / a string parameter; "s1,s2" two strings.
KINDS: tuple[str, ...] = ("s", "s,int", "s,str", "s1,s2")

# A parameter value in an expression: an int or a str (opgen.expr.ParamValue).
ParamValue = Union[int, str]
# The exact output length of a call, from the length of its first input and its parameters.
OutLen = Callable[[int, tuple[ParamValue, ...]], int]
Cost = Callable[[int, Any], tuple[int, int, int]]


@dataclass(frozen=True)
class Operator:
    """One operator: its facts live here, and every other module reads them from the operator."""

    id: str
    name: str  # the native benchmark's name
    gloss: str  # a short English description (the card's operator table)
    source: str  # the shown source: the code opgen executes, compiled from this text
    n_inputs: int  # string inputs: 1 (unary) or 2 (binary: both are expressions)
    params: tuple[Param, ...]
    split: str
    fn: Callable[..., str]
    # Growth bound: the exact output length, for the operators that grow their input by a factor
    # (so that a call which would build a huge string is refused before it runs). None: the
    # operator grows its input at most twofold, and its output is checked after it returns.
    out_len: OutLen | None = None
    # Cost bound: ``cost(n, p)`` is (longest output, work, recursion depth) of a call on well-typed
    # arguments, the first input ``n`` characters long and ``p`` the second argument (None when the
    # operator has one): upper bounds read off the shown source, with work in interpreted steps
    # plus characters copied by C code / 16, and every integer operation charged by the bit length
    # of its operand (:func:`int_steps`). The static grader (opgen/score/static.py) evaluates a call
    # only inside a budget of these units.
    cost: Cost | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled (a Ray task's recipe or library) by value, not by its function: a study operator
        # as the receiving process's own (ops.get), another one rebuilt from its source (each
        # source compiles standalone: `opgen ops check`'s law), unless its function is importable
        # by name (a module's own def), which then travels by reference. Bounds (out_len, cost)
        # travel as pickle sends them: module-level functions by reference.
        if BY_ID.get(self.id) is self:
            return (get, (self.id,))
        fn = self.fn if _importable(self.fn) else None
        return (_rebuilt_operator, (self.id, self.name, self.gloss, self.source, self.n_inputs, self.params,
                                    self.split, fn, self.out_len, self.cost))

    def __copy__(self) -> Operator:
        return self  # immutable: a copy is the operator itself (never a recompile)

    def __deepcopy__(self, memo: dict[int, Any]) -> Operator:
        return self

    @property
    def index(self) -> int:
        return int(self.id.split("_")[1])

    @property
    def arity(self) -> int:
        return self.n_inputs + len(self.params)

    @property
    def input_names(self) -> tuple[str, ...]:
        return ("s",) if self.n_inputs == 1 else ("s1", "s2")

    @property
    def signature(self) -> str:
        return f"({', '.join(self.input_names + tuple(p.name for p in self.params))})"

    @property
    def kind(self) -> str:
        """The signature kind (one of :data:`KINDS`): which probe arguments the diagnosis feeds it."""
        if self.n_inputs == 2:
            return "s1,s2"
        if not self.params:
            return "s"
        return "s,int" if self.params[0].kind == "int" else "s,str"


@dataclass(frozen=True)
class OperatorLibrary:
    """A named, ordered set of operators: the unit a study is run on (issue 25).

    The study's 25 are :data:`STUDY`; a user library is loaded by :mod:`opgen.library` (a
    ``module:obj`` import spec or a YAML file the user chose) and known by its :attr:`digest`
    everywhere else (rows, manifests, the store). Everything about the split is derived from the
    operators' own ``split`` field, never listed twice."""

    name: str
    operators: tuple[Operator, ...]

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("an operator library needs a name")
        if not self.operators:
            raise ValueError(f"operator library {self.name!r} has no operators")
        seen: set[str] = set()
        for op in self.operators:
            if not isinstance(op, Operator):
                raise TypeError(f"operator library {self.name!r}: {op!r} is not an opgen.ops.Operator")
            if op.id in seen:
                raise ValueError(f"operator library {self.name!r}: duplicate operator id {op.id!r}")
            seen.add(op.id)
            if op.split not in SPLITS:
                raise ValueError(f"operator library {self.name!r}: operator {op.id!r} has split {op.split!r} "
                                 f"(use {' or '.join(SPLITS)})")

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(op.id for op in self.operators)

    @property
    def train_ids(self) -> tuple[str, ...]:
        return tuple(op.id for op in self.operators if op.split == TRAIN)

    @property
    def heldout_ids(self) -> tuple[str, ...]:
        return tuple(op.id for op in self.operators if op.split == HELDOUT)

    def __len__(self) -> int:
        return len(self.operators)

    @cached_property
    def by_id(self) -> dict[str, Operator]:
        """Each operator by its id."""
        return {op.id: op for op in self.operators}

    @cached_property
    def functions(self) -> dict[str, Callable[..., str]]:
        """Each operator's function by its id."""
        return {op.id: op.fn for op in self.operators}

    @cached_property
    def position(self) -> dict[str, int]:
        """Each operator's position in the library: its bit in an operator mask and its sort key
        (the study's ids are ``func_0`` .. ``func_24`` in order, so there position == ``index``)."""
        return {op.id: i for i, op in enumerate(self.operators)}

    def __reduce__(self) -> tuple[Any, ...]:
        # The study's library travels by reference (a Ray task's recipe): the receiving process's
        # STUDY, the very operator objects its caches and fast paths know, never a copy of them.
        if self.operators is OPERATORS:
            return (_study_library, ())
        return (OperatorLibrary, (self.name, self.operators))

    @property
    def is_study(self) -> bool:
        """Whether this is the study's own library (its rows name no library: byte-identical to before)."""
        return self.operators is OPERATORS or self.digest == STUDY.digest

    def get(self, op_id: str) -> Operator:
        try:
            return self.by_id[op_id]
        except KeyError:
            raise UnknownOperator(op_id, self) from None

    def resolve_set(self, spec: str | list[str]) -> tuple[str, ...]:
        """An operator set by name ("train", "heldout", "all") or an explicit list, in library order."""
        if isinstance(spec, str):
            named = {"train": self.train_ids, "heldout": self.heldout_ids, "all": self.ids}
            if spec not in named:
                raise ValueError(f"unknown operator set {spec!r} (use train, heldout, all or a list of ids)")
            return named[spec]
        for op_id in spec:
            self.get(op_id)
        wanted = set(spec)
        return tuple(op_id for op_id in self.ids if op_id in wanted)

    def of_kind(self, kind: str) -> tuple[str, ...]:
        """The ids of the operators of a signature kind, in library order."""
        if kind not in KINDS:
            raise ValueError(f"unknown signature kind {kind!r} (known: {', '.join(KINDS)})")
        return tuple(op.id for op in self.operators if op.kind == kind)

    @cached_property
    def mask_dtype(self) -> str:
        """The numpy dtype of this library's operator bitmasks (:func:`mask_dtype`)."""
        return mask_dtype(len(self.operators))

    @cached_property
    def digest(self) -> str:
        """The library's identity (:func:`content_digest` of its operators): its name and the
        growth/cost callables are not content, so renaming a library keeps its digest."""
        return content_digest([describe_operator(op) for op in self.operators])

    def __hash__(self) -> int:
        # By identity's digest (computed once): caches keyed by a library hash it on every lookup,
        # and the generated hash would hash every operator's fields each time.
        return hash(self.digest)

    def describe(self) -> dict[str, Any]:
        """What a manifest records about the library: its name, digest, size and split."""
        return {"name": self.name, "digest": self.digest, "n_operators": len(self.operators),
                "train": list(self.train_ids), "heldout": list(self.heldout_ids)}


def _study_library() -> OperatorLibrary:
    return STUDY


def describe_operator(op: Operator) -> dict[str, Any]:
    """What of an operator is content (its part of :func:`content_digest`): id, name, source,
    n_inputs, params, split and gloss, as plain values."""
    return {"id": op.id, "name": op.name, "source": op.source, "n_inputs": op.n_inputs,
            "params": [{"name": p.name, "kind": p.kind, "lo": p.lo, "hi": p.hi, "choices": list(p.choices)}
                       for p in op.params],
            "split": op.split, "gloss": op.gloss}


def content_digest(operators: list[dict[str, Any]]) -> str:
    """sha256 of a canonical JSON (sorted keys, no whitespace) of the operators' descriptions
    (:func:`describe_operator`), in order: a library's identity. A library file's digest is this of
    its descriptions read as data (opgen.library.digest_of_file), with nothing compiled."""
    text = json.dumps(operators, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _importable(fn: object) -> bool:
    """Whether pickle can send ``fn`` by reference: its module is imported and names it."""
    import sys

    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    value: Any = module
    for part in str(getattr(fn, "__qualname__", "")).split("."):
        value = getattr(value, part, None)
    return module is not None and value is fn


def _rebuilt_operator(op_id: str, name: str, gloss: str, source: str, n_inputs: int, params: tuple[Param, ...],
                      split: str, fn: Callable[..., str] | None, out_len: Any, cost: Any) -> Operator:
    """An unpickled operator: its function compiled from its own source when it did not travel."""
    if fn is None:
        namespace: dict[str, object] = {"__name__": f"opgen.library.rebuilt.{op_id}"}
        exec(compile(source, f"<opgen {op_id}>", "exec"), namespace)
        made = namespace.get(op_id)
        if not callable(made):
            raise TypeError(f"operator {op_id!r}: its source defines no function {op_id!r}")
        fn = made
    return Operator(op_id, name, gloss, source, n_inputs, params, split, fn, out_len, cost)


def _src(text: str) -> str:
    return textwrap.dedent(text).strip("\n") + "\n"


_LETTERS: dict[str, Any] = dict(kind="letters", lo=2, hi=4)

# (id, native name, gloss, split, n_inputs, params, source)
_TABLE: list[tuple[str, str, str, str, int, tuple[Param, ...], str]] = [
    ("func_0", "deterministic_shuffle",
     "deterministic shuffle: reorders the characters with a stride coprime to the length",
     HELDOUT, 1, (), _src('''
        def func_0(s):
            """Deterministically shuffle s: out[i] = s[(i * m) % L], m the first odd number >= 3 coprime to L."""
            from math import gcd
            L = len(s)
            if L == 0:
                return s
            multiplier = 3
            while gcd(multiplier, L) != 1:
                multiplier += 2
            return ''.join(s[(i * multiplier) % L] for i in range(L))
     ''')),
    ("func_1", "repeat_str", "repeat the string n times",
     TRAIN, 1, (Param("n", "int", 2, 4),), _src('''
        def func_1(s, n):
            """Repeat the string s exactly n times."""
            return s * n
     ''')),
    ("func_2", "remove_vowels", "remove every vowel (upper and lower case)",
     HELDOUT, 1, (), _src('''
        def func_2(s):
            """Remove vowels from the string."""
            vowels = 'aeiouAEIOU'
            return ''.join(ch for ch in s if ch not in vowels)
     ''')),
    ("func_3", "sort_chars", "sort the characters",
     TRAIN, 1, (), _src('''
        def func_3(s):
            """Sort the characters in the string."""
            return ''.join(sorted(s))
     ''')),
    ("func_4", "reverse_words", "reverse the order of the words",
     TRAIN, 1, (), _src('''
        def func_4(s):
            """Reverse the order of words in the string."""
            words = s.split()
            return ' '.join(reversed(words))
     ''')),
    ("func_5", "add_prefix", "add a fixed prefix",
     TRAIN, 1, (Param("pre", **_LETTERS),), _src('''
        def func_5(s, pre):
            """Add a fixed prefix to the string."""
            return pre + s
     ''')),
    ("func_6", "add_suffix", "add a fixed suffix",
     HELDOUT, 1, (Param("suf", **_LETTERS),), _src('''
        def func_6(s, suf):
            """Add a fixed suffix to the string."""
            return s + suf
     ''')),
    ("func_7", "interlace_str", "interlace two strings character by character",
     HELDOUT, 2, (), _src('''
        def func_7(s1, s2):
            """Interlace two strings character by character; the longer one's tail is appended."""
            result = []
            len1, len2 = len(s1), len(s2)
            for i in range(max(len1, len2)):
                if i < len1:
                    result.append(s1[i])
                if i < len2:
                    result.append(s2[i])
            return ''.join(result)
     ''')),
    ("func_8", "rotate_str", "rotate the string left by n positions",
     HELDOUT, 1, (Param("n", "int", 1, 3),), _src('''
        def func_8(s, n):
            """Rotate the string s to the left by n positions."""
            if not s:
                return s
            n = n % len(s)
            return s[n:] + s[:n]
     ''')),
    ("func_9", "mirror_str", "append the reversed string",
     TRAIN, 1, (), _src('''
        def func_9(s):
            """Append the reversed string to the original."""
            return s + s[::-1]
     ''')),
    ("func_10", "alternate_case", "alternate lower and upper case by position",
     HELDOUT, 1, (), _src('''
        def func_10(s):
            """Lower-case characters at even indices and upper-case those at odd indices."""
            return ''.join(ch.lower() if i % 2 == 0 else ch.upper() for i, ch in enumerate(s))
     ''')),
    ("func_11", "shift_chars", "shift letters through the alphabet",
     TRAIN, 1, (Param("shift", "int", 1, 5),), _src('''
        def func_11(s, shift):
            """Shift alphabetical characters by a fixed amount (wrapping around), keeping case."""
            def shift_char(ch):
                if 'a' <= ch <= 'z':
                    return chr((ord(ch) - ord('a') + shift) % 26 + ord('a'))
                if 'A' <= ch <= 'Z':
                    return chr((ord(ch) - ord('A') + shift) % 26 + ord('A'))
                return ch
            return ''.join(shift_char(ch) for ch in s)
     ''')),
    ("func_12", "vowel_to_number", "replace vowels by digits (a1 e2 i3 o4 u5)",
     HELDOUT, 1, (), _src('''
        def func_12(s):
            """Replace vowels with numbers: a/A->1, e/E->2, i/I->3, o/O->4, u/U->5."""
            mapping = {'a': '1', 'e': '2', 'i': '3', 'o': '4', 'u': '5',
                       'A': '1', 'E': '2', 'I': '3', 'O': '4', 'U': '5'}
            return ''.join(mapping.get(ch, ch) for ch in s)
     ''')),
    ("func_13", "insert_separator", "insert a separator between characters",
     TRAIN, 1, (Param("sep", "choice", choices=("-", "_", "|")),), _src('''
        def func_13(s, sep):
            """Insert the separator sep between every two characters."""
            return sep.join(s)
     ''')),
    ("func_14", "duplicate_every_char", "duplicate every character",
     HELDOUT, 1, (), _src('''
        def func_14(s):
            """Duplicate every character in the string."""
            return ''.join(ch * 2 for ch in s)
     ''')),
    ("func_15", "fancy_brackets", "wrap every character in fancy brackets",
     TRAIN, 1, (), _src('''
        def func_15(s):
            """Enclose each character in fancy brackets."""
            return ''.join('«' + ch + '»' for ch in s)
     ''')),
    ("func_16", "compress_repeats", "collapse runs of repeated characters",
     HELDOUT, 1, (), _src('''
        def func_16(s):
            """Collapse every run of equal adjacent characters to one character."""
            if not s:
                return s
            result = [s[0]]
            for ch in s[1:]:
                if ch != result[-1]:
                    result.append(ch)
            return ''.join(result)
     ''')),
    ("func_17", "recursive_reverse", "reverse the string recursively",
     TRAIN, 1, (), _src('''
        def func_17(s):
            """Recursively reverse the string."""
            if s == '':
                return s
            return func_17(s[1:]) + s[0]
     ''')),
    ("func_18", "loop_concat", "concatenate the string n times in a loop",
     HELDOUT, 1, (Param("n", "int", 2, 4),), _src('''
        def func_18(s, n):
            """Concatenate s with itself n times, using a loop."""
            result = ''
            for _ in range(n):
                result += s
            return result
     ''')),
    ("func_19", "while_rotate", "rotate left by one, n times, in a while loop",
     TRAIN, 1, (Param("n", "int", 1, 3),), _src('''
        def func_19(s, n):
            """Rotate s left by one character n times, using a while loop."""
            count = 0
            while count < n and s:
                s = s[1:] + s[0]
                count += 1
            return s
     ''')),
    ("func_20", "recursive_interlace", "interlace two strings recursively",
     TRAIN, 2, (), _src('''
        def func_20(s1, s2):
            """Recursively interlace two strings; once one is empty, the rest of the other follows."""
            if not s1 or not s2:
                return s1 + s2
            return s1[0] + s2[0] + func_20(s1[1:], s2[1:])
     ''')),
    ("func_21", "loop_filter_nonalpha", "keep only alphabetic characters, in a loop",
     HELDOUT, 1, (), _src('''
        def func_21(s):
            """Remove non-alphabetic characters from s, using a loop."""
            result = ''
            for ch in s:
                if ch.isalpha():
                    result += ch
            return result
     ''')),
    ("func_22", "verify_even_length", "drop the last character when the length is odd",
     TRAIN, 1, (), _src('''
        def func_22(s):
            """Return s if its length is even; otherwise drop its last character."""
            if len(s) % 2 == 0:
                return s
            return s[:-1]
     ''')),
    # The search stops at exactly ``d == 0``, as the native source does: a negative depth (never
    # sampled, but parseable) therefore still reaches ``t + '1'``, so the result matches the benchmark.
    ("func_23", "backchain_add_digit", "depth-limited search for a variant containing a digit",
     TRAIN, 1, (Param("depth", "int", 1, 3),), _src('''
        def func_23(s, depth):
            """Backward-chain (depth-limited DFS) to a variant of s that contains a digit."""
            def has_digit(t):
                return any(ch.isdigit() for ch in t)

            def search(t, d):
                if has_digit(t):
                    return t
                if d == 0:
                    return None
                for candidate in (t + '1', '2' + t, t.replace('a', '3'), t[::-1]):
                    found = search(candidate, d - 1)
                    if found is not None:
                        return found
                return None

            result = search(s, depth)
            return result if result is not None else s
     ''')),
    ("func_24", "backchain_palindrome", "backtracking palindrome: mirror until a palindrome",
     HELDOUT, 1, (Param("depth", "int", 1, 3),), _src('''
        def func_24(s, depth):
            """Backward-chain to a palindrome: if s is not one, recurse on s + reversed s."""
            if s == s[::-1]:
                return s
            if depth <= 0:
                return s
            return func_24(s + s[::-1], depth - 1)
     ''')),
]




def _times(n: int, params: tuple[ParamValue, ...]) -> int:  # s * n, and n concatenations in a loop
    return n * max(int(params[0]), 0)


def _joined(n: int, params: tuple[ParamValue, ...]) -> int:  # sep.join(s)
    sep = len(str(params[0]))
    return max(n * (1 + sep) - sep, 0)


# Growth bounds (Operator.out_len) of the operators that grow their input by a factor; every other
# operator grows its input at most twofold (tests/test_ops.py checks both against the sources).
_OUT_LEN: dict[str, OutLen] = {
    "func_1": _times,
    "func_13": _joined,
    "func_15": lambda n, params: 3 * n,  # '«' + ch + '»' per character
    "func_18": _times,
}


# ---------------------------------------------------------------- cost bounds (Operator.cost)


def int_steps(value: object) -> int:
    """Work units of one arithmetic operation or comparison on ``value``: 1 for a machine-sized
    integer, one more per 16 of CPython's 30-bit digits (an addition, comparison or small modulus
    of a huge integer is linear in its digits)."""
    return abs(value).bit_length() // 480 + 1 if type(value) is int else 1


def _count(p: Any) -> int:
    """A repetition count as the cost formulas use it: negative counts repeat nothing, and counts
    beyond 2**40 (already far over any budget) are taken as 2**40, so that no formula squares a huge
    integer of the model's."""
    return int(min(max(p, 0), 1 << 40))


def _copy(out: int) -> tuple[int, int, int]:
    return out, out // 16 + 1, 0


def _func_20(n: int, m: int) -> tuple[int, int, int]:
    short = min(n, m)
    return n + m, 4 * short + short * (n + m) // 16 + 1, short + 1


def _per_char(n: int, p: object) -> tuple[int, int, int]:
    return n, 3 * n + 1, 0


def _quarter(n: int, p: object) -> tuple[int, int, int]:
    return n, n // 4 + 1, 0


def _shift(n: int, p: Any) -> tuple[int, int, int]:
    # two integer operations per letter, each on the shift: (ord(ch) - 97 + shift) % 26
    return n, 3 * n + 1 + 2 * n * int_steps(p), 0


def _rotate(n: int, p: Any) -> tuple[int, int, int]:
    return n, n // 4 + 1 + int_steps(p), 0  # one n % len(s)


def _cost_plus(cost: Cost, per_int: int) -> Cost:
    """``cost`` with ``per_int`` integer operations on the parameter added to its work."""
    def with_ints(n: int, p: Any) -> tuple[int, int, int]:
        out, work, depth = cost(n, p)
        return out, work + per_int * int_steps(p), depth
    return with_ints


_COST: dict[str, Cost] = {
    "func_1": _cost_plus(lambda n, p: _copy(n * _count(p)), 1),  # s * n: one allocation
    # n concatenations, each of which may copy the result so far; range(n) compares n each step
    "func_18": _cost_plus(lambda n, p: (n * _count(p), _count(p) + _count(p) ** 2 * n // 32 + 1, 0), 2),
    "func_13": lambda n, p: _copy(max(n * (1 + len(p)) - len(p), 0)),
    "func_5": lambda n, p: _copy(n + len(p)),
    "func_6": lambda n, p: _copy(n + len(p)),
    "func_7": lambda n, p: (n + len(p), 2 * (n + len(p)) + 1, 0),
    "func_20": lambda n, p: _func_20(n, len(p)),
    "func_17": lambda n, p: (n, 2 * n + n * n // 32 + 1, n + 1),  # one frame and one slice per character
    # n rotations by one, each a slice of the whole, and a comparison with n per rotation
    "func_19": lambda n, p: (n, 2 * (_count(p) if n else 0) + (_count(p) if n else 0) * n // 16 + 1
                             + ((_count(p) if n else 0) + 1) * int_steps(p), 0),
    # one mirror at most: s + s[::-1] is a palindrome; `depth <= 0` and `depth - 1` once each
    "func_24": _cost_plus(lambda n, p: (2 * n, n // 2 + 1, 2), 4),
    # the first candidate, t + '1', has a digit: two levels; `d == 0` and `d - 1` a few times
    "func_23": _cost_plus(lambda n, p: (n + 1, 3 * n + 8, 3), 8),
    "func_9": lambda n, p: (2 * n, 2 * n + 1, 0),
    "func_14": lambda n, p: (2 * n, 2 * n + 1, 0),
    "func_15": lambda n, p: (3 * n, 2 * n + 1, 0),
    "func_10": lambda n, p: (3 * n, 2 * n + 1, 0),  # case mappings grow a character at most 3-fold
    "func_11": _shift,
    "func_8": _rotate,
    **dict.fromkeys(("func_0", "func_2", "func_12", "func_16", "func_21"), _per_char),
    **dict.fromkeys(("func_3", "func_4", "func_22"), _quarter),
}


def _compile_library() -> tuple[Operator, ...]:
    namespace: dict[str, object] = {"__name__": "opgen.ops.library"}
    for op_id, *_rest, source in _TABLE:
        exec(compile(source, f"<opgen {op_id}>", "exec"), namespace)
    ops = []
    for op_id, name, gloss, split, n_inputs, params, source in _TABLE:
        fn = namespace[op_id]
        assert callable(fn)
        ops.append(Operator(op_id, name, gloss, source, n_inputs, params, split, fn, _OUT_LEN.get(op_id),
                            _COST.get(op_id)))
    ids = {op.id for op in ops}
    for what, table in (("growth bounds", _OUT_LEN), ("cost bounds", _COST)):
        if set(table) - ids:
            raise RuntimeError(f"{what} for operators not in the library: {sorted(set(table) - ids)}")
    return tuple(ops)


def mask_dtype(n_operators: int) -> str:
    """The numpy dtype of an operator bitmask (bit ``op.index`` set per operator a row uses) for a
    library of ``n_operators``: the narrowest unsigned integer that holds every bit. More operators
    than the widest mask holds is an error here, at import, never a bit silently lost later."""
    for bits in (32, 64):
        if n_operators <= bits:
            return f"uint{bits}"
    raise RuntimeError(f"{n_operators} operators do not fit in a 64-bit operator mask: widen opgen.ops.mask_dtype")


OPERATORS: tuple[Operator, ...] = _compile_library()
if [op.index for op in OPERATORS] != list(range(len(OPERATORS))):
    raise RuntimeError("operator ids must be func_0 .. func_N-1 in order (their index is their mask bit)")
# The dtype of every operator bitmask (rows, build keys, manifest counts, the leakage check).
MASK_DTYPE: str = mask_dtype(len(OPERATORS))
BY_ID: dict[str, Operator] = {op.id: op for op in OPERATORS}
TRAIN_IDS: tuple[str, ...] = tuple(op.id for op in OPERATORS if op.split == TRAIN)
HELDOUT_IDS: tuple[str, ...] = tuple(op.id for op in OPERATORS if op.split == HELDOUT)
ALL_IDS: tuple[str, ...] = tuple(op.id for op in OPERATORS)
_BY_KIND: dict[str, tuple[str, ...]] = {k: tuple(op.id for op in OPERATORS if op.kind == k) for k in KINDS}
# The study's library as a value (opgen.library loads others): the same operator objects, in order.
STUDY: OperatorLibrary = OperatorLibrary("study", OPERATORS)
DEFAULT_LIBRARY: OperatorLibrary = STUDY

# Builtin zero-argument string methods the expression grammar allows, written `(expr).name()`.
# The native generator samples the first four; probes use the rest.
NATIVE_METHODS: tuple[str, ...] = ("upper", "lower", "capitalize", "swapcase")
METHODS: tuple[str, ...] = NATIVE_METHODS + ("strip", "lstrip", "rstrip", "title", "casefold")


class UnknownOperator(KeyError, OpgenError):
    exit_code = USAGE

    def __init__(self, op_id: str, library: OperatorLibrary | None = None):
        super().__init__(op_id)
        self.op_id = op_id
        self.library = library

    def __str__(self) -> str:
        if self.library is None or self.library.operators is OPERATORS:
            return f"unknown operator {self.op_id!r} (known: func_0 .. func_{len(OPERATORS) - 1})"
        known = self.library.ids
        shown = ", ".join(known[:8]) + (f", ... ({len(known)} in all)" if len(known) > 8 else "")
        return f"unknown operator {self.op_id!r} in library {self.library.name!r} (known: {shown})"


def get(op_id: str) -> Operator:
    try:
        return BY_ID[op_id]
    except KeyError:
        raise UnknownOperator(op_id) from None


def resolve_set(spec: str | list[str]) -> tuple[str, ...]:
    """An operator set by name ("train", "heldout", "all") or an explicit list, in library order."""
    if isinstance(spec, str):
        named = {"train": TRAIN_IDS, "heldout": HELDOUT_IDS, "all": ALL_IDS}
        if spec not in named:
            raise ValueError(f"unknown operator set {spec!r} (use train, heldout, all or a list of ids)")
        return named[spec]
    for op_id in spec:
        get(op_id)
    wanted = set(spec)
    return tuple(op_id for op_id in ALL_IDS if op_id in wanted)


def call(op_id: str, *args: object) -> str:
    return get(op_id).fn(*args)


def of_kind(kind: str) -> tuple[str, ...]:
    """The ids of the operators of a signature kind (:attr:`Operator.kind`), in library order."""
    try:
        return _BY_KIND[kind]
    except KeyError:
        raise ValueError(f"unknown signature kind {kind!r} (known: {', '.join(KINDS)})") from None
