"""Recipes: YAML → checked against schemas/recipe.schema.json → resolved splits with their defaults.

Every error names the file, the path inside it and what was expected, before any work starts.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from opgen import formats, generate, schemacheck
from opgen.errors import USAGE, OpgenError
from opgen.library import LibraryError, given
from opgen.ops import STUDY, OperatorLibrary
from opgen.resources import recipe_path, resource_dir, schema_path

SPLIT_DEFAULTS: dict[str, Any] = {
    "kind": "rl", "prompt_format": "closed_book", "answer_format": None, "unique": "task",
    "shard_rows": 50_000, "options": {}, "data_source": None, "ability": None, "prompt_template": None,
}
# data_source templates: placeholders a row fills in (docs/recipes.md, "data_source")
DATA_SOURCE_FIELDS = ("family", "depth")
DEFAULT_DATA_SOURCE = "opgen/{family}"


def check_data_source(template: str) -> str | None:
    """Why ``template`` is not a data_source template (None when it is one)."""
    problem = formats.placeholder_problem(template, DATA_SOURCE_FIELDS)
    return None if problem is None else f"{template!r}: {problem}"


class RecipeError(ValueError, OpgenError):
    """A recipe that cannot be built; the message starts with ``<file>: <path>:``."""

    exit_code = USAGE


@dataclass(frozen=True)
class SplitConfig:
    name: str
    recipe: str
    generator: str
    role: str
    kind: str
    family: str
    prompt_format: str
    answer_format: str
    unique: str
    shard_rows: int
    options: dict[str, Any]
    digest: str  # names this split's rows: seed, generator, its version and its resolved options
    where: str  # "<file>: splits.<name>" for error messages
    description: str = ""  # prose for cards and manifests; not part of the digest
    data_source: str = DEFAULT_DATA_SOURCE  # a template: {family}, {depth} (the row's depth)
    ability: str = ""  # the rows' ability; "" = code (program rows) / code_io (forward rows)
    prompt_template: str | None = None  # a user's prompt wording (its text), placeholders formats.TEMPLATE_FIELDS
    prompt_template_file: str = ""  # where it was read from, as the recipe names it

    def resolved(self) -> dict[str, Any]:
        return {"description": self.description,
                "generator": self.generator, "role": self.role, "kind": self.kind, "family": self.family,
                "prompt_format": self.prompt_format, "answer_format": self.answer_format,
                "unique": self.unique, "shard_rows": self.shard_rows, "data_source": self.data_source,
                "ability": self.ability or ("code_io" if formats.mode_of(self.prompt_format) == "forward" else "code"),
                "prompt_template": None if self.prompt_template is None else {
                    "file": self.prompt_template_file,
                    "sha256": hashlib.sha256(self.prompt_template.encode()).hexdigest()},
                "options": self.options}


@dataclass
class Recipe:
    name: str
    path: str  # as given, or "datasets/<name>.yaml" for a bundled recipe
    sha256: str
    seed: int
    splits: list[SplitConfig]
    heldout_ops: tuple[str, ...]
    allow: tuple[str, ...]
    raw: dict[str, Any] = field(default_factory=dict)
    # leakage.avoid_programs: training recipes whose composition programs the eval splits never
    # draw (opt-in; tasks are disjoint by construction, opgen.rng.input_side)
    avoid: tuple[str, ...] = ()
    split: Any = None  # the recipe's compositional split (opgen.splits.kinds.Rule), if it names one
    # the recipe's operator library (``library:``, or the build's --library; default the study's):
    # manifests and rows name it by name and digest (opgen.library.Ref)
    library: OperatorLibrary = STUDY

    @property
    def max_prompt_length(self) -> int | None:
        return self.raw.get("max_prompt_length")

    def resolved(self) -> dict[str, Any]:
        return {"name": self.name, "seed": self.seed, "description": self.raw.get("description", ""),
                "max_prompt_length": self.max_prompt_length,
                "leakage": {"heldout_ops": list(self.heldout_ops), "allow": list(self.allow),
                            "avoid_programs": list(self.avoid),
                            "reason": self.raw.get("leakage", {}).get("reason", "")},
                "splits": {s.name: s.resolved() for s in self.splits},
                **({"split": self.split.resolved()} if self.split is not None else {})}


def _schema() -> dict:
    # The file lists the built-in answer formats (tests/test_formats.py keeps it equal to the
    # registry); a format registered at run time (opgen.formats.register_answer_format) is allowed too.
    return _schema_for(formats.ANSWER_FORMATS)


@functools.cache
def _schema_for(answer_formats: tuple[str, ...]) -> dict:
    schema = json.loads(schema_path("recipe.schema.json").read_text())
    schema["$defs"]["split"]["properties"]["answer_format"]["enum"] = list(answer_formats)
    return schema


def _validator():
    # jsonschema is imported only for a recipe the fast check cannot vouch for (~75 ms of start-up)
    return schemacheck.validator(_schema())


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a mapping with the same key twice (plain YAML keeps the last)."""


