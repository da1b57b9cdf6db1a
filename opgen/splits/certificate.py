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

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from opgen.ops import STUDY, OperatorLibrary
from opgen.splits import compounds as C
from opgen.splits import divergence as D
from opgen.splits import rows as R
from opgen.splits.kinds import Rule, SplitError

_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\.[a-z]+|\+")  # an operator id (any library's), a method, +


def histogram_section(units: Sequence[C.RowUnits], spec: C.CompoundSpec) -> dict[str, Any]:
    atoms, comps = C.histograms(units, spec)
    return {"spec": spec.as_dict(), "rows": len(units),
            "atoms": {k: _num(v) for k, v in sorted(atoms.items())},
            "compounds": {k: _num(v) for k, v in sorted(comps.items())}}


def _num(v: float) -> float | int:
    return int(v) if float(v).is_integer() else round(float(v), 6)


def _tokens(compound: str) -> set[str]:
    return set(_TOKEN.findall(compound))


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
    CHECKS[rule.kind](rule, cert, check, problems, train, evals, train_depths, eval_depths, dict(claims or {}))
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
    lib_of: dict[str, OperatorLibrary] = {}  # a split's operator library
    for r in recipes:
        for s in r.splits:
            spec_of[s.name] = r.split.spec if r.split is not None else C.DEFAULT
            lib_of[s.name] = r.library
    units: dict[str, list[C.RowUnits]] = {}
    depths: dict[str, list[int]] = {}
    for name, paths in files.items():
        spec = spec_of.get(name, C.DEFAULT)
        counted = (tallies or {}).get(name)
        if counted is not None and counted.spec == spec:
            man["splits"][name]["compounds"] = tally_section(counted)
            continue
        units[name] = R.units_of(list(paths), spec, lib_of.get(name, STUDY))
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
            depths[n] = R.depths_of(list(files[n]), lib_of.get(n, STUDY))
        claims = None
        if r.split.kind == "mcd":
            claims = mcd_claims(r, [man["splits"].get(n) or ((previous or {}).get("splits") or {}).get(n) or {}
                                    for n in names])
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


def mcd_claims(recipe: Any, sections: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What an mcd recipe's search claims (its ``mcd_side`` splits' manifest section, else the search
    itself, re-run from the recipe), and whether the training splits are the search's own rows."""
    found = next((s["mcd"] for s in sections if s.get("mcd")), None)
    if found is None:
        from opgen.splits import mcd

        sel = mcd.pool_and_selection(recipe.split.config, recipe.seed, f"{recipe.path}: ", recipe.library)[1]
        found = {"pool_rows": recipe.split.config["pool"]["rows"], "train_rows": len(sel.train),
                 "eval_rows": len(sel.eval), "heldout_compounds": list(sel.heldout),
                 "atom_divergence": sel.atom_divergence, "compound_divergence": sel.compound_divergence,
                 "random_split": {"atom_divergence": sel.random_atom_divergence,
                                  "compound_divergence": sel.random_compound_divergence}, "rounds": sel.rounds,
                 **({"search": sel.method, "anneal_steps": sel.anneal_steps, "anneal_accepted": sel.anneal_accepted}
                    if sel.method != "greedy" else {})}
    cells = sorted({s.generator for s in recipe.splits if s.role == "train" and s.generator != "mcd_side"})
    return {**found, "train_generators": cells}


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
        units[n] = R.units_of(list(kept[n]), r.split.spec, r.library)
    why = "no certificate in the previous build" if not isinstance(old_cert, dict) else \
        "the rebuilt splits' files differ from the previous build's"
    only = {"rebuilt": list(rebuilt), "certificate": "recomputed",
            "why": f"{why}; the kept splits ({', '.join(others)}) were read back from the folder"}
    return None, only, {**files, **{n: kept[n] for n in others}}


def _check_heldout(rule: Rule, cert: dict[str, Any], check: dict[str, Any], problems: list[str],
                   train: Sequence[C.RowUnits], evals: Sequence[C.RowUnits], *_: Any) -> None:
    """systematicity and heldout-ops: no training row holds a held-out compound."""
    listed = rule.heldout_compounds()
    held_ops = set(rule.ops)

    def holds(u: C.RowUnits) -> bool:
        if listed is not None:
            return bool(set(u.compounds) & set(listed))
        return any(_tokens(c) & held_ops for c in u.compounds)

    cert["heldout_compounds"] = listed if listed is not None else \
        f"every compound with one of {', '.join(rule.config['ops'])}"
    bad = [i for i, u in enumerate(train) if holds(u)]
    check["train_rows_with_heldout_compound"] = len(bad)
    check["examples"] = bad[:5]
    if bad:
        problems.append(f"{len(bad)} training rows hold a held-out compound (rows {bad[:5]})")
    with_h = sum(1 for u in evals if holds(u))
    cert["heldout_share_of_eval_rows"] = round(with_h / len(evals), 6) if evals else 0.0
    if rule.eval_requires:
        check["eval_rows_without_heldout_compound"] = len(evals) - with_h
        if with_h < len(evals):
            problems.append(f"{len(evals) - with_h} eval rows hold no held-out compound (eval: require)")
    if rule.kind == "systematicity" and train:
        composed = set().union(*(_tokens(c) for u in train for c in u.compounds))
        position = rule.library.position  # the library's own order (the study's: func_0 .. func_24)
        needed = sorted({o for p in rule.pairs for o in p}, key=position.__getitem__)
        missing = [o for o in needed if o not in composed]
        check["pair_operators_composed_in_training"] = {o: o in composed for o in needed}
        if missing:
            # a fact of this build, not a failure: another training build of the same split (the SFT
            # cell beside an RL pool of unary chains) may compose them
            check.setdefault("warnings", []).append(
                f"operators {', '.join(missing)} of the held-out pairs are never composed (with any operator) "
                "in this build's training rows: a systematicity split tests known operators in new combinations")


