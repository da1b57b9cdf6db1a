"""What a build proves about its split, measured from the files it wrote (docs/splits.md).

After a build's rows are written and before its manifest is, :func:`annotate` stores per split the
weighted atom and compound histograms (``splits.<name>.compounds``): counted by the builder as it
generated the rows (a :class:`~opgen.splits.compounds.Tally`), or, for the splits of a recipe that
names a ``split``, read back from the written rows (opgen.splits.rows: ground truth → typed
trees). For each recipe that names a ``split`` it
stores its certificate under ``split_certificates.<recipe>``: D_A, D_C, the held-out compounds,
their share of eval rows, and the check that no training row holds one. The check reads the
rows, not the generator's filter: it matches compound *texts* of the parsed rows against the
rule, where generation tested tree edges. A failed check fails the build.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from opgen import ops
from opgen.splits import compounds as C
from opgen.splits import divergence as D
from opgen.splits import rows as R
from opgen.splits.kinds import Read, Rule, SplitError


def histogram_section(units: Sequence[C.RowUnits], spec: C.CompoundSpec) -> dict[str, Any]:
    atoms, comps = C.histograms(units, spec)
    return {"spec": spec.as_dict(), "rows": len(units),
            "atoms": {k: _num(v) for k, v in sorted(atoms.items())},
            "compounds": {k: _num(v) for k, v in sorted(comps.items())}}


def _num(v: float) -> float | int:
    return int(v) if float(v).is_integer() else round(float(v), 6)


def certify(rule: Rule, train: Sequence[C.RowUnits], evals: Sequence[C.RowUnits], train_depths: Sequence[int],
            eval_depths: Sequence[int], claims: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The certificate of ``rule`` over the rows read back from a build (``claims``: an mcd search's)."""
    spec = rule.spec
    cert: dict[str, Any] = {"kind": rule.kind, "config": rule.config, "train_rows": len(train),
                            "eval_rows": len(evals)}
    if train and evals:
        measured = D.compare(train, evals, spec)
        cert.update({"atom_divergence": measured["atom_divergence"],
                     "compound_divergence": measured["compound_divergence"],
                     "unseen_compounds": measured["heldout_compounds"],
                     "unseen_compound_share_of_eval_rows": measured["heldout_share_of_eval_rows"],
                     "eval_atoms_unseen_in_train": measured["atoms"]["eval_unseen_in_train"]})
    else:
        cert.update({"atom_divergence": None, "compound_divergence": None,
                     "note": "the build has no " + ("train" if not train else "eval") + " split of this recipe: "
                     "divergence needs both (opgen split-stats compares builds)"})
    problems: list[str] = []
    check: dict[str, Any] = {"read_from": "the written rows (ground_truth → typed trees → compound texts)"}
    rule.impl.check(rule, cert, check, problems, Read(train, evals, train_depths, eval_depths, dict(claims or {})))
    check["ok"] = not problems
    check["problems"] = problems
    cert["check"] = check
    return cert


