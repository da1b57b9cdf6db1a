"""Build directory → Hub tree → one commit.

A build (``manifest.json`` and its parquet files, docs/contracts.md "Build directory") becomes one
Hub dataset with one config per split family::

    README.md                                        the dataset card (opgen.card)
    manifest.json                                    the build's manifest, byte for byte
    data/<config>/<split>-00000-of-00001.parquet     the build's files, byte for byte, renamed

Every file is copied while its sha256 is checked against the manifest, so the tree (and what a
push uploads, which is that same tree) holds exactly the bytes the builder recorded.
huggingface_hub is imported only inside :func:`push`. The plan's types (:class:`Plan`, :class:`Split`,
:class:`BuildFile`) live in opgen.hubplan, which the card reads too.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opgen import card, outdir
from opgen.errors import OpgenError
from opgen.hubplan import BuildFile, Plan, Split
from opgen.library import LibraryError, OperatorLibrary, digest_of_file, library_of, ref_of_manifest
from opgen.outdir import LIBRARY_FILE

MANIFEST = "manifest.json"
CARD = "README.md"

_SPLIT_KEYS = ("family", "kind", "mode", "prompt_format", "answer_format", "rows", "files")
_FILE_KEYS = ("path", "rows", "sha256", "bytes")
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_CHUNK = 1 << 20


class HubError(OpgenError):
    """A build that cannot be published as it is, or a push that failed; the message names the file
    or field at fault."""

    exit_code = 1


class MissingToken(HubError):
    pass


class MissingExtra(HubError):
    """huggingface_hub is not installed."""


def hub_name(text: str) -> str:
    """A config or split name the Hub accepts: word characters only (``heldout_trees_d1-8`` →
    ``heldout_trees_d1_8``), so the study's names stay recognisable."""
    return re.sub(r"[^0-9A-Za-z_]+", "_", text).strip("_")


def check_repo_id(repo_id: str) -> str:
    """``ORG/NAME`` as the Hub spells repository ids; raises ValueError saying what is wrong."""
    if not _REPO_ID.match(repo_id) or "--" in repo_id or ".." in repo_id or repo_id.endswith(".git"):
        raise ValueError(f"{repo_id!r} is not a Hub repository id of the form ORG/NAME "
                         "(letters, digits, '-', '_', '.'; no '--' or '..')")
    if len(repo_id.split("/")[1]) > 96:
        raise ValueError(f"{repo_id!r}: the name part is longer than 96 characters")
    return repo_id


def read_manifest(build_dir: Path) -> tuple[dict, bytes]:
    path = build_dir / MANIFEST
    if not path.is_file():
        raise HubError(f"{path}: no manifest (is {build_dir} a directory written by `opgen build`?)")
    raw = path.read_bytes()
    try:
        manifest = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HubError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(manifest, dict):
        raise HubError(f"{path}: expected a JSON object at the top level")
    _object(str(path), manifest, ("opgen_version", "splits"))
    if not isinstance(manifest["splits"], dict) or not manifest["splits"]:
        raise HubError(f"{path}: field 'splits' must be a non-empty object")
    return manifest, raw


def _object(where: str, value: object, keys: tuple[str, ...]) -> dict:
    """``value``, an object holding every field of ``keys``."""
    if not isinstance(value, dict):
        raise HubError(f"{where}: expected an object")
    for key in keys:
        if key not in value:
            raise HubError(f"{where}: missing field {key!r}")
    return value


def _build_file(build_dir: Path, where: str, entry: object) -> BuildFile:
    entry = _object(where, entry, _FILE_KEYS)
    rel = entry["path"]
    if not isinstance(rel, str) or not rel.endswith(".parquet"):
        raise HubError(f"{where}.path: expected a relative path to a .parquet file, got {rel!r}")
    # A manifest is data: it must not make us read (and publish) files outside the build.
    resolved = (build_dir / rel).resolve()
    if Path(rel).is_absolute() or not resolved.is_relative_to(build_dir.resolve()):
        raise HubError(f"{where}.path: {rel!r} points outside the build directory")
    for key in ("rows", "bytes"):
        if not isinstance(entry[key], int) or isinstance(entry[key], bool) or entry[key] < 0:
            raise HubError(f"{where}.{key}: expected a non-negative integer, got {entry[key]!r}")
    digest = entry["sha256"]
    if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise HubError(f"{where}.sha256: expected 64 lowercase hex digits, got {digest!r}")
    return BuildFile(rel, entry["rows"], digest, entry["bytes"])


