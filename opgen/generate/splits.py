"""Generators of compositional splits, defined in opgen.splits (docs/splits.md): registered here."""

from opgen.splits.generator import GENERATORS

__all__ = ["GENERATORS"]