def _mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    seen: dict = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            first = seen.get(key)
        except TypeError:
            continue  # an unhashable key: the constructor below reports it
        if first is not None:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first at line {first.line + 1}); a recipe names each key once",
                key_node.start_mark)
        seen[key] = key_node.start_mark
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def _read_text(path: Path, shown: str) -> str:
    raw = path.read_bytes()
    if raw[:2] in (b"\xff\xfe", b"\xfe\xff"):
        raise RecipeError(f"{shown}: the file is UTF-16 text; save the recipe as UTF-8")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise RecipeError(f"{shown}: line {line}: byte 0x{raw[exc.start]:02x} is not UTF-8 "
                          f"(byte offset {exc.start}); save the recipe as UTF-8") from None
    return path.read_text(encoding="utf-8")


MAX_TEMPLATE_BYTES = 1 << 20  # a prompt wording; far above any real one, far below a runaway file


def _read_template(path: Path, named: str, where: str) -> str:
    """A prompt template's text: a regular file (not a device, FIFO or folder) of at most
    MAX_TEMPLATE_BYTES, read no further than that (``/dev/zero`` is refused, never read whole)."""
    import stat

    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            raise RecipeError(f"{where}: {named} is not a regular file")
        if st.st_size > MAX_TEMPLATE_BYTES:
            raise RecipeError(f"{where}: {named} is {st.st_size:,} bytes; a prompt template is at most "
                              f"{MAX_TEMPLATE_BYTES:,}")
        with open(path, "rb") as f:
            raw = f.read(MAX_TEMPLATE_BYTES + 1)
    except OSError as exc:
        raise RecipeError(f"{where}: cannot read {named} ({exc.strerror or exc})") from None
    if len(raw) > MAX_TEMPLATE_BYTES:  # grew since the stat
        raise RecipeError(f"{where}: {named} is over {MAX_TEMPLATE_BYTES:,} bytes; a prompt template is at most that")
    try:
        return raw.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError as exc:
        raise RecipeError(f"{where}: cannot read {named} ({exc})") from None


def _path(parts) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


def locate(spec: str) -> tuple[Path, str]:
    """A recipe argument → (file, how the manifest names it): a path, else a bundled recipe's name."""
    path = Path(spec)
    if path.is_file():
        return path, spec
    if path.suffix in (".yaml", ".yml") and (path.parent != Path(".") or path.exists()):
        try:
            recipe_path(path.stem)
        except FileNotFoundError:
            raise RecipeError(f"{spec}: no such recipe file") from None
        raise RecipeError(f"{spec}: no such recipe file here; opgen bundles a recipe of that name: "
                          f"give it as {path.stem!r} (e.g. opgen build {path.stem})")
    try:
        found = recipe_path(spec)
    except FileNotFoundError as exc:
        raise RecipeError(f"{spec}: not a file, and {exc}") from None
    return found, f"{resource_dir('datasets').name}/{found.name}"


