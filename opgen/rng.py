"""Hash-derived, counter-based randomness that opgen owns.

A row's randomness is a pure function of everything that names it — (recipe digest, split, row
index, attempt) — so any row can be rebuilt alone, by any worker, on any machine, under any
``PYTHONHASHSEED`` and Python/numpy version. ``random.Random`` and numpy Generator *methods* are not
used: their algorithms are not promised stable across versions. Every draw here is defined in terms
of blake2b and integer arithmetic only.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

T = TypeVar("T")

_WORDS = struct.Struct("<8Q")
LOWERCASE = "abcdefghijklmnopqrstuvwxyz"


def _encode(part: object) -> bytes:
    """An unambiguous byte encoding of a key part (type-tagged, length-prefixed)."""
    if isinstance(part, bool):
        raw, tag = (b"1" if part else b"0"), b"b"
    elif isinstance(part, int):
        raw, tag = str(part).encode(), b"i"
    elif isinstance(part, str):
        raw, tag = part.encode("utf-8"), b"s"
    elif isinstance(part, bytes):
        raw, tag = part, b"y"
    else:
        raise TypeError(f"rng key parts must be str, int, bool or bytes, not {type(part).__name__}")
    return tag + len(raw).to_bytes(8, "little") + raw


def key_of(*parts: object) -> bytes:
    h = hashlib.blake2b(digest_size=32, person=b"opgen-rng")
    for part in parts:
        h.update(_encode(part))
    return h.digest()


class Rng:
    """A deterministic stream of 64-bit words: blake2b(key, counter), eight words per digest."""

    __slots__ = ("_key", "_counter", "_buf", "_pos")

    def __init__(self, *parts: object):
        self._key = key_of(*parts)
        self._counter = 0
        self._buf: tuple[int, ...] = ()
        self._pos = 8

    def derive(self, *parts: object) -> Rng:
        """An independent child stream named by ``parts`` (the parent's stream is not consumed)."""
        return Rng(self._key, *parts)

    def word(self) -> int:
        if self._pos == 8:
            digest = hashlib.blake2b(self._counter.to_bytes(8, "little"), key=self._key, digest_size=64).digest()
            self._buf = _WORDS.unpack(digest)
            self._counter += 1
            self._pos = 0
        w = self._buf[self._pos]
        self._pos += 1
        return w

    def below(self, n: int) -> int:
        """Uniform integer in [0, n), unbiased (rejection on the top partial block)."""
        if n <= 0:
            raise ValueError(f"below() needs n >= 1, got {n}")
        if n > 1 << 64:
            return self._below_wide(n)
        limit = (1 << 64) - ((1 << 64) % n)
        while True:
            w = self.word()
            if w < limit:
                return w % n

    def _below_wide(self, n: int) -> int:
        # One 64-bit word cannot cover n > 2**64 (the single-word limit would be 0 and never met):
        # draw as many words as n needs, little-endian, and reject on the top partial block.
        words = (n.bit_length() + 63) // 64
        span = 1 << (64 * words)
        limit = span - (span % n)
        while True:
            v = 0
            for i in range(words):
                v |= self.word() << (64 * i)
            if v < limit:
                return v % n

    def integer(self, lo: int, hi: int) -> int:
        """Uniform integer in [lo, hi], both ends included."""
        if hi < lo:
            raise ValueError(f"empty range {lo}..{hi}")
        return lo + self.below(hi - lo + 1)

    def uniform(self) -> float:
        """A float in [0, 1) with 53 random bits."""
        return (self.word() >> 11) / 9007199254740992.0

    def chance(self, p: float) -> bool:
        return self.uniform() < p

    def choice(self, seq: Sequence[T]) -> T:
        if not seq:
            raise ValueError("choice() from an empty sequence")
        return seq[self.below(len(seq))]

    def weighted(self, seq: Sequence[T], weights: Sequence[float]) -> T:
        if len(weights) != len(seq):
            raise ValueError(f"weighted() needs one weight per item, got {len(weights)} for {len(seq)}")
        if not all(w >= 0 for w in weights):  # also catches NaN
            raise ValueError("weighted() needs non-negative weights")
        total = float(sum(weights))
        if not total < float("inf"):
            raise ValueError("weighted() needs finite weights")
        if total <= 0:
            raise ValueError("weighted() needs a positive total weight")
        r = self.uniform() * total
        acc = 0.0
        for item, w in zip(seq, weights):
            acc += w
            if r < acc:
                return item
        # Float rounding can leave r just above the running sum: fall back to the last item that
        # can be drawn at all, never to a zero-weight one.
        return next(item for item, w in zip(reversed(seq), reversed(weights)) if w > 0)

    def shuffled(self, seq: Sequence[T]) -> list[T]:
        """A Fisher-Yates permutation of ``seq``."""
        out = list(seq)
        for i in range(len(out) - 1, 0, -1):
            j = self.below(i + 1)
            out[i], out[j] = out[j], out[i]
        return out

    def sample(self, seq: Sequence[T], k: int) -> list[T]:
        """``k`` distinct elements of ``seq`` in random order."""
        if k < 0 or k > len(seq):
            raise ValueError(f"cannot sample {k} of {len(seq)}")
        pool = list(seq)
        out = []
        for _ in range(k):
            out.append(pool.pop(self.below(len(pool))))
        return out

    def text(self, lo: int, hi: int, alphabet: str = LOWERCASE) -> str:
        """A string of ``lo``..``hi`` characters drawn from ``alphabet``."""
        n = self.integer(lo, hi)
        return "".join(alphabet[self.below(len(alphabet))] for _ in range(n))


# ------------------------------------------------------------------ counter streams
# The candidate streams of generators that draw many rows in bulk (``trees``): a 64-bit key per
# split (the first 8 bytes of ``key_of(...)``), then SplitMix64 arithmetic only, which numpy can
# compute for a whole chunk of rows at once (``counter_blocks``) with the same results as
# ``CounterRng`` word by word. Candidate ``(i, j)``'s stream has seed
# ``mix64(mix64(key + (i + 1) * GAMMA) + (j + 1) * GAMMA_J)``; its word ``c`` is
# ``mix64(seed + (c + 1) * GAMMA)`` (all modulo 2**64).

_MASK = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15
GAMMA_J = 0xD1B54A32D192ED03


def mix64(z: int) -> int:
    """The SplitMix64 finaliser (a bijection on 64-bit integers)."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def counter_key(*parts: object) -> int:
    """The 64-bit key of the counter streams named by ``parts``."""
    return int.from_bytes(key_of(*parts)[:8], "little")


def counter_seed(key: int, i: int, j: int) -> int:
    return mix64((mix64((key + (i + 1) * GAMMA) & _MASK) + (j + 1) * GAMMA_J) & _MASK)


class CounterRng(Rng):
    """``Rng``'s draws over the counter stream of candidate ``(i, j)`` under ``key``."""

    __slots__ = ()
    _key: int  # type: ignore[assignment]  # the parent's slot, holding this stream's 64-bit seed

    def __init__(self, key: int, i: int, j: int):
        self._key = counter_seed(key, i, j)
        self._counter = 0
        self._buf = ()
        self._pos = 0

    def word(self) -> int:
        # Word c is computed when it is read (no block of eight): most candidates read few words.
        p = self._pos
        self._pos = p + 1
        if p < len(self._buf):
            return self._buf[p]
        return mix64((self._key + (p + 1) * GAMMA) & _MASK)

    def derive(self, *parts: object) -> Rng:
        return Rng(self._key.to_bytes(8, "little"), *parts)

    @classmethod
    def resume(cls, seed: int, words: tuple[int, ...], pos: int) -> CounterRng:
        """The stream whose seed is ``seed`` and first eight words ``words``, ``pos`` of them read."""
        r = object.__new__(cls)
        r._key, r._buf, r._counter, r._pos = seed, words, 0, pos
        return r


def counter_blocks(key: int, i: npt.ArrayLike,
                   j: npt.ArrayLike) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]]:
    """``(seeds, words)`` for candidates ``(i[n], j[n])`` (numpy integer arrays): the seed of each
    stream and its first eight words, shape ``(n, 8)``, equal to ``CounterRng``'s."""
    import numpy as np

    u = np.uint64
    with np.errstate(over="ignore"):
        i = np.asarray(i).astype(u)
        j = np.asarray(j).astype(u)
        seeds = _mix64_np(_mix64_np(u(key) + (i + u(1)) * u(GAMMA)) + (j + u(1)) * u(GAMMA_J))
        steps = np.arange(1, 9, dtype=u) * u(GAMMA)
        return seeds, _mix64_np(seeds[:, None] + steps[None, :])