def _entry(build_dir: Path, mpath: Path, build_name: str, info: object) -> tuple:
    """One manifest split, checked: (build name, Hub name, family, its manifest entry, its files)."""
    where = f"{mpath}: splits.{build_name}"
    info = _object(where, info, _SPLIT_KEYS)
    if not isinstance(info["files"], list) or not info["files"]:
        raise HubError(f"{where}.files: expected a non-empty list")
    files = tuple(_build_file(build_dir, f"{where}.files[{i}]", f) for i, f in enumerate(info["files"]))
    if sum(f.rows for f in files) != info["rows"]:
        raise HubError(f"{where}: rows is {info['rows']} but its files hold {sum(f.rows for f in files)}")
    name = hub_name(build_name)
    if not name or name == "all":  # datasets reserves "all" for the union of splits
        raise HubError(f"{where}: the split name {build_name!r} has no usable Hub name")
    family = str(info["family"])
    if not hub_name(family):
        raise HubError(f"{where}.family: {family!r} has no usable Hub config name")
    return build_name, name, family, info, files


def _benchmarks(manifest: dict, infos: dict[str, dict]) -> dict[str, str]:
    """Build split name -> the Hub config of its benchmark: the splits of a recipe that has both a
    train and an eval split, all of one row kind, under the recipe's name (made Hub-safe)."""
    out: dict[str, str] = {}
    for rec in manifest.get("recipes") or []:
        if not isinstance(rec, dict):
            continue
        names = [n for n in ((rec.get("resolved") or {}).get("splits") or {}) if n in infos]
        roles = {str(infos[n].get("role", "")) for n in names}
        kinds = {str(infos[n]["kind"]) for n in names}
        config = hub_name(str(rec.get("name") or ""))
        if {"train", "eval"} <= roles and len(kinds) == 1 and config and config != "all":
            out.update({n: config for n in names if n not in out})
    return out


def _check_unique(mpath: Path, splits: list[Split], benchmark: dict[str, str] | None = None) -> None:
    """No two families in one config (a benchmark's config holds its recipe's), no two splits under
    one Hub name, no file listed twice."""
    families: dict[str, str] = {}
    for s in splits:
        group = f"recipe {s.config}" if benchmark and s.build_name in benchmark else s.family
        other = families.setdefault(s.config, group)
        if other != group:
            raise HubError(f"{mpath}: families {other!r} and {s.family!r} both become the Hub config "
                           f"{s.config!r}; rename one")
    seen: dict[tuple[str, str], str] = {}
    for s in splits:
        other = seen.setdefault((s.config, s.name), s.build_name)
        if other != s.build_name:
            raise HubError(f"{mpath}: splits {other!r} and {s.build_name!r} of config {s.config!r} "
                           f"both become the Hub split {s.name!r}; rename one")
    used: dict[str, str] = {}
    for s in splits:
        for f in s.files:
            other = used.setdefault(f.path, s.build_name)
            if other != s.build_name or sum(g.path == f.path for g in s.files) > 1:
                raise HubError(f"{mpath}: file {f.path!r} is listed more than once")


