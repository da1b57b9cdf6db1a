"""Every operator's arguments over a fixed corpus, shared by tests/test_ops.py (shown source against the
library and the reference) and tests/test_operator_facts.py (growth bounds against the executed sources)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from opgen import ops


def cases(op: ops.Operator, strings: Sequence[str], pairs: Sequence[str] | None = None,
          off_choice: tuple[str, ...] = ()) -> list[tuple]:
    """Each of ``strings`` (for two inputs: each pair of ``pairs``, by default of ``strings``) with every
    parameter value: an int's range and 0 and -1, each choice and ``off_choice``, three letter strings."""
    domains = []
    for p in op.params:
        if p.kind == "int":
            domains.append(list(range(p.lo, p.hi + 1)) + [0, -1])
        elif p.kind == "choice":
            domains.append(list(p.choices) + list(off_choice))
        else:
            domains.append(["ab", "xyz", "qrst"])
    inputs = [(s,) for s in strings] if op.n_inputs == 1 else list(itertools.product(pairs or strings, repeat=2))
    return [i + tuple(p) for i in inputs for p in itertools.product(*domains)]