def load(spec: str, seed: int | None = None, library: OperatorLibrary | str | None = None) -> Recipe:
    """The recipe ``spec`` names (a file the user gave, or a bundled recipe); ``library`` (an
    OperatorLibrary or a spec the user gave) replaces its ``library:``, which is otherwise loaded
    from the recipe's folder (:func:`own_library`: the user's recipe names the user's library)."""
    path, shown = locate(spec)
    try:
        text = _read_text(path, shown)
    except OSError as exc:
        raise RecipeError(f"{shown}: cannot read the recipe ({exc.strerror})") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise RecipeError(f"{shown}: {where}not valid YAML ({getattr(exc, 'problem', exc)})") from None
    if library is not None:
        try:
            lib = given(library) or STUDY
        except LibraryError as exc:
            raise RecipeError(f"--library {library}: {exc}") from None
    else:
        lib = own_library(data, shown, path.parent)
    recipe = resolve(data, shown, hashlib.sha256(text.encode()).hexdigest(), seed, base=path.parent, library=lib)
    # a recipe file named in leakage.avoid_programs is found next to the recipe naming it
    recipe.avoid = tuple(str(path.parent / a) if a.endswith((".yaml", ".yml")) and not Path(a).is_absolute()
                         and (path.parent / a).is_file() else a for a in recipe.avoid)
    return recipe


def _non_finite(data: Any, parts: tuple = ()) -> tuple | None:
    """The path of the first NaN or infinity in ``data`` (YAML's ``.nan``, ``.inf``), None if none.

    JSON Schema's ``minimum``/``maximum`` compare False with NaN, so a NaN probability passes the
    schema; no recipe number is meant to be one."""
    import math

    if isinstance(data, float) and not math.isfinite(data):
        return parts
    if isinstance(data, dict):
        for k, v in data.items():
            found = _non_finite(v, (*parts, k))
            if found is not None:
                return found
    elif isinstance(data, list):
        for i, v in enumerate(data):
            found = _non_finite(v, (*parts, i))
            if found is not None:
                return found
    return None


def own_library(data: Any, shown: str, base: Path) -> OperatorLibrary:
    """The library a recipe file the user gave names with ``library:`` (a YAML path relative to
    ``base``, the recipe's folder, or ``module:obj``), loaded: the user's own; the study's when it
    names none. Only :func:`load` (a file given on the command line or to the API) calls this."""
    spec = data.get("library") if isinstance(data, dict) else None
    if spec is None or spec in _STUDY_SPECS:
        return STUDY
    where = f"{shown}: library"
    if not isinstance(spec, str) or not spec:
        raise RecipeError(f"{where}: a library spec (study, a YAML file or module:obj), got {spec!r}")
    target = str(base / spec) if spec.endswith((".yaml", ".yml")) and not Path(spec).is_absolute() else spec
    try:
        return given(target) or STUDY
    except LibraryError as exc:
        raise RecipeError(f"{where}: {exc}") from None


_STUDY_SPECS = ("study", "default")


def _library_given(data: Any, shown: str, library: OperatorLibrary | None) -> OperatorLibrary:
    """``library``, else the study's; a recipe naming another with ``library:`` and given none (a
    recipe read as data) is refused, not loaded."""
    named = data.get("library")
    if library is None and named is not None and named not in _STUDY_SPECS:
        raise RecipeError(f"{shown}: library: {str(named)[:80]!r}: a recipe given as data loads no library it "
                          "names; give the library (library=, --library), or the recipe as a file")
    return STUDY if library is None else library


