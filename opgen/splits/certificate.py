"""What a build proves about its split, measured from the files it wrote (docs/splits.md).

After a build's rows are written and before its manifest is, :func:`annotate` stores per split the
weighted atom and compound histograms (``splits.<name>.compounds``): counted by the builder as it
generated the rows (a :class:`~opgen.splits.compounds.Tally`, edges), or, for the splits of a
recipe that names a ``split``, read back from the written rows (opgen.splits.rows: ground truth →
typed trees) under the split's compound spec. For each recipe that names a ``split`` it stores its
certificate under ``split_certificates.<recipe>``: its definitions (the compound spec in words,
the divergences' formulas), D_A and D_C, their random-split baseline at the same spec and sizes
and the excess over it, the held-out compounds (those eval rows test apart from those they do
not), and the kind's check (no training row holds a held-out compound...). The check reads the
rows, not the generator's filter; a failed check fails the build.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from opgen import write
from opgen.ops import STUDY, OperatorLibrary
from opgen.splits import compounds, divergence, rows
from opgen.splits import table as T
from opgen.splits.kinds import Read, Rule, SplitError


def histogram_section(units: Sequence[compounds.RowUnits], spec: compounds.CompoundSpec) -> dict[str, Any]:
    atoms, comps = compounds.histograms(units, spec)
    return {"spec": spec.as_dict(), "rows": len(units),
            "atoms": {k: _num(v) for k, v in sorted(atoms.items())},
            "compounds": {k: _num(v) for k, v in sorted(comps.items())}}


def _num(v: float) -> float | int:
    return int(v) if float(v).is_integer() else round(float(v), 6)


# D_A above which a split presented as compound-only is flagged (DBCA's CFQ splits: D_A <= 0.02).
COMPOUND_ONLY_ATOM_BOUND = 0.02


def definitions(spec: compounds.CompoundSpec) -> dict[str, str]:
    """What the certificate's numbers mean, in words (the card shows them)."""
    return {"compounds": spec.describe(),
            "atom_divergence": "D_A = 1 - C_0.5(F_A(train) || F_A(eval)), Chernoff coefficient of the normalized "
                               "atom weights",
            "compound_divergence": "D_C = 1 - C_0.1(F_C(train) || F_C(eval)) over the DBCA-weighted compounds, "
                                   "P(G'|G) taken over the train and eval rows together",
            "baseline": f"{T.BASELINE_SEEDS} random splits at the same compound spec and sizes; excess = measured - "
                        "their mean"}


def certify(rule: Rule, train: rows.Rows, evals: rows.Rows, claims: Mapping[str, Any] | None = None,
            seed_parts: Sequence[object] = ()) -> dict[str, Any]:
    """The certificate of ``rule`` over the rows read back from a build (``claims``: an mcd search's;
    ``seed_parts``: what seeds the baseline's random splits besides the rule)."""
    spec = rule.spec
    claims = dict(claims or {})
    cert: dict[str, Any] = {"kind": rule.kind, "config": rule.config, "definitions": definitions(spec),
                            "train_rows": len(train.units), "eval_rows": len(evals.units)}
    problems: list[str] = []
    check: dict[str, Any] = {"read_from": "the written rows (ground_truth → typed trees → compound texts)"}
    if train.units and evals.units:
        measured = divergence.compare(train.units, evals.units, spec)
        cert.update({"atom_divergence": measured["atom_divergence"],
                     "compound_divergence": measured["compound_divergence"],
                     "unseen_compounds": measured["heldout_compounds"],
                     "unseen_compound_share_of_eval_rows": measured["heldout_share_of_eval_rows"],
                     "eval_atoms_unseen_in_train": measured["atoms"]["eval_unseen_in_train"]})
        cert["baseline"] = _baseline(rule, train.units, evals.units, claims, seed_parts)
        cert["excess_over_baseline"] = {
            k: round(cert[k] - cert["baseline"][k]["mean"], 6) for k in ("atom_divergence", "compound_divergence")}
        if rule.impl.compound_only and cert["atom_divergence"] > COMPOUND_ONLY_ATOM_BOUND:
            unseen = measured["atoms"]["eval_unseen_in_train"]
            check.setdefault("warnings", []).append(
                f"atom divergence {cert['atom_divergence']:.4f} exceeds {COMPOUND_ONLY_ATOM_BOUND}: eval rows use "
                f"{measured['atoms']['eval']} atoms, training rows {measured['atoms']['train']}"
                + (f" ({', '.join(unseen[:8])} never in training)" if unseen else "")
                + f" — the split ({rule.kind}) is presented as compound-only (known atoms in new combinations), "
                "and this one also shifts which atoms are tested")
    else:
        cert.update({"atom_divergence": None, "compound_divergence": None, "baseline": None,
                     "note": "the build has no " + ("train" if not train.units else "eval") + " split of this "
                     "recipe: divergence needs both (opgen split-stats compares builds)"})
    rule.impl.check(rule, cert, check, problems, Read(train.units, evals.units, train.depths, evals.depths, claims,
                                                      train.facts, evals.facts))
    check["ok"] = not problems
    check["problems"] = problems
    cert["check"] = check
    return cert