def plan(build_dir: Path, library: OperatorLibrary | None = None) -> Plan:
    """Read the manifest and decide every file's place in the tree (reads no parquet). The build's
    operator library is the one the manifest names, found by digest (opgen.library.library_of:
    ``library``, the one the user gave, the study's or the user's store's): UnknownLibrary first,
    before anything is written, when it cannot be had."""
    build_dir = Path(build_dir)
    manifest, raw = read_manifest(build_dir)
    mpath = build_dir / MANIFEST
    lib = library_of(ref_of_manifest(manifest, str(mpath)), library, f"{mpath}: ")
    entries = [_entry(build_dir, mpath, b, manifest["splits"][b]) for b in sorted(manifest["splits"])]

    # One config per family; a family mixing row kinds (rl and sft rows have different columns)
    # is split by kind, because every split of a config must share one schema. A benchmark (a
    # recipe with train and eval splits of one kind) is one config named after the recipe, so
    # load_dataset(repo) gives its train and test together.
    kinds: dict[str, set[str]] = {}
    for _, _, family, info, _ in entries:
        kinds.setdefault(family, set()).add(str(info["kind"]))
    benchmark = _benchmarks(manifest, {b: info for b, _, _, info, _ in entries})
    config_of = {build_name: benchmark.get(build_name) or (
        hub_name(family) if len(kinds[family]) == 1 else hub_name(f"{family}_{info['kind']}"))
        for build_name, _, family, info, _ in entries}
    names = _role_names([(config_of[b], b, name, info.get("role")) for b, name, _, info, _ in entries])
    splits = []
    for build_name, name, family, info, files in entries:
        splits.append(Split(build_name, names[build_name], config_of[build_name], family, str(info["kind"]),
                            str(info["mode"]), str(info["prompt_format"]), str(info["answer_format"]),
                            int(info["rows"]), files, info, name))
    splits.sort(key=lambda s: (s.config, s.name))
    _check_unique(mpath, splits, benchmark)
    first = next(iter(manifest["splits"]))  # manifest order is build order
    return Plan(build_dir, manifest, hashlib.sha256(raw).hexdigest(), tuple(splits), config_of[first], lib)


# The Hub's (and datasets') conventional split names per role.
ROLE_SPLITS = {"train": "train", "eval": "test"}


def _role_names(entries: list[tuple[str, str, str, object]]) -> dict[str, str]:
    """Hub split names: ``train`` / ``test`` for the one split of that role in its config, where
    that is unambiguous; else (two eval splits in one config, no role in the manifest, a name
    clash) every split of the config keeps its file name. ``entries``: (config, build name, file
    name, role)."""
    by_config: dict[str, list[tuple[str, str, object]]] = {}
    for config, build_name, file_name, role in entries:
        by_config.setdefault(config, []).append((build_name, file_name, role))
    out: dict[str, str] = {}
    for members in by_config.values():
        roles = [role for _, _, role in members]
        proposed = {b: ROLE_SPLITS[role] if role in ROLE_SPLITS and roles.count(role) == 1 else f
                    for b, f, role in members}
        clash = len(set(proposed.values())) < len(proposed)
        out.update({b: f for b, f, _ in members} if clash else proposed)
    return out


def _copy_verified(src: Path, dst: Path, f: BuildFile) -> None:
    if not src.is_file():
        raise HubError(f"{src}: listed in the manifest but missing from the build")
    digest = hashlib.sha256()
    size = 0
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        while chunk := fin.read(_CHUNK):
            digest.update(chunk)
            fout.write(chunk)
            size += len(chunk)
    if digest.hexdigest() != f.sha256:
        raise HubError(f"{src}: sha256 {digest.hexdigest()} does not match the manifest's {f.sha256}; "
                       "the file changed after the build (rebuild it, or restore the file)")
    if size != f.bytes:
        raise HubError(f"{src}: {size} bytes, the manifest says {f.bytes}")


def _check_parquet(plan_: Plan, staged: Path) -> None:
    """Row counts as the manifest says, and one schema per config (datasets casts a config's
    splits to the first one's features, so a mismatch would fail at load time, not here)."""
    import pyarrow.parquet as pq

    for config in plan_.configs:
        first: tuple[str, object] | None = None
        for s in plan_.splits_of(config):
            for f, rel in zip(s.files, s.repo_paths()):
                try:
                    meta = pq.read_metadata(staged / rel)
                except Exception as exc:  # pyarrow raises several types for a damaged file
                    raise HubError(f"{plan_.build_dir / f.path}: not a readable parquet file ({exc})") from None
                if meta.num_rows != f.rows:
                    raise HubError(f"{plan_.build_dir / f.path}: {meta.num_rows} rows, the manifest says {f.rows}")
                schema = meta.schema.to_arrow_schema()
                if first is None:
                    first = (f.path, schema)
                elif not schema.equals(first[1], check_metadata=False):
                    raise HubError(f"config {config!r}: {f.path} and {first[0]} have different columns; "
                                   "every split of a family must have one row kind")


