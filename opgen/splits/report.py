"""Divergence reports for people: ``opgen split-stats``, the split section of ``opgen stats`` and of the card."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from opgen.library import OperatorLibrary, library_of_rows
from opgen.splits import compounds, divergence
from opgen.splits import rows as R
from opgen.splits import table as T

SHOWN = 20  # held-out compounds listed in text (all of them in --json)


def split_stats(train: Sequence[Path], evals: Sequence[Path], spec: compounds.CompoundSpec = compounds.DEFAULT,
                baseline_seeds: int = T.BASELINE_SEEDS, library: OperatorLibrary | None = None) -> dict[str, Any]:
    """D_A, D_C and the held-out compounds of TRAIN against EVAL (files or folders), over the
    library their rows name (``library``: the one the user gave; else the study's or the store's),
    beside random splits of the same rows pooled, at the same sizes (``baseline_seeds`` of them; 0:
    none). Every file of both is found and opened before any row is read: an unusable EVAL is
    named before TRAIN's rows are parsed."""
    files = R.parquet_files([*train, *evals])
    for f in files:
        R.rows_file(f)
    lib = library_of_rows(files, library)
    tu, eu = R.units_of(train, spec, lib), R.units_of(evals, spec, lib)
    out = divergence.compare(tu, eu, spec)
    out = {"train": [str(p) for p in train], "eval": [str(p) for p in evals], **out}
    if baseline_seeds and tu and eu:
        base = T.random_baseline(T.Table.of([*tu, *eu], spec), len(tu), len(eu), ("split-stats",), seeds=baseline_seeds)
        out["baseline"] = {**base, "of": "the train and eval rows, pooled"}
        out["excess_over_baseline"] = {k: round(out[k] - base[k]["mean"], 6)
                                       for k in ("atom_divergence", "compound_divergence")}
    return out


def render_split_stats(r: Mapping[str, Any]) -> str:
    held = r["heldout_compounds"]
    lines = [f"train: {', '.join(r['train'])} ({r['train_rows']:,} rows)",
             f"eval:  {', '.join(r['eval'])} ({r['eval_rows']:,} rows)",
             f"compounds: {compounds.CompoundSpec.from_dict(r['compounds_spec']).describe()}",
             f"atom divergence     D_A = 1 - C_0.5 = {r['atom_divergence']:.4f}  "
             f"({r['atoms']['train']} atoms in train, {r['atoms']['eval']} in eval)",
             f"compound divergence D_C = 1 - C_0.1 = {r['compound_divergence']:.4f}  "
             f"({r['compounds']['train']} compounds in train, {r['compounds']['eval']} in eval)",
             f"held-out compounds (in eval, in no training row): {len(held)}, in "
             f"{r['heldout_share_of_eval_rows']:.1%} of eval rows"]
    base = r.get("baseline")
    if isinstance(base, dict):
        a, c = base["atom_divergence"], base["compound_divergence"]
        ex = r["excess_over_baseline"]
        lines.insert(5, f"random splits of {base['of']} ({base['seeds']} seeds, same sizes): D_A {a['mean']:.4f} "
                        f"± {a['std']:.4f}, D_C {c['mean']:.4f} ± {c['std']:.4f}; excess D_A "
                        f"{ex['atom_divergence']:+.4f}, D_C {ex['compound_divergence']:+.4f}")
    if held:
        more = f", ... ({len(held) - SHOWN} more)" if len(held) > SHOWN else ""
        lines.append("  " + ", ".join(held[:SHOWN]) + more)
    if r["atoms"]["eval_unseen_in_train"]:
        lines.append("eval atoms never seen in training: " + ", ".join(r["atoms"]["eval_unseen_in_train"]))
    return "\n".join(lines)


# ---------------------------------------------------------------- opgen stats, the card