def resolve(data: Any, shown: str, sha: str = "", seed: int | None = None, base: Path | None = None,
            library: OperatorLibrary | None = None) -> Recipe:
    """The recipe ``data`` (a recipe's content) resolved. ``library``: its operator library, loaded
    by the caller from what the user chose (:func:`load`, ``--library``, ``library=``); a recipe
    read as data (a manifest's, a request's) that names one with ``library:`` and is given none is
    refused here: nothing that data names is loaded."""
    bad = _non_finite(data)
    if bad is not None:
        raise RecipeError(f"{shown}: {_path(bad)}: {_at(data, bad)!r} is not a finite number "
                          "(.nan and .inf are not allowed in a recipe)")
    errors = [] if schemacheck.surely_valid(_schema(), data) else \
        sorted(_validator().iter_errors(data), key=lambda e: (len(list(e.path)), list(map(str, e.path))))
    if errors:
        err = errors[0]
        raise RecipeError(f"{shown}: {_path(err.path)}: {_explain(err)}")
    seed = data.get("seed", 0) if seed is None else seed
    lib = _library_given(data, shown, library)
    defaults = {**SPLIT_DEFAULTS, **data.get("defaults", {})}
    leak = data.get("leakage", {})
    if "avoid" in leak:
        raise RecipeError(f"{shown}: leakage.avoid was removed in opgen 0.3: eval and probe tasks are disjoint from "
                          "every training task by construction (their inputs are drawn on the other side; "
                          "docs/recipes.md, 'Leakage'). To keep eval rows off the training cells' composition "
                          "programs as well, name the cells under leakage.avoid_programs.")
    rule = _split_rule(data.get("split"), shown, seed, lib)
    try:
        # a split other than the study's names what training may not compose itself (docs/splits.md)
        held = leak.get("heldout_ops", "heldout" if rule is None or rule.kind == "heldout-ops" else None)
        heldout_ops = () if held is None else lib.resolve_set(held)
    except (ValueError, KeyError) as exc:
        raise RecipeError(f"{shown}: leakage.heldout_ops: {exc}") from None
    splits = []
    for name, raw in data["splits"].items():
        merged = copy.deepcopy(defaults)
        merged.update(copy.deepcopy(raw))
        merged["options"] = {**copy.deepcopy(defaults.get("options", {})), **copy.deepcopy(raw.get("options", {}))}
        where = f"{shown}: splits.{name}"
        merged = _split_prepared(rule, merged, where)
        for key in ("generator", "role"):
            if key not in merged:
                raise RecipeError(f"{where}: '{key}' is required (in the split or in defaults)")
        try:
            cls = generate.get(merged["generator"])
        except generate.GeneratorError as exc:
            raise RecipeError(f"{where}.generator: {exc}") from None
        answer = merged["answer_format"] or formats.DEFAULT_ANSWER[merged["prompt_format"]]
        try:
            formats.check_pair(merged["prompt_format"], answer)
        except formats.FormatError as exc:
            raise RecipeError(f"{where}.answer_format: {exc}") from None
        data_source = merged["data_source"] or DEFAULT_DATA_SOURCE
        problem = check_data_source(data_source)
        if problem:
            raise RecipeError(f"{where}.data_source: {problem}")
        template, template_file = None, merged["prompt_template"] or ""
        if template_file:
            tpath = Path(template_file) if Path(template_file).is_absolute() else (base or Path(".")) / template_file
            template = _read_template(tpath, template_file, f"{where}.prompt_template")
            problem = formats.check_template(template)
            if problem:
                raise RecipeError(f"{where}.prompt_template: {template_file}: {problem}")
        try:
            options = cls.resolve(merged["options"], f"{where}.options")
        except generate.GeneratorError as exc:
            raise RecipeError(str(exc)) from None
        _check_generator_library(lib, merged["generator"], where)
        shaping = {"seed": seed, "generator": merged["generator"], "version": cls.VERSION, "options": options}
        shaping.update(() if lib.is_study else [("library", lib.digest)])  # another library: another digest
        if getattr(cls, "SIDED", False):  # its rows depend on the role (the input side)
            shaping["role"] = merged["role"]
        digest = hashlib.sha256(json.dumps(shaping, sort_keys=True).encode()).hexdigest()[:32]
        splits.append(SplitConfig(
            name=name, recipe=data["name"], generator=merged["generator"], role=merged["role"],
            kind=merged["kind"], family=merged.get("family") or name, prompt_format=merged["prompt_format"],
            answer_format=answer, unique=merged["unique"], shard_rows=merged["shard_rows"], options=options,
            digest=digest, where=where, description=raw.get("description", ""), data_source=data_source,
            ability=merged["ability"] or "", prompt_template=template, prompt_template_file=template_file))
    return Recipe(name=data["name"], path=shown, sha256=sha, seed=seed, splits=splits, heldout_ops=heldout_ops,
                  allow=tuple(leak.get("allow", ())), raw=data,
                  avoid=tuple(leak.get("avoid_programs", ())), split=rule, library=lib)


