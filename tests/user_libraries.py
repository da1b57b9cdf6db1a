"""The toy operator libraries the user-library tests share (issue 25): one home for each, imported
as a plain module (``import user_libraries``), never ``tests.x`` (CI runs a bare ``pytest``)."""

from __future__ import annotations

import textwrap
from pathlib import Path


def _library(name: str, *operators: str) -> str:
    """The YAML of the library ``name`` whose operators are the list entries ``operators`` (each
    block of entries dedented, so it may stand at any indent)."""
    return f"name: {name}\noperators:\n" + textwrap.indent("".join(map(textwrap.dedent, operators)), "  ")


# Operators that several libraries below hold.
REV = """\
- id: rev
  gloss: reverse the string
  split: train
  source: |
    def rev(s):
        return s[::-1]
"""

UP = """\
- id: up
  gloss: upper-case the string
  split: train
  source: |
    def up(s):
        return s.upper()
"""

# Six operators a user might write, touching no package file: four train (one with an int param,
# one of two string inputs), two held-out (one with a param).
SIX = _library("six", REV, """\
      - id: dup
        gloss: repeat the string n times
        split: train
        params: [{name: n, kind: int, lo: 1, hi: 3}]
        source: |
          def dup(s, n):
              return s * n
    """, UP, """\
      - id: mix
        gloss: interleave two strings
        split: train
        n_inputs: 2
        source: |
          def mix(s1, s2):
              return "".join(a + b for a, b in zip(s1, s2)) + s1[len(s2):] + s2[len(s1):]
      - id: rot
        gloss: rotate left by n
        split: heldout
        params: [{name: n, kind: int, lo: 0, hi: 4}]
        source: |
          def rot(s, n):
              if not s:
                  return s
              n = n % len(s)
              return s[n:] + s[:n]
      - id: drop_vowels
        gloss: remove the vowels
        split: heldout
        source: |
          def drop_vowels(s):
              return "".join(c for c in s if c not in "aeiou")
    """)


def write_six(folder: Path, name: str = "six.yaml") -> Path:
    """:data:`SIX` written to ``folder/name``; returns the path."""
    path = Path(folder) / name
    path.write_text(SIX)
    return path



# Every signature kind (s, s,int, s,str by choice and by letters, s1,s2), one recursive operator and
# a renamed one: what `opgen ops check` (tests/test_opscheck.py) is run on.
KINDS = textwrap.dedent('''\
    name: six
    operators:
      - id: rev
        gloss: reverse the string
        split: train
        source: |
          def rev(s):
              """Reverse s recursively."""
              if not s:
                  return s
              return rev(s[1:]) + s[0]
      - id: upper_first
        name: capitalise
        gloss: upper-case the first character
        split: heldout
        source: |
          def upper_first(s):
              return s[:1].upper() + s[1:]
      - id: take
        gloss: the first n characters
        split: train
        params: [{name: n, kind: int, lo: 0, hi: 5}]
        source: |
          def take(s, n):
              return s[:n]
      - id: wrap
        gloss: wrap in a bracket pair
        split: heldout
        params: [{name: b, kind: choice, choices: ["()", "[]"]}]
        source: |
          def wrap(s, b):
              return b[0] + s + b[1]
      - id: tag
        gloss: append a tag
        split: train
        params: [{name: t, kind: letters, lo: 1, hi: 3}]
        source: |
          def tag(s, t):
              return s + '#' + t
      - id: zip2
        gloss: interlace two strings
        split: heldout
        n_inputs: 2
        source: |
          def zip2(s1, s2):
              out = []
              for i in range(max(len(s1), len(s2))):
                  out.append(s1[i:i + 1] + s2[i:i + 1])
              return ''.join(out)
    ''')


# Six operators graded in tests/test_user_library_grading.py: two held out (shift, swapc), two
# with an int parameter, and a dup/evens pair that a chimera recall confuses.
TOY = _library("toy", REV, """\
      - id: dup
        gloss: repeat the string twice
        split: train
        source: |
          def dup(s):
              return s + s
      - id: shift
        gloss: shift each lowercase letter n places forward
        split: heldout
        params: [{name: n, kind: int, lo: 1, hi: 3}]
        source: |
          def shift(s, n):
              return ''.join(chr((ord(c) - 97 + n) % 26 + 97) if 'a' <= c <= 'z' else c for c in s)
      - id: evens
        gloss: keep the characters at even positions
        split: train
        source: |
          def evens(s):
              return s[::2]
      - id: swapc
        gloss: swap the case of every letter
        split: heldout
        source: |
          def swapc(s):
              return s.swapcase()
      - id: tail
        gloss: drop the first n characters
        split: train
        params: [{name: n, kind: int, lo: 1, hi: 2}]
        source: |
          def tail(s, n):
              return s[n:]
    """)


# A ``module:obj`` library over one of the YAML files above (written beside it): the same operators
# with a cost bound each (a module-level function), which lets the static path grade their programs
# (a YAML library has none: the static path declines, the sandbox grades).
_COSTED = textwrap.dedent('''\
    import dataclasses
    from pathlib import Path

    from opgen import library as L
    from opgen.ops import OperatorLibrary


    def _cost(n, p):
        return {cost}


    _base = L.load(str(Path(__file__).with_name("{yaml}")))
    LIB = OperatorLibrary("{name}", tuple(dataclasses.replace(op, cost=_cost) for op in _base.operators))
    ''')


def costed_module(yaml: str, name: str, cost: str) -> str:
    """The text of a module whose ``LIB`` is the library of ``yaml`` (a file beside it) named
    ``name``, every operator with the cost bound ``cost`` (an expression of n and p)."""
    return _COSTED.format(yaml=yaml, name=name, cost=cost)


def write_six_module(folder: Path, module: str = "six_costed") -> str:
    """six.yaml and a costed module over it in ``folder``; returns its spec ``module:LIB``
    (``folder`` must be on sys.path for it to import)."""
    write_six(folder)
    (Path(folder) / f"{module}.py").write_text(costed_module("six.yaml", "six", "(3 * n + 8, 4 * n + 16, 0)"))
    return f"{module}:LIB"


# Operators that break their contract once their input is longer than five characters (so `opgen ops
# check` and a build reach it at once): `hostile(kind)` is a library of three lawful operators and
# `bad`, whose body is HOSTILE[kind]. tests/test_hostile_operators.py runs them in builds and checks.
HOSTILE = {
    "system_exit": "raise SystemExit(3)",
    "keyboard_interrupt": "raise KeyboardInterrupt",
    "os_exit": "import os\nos._exit(3)",
    "not_a_str": "return len(s)",
    "loops": "while True:\n    pass",
    # swallows whatever stops it, then loops on: only ending its process stops it
    "swallows": "while True:\n    try:\n        while True:\n            s = s + ''\n    except BaseException:\n"
                "        pass",
}

_HOSTILE = _library("hostile", REV, UP, """\
  - id: bad
    gloss: misbehaves on long strings
    split: train
    source: |
      def bad(s):
          if len(s) > 5:
              {body}
          return s
  - id: rot
    gloss: rotate left by one
    split: heldout
    source: |
      def rot(s):
          return s[1:] + s[:1]
  """)


def hostile(kind: str) -> str:
    """A library whose operator ``bad`` does ``HOSTILE[kind]`` on inputs over five characters."""
    return _HOSTILE.format(body=HOSTILE[kind].replace("\n", "\n" + " " * 14))  # the body's column in _HOSTILE


def write_hostile(folder: Path, kind: str) -> Path:
    path = Path(folder) / f"hostile_{kind}.yaml"
    path.write_text(hostile(kind))
    return path