def stats_section(files: Sequence[Path], library: OperatorLibrary) -> dict[str, Any]:
    """For ``opgen stats``: atoms and compounds of the rows (of ``library``, the one they name), and
    the certificates of the builds they come from (a file's folder's manifest.json)."""
    units = R.units_of(list(files), compounds.EDGES, library)
    atoms, comps = compounds.histograms(units, compounds.EDGES)
    top = sorted(comps.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
    certs: dict[str, Any] = {}
    for folder in sorted({Path(f).parent for f in files}):
        man = folder / "manifest.json"
        if man.is_file():
            try:
                found = json.loads(man.read_text(encoding="utf-8")).get("split_certificates")
            except (OSError, ValueError):
                found = None
            if isinstance(found, dict):
                certs.update({f"{folder}:{k}": _brief(v) for k, v in found.items() if isinstance(v, dict)})
    return {"atoms": len(atoms), "compounds": len(comps), "top_compounds": dict(top), "certificates": certs}


def _brief(cert: Mapping[str, Any]) -> dict[str, Any]:
    return {k: cert.get(k) for k in ("kind", "train_splits", "eval_splits", "atom_divergence", "compound_divergence",
                                     "heldout_share_of_eval_rows")} | {"check_ok": (cert.get("check") or {}).get("ok")}


def render_stats_section(s: Mapping[str, Any]) -> str:
    lines = [f"\ncompounds: {s['atoms']} distinct atoms, {s['compounds']} distinct compounds (edges)"]
    for k, v in s["top_compounds"].items():
        lines.append(f"  {k}  {v:g}")
    for name, c in s["certificates"].items():
        lines.append(f"split certificate {name}: {c['kind']}, D_A {_f(c['atom_divergence'])}, "
                     f"D_C {_f(c['compound_divergence'])}, check ok = {c['check_ok']}")
    return "\n".join(lines)


def _f(v: Any) -> str:
    return "n/a" if v is None else f"{v:.4f}"


def card_section(manifest: Mapping[str, Any]) -> str | None:
    """The card's "Compositional split" section (None when the build names no split)."""
    certs = manifest.get("split_certificates")
    if not isinstance(certs, dict) or not certs:
        return None
    blocks = []
    for recipe, c in certs.items():
        if not isinstance(c, dict):
            continue
        check = c.get("check") or {}
        held = c.get("heldout_compounds")
        held_text = held if isinstance(held, str) else \
            (", ".join(f"`{h}`" for h in held[:40]) + (f" … ({len(held) - 40} more)" if len(held) > 40 else "")
             if held else "none")
        defs: Mapping[str, Any] = c["definitions"] if isinstance(c.get("definitions"), dict) else {}
        rows = [["kind", f"`{c.get('kind')}`" + (f" (rule: {c['rule']})" if c.get("rule") else "")],
                ["compounds", str(defs.get("compounds", "n/a"))],
                ["train splits", ", ".join(f"`{n}`" for n in c.get("train_splits") or []) or "none"],
                ["eval splits", ", ".join(f"`{n}`" for n in c.get("eval_splits") or []) or "none"],
                ["atom divergence D_A = 1 − C₀.₅", _f(c.get("atom_divergence")) + _beside(c, "atom_divergence")],
                ["compound divergence D_C = 1 − C₀.₁",
                 _f(c.get("compound_divergence")) + _beside(c, "compound_divergence")],
                ["held-out compounds", held_text],
                ["share of eval rows holding one", f"{c.get('heldout_share_of_eval_rows', 0):.1%}"]]
        if isinstance(c.get("heldout_untested"), list):
            rows.append(["held out but in no eval row (untested)",
                         ", ".join(f"`{h}`" for h in c["heldout_untested"][:40]) or "none"])
        rows += [["training rows holding a held-out compound (checked from the rows)",
                  str(check.get("train_rows_with_heldout_compound", check.get("train_rows_deeper_than_max", "n/a")))],
                 ["certificate check", "passed" if check.get("ok") else "FAILED"]]
        rows += [["note", w] for w in check.get("warnings") or []]
        only = c.get("only")
        if isinstance(only, dict):
            rows.append(["updated by --only", f"{', '.join(only.get('rebuilt') or [])} rebuilt; certificate "
                                              f"{only.get('certificate')}: {only.get('why')}"])
        table = "| | |\n|---|---|\n" + "\n".join(f"| {a} | {b} |" for a, b in rows)
        blocks.append(f"Recipe `{recipe}`:\n\n{table}")
    return ("Divergences measured from this build's rows (docs/splits.md; DBCA, Keysers et al. 2020): atoms "
            "are the nodes of a program's composition tree (operators, methods, concatenation), compounds its "
            "connected fragments as each certificate's compound spec says; each divergence is shown beside the "
            "mean of random splits at the same spec and sizes.\n\n"
            + "\n\n".join(blocks))


def _beside(cert: Mapping[str, Any], key: str) -> str:
    """`` (random splits: 0.0123 ± 0.0010; excess +0.5000)`` for a certificate with a baseline."""
    base = cert.get("baseline")
    if not isinstance(base, dict) or not isinstance(base.get(key), dict):
        return ""
    b = base[key]
    excess = (cert.get("excess_over_baseline") or {}).get(key)
    return (f" (random splits of {base.get('of', 'the rows')}: {_f(b.get('mean'))} ± {_f(b.get('std'))}"
            + (f"; excess {excess:+.4f}" if isinstance(excess, (int, float)) else "") + ")")
