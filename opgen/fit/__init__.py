"""`opgen fit`: scaling laws over checkpoint sweeps — per-run curves of accuracy against RL compute,
their dependence on pretraining across runs, with bootstrap and profile uncertainty.

Modules: ``inputs`` (readers), ``compute`` (C_RL), ``models`` (curve forms and the grid-then-refine
weighted least squares), ``uncertainty`` (bootstrap replicates, profile intervals), ``across``
(correlations over runs), ``select`` (AIC/BIC, backtest, fit windows), ``report`` (fit.json, CSV,
plots), ``pipeline`` (the whole job). scipy is imported only inside this package (extra ``fit``).
"""

from __future__ import annotations

from opgen.errors import USAGE, OpgenError


class FitInputError(ValueError, OpgenError):
    """Input a fit cannot use: the message names the file, field or row."""

    exit_code = USAGE