def tally_section(tally: C.Tally) -> dict[str, Any]:
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
             tallies: Mapping[str, C.Tally] | None = None, previous: Mapping[str, Any] | None = None,
             kept: Mapping[str, Sequence[Path]] | None = None) -> None:
    """Add per-split histograms and each split recipe's certificate to ``man`` (raises SplitError
    when a certificate's check fails). ``files``: each built split's parquet files; ``tallies``:
    the histograms of splits the builder counted as it generated them (those are not read back;
    a split recipe's splits always are, for its certificate).

    ``--only`` (``previous``: the build it updates; ``kept``: the files of the splits it keeps): a
    split recipe whose splits were partly rebuilt keeps the previous certificate when every rebuilt
    split's files are byte-identical to what the previous manifest recorded, and is otherwise
    certified again from the rebuilt rows and the kept splits' files, read back from the folder.
    Either way the certificate says so under ``only``. Recipes none of whose splits were rebuilt
    keep their certificate (the caller's merge carries it over)."""
    spec_of: dict[str, C.CompoundSpec] = {}
    lib_of: dict[str, Any] = {}  # a split's operator library (None: the study's)
    for r in recipes:
        for s in r.splits:
            spec_of[s.name] = r.split.spec if r.split is not None else C.DEFAULT
            lib_of[s.name] = ops.unless_study(r.library)
    units: dict[str, list[C.RowUnits]] = {}
    depths: dict[str, list[int]] = {}
    for name, paths in files.items():
        spec = spec_of.get(name, C.DEFAULT)
        counted = (tallies or {}).get(name)
        if counted is not None and counted.spec == spec:
            man["splits"][name]["compounds"] = tally_section(counted)
            continue
        units[name] = R.units_of(list(paths), spec, lib_of.get(name))
        man["splits"][name]["compounds"] = histogram_section(units[name], spec)
    certs: dict[str, Any] = {}
    for r in recipes:
        if r.split is None:
            continue
        names = [s.name for s in r.splits]
        rebuilt = [n for n in names if n in units]
        if not rebuilt:
            continue  # --only rebuilt none of it: the previous certificate stays (merged by the caller)
        only = None
        if len(rebuilt) < len(names):
            kept_cert, only, files = _partly_rebuilt(r, names, rebuilt, man, units, files, previous or {}, kept or {})
            if kept_cert is not None:
                certs[r.name] = kept_cert
                continue
        train_names = [s.name for s in r.splits if s.role == "train"]
        eval_names = [s.name for s in r.splits if s.role == "eval"]
        for n in (*train_names, *eval_names):
            depths[n] = R.depths_of(list(files[n]), lib_of.get(n))
        claims = r.split.impl.claims(r.split, r, [man["splits"].get(n) or ((previous or {}).get("splits") or {}).get(n)
                                                  or {} for n in names])
        cert = certify(r.split, [u for n in train_names for u in units[n]], [u for n in eval_names for u in units[n]],
                       [d for n in train_names for d in depths[n]], [d for n in eval_names for d in depths[n]], claims)
        cert = {"train_splits": train_names, "eval_splits": eval_names, **cert}
        if only is not None:
            cert["only"] = only
        if not cert["check"]["ok"]:
            raise SplitError(f"{r.path}: split: the {r.split.kind} certificate's check failed: "
                             + "; ".join(cert["check"]["problems"]))
        certs[r.name] = cert
    if certs:
        man["split_certificates"] = certs


def _partly_rebuilt(r: Any, names: Sequence[str], rebuilt: Sequence[str], man: Mapping[str, Any],
                    units: dict[str, list[C.RowUnits]], files: Mapping[str, Sequence[Path]],
                    prev: Mapping[str, Any], kept: Mapping[str, Sequence[Path]],
                    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None, Mapping[str, Sequence[Path]]]:
    """--only rebuilt some of a split recipe's splits: (the previous certificate, kept, when the
    rebuilt files are those recorded; else None and the ``only`` note, with the kept splits' rows
    read back into ``units`` and their files added)."""
    old_cert = (prev.get("split_certificates") or {}).get(r.name)
    same = all(_recorded_files(man["splits"][n]) == _recorded_files((prev.get("splits") or {}).get(n))
               for n in rebuilt)
    if isinstance(old_cert, dict) and same:
        return {**old_cert, "only": {
            "rebuilt": list(rebuilt), "certificate": "kept",
            "why": "the rebuilt splits' files are byte-identical (sha256) to the previous build's"}}, None, files
    absent = [n for n in names if n not in units and n not in kept]
    if absent:
        raise SplitError(f"{r.path}: split: --only rebuilt {', '.join(rebuilt)} but the build holds no "
                         f"{', '.join(absent)} to certify the split with; rebuild the whole recipe")
    others = [n for n in names if n not in units]
    for n in others:
        units[n] = R.units_of(list(kept[n]), r.split.spec, ops.unless_study(r.library))
    why = "no certificate in the previous build" if not isinstance(old_cert, dict) else \
        "the rebuilt splits' files differ from the previous build's"
    only = {"rebuilt": list(rebuilt), "certificate": "recomputed",
            "why": f"{why}; the kept splits ({', '.join(others)}) were read back from the folder"}
    return None, only, {**files, **{n: kept[n] for n in others}}
