"""RL compute per checkpoint, as the reference analysis defines it (paper App. D).

``rollout``: C_RL = 10 · N · T_rollout · step with T_rollout = prompts per step × group size ×
(prompt + response tokens) — a per-step constant, so C is proportional to the step. ``step``: C = step
(the reference's step-only sensitivity variant; a constant multiplier moves R_ref, not slopes).
``given``: a compute column of a tidy table, taken as is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from opgen.fit import FitInputError

ROLLOUT_FIELDS = ("params", "prompts_per_step", "group", "prompt_tokens", "response_tokens")


@dataclass(frozen=True)
class ComputeDef:
    name: str
    formula: str
    default_c_ref: float
    needs: tuple[str, ...]

    def per_step(self, run: str, info: Mapping) -> float | None:
        """Compute per RL step for one run (None for ``given``: the table holds C itself)."""
        missing = [f for f in self.needs if info.get(f) is None]
        if missing:
            raise FitInputError(f"run {run!r}: compute {self.name!r} needs {', '.join(missing)} "
                                f"(runs table or the matching --option; or use --compute step)")
        if self.name == "rollout":
            # the reference's order of operations, so its x values are reproduced bit for bit
            t_rollout = info["prompts_per_step"] * info["group"] * (info["prompt_tokens"] + info["response_tokens"])
            c = 10 * info["params"] * t_rollout
        elif self.name == "step":
            c = 1.0
        else:
            return None
        if not (isinstance(c, (int, float)) and math.isfinite(c) and c > 0):
            raise FitInputError(f"run {run!r}: compute per step is {c!r}; every factor must be positive")
        return float(c)


COMPUTE: dict[str, ComputeDef] = {
    "rollout": ComputeDef("rollout", "C = step * 10 * params * prompts_per_step * group * "
                          "(prompt_tokens + response_tokens)", 1e20, ROLLOUT_FIELDS),
    "step": ComputeDef("step", "C = step", 1.0, ()),
    "given": ComputeDef("given", "C as given in the input table", 1e20, ()),
}


def get(name: str) -> ComputeDef:
    try:
        return COMPUTE[name]
    except KeyError:
        raise FitInputError(f"unknown compute definition {name!r} (known: {', '.join(COMPUTE)})") from None
