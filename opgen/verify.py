"""``opgen verify DIR``: rebuild a build from its own manifest and compare, split by split.

The manifest carries each recipe resolved (every default filled in), the seed, the limit and, per
split, which splits were built together (``built_with``: ``--only`` builds a split alone, and its
duplicates are judged within that build). verify rebuilds each such group into a temporary
directory and compares three things per split: the content digest of the files in DIR
(opgen.content), the one the manifest records, and the rebuild's. Where the manifest's versions
(opgen, pyarrow) equal this machine's, the files' sha256 must match too; elsewhere parquet bytes
may differ legitimately (pyarrow 21 and 26 encode the same rows differently) and are not compared.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from opgen import content, outdir
from opgen import manifest as M


class VerifyError(ValueError):
    """DIR is not a build verify can rebuild (no manifest, no resolved recipe)."""


@dataclass
class SplitResult:
    name: str
    ok: bool
    content: str  # the rebuild's content digest
    bytes_compared: bool
    problems: list[str] = field(default_factory=list)


@dataclass
class Report:
    build_dir: str
    versions_then: dict
    versions_now: dict
    splits: list[SplitResult]

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.splits)


def _recipes(man: dict, where: Path):
    from opgen import recipe as R

    recipes = []
    for n, r in enumerate(man.get("recipes", [])):
        res = r.get("resolved") if isinstance(r, dict) else None
        if not isinstance(res, dict):
            raise VerifyError(f"{where}: recipes[{n}] has no resolved recipe to rebuild from")
        data = {k: v for k, v in res.items() if v is not None}
        if isinstance(data.get("splits"), dict):
            data["splits"] = {name: _recipe_split(s) for name, s in data["splits"].items()}
        try:
            recipes.append(R.resolve(data, r.get("path", f"recipes[{n}]"), r.get("sha256", "")))
        except R.RecipeError as exc:
            raise VerifyError(f"{where}: recipes[{n}] no longer resolves with this opgen: {exc}") from None
    if not recipes:
        raise VerifyError(f"{where}: lists no recipes")
    return recipes


def verify(build_dir: Path, workers: int = 1) -> Report:
    from opgen import build as B

    build_dir = Path(build_dir)
    where = build_dir / "manifest.json"
    man = outdir.read_manifest(build_dir)
    if man is None:
        raise VerifyError(f"{where}: missing or not an opgen manifest")
    recipes = _recipes(man, where)
    digests = {s.name: s.digest for r in recipes for s in r.splits}
    all_names = [s.name for r in recipes for s in r.splits]
    then = man.get("versions") or {"opgen": man.get("opgen_version", "?")}
    now = M.versions()
    same_writer = all(then.get(k) == now[k] for k in ("opgen", "pyarrow"))
    groups: dict[tuple[str, ...], list[str]] = {}
    for name, section in man["splits"].items():
        if name not in digests:
            raise VerifyError(f"{where}: split {name!r} is not in the manifest's recipes")
        groups.setdefault(tuple(section.get("built_with") or list(man["splits"])), []).append(name)
    results: dict[str, SplitResult] = {}
    limit = man.get("limit")
    for group, names in groups.items():
        only = () if list(group) == all_names else tuple(group)
        with tempfile.TemporaryDirectory(prefix="opgen-verify-") as tmp:
            try:
                rebuilt = B.build(recipes, Path(tmp) / "build", workers=workers, only=only, limit=limit)
            except B.BuildError as exc:
                raise VerifyError(f"rebuilding {', '.join(group)} failed: {exc}") from None
            for name in names:
                results[name] = _compare(name, man["splits"][name], rebuilt["splits"][name], build_dir,
                                         digests[name], same_writer)
    return Report(str(build_dir), then, now, [results[n] for n in man["splits"]])


def _compare(name: str, recorded: dict, rebuilt: dict, build_dir: Path, digest: str, same_writer: bool) -> SplitResult:
    problems = []
    if recorded.get("digest") not in (None, digest):
        problems.append(f"the recipe's split digest is {digest[:12]}…, the manifest's {recorded['digest'][:12]}… "
                        "(a generator VERSION or option resolution changed)")
    files = [build_dir / f["path"] for f in recorded["files"]]
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        problems.append(f"files missing: {', '.join(missing)}")
        here = ""
    else:
        try:
            here = content.digest_files(files)
        except (OSError, ValueError) as exc:
            problems.append(f"cannot read its files ({exc})")
            here = ""
    want = rebuilt["content_sha256"]
    if here and here != want:
        problems.append(f"content of the files in {build_dir} {here[:12]}… differs from the rebuild's {want[:12]}…")
    rec = recorded.get("content_sha256")
    if rec is None:
        problems.append("the manifest records no content digest (an older opgen built it)")
    elif rec != want:
        problems.append(f"the manifest's content digest {rec[:12]}… differs from the rebuild's {want[:12]}…")
    if recorded["rows"] != rebuilt["rows"]:
        problems.append(f"{recorded['rows']} rows recorded, {rebuilt['rows']} rebuilt")
    if same_writer:
        old = [(f["path"], f["sha256"]) for f in recorded["files"]]
        new = [(f["path"], f["sha256"]) for f in rebuilt["files"]]
        if old != new:
            problems.append("parquet bytes differ from the rebuild's although opgen and pyarrow are the same versions")
    return SplitResult(name, not problems, want, same_writer, problems)


def render(report: Report) -> str:
    t, n = report.versions_then, report.versions_now
    lines = [f"built with opgen {t.get('opgen', '?')}, pyarrow {t.get('pyarrow', '?')}; "
             f"rebuilt with opgen {n['opgen']}, pyarrow {n['pyarrow']}"]
    for s in report.splits:
        if s.ok:
            how = "bytes identical" if s.bytes_compared else "bytes not compared (another parquet writer)"
            lines.append(f"ok   {s.name}: content {s.content[:16]}, {how}")
        else:
            lines.append(f"FAIL {s.name}: " + "; ".join(s.problems))
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