def _check_productivity(rule: Rule, cert: dict[str, Any], check: dict[str, Any], problems: list[str],
                        train: Sequence[C.RowUnits], evals: Sequence[C.RowUnits], train_depths: Sequence[int],
                        eval_depths: Sequence[int], *_: Any) -> None:
    """productivity: every training row at most max_train_depth deep, every eval row deeper."""
    d = rule.max_train_depth
    assert d is not None
    deep = [i for i, x in enumerate(train_depths) if x > d]
    shallow = [i for i, x in enumerate(eval_depths) if x <= d]
    cert["heldout_compounds"] = f"programs deeper than {d}"
    cert["depths"] = {"train_max": max(train_depths, default=None), "eval_min": min(eval_depths, default=None)}
    check["train_rows_deeper_than_max"] = len(deep)
    check["eval_rows_not_deeper"] = len(shallow)
    if deep:
        problems.append(f"{len(deep)} training rows are deeper than {d} (rows {deep[:5]})")
    if shallow:
        problems.append(f"{len(shallow)} eval rows are not deeper than {d} (rows {shallow[:5]})")


def _check_mcd(rule: Rule, cert: dict[str, Any], check: dict[str, Any], problems: list[str],
               train: Sequence[C.RowUnits], evals: Sequence[C.RowUnits], train_depths: Sequence[int],
               eval_depths: Sequence[int], claims: dict[str, Any]) -> None:
    """mcd: the search's held-out compounds in no training row; its divergences those of the rows."""
    held = list(claims.get("heldout_compounds", []))
    cert["heldout_compounds"] = held
    hs = set(held)
    bad = [i for i, u in enumerate(train) if hs & set(u.compounds)]
    check["train_rows_with_heldout_compound"] = len(bad)
    if bad:
        problems.append(f"{len(bad)} training rows hold a compound the search held out (rows {bad[:5]})")
    with_h = sum(1 for u in evals if hs & set(u.compounds))
    cert["heldout_share_of_eval_rows"] = round(with_h / len(evals), 6) if evals else 0.0
    cert["search"] = {k: claims.get(k) for k in ("pool_rows", "atom_divergence", "compound_divergence",
                                                 "random_split", "rounds")} | \
        {k: claims[k] for k in ("search", "anneal_steps", "anneal_accepted") if k in claims}
    bound = rule.config["max_atom_divergence"]
    cells = list(claims.get("train_generators") or [])
    if cells:
        # training cells on the search's train side (atomic rows beside its compositions): their D_A and
        # D_C are measured above from their rows; the bound and the search's D_C are of its own selection
        cert["train_cells"] = cells
        check.setdefault("warnings", []).append(
            f"the training splits are built by {', '.join(cells)} on the search's train side: D_A and D_C are "
            "measured from their rows (atomic rows included); max_atom_divergence bounds the search's own "
            f"selection (search.atom_divergence {claims.get('atom_divergence')})")
        return
    if train and evals:
        whole = len(train) == claims.get("train_rows") and len(evals) == claims.get("eval_rows")
        if whole and cert["atom_divergence"] > bound + 1e-9:
            problems.append(f"atom divergence {cert['atom_divergence']} exceeds max_atom_divergence {bound}")
        if not whole:
            check.setdefault("warnings", []).append(
                f"a part of the selection was built (--limit): {len(train)} of {claims.get('train_rows')} train "
                f"and {len(evals)} of {claims.get('eval_rows')} eval rows; the search's divergences are of the whole")
        elif claims.get("compound_divergence") is not None and \
                abs(cert["compound_divergence"] - claims["compound_divergence"]) > 1e-5:
            problems.append(f"the rows' compound divergence {cert['compound_divergence']} is not the "
                            f"search's {claims['compound_divergence']}")


CHECKS: dict[str, Any] = {"systematicity": _check_heldout, "heldout-ops": _check_heldout,
                          "productivity": _check_productivity, "mcd": _check_mcd}