def _mix64_np(z: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    import numpy as np

    u = np.uint64
    z = (z ^ (z >> u(30))) * u(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> u(27))) * u(0x94D049BB133111EB)
    out: npt.NDArray[np.uint64] = z ^ (z >> u(31))
    return out


# ------------------------------------------------------------------ the input side
# Disjoint by construction (issue 23): every input string has a side, a keyed hash of its text, and
# a split draws only inputs of its role's side (training: 0, eval and probes: 1). So no eval task
# (program, input) can equal a training task of any recipe, whatever the programs: programs keep
# their natural distribution and no recipe's rows depend on another recipe. docs/recipes.md,
# "Leakage", gives what it costs (one redrawn input per row on average, a length shift under 1%).

SIDES = {"train": 0, "eval": 1}
_SIDE_KEY = key_of("opgen-input-side", 1)


def input_side(x: str) -> int:
    """The side (0 or 1) of input ``x``: one bit of a keyed blake2b of its UTF-8 text."""
    return hashlib.blake2b(x.encode("utf-8"), digest_size=8, key=_SIDE_KEY).digest()[0] & 1


def side_of(role: str) -> int:
    """The input side a split of ``role`` draws from (train 0, eval 1)."""
    try:
        return SIDES[role]
    except KeyError:
        raise ValueError(f"unknown role {role!r} (known: {', '.join(SIDES)})") from None
