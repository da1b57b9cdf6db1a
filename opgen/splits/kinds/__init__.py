"""The split kinds a recipe names (``split: {kind: ...}``, docs/splits.md): one object per kind.

Each kind is one file here defining ``KIND`` (an :class:`~opgen.splits.kinds.base.SplitKind`: its
fields, how it resolves them, its draw rule and its part of the certificate) and one entry in
:data:`KINDS`; tests/test_split_kinds.py ties the two. A kind turns the recipe's ``split`` mapping
into a :class:`Rule`: what a training row and an eval row may hold. Filter kinds
(``systematicity``, ``heldout-ops``, ``productivity``) hold each split's generator to the rule (a
rejected candidate is counted as ``split`` and the row's next candidate is drawn, as for any
local constraint); ``mcd`` selects train and eval rows from one pool (opgen.splits.mcd). Every
rule is deterministic from the recipe and seed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opgen import schemacheck
from opgen.ops import STUDY, OperatorLibrary
from opgen.splits import compounds
from opgen.splits.kinds import heldout_ops, mcd, productivity, systematicity
from opgen.splits.kinds.base import POOL_CELLS, Read, Rule, SplitError, SplitKind

__all__ = ["KINDS", "POOL_CELLS", "Read", "Rule", "SplitError", "SplitKind", "get", "resolve", "rule_from_config"]

# The registry: kind name → its object (a new kind: one file here and one entry below).
KINDS: dict[str, SplitKind] = {k.name: k for k in (systematicity.KIND, heldout_ops.KIND, productivity.KIND,
                                                     mcd.KIND)}


def _known() -> str:
    return ", ".join(KINDS)


def get(name: Any, where: str = "split.kind") -> SplitKind:
    """The kind called ``name``; an unknown one raises, naming the known kinds."""
    if not isinstance(name, str) or name not in KINDS:
        raise SplitError(f"{where}: {name!r} is not a split kind (known: {_known()})")
    return KINDS[name]


def resolve(raw: Any, shown: str, seed: int, lib: OperatorLibrary = STUDY) -> Rule | None:
    """The recipe's ``split`` mapping → a :class:`Rule` over the operators of ``lib`` (the recipe's
    library; None when the recipe has none)."""
    if raw is None:
        return None
    where = f"{shown}: split"
    if isinstance(raw, str):  # `split: heldout-ops`: a kind whose fields all have defaults
        raw = {"kind": raw}
    if not isinstance(raw, dict):
        raise SplitError(f"{where}: expected a mapping with a 'kind' (one of {_known()})")
    impl = get(raw.get("kind"), f"{where}.kind")
    schema = impl.schema()
    if not schemacheck.surely_valid(schema, raw):
        errors = sorted(schemacheck.validator(schema).iter_errors(raw), key=lambda e: list(map(str, e.path)))
        if errors:
            err = errors[0]
            path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.path)
            extra = ""
            if err.validator == "additionalProperties":
                extra = f" (expected one of: {', '.join(sorted(schema['properties']))})"
            raise SplitError(f"{where}{path}: {err.message}{extra}")
    try:
        spec = compounds.CompoundSpec.from_dict(raw.get("compounds"), "compounds")
    except compounds.CompoundError as exc:
        raise SplitError(f"{where}.{exc}") from None
    config: dict[str, Any] = {"kind": impl.name, "compounds": spec.as_dict()}
    if raw.get("description"):
        config["description"] = raw["description"]
    return impl.resolve(raw, config, spec, where, seed, lib)


def rule_from_config(config: Mapping[str, Any], lib: OperatorLibrary = STUDY) -> Rule:
    """A rule from its resolved config (as a manifest or a pool option holds it), over ``lib``."""
    rule = resolve(dict(config), "split", 0, lib)
    assert rule is not None
    return rule