TREE_ENTRIES = frozenset({CARD, MANIFEST, "data", LIBRARY_FILE})  # what a tree holds at its top
DRY_RUN = "opgen push --dry-run"


def write_tree(build_dir: Path, out_dir: Path, repo_id: str, *, license: str = "apache-2.0",
               pretty_name: str | None = None, force: bool = False, library: OperatorLibrary | None = None) -> Plan:
    """Write the exact Hub tree of a build to ``out_dir``: a new or empty directory, or (``force``)
    a tree this function wrote before; never another folder, with or without ``force``.

    Under the output-directory discipline of every command that writes (opgen.outdir.committed):
    ``out_dir`` is locked, the tree is staged beside it (``README.md`` last) and swapped in whole, so
    ``out_dir`` holds a complete, verified tree or is left as it was (a killed run's staging
    directory is removed by the next one).
    """
    out_dir = Path(out_dir)
    check_repo_id(repo_id)
    plan_ = plan(build_dir, library)
    try:
        # every entry is let through here and judged by _check_replace, under the lock
        with outdir.committed(out_dir, lambda name: True, DRY_RUN, CARD) as tmp:
            _check_replace(outdir.absolute(out_dir), force)
            _fill_tree(plan_, tmp, repo_id, license, pretty_name)
    except outdir.OutputError as exc:
        raise HubError(str(exc)) from None
    return plan_


def _check_replace(out_dir: Path, force: bool) -> None:
    """Under the lock: ``out_dir`` is missing or empty, or an earlier tree and ``force`` given."""
    if not out_dir.is_dir() or not any(out_dir.iterdir()):
        return
    names = sorted(p.name for p in out_dir.iterdir())
    if outdir.read_manifest(out_dir) is None or not (out_dir / CARD).is_file() or not set(names) <= TREE_ENTRIES:
        raise HubError(f"{out_dir}: already exists and is not an empty directory, and not a tree {DRY_RUN} wrote "
                       f"(it holds {', '.join(names[:3])}{', …' if len(names) > 3 else ''}); it is never "
                       f"replaced, not even with --force; choose a new path")
    if not force:
        raise HubError(f"{out_dir}: already holds a tree {DRY_RUN} wrote; pass --force to replace it whole, "
                       f"or choose a new path")


def _fill_tree(plan_: Plan, tmp: Path, repo_id: str, license: str, pretty_name: str | None) -> None:
    """The tree's files into the empty directory ``tmp``, the card last."""
    for f, rel in plan_.placements():
        dst = tmp / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        _copy_verified(plan_.build_dir / f.path, dst, f)
    _check_parquet(plan_, tmp)
    if not plan_.library.is_study:  # the build's copy of its library, read as data and checked, ships too
        src = plan_.build_dir / LIBRARY_FILE
        try:
            found = digest_of_file(src)
        except LibraryError as exc:
            raise HubError(f"{exc} (a build of a library not the study's keeps it as {LIBRARY_FILE})") from None
        if found != plan_.library.digest:
            raise HubError(f"{src}: content digest {found[:12]} is not the manifest's library "
                           f"({plan_.library.digest[:12]})")
        shutil.copyfile(src, tmp / LIBRARY_FILE)
    # Re-check the manifest we planned from is the one we ship (a rebuild may have replaced it).
    raw = (plan_.build_dir / MANIFEST).read_bytes()
    if hashlib.sha256(raw).hexdigest() != plan_.manifest_sha256:
        raise HubError(f"{plan_.build_dir / MANIFEST}: changed while the tree was being written")
    (tmp / MANIFEST).write_bytes(raw)
    text = card.render(plan_, tmp, repo_id, license=license, pretty_name=pretty_name)
    (tmp / CARD).write_text(text, encoding="utf-8")
    os.chmod(tmp, 0o755)  # the tree is meant to be shared


