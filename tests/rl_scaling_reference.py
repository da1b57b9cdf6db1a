"""The reference analysis (/work/shared/reference/rl-scaling-fit.txt, shipped flattened to one line),
re-indented so it runs: ``ANALYZE`` is its ``fit_exp`` and ``analyze`` word for word (a test checks
that its whitespace-collapsed text occurs in the reference text), executed against scipy; only the
Hub listing of ``load_results``/``load_losses`` is replaced by a folder walk (``load``)."""

from __future__ import annotations

import json
import os
import re
import types
from pathlib import Path

REFERENCE_TEXT = Path(os.environ.get("OPGEN_RL_SCALING_REFERENCE",
                                     "/work/shared/reference/rl-scaling-fit.txt"))
# tests/data keeps a copy, so the tie test runs where /work/shared is not mounted (CI)
LOCAL_COPY = Path(__file__).parent / "data" / "rl-scaling-fit.txt"

PRELUDE = '''
import numpy as np
from scipy import stats
from scipy.optimize import curve_fit
C_REF = 1e20
N_PARAMS_20M = 20.5e6
PROMPTS_PER_STEP = 256
GROUP = 8
'''

ANALYZE = '''
def fit_exp(L, alpha, beta, gamma):
    return gamma + alpha * np.exp(-beta * np.asarray(L))


def analyze(runs, losses, args, label):
    per_run = []
    for tok_b, curve in sorted(runs.items()):
        steps = sorted(curve)
        if len(steps) < 3:
            print(f"[{label}] [skip] T={tok_b}B has {len(steps)} points")
            continue
        L = losses.get(round(tok_b, 2))
        T_rollout_step = PROMPTS_PER_STEP * GROUP * (args.prompt_len + args.resp_len)
        c_per_step = 10 * N_PARAMS_20M * T_rollout_step
        x = np.array([np.log10(step * c_per_step) - np.log10(C_REF) for step in steps])
        y = np.array([curve[s] for s in steps])
        xs = np.log10(np.array(steps, dtype=float))  # step-only sensitivity fit
        if float(y.max() - y.min()) < 1e-9:
            B, R_ref, Bs, Rs = 0.0, float(y.mean()), 0.0, float(y.mean())
        else:
            A = np.vstack([np.ones_like(x), x]).T
            (R_ref, B), *_ = np.linalg.lstsq(A, y, rcond=None)
            As = np.vstack([np.ones_like(xs), xs]).T
            (Rs, Bs), *_ = np.linalg.lstsq(As, y, rcond=None)
        per_run.append({
            "tokens": tok_b, "log10_tokens": float(np.log10(tok_b * 1e9)), "loss": L, "steps": steps,
            "pass1": [float(v) for v in y], "R_ref": float(R_ref), "B": float(B),
            "R_ref_step": float(Rs), "B_step": float(Bs), "pass1_last": float(y[-1]),
        })
        print(f"[{label}] T={tok_b:5.1f}B L={('%.3f' % L) if L else ' ? '} "
              f"pass1={[round(float(v), 4) for v in y]} "
              f"-> R_ref={R_ref:.4f} B={B:.5f}")

    done = [r for r in per_run if r["loss"] is not None]
    out = {"per_run": per_run}

    # ---- claim 4a: R_ref vs pretraining loss --------------------------------
    if len(done) >= 4:
        Ls = np.array([r["loss"] for r in done])
        Rs = np.array([r["R_ref"] for r in done])
        rho, rho_p = stats.spearmanr(Ls, Rs)
        popt = None
        try:
            popt, _ = curve_fit(fit_exp, Ls, Rs, p0=[100.0, 12.0, 0.03], maxfev=20000)
            pred = fit_exp(Ls, *popt)
            ss_res = float(((Rs - pred) ** 2).sum())
            ss_tot = float(((Rs - Rs.mean()) ** 2).sum())
            r2 = 1 - ss_res / ss_tot if ss_tot > 0 else float("nan")
        except Exception as e:
            r2 = float("nan")
            print(f"[{label}] exp fit failed: {e}")
        out["claim_R_ref_vs_loss"] = {
            "spearman_rho": float(rho), "spearman_p": float(rho_p),
            "exp_fit": {"alpha": float(popt[0]), "beta": float(popt[1]), "gamma": float(popt[2]),
                        "R2": r2} if popt is not None else None,
            "paper": {"rho_range": "[-0.99, -0.93]", "alpha_f": 129.85, "beta_f": 12.85,
                      "gamma_f": 0.0314, "R2_f": 0.980},
        }
        print(f"[{label}] Claim 4a (R_ref vs L): Spearman rho={rho:.3f} "
              f"(paper -0.93..-0.99)")

    # ---- claim 4a (no-extrapolation variant): pass@1 at fixed RL compute ----
    # At our reduced scale the R_ref extrapolation to C_ref=1e20 is noise-
    # dominated, so also correlate the MEASURED pass@1 at the last (and highest
    # common) RL step with L. This is the same claim read without extrapolation.
    if len(done) >= 4:
        last = {}
        for r in done:
            last[r["tokens"]] = (r["loss"], r["pass1"][-1], r["steps"][-1])
        Ls2 = np.array([v[0] for v in last.values()])
        Rs2 = np.array([v[1] for v in last.values()])
        rho2, rho2_p = stats.spearmanr(Ls2, Rs2)
        r2_lin, r2_p = stats.pearsonr(Ls2, Rs2)
        out["claim_R_ref_vs_loss_measured"] = {
            "note": "pass@1 at the measured (non-extrapolated) final RL step vs L",
            "points": {f"{t}B": {"loss": v[0], "pass1_last": v[1], "step": v[2]} for t, v in last.items()},
            "spearman_rho": float(rho2), "spearman_p": float(rho2_p),
            "pearson_r": float(r2_lin), "pearson_p": float(r2_p),
            "paper": {"rho_range": "[-0.99, -0.93]"},
        }
        print(f"[{label}] Claim 4a measured (pass1@last vs L): Spearman "
              f"rho={rho2:.3f}, Pearson r={r2_lin:.3f}")

    # ---- claim 4b: slope B vs log10 tokens ----------------------------------
    if len(done) >= 4:
        Ts = np.array([r["log10_tokens"] for r in done])
        Bs = np.array([r["B"] for r in done])
        r, r_p = stats.pearsonr(Ts, Bs)
        rho_b, _ = stats.spearmanr(Ts, Bs)
        slope, intercept = np.polyfit(Ts, Bs, 1)
        pred = intercept + slope * Ts
        ss_tot = float(((Bs - Bs.mean()) ** 2).sum())
        r2 = 1 - float(((Bs - pred) ** 2).sum()) / ss_tot if ss_tot > 0 else float("nan")
        out["claim_B_vs_logT"] = {
            "pearson_r": float(r), "p": float(r_p), "spearman_rho": float(rho_b),
            "linear_fit": {"slope_per_decade_tokens": float(slope), "intercept": float(intercept), "R2": r2},
            "paper": {"pearson_r": 0.84},
        }
        print(f"[{label}] Claim 4b (B vs log T): Pearson r={r:.3f} (paper +0.84), "
              f"slope={slope:.5f}/decade, R2={r2:.3f}")
    return out
'''