def _baseline(rule: Rule, train: Sequence[compounds.RowUnits], evals: Sequence[compounds.RowUnits],
              claims: Mapping[str, Any],
              seed_parts: Sequence[object]) -> dict[str, Any]:
    """Random splits at the same spec and sizes: of the search's pool when the build's rows are the
    search's own selection (mcd), else of the certificate's own train and eval rows together."""
    pooled = claims.get("baseline")
    if isinstance(pooled, Mapping) and not claims.get("train_generators") and \
            (len(train), len(evals)) == (claims.get("train_rows"), claims.get("eval_rows")):
        return {**pooled, "of": "the search's pool"}
    table = T.Table.of([*train, *evals], rule.spec)
    out = T.random_baseline(table, len(train), len(evals), ("certificate", rule.kind, *seed_parts))
    return {**out, "of": "this certificate's train and eval rows, pooled"}


def tally_section(tally: compounds.Tally) -> dict[str, Any]:
    """:func:`histogram_section` of the rows a :class:`~opgen.splits.compounds.Tally` counted."""
    atoms, comps = tally.histograms()
    return {"spec": tally.spec.as_dict(), "rows": tally.rows,
            "atoms": {k: _num(v) for k, v in sorted(atoms.items())},
            "compounds": {k: _num(v) for k, v in sorted(comps.items())}}


def _recorded_files(section: Mapping[str, Any] | None) -> list[tuple[Any, Any]] | None:
    if not isinstance(section, Mapping) or not isinstance(section.get("files"), list):
        return None
    return [(f.get("path"), f.get("sha256")) for f in section["files"] if isinstance(f, Mapping)]


def annotate(man: dict[str, Any], recipes: Sequence[Any], files: Mapping[str, Sequence[Path]],
             tallies: Mapping[str, compounds.Tally] | None = None, previous: Mapping[str, Any] | None = None,
             kept: Mapping[str, Sequence[Path]] | None = None) -> None:
    """Add per-split histograms and each split recipe's certificate to ``man`` (raises SplitError
    when a certificate's check fails). ``files``: each built split's parquet files; ``tallies``:
    the histograms of splits the builder counted as it generated them (those are not read back;
    a split recipe's splits always are, for its certificate).

    ``--only`` (``previous``: the build it updates; ``kept``: the files of the splits it keeps): a
    split recipe whose splits were partly rebuilt keeps the previous certificate when every rebuilt
    split's files and every kept split's files are byte-identical (sha256) to what the previous
    manifest recorded, and is otherwise certified again from the rebuilt rows and the kept splits'
    files, read back from the folder. Either way the certificate says so under ``only``. Recipes
    none of whose splits were rebuilt keep their certificate (the caller's merge carries it over)."""
    spec_of: dict[str, compounds.CompoundSpec] = {}
    rule_of: dict[str, Rule] = {}
    lib_of: dict[str, OperatorLibrary] = {}  # a split's operator library
    for r in recipes:
        for s in r.splits:
            spec_of[s.name] = r.split.spec if r.split is not None else compounds.EDGES
            lib_of[s.name] = r.library
            if r.split is not None:
                rule_of[s.name] = r.split
    read: dict[str, rows.Rows] = {}
    for name, paths in files.items():
        spec = spec_of.get(name, compounds.EDGES)
        counted = (tallies or {}).get(name)
        if counted is not None and counted.spec == spec:
            man["splits"][name]["compounds"] = tally_section(counted)
            continue
        read[name] = _read(paths, spec, lib_of.get(name, STUDY), rule_of.get(name))
        man["splits"][name]["compounds"] = histogram_section(read[name].units, spec)
    certs: dict[str, Any] = {}
    for r in recipes:
        if r.split is None:
            continue
        names = [s.name for s in r.splits]
        rebuilt = [n for n in names if n in read]
        if not rebuilt:
            continue  # --only rebuilt none of it: the previous certificate stays (merged by the caller)
        only = None
        if len(rebuilt) < len(names):
            kept_cert, only = _partly_rebuilt(r, names, rebuilt, man, read, previous or {}, kept or {})
            if kept_cert is not None:
                certs[r.name] = kept_cert
                continue
        train_names = [s.name for s in r.splits if s.role == "train"]
        eval_names = [s.name for s in r.splits if s.role == "eval"]
        claims = r.split.impl.claims(r.split, r, [man["splits"].get(n) or ((previous or {}).get("splits") or {}).get(n)
                                                  or {} for n in names])
        cert = certify(r.split, _joined(read, train_names), _joined(read, eval_names), claims, (r.name, r.seed))
        cert = {"train_splits": train_names, "eval_splits": eval_names, **cert}
        if only is not None:
            cert["only"] = only
        if not cert["check"]["ok"]:
            raise SplitError(f"{r.path}: split: the {r.split.kind} certificate's check failed: "
                             + "; ".join(cert["check"]["problems"]))
        certs[r.name] = cert
    if certs:
        man["split_certificates"] = certs


