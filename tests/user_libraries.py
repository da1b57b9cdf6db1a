"""The toy operator libraries the user-library tests share (issue 25): one home for each, imported
as a plain module (``import user_libraries``), never ``tests.x`` (CI runs a bare ``pytest``)."""

from __future__ import annotations

import textwrap
from pathlib import Path

# Six operators a user might write, touching no package file: four train (one with an int param,
# one of two string inputs), two held-out (one with a param).
SIX = textwrap.dedent("""\
    name: six
    operators:
      - id: rev
        gloss: reverse the string
        split: train
        source: |
          def rev(s):
              return s[::-1]
      - id: dup
        gloss: repeat the string n times
        split: train
        params: [{name: n, kind: int, lo: 1, hi: 3}]
        source: |
          def dup(s, n):
              return s * n
      - id: up
        gloss: upper-case the string
        split: train
        source: |
          def up(s):
              return s.upper()
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


# SIX with a cost bound on every operator: a ``module:obj`` library (``six_costed:LIB``, the
# module written beside six.yaml by :func:`write_six_module`), whose bounds are module-level
# functions and whose operators' functions are compiled from six.yaml's sources.
SIX_MODULE = textwrap.dedent('''\
    import dataclasses
    from pathlib import Path

    from opgen import library as L
    from opgen.ops import OperatorLibrary


    def cost(n, p):
        return (3 * n + 8, 4 * n + 16, 0)


    _base = L.load(str(Path(__file__).with_name("six.yaml")))
    LIB = OperatorLibrary("six", tuple(dataclasses.replace(op, cost=cost) for op in _base.operators))
    ''')


def write_six_module(folder: Path, module: str = "six_costed") -> str:
    """six.yaml and the module of :data:`SIX_MODULE` in ``folder``; returns its spec ``module:LIB``
    (``folder`` must be on sys.path for it to import)."""
    write_six(folder)
    (Path(folder) / f"{module}.py").write_text(SIX_MODULE)
    return f"{module}:LIB"