def flat(text: str) -> str:
    return " ".join(text.split())


def reference_text() -> str | None:
    for p in (REFERENCE_TEXT, LOCAL_COPY):
        if p.is_file():
            return p.read_text(encoding="utf-8")
    return None


def namespace() -> dict:
    ns: dict = {}
    exec(PRELUDE + ANALYZE, ns)  # the reference's own code, from this file
    return ns


def load(root) -> tuple[dict, dict]:
    """``load_results()`` and ``load_losses()`` with ``list_repo_files``/``hf_hub_download`` replaced by
    a walk of a local folder (the rest of their bodies as in the reference)."""
    root = str(root)
    files = []
    for dirpath, _dirs, names in os.walk(root):
        for n in names:
            files.append(os.path.relpath(os.path.join(dirpath, n), root).replace(os.sep, "/"))
    runs: dict = {}
    for f in [f for f in files if f.startswith(("results/t2/", "results/t2b/")) and f.endswith(".json")]:
        d = json.load(open(os.path.join(root, f)))
        tag = os.path.basename(f)[:-5]
        subset = "b1b2" if tag.startswith("t2b_") else "b3b4"
        m = re.match(r"(?:t2b_|rl_)20m_([\dp]+)B_s(\d+)", tag)
        if not m:
            continue
        tok_b = float(m.group(1).replace("p", "."))
        step = int(m.group(2))
        runs.setdefault((subset, tok_b), {})[step] = d["summary"]["pass1_mean_overall"]
    losses = {}
    for f in [f for f in files if f.startswith("results/loss/loss_model_20m_") and f.endswith(".json")]:
        d = json.load(open(os.path.join(root, f)))
        tok_b = d.get("pretrain_tokens", 0) / 1e9
        losses[round(tok_b, 2)] = d["val_loss"]
    return runs, losses


def run(root, prompt_len: float = 300.0, resp_len: float = 1400.0) -> dict:
    """The reference's ``main()`` on a folder: {subset: analyze(...)} for b1b2 and b3b4."""
    import contextlib
    import io

    ns = namespace()
    runs, losses = load(root)
    args = types.SimpleNamespace(prompt_len=prompt_len, resp_len=resp_len)
    out = {}
    with contextlib.redirect_stdout(io.StringIO()):
        for subset in ("b1b2", "b3b4"):
            sub = {t: curve for (s, t), curve in runs.items() if s == subset}
            if not sub:
                continue
            out[subset] = ns["analyze"](sub, losses, args, subset)
    return out