def _read(paths: Sequence[Path], spec: compounds.CompoundSpec, lib: OperatorLibrary, rule: Rule | None) -> rows.Rows:
    fact = None if rule is None else (lambda trees: rule.impl.row_fact(rule, trees))
    return rows.read(list(paths), spec, lib, fact)


def _joined(read: Mapping[str, rows.Rows], names: Sequence[str]) -> rows.Rows:
    return rows.Rows([u for n in names for u in read[n].units], [d for n in names for d in read[n].depths],
                     [f for n in names for f in read[n].facts])


def _partly_rebuilt(r: Any, names: Sequence[str], rebuilt: Sequence[str], man: Mapping[str, Any],
                    read: dict[str, rows.Rows], prev: Mapping[str, Any], kept: Mapping[str, Sequence[Path]],
                    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """--only rebuilt some of a split recipe's splits: (the previous certificate, kept, when the
    rebuilt files are those recorded and the kept files are still the bytes the manifest recorded;
    else None and the ``only`` note, with the kept splits' rows read back into ``read``)."""
    old_cert = (prev.get("split_certificates") or {}).get(r.name)
    prev_splits = prev.get("splits") or {}
    absent = [n for n in names if n not in read and n not in kept]
    if absent:
        raise SplitError(f"{r.path}: split: --only rebuilt {', '.join(rebuilt)} but the build holds no "
                         f"{', '.join(absent)} to certify the split with; rebuild the whole recipe")
    others = [n for n in names if n not in read]
    same = all(_recorded_files(man["splits"][n]) == _recorded_files(prev_splits.get(n)) for n in rebuilt)
    changed = [str(p) for n in others for p, (_, digest) in zip(kept[n], _recorded_files(prev_splits.get(n)) or [])
               if write.sha256_of(Path(p)) != digest]
    changed += [f"{n} (its files are not the manifest's)" for n in others
                if len(kept[n]) != len(_recorded_files(prev_splits.get(n)) or [])]
    if isinstance(old_cert, dict) and same and not changed:
        return {**old_cert, "only": {
            "rebuilt": list(rebuilt), "certificate": "kept",
            "why": "the rebuilt splits' files are byte-identical (sha256) to the previous build's, and so are the "
                   "kept splits' files to the manifest's"}}, None
    for n in others:
        read[n] = _read(kept[n], r.split.spec, r.library, r.split)
    why = ("no certificate in the previous build" if not isinstance(old_cert, dict) else
           f"kept files differ from what the manifest recorded (sha256): {', '.join(changed)}" if changed else
           "the rebuilt splits' files differ from the previous build's")
    only = {"rebuilt": list(rebuilt), "certificate": "recomputed",
            "why": f"{why}; the kept splits ({', '.join(others)}) were read back from the folder"}
    return None, only