def _check_generator_library(lib: OperatorLibrary, name: str, where: str) -> None:
    """A generator that knows the study's operators by name draws no other library's (Generator.ANY_LIBRARY)."""
    if lib.is_study or getattr(generate.get(name), "ANY_LIBRARY", False):
        return
    fit = sorted(n for n in generate.registry() if getattr(generate.get(n), "ANY_LIBRARY", False))
    raise RecipeError(f"{where}.generator: {name!r} draws the study's own operators only (library {lib.name!r} "
                      f"is not the study's); generators for any library: {', '.join(fit)}")


def _split_rule(raw: Any, shown: str, seed: int, lib: OperatorLibrary = STUDY) -> Any:
    """The recipe's ``split`` (opgen.splits.kinds.Rule), or None."""
    from opgen.splits import kinds

    try:
        return kinds.resolve(raw, shown, seed, lib)
    except kinds.SplitError as exc:
        raise RecipeError(str(exc)) from None


def _split_prepared(rule: Any, merged: dict[str, Any], where: str) -> dict[str, Any]:
    if rule is None:
        return merged
    from opgen.splits import kinds

    try:
        return rule.prepare(merged, where)
    except kinds.SplitError as exc:
        raise RecipeError(str(exc)) from None


def _at(data: Any, parts: tuple) -> Any:
    for p in parts:
        data = data[p]
    return data


def _explain(err) -> str:  # a jsonschema.ValidationError
    if err.validator == "additionalProperties":
        allowed = sorted(err.schema.get("properties", {}))
        return f"{err.message} (expected one of: {', '.join(allowed)})"
    if err.validator == "required":
        return err.message
    return f"{err.message} (expected {_expected(err.schema)})" if _expected(err.schema) else err.message


def _expected(schema: dict) -> str:
    if "enum" in schema:
        return "one of " + ", ".join(json.dumps(v) for v in schema["enum"])
    if "type" in schema:
        t = schema["type"]
        return " or ".join(t) if isinstance(t, list) else str(t)
    if "pattern" in schema:
        return f"text matching {schema['pattern']}"
    return ""


def build_generator(cfg: SplitConfig, recipe: Recipe) -> generate.Generator:
    ctx = generate.Context(digest=cfg.digest, split=cfg.name, seed=recipe.seed, role=cfg.role,
                           where=f"{cfg.where}.options",
                           op_sets={"train": recipe.library.train_ids, "heldout": recipe.library.heldout_ids,
                                    "all": recipe.library.ids, "study_heldout": recipe.heldout_ops},
                           library=recipe.library)
    try:
        gen = generate.get(cfg.generator)(cfg.options, ctx)
    except generate.Unsatisfiable:  # its own class: what no draw can give (opgen serve answers it with a 4xx)
        raise
    except generate.GeneratorError as exc:
        raise RecipeError(str(exc)) from None
    if recipe.split is not None:
        from opgen.splits import kinds

        try:
            gen = recipe.split.wrap(gen, cfg.role, cfg.generator, cfg.where)
        except kinds.SplitError as exc:
            raise RecipeError(str(exc)) from None
    return gen
