"""Inputs for the `opgen fit` tests, built on the spot: the reference analysis's layout, tidy tables, and
synthetic curves with known parameters and binomial noise."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np

# pretraining tokens (billions) -> validation loss of the 20m family in the reference-layout fixture
TOKENS_B = {0.5: 4.10, 1.0: 3.85, 2.0: 3.62, 4.0: 3.47, 8.0: 3.35, 16.0: 3.29, 32.0: 3.25}
STEPS = (25, 50, 100, 200, 400)


def _tag(t: float) -> str:
    return f"{t:g}".replace(".", "p")


def write_reference(root: Path, seed: int = 0, tokens: dict | None = None, no_loss: tuple = (),
                    short: tuple = (32.0,), steps_: tuple = STEPS, noise: float = 0.004) -> Path:
    """results/t2 (split b3b4), results/t2b (split b1b2), results/loss, as the reference reads them; one
    run has two steps only (the reference skips it) and one loss file has no run.

    ``tokens`` (billions -> loss) chooses the runs (default ``TOKENS_B``); runs in ``no_loss`` get no
    loss file; runs in ``short`` have two steps in t2."""
    rng = np.random.default_rng(seed)
    for sub in ("t2", "t2b", "loss"):
        (root / "results" / sub).mkdir(parents=True, exist_ok=True)
    for t, loss in (TOKENS_B if tokens is None else tokens).items():
        for sub, prefix, base in (("t2", "rl", 0.02), ("t2b", "t2b", 0.15)):
            steps = steps_[:2] if (t in short and sub == "t2") else steps_
            for s in steps:
                level = base + 0.4 * math.exp(-3.0 * (loss - 3.2)) * 0.1
                slope = 0.01 * math.log10(t * 1e9) - 0.06
                v = max(0.0, level + slope * math.log10(s) + rng.normal(0, noise))
                body = {"summary": {"pass1_mean_overall": v, "n_prompts": 512}, "config": {"step": s}}
                (root / "results" / sub / f"{prefix}_20m_{_tag(t)}B_s{s}.json").write_text(json.dumps(body))
        if t in no_loss:
            continue
        (root / "results" / "loss" / f"loss_model_20m_{_tag(t)}B.json").write_text(
            json.dumps({"pretrain_tokens": t * 1e9, "val_loss": loss}))
    (root / "results" / "loss" / "loss_model_20m_64B.json").write_text(
        json.dumps({"pretrain_tokens": 64e9, "val_loss": 3.2}))
    # files the reference ignores: another family, a name its pattern does not match
    (root / "results" / "t2" / "rl_100m_1B_s50.json").write_text(json.dumps({"summary": {"pass1_mean_overall": 0.9}}))
    (root / "results" / "t2" / "notes.json").write_text("{}")
    return root


def synthetic(curve, steps, n_prompts: int, n_runs: int, seed: int, *, clusters: bool = True, seeds: int = 1,
              split: str = "test"):
    """Observations of ``n_runs`` independent runs whose accuracy at step s is ``curve(s)``: every prompt
    answers each checkpoint correctly with that probability, independently (binomial noise). Each run
    has prompts of its own (cluster "r<i>#p<j>"), or no prompt identity at all (``clusters=False``)."""
    from opgen.fit.inputs import RUN_FIELDS, Observations

    rng = np.random.default_rng(seed)
    p = np.array([curve(s) for s in steps])
    obs = Observations("synthetic", counts=True, cluster_by="prompt" if clusters else None)
    for i in range(n_runs):
        run = f"r{i:03d}"
        obs.runs[run] = {f: None for f in RUN_FIELDS}
        for sd in range(seeds):
            correct = rng.random((n_prompts, len(steps))) < p[None, :]
            for t, s in enumerate(steps):
                if clusters:
                    for j in range(n_prompts):
                        obs.add((split, run, sd, s, None, f"{run}#p{j}"), int(correct[j, t]), 1)
                else:
                    obs.add((split, run, sd, s, None, None), int(correct[:, t].sum()), n_prompts)
    return obs


def replay_sweep(root: Path, curves: dict, steps, n_rows: int = 24, seed: int = 0,
                 prompt_tokens: int = 100, completion_tokens: int = 300) -> tuple[Path, list[Path]]:
    """A program data file and, per run and step, a replay folder of responses: at step s exactly
    round(n_rows · curves[run](s)) rows (a fixed random subset) carry the gold answer, the rest a wrong one."""
    import tiny_model as tm

    data = tm.write_trees(root / "trees.parquet", n=n_rows)
    rng = np.random.default_rng(seed)
    order = {run: rng.permutation(n_rows) for run in curves}
    models = []
    for run, curve in curves.items():
        for s in steps:
            folder = root / "replay" / run / f"step{s}"
            folder.mkdir(parents=True)
            good = set(order[run][: int(round(n_rows * curve(s)))].tolist())
            lines = []
            for i in range(n_rows):
                e, _x = tm.TREES[i % len(tm.TREES)]
                answer = tm.ra_answer(e)
                if i not in good:
                    answer = answer.replace(f"return {e}", "return func_3(x) + 'wrong'")
                lines.append(json.dumps({"index": i, "response": answer, "prompt_tokens": prompt_tokens,
                                         "completion_tokens": [completion_tokens]}) + "\n")
            (folder / "trees_generations.jsonl").write_text("".join(lines), encoding="utf-8")
            models.append(folder)
    return data, models


def write_tidy(path: Path, rows, header=("run", "step", "split", "n_correct", "n_total", "tokens", "loss")) -> Path:
    """A tidy CSV for ``opgen fit --tidy``: ``header``, then ``rows``."""
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path
