"""Inputs for the `opgen fit` tests, built on the spot: the reference analysis's layout, tidy tables, and
synthetic curves with known parameters and binomial noise."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

# pretraining tokens (billions) -> validation loss of the 20m family in the reference-layout fixture
TOKENS_B = {0.5: 4.10, 1.0: 3.85, 2.0: 3.62, 4.0: 3.47, 8.0: 3.35, 16.0: 3.29, 32.0: 3.25}
STEPS = (25, 50, 100, 200, 400)


def _tag(t: float) -> str:
    return f"{t:g}".replace(".", "p")


def write_reference(root: Path, seed: int = 0) -> Path:
    """results/t2 (split b3b4), results/t2b (split b1b2), results/loss, as the reference reads them; one
    run has two steps only (the reference skips it) and one loss file has no run."""
    rng = np.random.default_rng(seed)
    for sub in ("t2", "t2b", "loss"):
        (root / "results" / sub).mkdir(parents=True, exist_ok=True)
    for t, loss in TOKENS_B.items():
        for sub, prefix, base in (("t2", "rl", 0.02), ("t2b", "t2b", 0.15)):
            steps = STEPS[:2] if (t == 32.0 and sub == "t2") else STEPS
            for s in steps:
                level = base + 0.4 * math.exp(-3.0 * (loss - 3.2)) * 0.1
                slope = 0.01 * math.log10(t * 1e9) - 0.06
                v = max(0.0, level + slope * math.log10(s) + rng.normal(0, 0.004))
                body = {"summary": {"pass1_mean_overall": v, "n_prompts": 512}, "config": {"step": s}}
                (root / "results" / sub / f"{prefix}_20m_{_tag(t)}B_s{s}.json").write_text(json.dumps(body))
        (root / "results" / "loss" / f"loss_model_20m_{_tag(t)}B.json").write_text(
            json.dumps({"pretrain_tokens": t * 1e9, "val_loss": loss}))
    (root / "results" / "loss" / "loss_model_20m_64B.json").write_text(
        json.dumps({"pretrain_tokens": 64e9, "val_loss": 3.2}))
    # files the reference ignores: another family, a name its pattern does not match
    (root / "results" / "t2" / "rl_100m_1B_s50.json").write_text(json.dumps({"summary": {"pass1_mean_overall": 0.9}}))
    (root / "results" / "t2" / "notes.json").write_text("{}")
    return root
