"""``opgen verify DIR``: check a build against everything its manifest records, then rebuild it and compare.

What runs, in order (each is a :class:`Check` in the report, passed, failed or skipped with why):

- the manifest's fields: every field verify reads has the type it must have (a malformed one is a
  :class:`VerifyError` naming it, before any work);
- ``seed``: the top-level seed is the resolved recipes' (an int for one recipe or a ``--seed``
  build, else one per recipe);
- per recipe, ``sha256``: the recorded digest of the recipe's text is the file's, where the file it
  names is found from here (a path, or a bundled recipe); skipped otherwise;
- the folder: it holds the manifest's files and nothing else (a build owns its whole directory);
- per split, the files: each file's size, sha256 and row count are the manifest's;
- per split, the split digest (seed, generator, version, options) is the recipe's;
- per split, the content digest (opgen.content) of the files in DIR, the manifest's and the rebuild's
  agree, and the row counts;
- per split, bytes: where the manifest's versions (opgen, pyarrow) equal this machine's, the
  rebuild's files have the manifest's sha256. Elsewhere parquet bytes may differ legitimately
  (pyarrow 21 and 26 encode the same rows differently): the check is skipped and says so.

The rebuild uses the manifest alone: each recipe resolved (every default filled in), the seed,
the limit and, per split, which splits were built together (``built_with``: ``--only`` builds a
split alone, and its duplicates are judged within that build).
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from opgen import content, manifest
from opgen.errors import USAGE, OpgenError
from opgen.library import LibraryError, OperatorLibrary, digest_of_file, library_of, ref_of_manifest
from opgen.outdir import LIBRARY_FILE, listed_files

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
_HEX64 = re.compile(r"[0-9a-f]{64}")


class VerifyError(ValueError, OpgenError):
    """DIR is not a build verify can rebuild (no manifest, a malformed field, no resolved recipe);
    the message names the file and the field."""

    exit_code = USAGE


@dataclass(frozen=True)
class Check:
    scope: str  # "manifest", "folder", "recipe <path>" or a split's name
    name: str  # what was checked: fields, seed, sha256, extra files, files, split digest, content, rows, bytes
    status: str  # PASSED, FAILED or SKIPPED
    detail: str

    def as_dict(self) -> dict[str, str]:
        return {"scope": self.scope, "check": self.name, "status": self.status, "detail": self.detail}


@dataclass
class SplitResult:
    name: str
    ok: bool
    content: str  # the rebuild's content digest
    bytes_compared: bool
    problems: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)


@dataclass
class Report:
    build_dir: str
    versions_then: dict
    versions_now: dict
    splits: list[SplitResult]
    checks: list[Check] = field(default_factory=list)  # the build-wide ones (manifest, seed, recipes, folder)

    @property
    def ok(self) -> bool:
        return all(c.status != FAILED for c in self.all_checks())

    def all_checks(self) -> list[Check]:
        return self.checks + [c for s in self.splits for c in s.checks]

    def as_dict(self) -> dict[str, Any]:
        return {"build_dir": self.build_dir, "ok": self.ok, "versions_then": self.versions_then,
                "versions_now": self.versions_now, "checks": [c.as_dict() for c in self.checks],
                "splits": [{"name": s.name, "ok": s.ok, "content_sha256": s.content,
                            "bytes_compared": s.bytes_compared, "problems": s.problems,
                            "checks": [c.as_dict() for c in s.checks]} for s in self.splits]}


# ---- the manifest's fields ------------------------------------------------------------------

def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _bad(where: Path, field_: str, expected: str, got: object) -> VerifyError:
    shown = json.dumps(got)[:80] if not isinstance(got, str) else repr(got[:80])
    return VerifyError(f"{where}: field {field_!r}: expected {expected}, got {shown}")


def read(build_dir: Path) -> dict:
    """DIR/manifest.json with every field verify reads checked; raises VerifyError naming the field."""
    where = build_dir / "manifest.json"
    if not where.is_file():
        raise VerifyError(f"{where}: missing (is {build_dir} a directory written by `opgen build`?)")
    try:
        man = json.loads(where.read_bytes())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise VerifyError(f"{where}: not an opgen manifest (not readable JSON: {exc})") from None
    if not isinstance(man, dict) or "opgen_version" not in man:
        raise VerifyError(f"{where}: not an opgen manifest (no 'opgen_version')")
    _check_top(where, man)
    used: dict[str, str] = {}
    for name, s in man["splits"].items():
        _check_split(build_dir, where, man["splits"], name, s, used)
    return man


def _check_top(where: Path, man: dict) -> None:
    recipes = man.get("recipes")
    if not isinstance(recipes, list) or not recipes:
        raise _bad(where, "recipes", "a non-empty list of recipes", recipes)
    for n, r in enumerate(recipes):
        if not isinstance(r, dict):
            raise _bad(where, f"recipes[{n}]", "an object", r)
        if not isinstance(r.get("resolved"), dict):
            raise VerifyError(f"{where}: field 'recipes[{n}].resolved': no resolved recipe to rebuild from")
        for key in ("path", "sha256"):
            if key in r and not isinstance(r[key], str):
                raise _bad(where, f"recipes[{n}].{key}", "a string", r[key])
        if r.get("sha256") and not _HEX64.fullmatch(r["sha256"]):
            raise _bad(where, f"recipes[{n}].sha256", "64 lowercase hex digits", r["sha256"])
    seed = man.get("seed")
    if not (_is_int(seed) or (isinstance(seed, list) and seed and all(_is_int(s) for s in seed))):
        raise _bad(where, "seed", "an integer, or a list of integers (one per recipe)", seed)
    limit = man.get("limit")
    if limit is not None and not (_is_int(limit) and limit >= 1):
        raise _bad(where, "limit", "null or a positive integer", limit)
    versions = man.get("versions")
    if versions is not None and not (isinstance(versions, dict)
                                     and all(isinstance(v, str) for v in versions.values())):
        raise _bad(where, "versions", "an object of version strings", versions)
    splits = man.get("splits")
    if not isinstance(splits, dict) or not splits:
        raise _bad(where, "splits", "a non-empty object (split name -> its files; nothing to verify otherwise)",
                   splits)


def _check_split(build_dir: Path, where: Path, splits: dict, name: str, s: object, used: dict[str, str]) -> None:
    at = f"splits.{name}"
    if not isinstance(s, dict):
        raise _bad(where, at, "an object", s)
    if not _is_int(s.get("rows")) or s["rows"] < 0:
        raise _bad(where, f"{at}.rows", "a non-negative integer", s.get("rows"))
    files = s.get("files")
    if not isinstance(files, list) or not files:
        raise _bad(where, f"{at}.files", "a non-empty list", files)
    for i, f in enumerate(files):
        _check_file(build_dir, where, f"{at}.files[{i}]", f)
        if f["path"] in used:
            raise VerifyError(f"{where}: field '{at}.files[{i}].path': {f['path']!r} is listed twice "
                              f"(also by splits.{used[f['path']]})")
        used[f["path"]] = name
    for key in ("content_sha256", "digest"):
        if s.get(key) is not None and not isinstance(s[key], str):
            raise _bad(where, f"{at}.{key}", "a string", s[key])
    built_with = s.get("built_with")
    if built_with is not None and not (isinstance(built_with, list) and name in built_with
                                       and all(isinstance(b, str) and b in splits for b in built_with)):
        raise _bad(where, f"{at}.built_with", "a list of this manifest's split names including its own", built_with)


def _check_file(build_dir: Path, where: Path, at: str, f: object) -> None:
    if not isinstance(f, dict):
        raise _bad(where, at, "an object", f)
    rel = f.get("path")
    # a manifest is data: it must not make verify read files outside the build
    if not isinstance(rel, str) or not rel.endswith(".parquet") or Path(rel).is_absolute() \
            or not (build_dir / rel).resolve().is_relative_to(build_dir.resolve()):
        raise _bad(where, f"{at}.path", "a .parquet file inside the build directory", rel)
    if not isinstance(f.get("sha256"), str) or not _HEX64.fullmatch(f["sha256"]):
        raise _bad(where, f"{at}.sha256", "64 lowercase hex digits", f.get("sha256"))
    for key in ("rows", "bytes"):
        if not _is_int(f.get(key)) or f[key] < 0:
            raise _bad(where, f"{at}.{key}", "a non-negative integer", f.get(key))


def _recipes(man: dict, where: Path, library: OperatorLibrary):
    """The manifest's resolved recipes, over ``library`` (the one its ``library`` section names,
    found by opgen.library.library_of): a recorded recipe that names a library itself is refused."""
    from opgen import recipe as R

    recipes = []
    for n, r in enumerate(man["recipes"]):
        res = r["resolved"]
        if "library" in res:
            raise VerifyError(f"{where}: field 'recipes[{n}].resolved.library': a manifest names its library by name "
                              "and digest in 'library' only; a recorded recipe naming one is not opgen's (nothing "
                              "it names is loaded)")
        _refuse_imports(res, f"{where}: field 'recipes[{n}].resolved")
        data = {k: v for k, v in res.items() if v is not None}
        if isinstance(data.get("splits"), dict):
            data["splits"] = {name: _recipe_split(s) for name, s in data["splits"].items()}
        try:
            recipes.append(R.resolve(data, r.get("path", f"recipes[{n}]"), r.get("sha256", ""), library=library))
        except R.RecipeError as exc:
            raise VerifyError(f"{where}: recipes[{n}] no longer resolves with this opgen: {exc}") from None
    return recipes


def _refuse_imports(resolved: dict, where: str) -> None:
    """A recorded recipe, and each training recipe file its ``leakage.avoid_programs`` names, must
    name its generators by registered name: verify imports no module a manifest names (a
    ``package.module:Class`` generator is refused, as a library path is; the avoided recipes are
    replayed over the manifest's library, never one they name: opgen.leakage.training_programs)."""
    from opgen import generate

    def check(recipe: object, at: str) -> None:  # every "generator" in it: the splits', an mcd pool's
        stack = [recipe]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                gen = node.get("generator")
                if isinstance(gen, str) and ":" in gen and gen not in generate.registry():
                    raise VerifyError(f"{at}: generator {gen!r} is an import path; verify imports no module a "
                                      "manifest names (register the generator and rebuild with opgen build)")
                stack.extend(node.values())
            elif isinstance(node, list):
                stack.extend(node)

    check(resolved, where)
    leak = resolved.get("leakage")
    for k, avoid in enumerate(leak.get("avoid_programs") or [] if isinstance(leak, dict) else []):
        path = Path(str(avoid))
        if not path.is_file():
            continue  # a bundled recipe's name
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise VerifyError(f"{where}.leakage.avoid_programs[{k}]: {path}: cannot read it ({exc})") from None
        check(data, f"{where}.leakage.avoid_programs[{k}]: {path}")


# ---- the build-wide checks ------------------------------------------------------------------

def _seed_check(man: dict, recipes: list) -> Check:
    seed, seeds = man["seed"], [r.seed for r in recipes]
    if isinstance(seed, list):
        ok = seed == seeds
    else:
        ok = all(s == seed for s in seeds)
    if ok:
        return Check("manifest", "seed", PASSED, f"seed {seed} is the resolved recipes' ({', '.join(map(str, seeds))})")
    return Check("manifest", "seed", FAILED, f"the manifest's seed {seed} is not the resolved recipes' "
                                             f"({', '.join(map(str, seeds))})")


def _recipe_file(path: str) -> Path | None:
    from opgen.resources import recipe_path

    if not path or path.startswith("<"):
        return None
    p = Path(path)
    if p.is_file():
        return p
    if p.parent.name == "datasets":  # a bundled recipe is recorded as datasets/<name>.yaml
        try:
            return recipe_path(p.name)
        except FileNotFoundError:
            return None
    return None


def _recipe_check(r: dict) -> Check:
    import hashlib

    from opgen import recipe as R

    path, recorded = r.get("path", ""), r.get("sha256", "")
    scope = f"recipe {path or r['resolved'].get('name', '?')}"
    if not recorded:
        return Check(scope, "sha256", SKIPPED, "the manifest records no sha256 for this recipe")
    found = _recipe_file(path)
    if found is None:
        return Check(scope, "sha256", SKIPPED, f"not compared: no file {path!r} from here "
                                               "(the rebuild uses the manifest's resolved recipe)")
    try:
        now = hashlib.sha256(R._read_text(found, str(found)).encode()).hexdigest()
    except (OSError, R.RecipeError) as exc:
        return Check(scope, "sha256", FAILED, f"cannot read {found} ({exc})")
    if now == recorded:
        return Check(scope, "sha256", PASSED, f"{found}: sha256 {recorded[:12]}… is the manifest's")
    return Check(scope, "sha256", FAILED, f"{found}: sha256 {now[:12]}… is not the manifest's {recorded[:12]}… "
                                          "(the recipe changed since the build)")


def _library_check(build_dir: Path, library: OperatorLibrary) -> Check:
    """The build folder's copy of its library (opgen.outdir.LIBRARY_FILE), read as data: its content
    digest is the manifest's."""
    path = build_dir / LIBRARY_FILE
    if not path.is_file():
        return Check("library", "file", FAILED, f"{path} is missing (a build keeps the canonical file of a library "
                                                 "not the study's)")
    try:
        digest = digest_of_file(path)
    except LibraryError as exc:
        return Check("library", "file", FAILED, str(exc))
    if digest != library.digest:
        return Check("library", "file", FAILED, f"{path}: content digest {digest[:12]}… is not the manifest's "
                                                f"{library.digest[:12]}…")
    return Check("library", "file", PASSED, f"{LIBRARY_FILE}: library {library.name!r}, content digest "
                                            f"{digest[:12]}… is the manifest's")


def _folder_check(build_dir: Path, man: dict) -> Check:
    listed = listed_files(man)
    try:
        present = sorted(str(p.relative_to(build_dir)) for p in build_dir.iterdir())
    except OSError as exc:
        return Check("folder", "extra files", FAILED, f"cannot list {build_dir} ({exc.strerror})")
    # a file listed under a subfolder makes the subfolder expected
    expected = listed | {Path(p).parts[0] for p in listed}
    extra = [p for p in present if p not in expected]
    if extra:
        shown = ", ".join(extra[:5]) + (f" and {len(extra) - 5} more" if len(extra) > 5 else "")
        return Check("folder", "extra files", FAILED, f"{len(extra)} not in the manifest: {shown} "
                                                      "(a stale or foreign file; a build owns its whole directory)")
    return Check("folder", "extra files", PASSED, f"holds the manifest's {len(listed) - 1} files and nothing else")


# ---- per split ------------------------------------------------------------------------------

def _files_check(name: str, recorded: dict, build_dir: Path, bar: Any) -> tuple[Check, str]:
    """The files against the manifest (size, sha256, rows) and, when all are readable, their content digest."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from opgen.write import sha256_of

    problems, digests = [], []
    for f in recorded["files"]:
        path = build_dir / f["path"]
        try:
            if not path.is_file():
                problems.append(f"{f['path']} is missing")
                continue
            size = path.stat().st_size
            if size != f["bytes"]:
                problems.append(f"{f['path']}: {size} bytes, the manifest's {f['bytes']}")
            sha = sha256_of(path)
            if sha != f["sha256"]:
                problems.append(f"{f['path']}: sha256 {sha[:12]}… is not the manifest's {f['sha256'][:12]}… "
                                "(rewritten or re-encoded after the build)")
            try:
                rows = pq.ParquetFile(path).metadata.num_rows
                digests.append(content.digest_file(path))
            except (pa.ArrowException, ValueError) as exc:
                problems.append(f"{f['path']}: not a readable parquet file ({exc})")
                continue
            if rows != f["rows"]:
                problems.append(f"{f['path']}: {rows} rows, the manifest's {f['rows']}")
        except OSError as exc:
            problems.append(f"{f['path']}: cannot read it ({exc.strerror or exc})")
        finally:
            if bar is not None:
                bar.update(1)
    here = content.combine(digests) if len(digests) == len(recorded["files"]) else ""
    n = len(recorded["files"])
    if problems:
        return Check(name, "files", FAILED, "; ".join(problems)), here
    return Check(name, "files", PASSED, f"{n} file{'s' * (n != 1)}: size, sha256 and rows are the manifest's"), here


def _compare(name: str, recorded: dict, rebuilt: dict, build_dir: Path, digest: str, same_writer: bool,
             then: dict, now: dict, bar: Any = None) -> SplitResult:
    checks = []
    files, here = _files_check(name, recorded, build_dir, bar)
    checks.append(files)
    if recorded.get("digest") is None:
        checks.append(Check(name, "split digest", SKIPPED, "the manifest records no split digest"))
    elif recorded["digest"] != digest:
        checks.append(Check(name, "split digest", FAILED,
                            f"the recipe's split digest is {digest[:12]}…, the manifest's {recorded['digest'][:12]}… "
                            "(a generator VERSION or option resolution changed)"))
    else:
        checks.append(Check(name, "split digest", PASSED, f"{digest[:12]}… is the resolved recipe's"))
    want = rebuilt["content_sha256"]
    problems = []
    if here and here != want:
        problems.append(f"content of the files in {build_dir} {here[:12]}… differs from the rebuild's {want[:12]}…")
    elif not here:
        problems.append("content of the files in DIR not digested (see files)")
    rec = recorded.get("content_sha256")
    if rec is None:
        problems.append("the manifest records no content digest (an older opgen built it)")
    elif rec != want:
        problems.append(f"the manifest's content digest {rec[:12]}… differs from the rebuild's {want[:12]}…")
    checks.append(Check(name, "content", FAILED, "; ".join(problems)) if problems else
                  Check(name, "content", PASSED, f"{want[:16]} in the files, the manifest and the rebuild"))
    if recorded["rows"] != rebuilt["rows"]:
        checks.append(Check(name, "rows", FAILED, f"{recorded['rows']} rows recorded, {rebuilt['rows']} rebuilt"))
    else:
        checks.append(Check(name, "rows", PASSED, f"{rebuilt['rows']} rows recorded and rebuilt"))
    if same_writer:
        old = [(f["path"], f["sha256"]) for f in recorded["files"]]
        new = [(f["path"], f["sha256"]) for f in rebuilt["files"]]
        if old != new:
            checks.append(Check(name, "bytes", FAILED, "parquet bytes differ from the rebuild's although opgen "
                                                       "and pyarrow are the same versions"))
        elif files.status != PASSED:
            checks.append(Check(name, "bytes", FAILED, "the rebuild's sha256 are the manifest's, but the files in "
                                                       "DIR are not (see files)"))
        else:
            checks.append(Check(name, "bytes", PASSED, "identical to the rebuild's (same opgen and pyarrow)"))
    else:
        checks.append(Check(name, "bytes", SKIPPED,
                            f"not compared with the rebuild's: another parquet writer (opgen {then.get('opgen', '?')}"
                            f", pyarrow {then.get('pyarrow', '?')} then; opgen {now['opgen']}, pyarrow "
                            f"{now['pyarrow']} now)"))
    failed = [c.detail for c in checks if c.status == FAILED]
    bytes_ok = any(c.name == "bytes" and c.status == PASSED for c in checks)
    return SplitResult(name, not failed, want, bytes_ok, failed, checks)


def verify(build_dir: Path, workers: int = 1, progress: bool = False,
           library: OperatorLibrary | None = None) -> Report:
    """Verify ``build_dir`` (module docstring). Its operator library is the one its manifest names,
    found by digest (opgen.library.library_of: ``library``, the one the user gave, the study's or
    the user's store's; UnknownLibrary when neither): nothing the folder holds is loaded."""
    from opgen import build

    build_dir = Path(build_dir)
    where = build_dir / "manifest.json"
    man = read(build_dir)
    lib = library_of(ref_of_manifest(man, str(where)), library, f"{where}: ")
    recipes = _recipes(man, where, lib)
    digests = {s.name: s.digest for r in recipes for s in r.splits}
    all_names = [s.name for r in recipes for s in r.splits]
    then = man.get("versions") or {"opgen": man.get("opgen_version", "?")}
    now = manifest.versions()
    same_writer = all(then.get(k) == now[k] for k in ("opgen", "pyarrow"))
    checks = [Check("manifest", "fields", PASSED, "recipes, seed, limit, versions, splits and their files are "
                                                   "well-formed"),
              _seed_check(man, recipes)]
    checks += [_recipe_check(r) for r in man["recipes"]]
    if not lib.is_study:
        checks.append(_library_check(build_dir, lib))
    checks.append(_folder_check(build_dir, man))
    groups: dict[tuple[str, ...], list[str]] = {}
    for name, section in man["splits"].items():
        if name not in digests:
            raise VerifyError(f"{where}: split {name!r} is not in the manifest's recipes")
        groups.setdefault(tuple(section.get("built_with") or list(man["splits"])), []).append(name)
    results: dict[str, SplitResult] = {}
    limit = man.get("limit")
    bar = None
    if progress:  # tqdm only when asked for (its import costs start-up)
        from tqdm import tqdm

        bar = tqdm(total=sum(len(s["files"]) for s in man["splits"].values()), desc="check files", unit="file",
                   file=sys.stderr, leave=False)
    try:
        for group, names in groups.items():
            only = () if list(group) == all_names else tuple(group)
            with tempfile.TemporaryDirectory(prefix="opgen-verify-") as tmp:
                try:
                    rebuilt = build.build(recipes, Path(tmp) / "build", workers=workers, only=only, limit=limit,
                                          progress=progress)
                except build.BuildError as exc:
                    raise VerifyError(f"rebuilding {', '.join(group)} failed: {exc}") from None
                for name in names:
                    results[name] = _compare(name, man["splits"][name], rebuilt["splits"][name], build_dir,
                                             digests[name], same_writer, then, now, bar)
    finally:
        if bar is not None:
            bar.close()
    return Report(str(build_dir), then, now, [results[n] for n in man["splits"]], checks)


_MARK = {PASSED: "ok  ", FAILED: "FAIL", SKIPPED: "skip"}


def render(report: Report) -> str:
    """One line per build-wide check, then per split its verdict and the checks that ran (passed, skipped)."""
    t, n = report.versions_then, report.versions_now
    lines = [f"built with opgen {t.get('opgen', '?')}, pyarrow {t.get('pyarrow', '?')}; "
             f"rebuilt with opgen {n['opgen']}, pyarrow {n['pyarrow']}"]
    for c in report.checks:
        lines.append(f"{_MARK[c.status]} {c.scope} ({c.name}): {c.detail}")
    for s in report.splits:
        if s.ok:
            how = "bytes identical" if s.bytes_compared else "bytes not compared (another parquet writer)"
            lines.append(f"ok   {s.name}: content {s.content[:16]}, {how}")
        else:
            lines.append(f"FAIL {s.name}: " + "; ".join(s.problems))
        passed = [c.name for c in s.checks if c.status == PASSED]
        skipped = [f"{c.name} ({c.detail})" for c in s.checks if c.status == SKIPPED]
        lines.append("     passed: " + (", ".join(passed) or "none"))
        if skipped:
            lines.append("     skipped: " + "; ".join(skipped))
    ran = report.all_checks()
    lines.append(f"{sum(c.status == PASSED for c in ran)} checks passed, {sum(c.status == FAILED for c in ran)} "
                 f"failed, {sum(c.status == SKIPPED for c in ran)} skipped")
    return "\n".join(lines)


def _recipe_split(split: object) -> object:
    """A resolved split as recipe text: unset keys left out, a prompt template named by its file
    (the resolved form records ``{"file", "sha256"}``; the rebuild reads the file again)."""
    if not isinstance(split, dict):
        return split
    out = {k: v for k, v in split.items() if v is not None}
    template = out.get("prompt_template")
    if isinstance(template, dict):
        out["prompt_template"] = template.get("file")
    return out