def tree_files(root: Path) -> list[str]:
    """Every file under ``root`` as a repo path (posix, sorted): what one commit uploads."""
    root = Path(root)
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def _hf_hub() -> Any:
    """huggingface_hub, or a HubError naming the extra that installs it."""
    try:
        import huggingface_hub
    except ImportError as exc:
        raise MissingExtra(f"pushing to the Hub needs huggingface_hub (the 'hub' extra: pip install 'opgen[hub]'): "
                           f"{exc}") from None
    return huggingface_hub


def resolve_token(token: str | None = None) -> str:
    """An explicit token, else HF_TOKEN, else the login cache (huggingface_hub.get_token checks both)."""
    if token:
        return token
    get_token = _hf_hub().get_token

    try:
        found = get_token()
    except Exception as exc:  # an OIDC exchange that was asked for (HF_OIDC_RESOURCE) and failed
        raise MissingToken(f"could not obtain a Hugging Face token: {exc}") from None
    if not found:
        raise MissingToken("no Hugging Face token found: run `hf auth login` (or `huggingface-cli login`) "
                           "once on this machine, or set the HF_TOKEN environment variable to a token "
                           "with write access (https://huggingface.co/settings/tokens)")
    return found


def _check_staging_room(plan_: Plan) -> None:
    """Before any file is copied: TMPDIR can hold the tree a push stages (the build's files)."""
    tmp = tempfile.gettempdir()
    need = sum(f.bytes for f, _ in plan_.placements()) + (1 << 20)
    free = shutil.disk_usage(tmp).free
    if free < need:
        raise HubError(f"{tmp}: {free / 2**20:,.1f} MiB free; a push stages a verified copy of the build "
                       f"({need / 2**20:,.1f} MiB) there before its one commit; free space or point TMPDIR "
                       f"elsewhere; nothing was uploaded")


@dataclass(frozen=True)
class PushResult:
    repo_id: str
    revision: str | None
    files: tuple[str, ...]
    commit_url: str
    plan: Plan


def push(build_dir: Path, repo_id: str, *, private: bool = False, revision: str | None = None,
         token: str | None = None, license: str = "apache-2.0", pretty_name: str | None = None,
         library: OperatorLibrary | None = None) -> PushResult:
    """Publish a build as one commit: verify and stage the tree locally, then create the repo
    (if missing), the branch (if ``revision`` names one that is missing) and one commit holding
    every file. Nothing reaches the Hub unless the whole tree verified."""
    check_repo_id(repo_id)
    hf = _hf_hub()
    token = resolve_token(token)
    CommitOperationAdd, HfApi = hf.CommitOperationAdd, hf.HfApi

    # Staged in TMPDIR (room for one copy of the build): what is uploaded is what was verified,
    # whatever happens to the build directory meanwhile. The room is checked before the copy.
    _check_staging_room(plan(build_dir))
    with tempfile.TemporaryDirectory(prefix="opgen-push-") as tmp:
        staged = Path(tmp) / "tree"
        plan_ = write_tree(build_dir, staged, repo_id, license=license, pretty_name=pretty_name, library=library)
        files = tree_files(staged)
        operations = [CommitOperationAdd(path_in_repo=rel, path_or_fileobj=str(staged / rel)) for rel in files]
        api = HfApi(token=token)
        recipes = ", ".join(r.get("name", "?") for r in plan_.manifest.get("recipes", [])) or "a build"
        rows = sum(s.rows for s in plan_.splits)
        try:
            api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
            if revision:
                api.create_branch(repo_id, branch=revision, repo_type="dataset", exist_ok=True)
            info = api.create_commit(
                repo_id, operations, repo_type="dataset", revision=revision,
                commit_message=f"opgen {plan_.manifest['opgen_version']}: {recipes} "
                               f"({len(plan_.configs)} config{'' if len(plan_.configs) == 1 else 's'}, {rows:,} rows)",
                commit_description=f"manifest.json sha256 {plan_.manifest_sha256}",
            )
        except Exception as exc:  # HTTP, network, validation: one commit means no half-published tree
            raise HubError(f"push to {repo_id} failed: {type(exc).__name__}: {exc}") from None
    return PushResult(repo_id, revision, tuple(files), str(getattr(info, "commit_url", "")), plan_)
