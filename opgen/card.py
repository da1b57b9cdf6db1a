"""The dataset card (README.md) of a Hub tree: YAML front matter the Hub reads, prose people read.

Everything in it comes from the build (its manifest and real rows) and from opgen.ops, and nothing
from the clock or the machine, so the same build gives the same card byte for byte.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Sequence
from pathlib import Path

import yaml

from opgen import (
    ops,  # the study's (the bundled recipes' descriptions below); a card's own: Plan.library
    truth,
)
from opgen._version import __version__
from opgen.hubplan import Plan, Split
from opgen.ops import OperatorLibrary

TASK_CATEGORIES = ["text-generation"]
TAGS = ["code", "synthetic", "compositional-generalization", "program-synthesis", "string-operators",
        "recall-then-assemble", "verl", "opgen"]
_EXAMPLE_CHARS = 2500
_BAR = 40

# What each of the study's split families is for (compgen-checkpoints): pattern on the config
# name → (what it is, the study's file or checkpoint it serves). First match wins.
FAMILIES: list[tuple[str, str, str]] = [
    (r"^heldout_trees", f"expression trees over the {len(ops.HELDOUT_IDS)} held-out operators, exact depths 1-8",
     "eval/heldout_trees_d1-8.parquet: the held-out d4 / d8 accuracy of every checkpoint"),
    (r"^trainop_trees", f"expression trees over the {len(ops.TRAIN_IDS)} train operators, exact depths 1-8",
     "eval/trainop_trees_d1-8.parquet: the in-distribution counterpart of heldout_trees"),
    (r"^heldout_chains", "pure nesting chains f1(f2(…(x))) over held-out operators, depths 1-20",
     "eval/heldout_chains_d1-20.parquet: the chains d20 numbers of the RL contrasts"),
    (r"^trainop_chains", "pure nesting chains over train operators, depths 1-20",
     "eval/trainop_chains_d1-20.parquet"),
    (r"^probe_1b", "definition-load probe: the target operator is recalled after r other recalls "
     "(teacher-forced assistant prefix)", "eval/probe_1b.parquet: func_24 arity drift vs. definition load"),
    (r"^probe_1d", "chain-position probe: the target operator at the outer / middle / inner position "
     "of a deep chain", "eval/probe_1d.parquet"),
    (r"^probe_1f", "builtin-method argument tails in front of the operator's own argument",
     "eval/probe_1f.parquet"),
    (r"^probe_1g", "a long literal (8-200 characters) as the operator's first argument", "eval/probe_1g.parquet"),
    (r"^(stage_?15|closed_book)", f"closed-book data: depth-1 atomic tasks over all {len(ops.OPERATORS)} "
     "operators and depth-2..4 train-operator compositions, prose + one code block", "checkpoint stage15b-init"),
    (r"^sft_d1", "atomic tasks, one operator per answer, no composition rows", "SFT cell sft-d1-s1"),
    (r"^sft_v1", "atomic tasks one per answer + mixed-structure train-operator compositions, depth 2-4",
     "SFT cell sft-v1-s1"),
    (r"^sft_c1", "atomic tasks in co-occurrence groups (1-4 independent tasks per answer), no compositions",
     "SFT cell sft-c1-s1"),
    (r"^sft_e_?co", "atomic tasks in co-occurrence groups + the same compositions as v1", "SFT cell sft-eco-s1 (E-co)"),
    (r"^sft_c4b", "co-occurrence groups + mixed compositions of depth 2-4 (same count as c4)", "SFT cell sft-c4b-s1"),
    (r"^sft_c4", "co-occurrence groups + mixed compositions of depth 2 only", "SFT cell sft-c4-s1"),
    (r"^sft_matched_isolated", "per step 48 atomic tasks as single-task rows + 76 compositions",
     "SFT cell sft-matched-isolated-s1"),
    (r"^sft_matched_grouped", "per step the same 48 atomic tasks packed into 20 grouped rows + the same "
     "76 compositions", "SFT cell sft-matched-grouped-s1"),
    (r"^rl_r1", "RL pool: 1:1 train-operator serial chains d10-20 and all-operator multi-task atomic prompts",
     "RL runs rl-r1a / rl-r1b"),
    (r"^rl_md", "RL mixed-depth pool: one deep train-operator chain task followed by 1-2 long-literal "
     "atomic tasks", "RL runs rl-mda / rl-mdb"),
]


def describe(config: str) -> tuple[str, str]:
    """(what a config holds, the study's file or cell it serves); empty strings when unknown."""
    for pattern, what, serves in FAMILIES:
        if re.search(pattern, config.lower()):
            return what, serves
    return "", ""


def _fence(text: str, lang: str = "") -> str:
    # Gold answers hold ``` blocks themselves: the outer fence must be longer than any run inside.
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text.rstrip(chr(10))}\n{ticks}"


def _clip(text: str) -> str:
    if len(text) <= _EXAMPLE_CHARS:
        return text
    return text[:_EXAMPLE_CHARS] + f"\n… ({len(text) - _EXAMPLE_CHARS} more characters)"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _size_category(n: int) -> str:
    for limit, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"),
                        (1_000_000, "100K<n<1M"), (10_000_000, "1M<n<10M")):
        if n < limit:
            return name
    return "10M<n<100M"


def _feature_type(t) -> dict:
    """An Arrow type as the Hub card's ``features`` YAML spells it (datasets' own simplified form:
    ``dtype: string``, ``list: string``, ``struct: [...]``, ``list: [...]`` for a list of structs)."""
    import pyarrow as pa

    if pa.types.is_struct(t):
        return {"struct": [{"name": t.field(i).name, **_feature_type(t.field(i).type)} for i in range(t.num_fields)]}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        inner = _feature_type(t.value_type)
        key = "large_list" if pa.types.is_large_list(t) else "list"
        if "dtype" in inner:
            return {key: inner["dtype"]}
        if "struct" in inner:
            return {key: inner["struct"]}
        return {key: inner}
    names = {pa.string(): "string", pa.large_string(): "large_string", pa.int64(): "int64", pa.int32(): "int32",
             pa.int16(): "int16", pa.int8(): "int8", pa.bool_(): "bool", pa.float64(): "float64",
             pa.float32(): "float32", pa.binary(): "binary", pa.uint64(): "uint64", pa.uint32(): "uint32"}
    if t in names:
        return {"dtype": names[t]}
    raise ValueError(f"no Hub feature type for the Arrow type {t}")


def features(schema) -> list[dict]:
    """A parquet file's Arrow schema as the card's ``dataset_info.features`` list."""
    return [{"name": f.name, **_feature_type(f.type)} for f in schema]


def dataset_info(plan: Plan, tree_root: Path) -> list[dict]:
    """Per config: its features (from its first file's schema; every file of a config shares it)
    and per split the row count and the uncompressed bytes (parquet footers' row-group sizes, read
    without decoding any data); ``download_size``: the parquet files' bytes."""
    import pyarrow.parquet as pq

    out = []
    for config in plan.configs:
        members = plan.splits_of(config)
        schema = pq.read_schema(tree_root / members[0].repo_paths()[0])
        splits: list[dict[str, int | str]] = []
        for s in members:
            size = 0
            for rel in s.repo_paths():
                meta = pq.read_metadata(tree_root / rel)
                size += sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
            splits.append({"name": s.name, "num_bytes": size, "num_examples": s.rows})
        out.append({"config_name": config, "features": features(schema), "splits": splits,
                    "download_size": sum(f.bytes for s in members for f in s.files),
                    "dataset_size": sum(int(x["num_bytes"]) for x in splits)})
    return out


def front_matter(plan: Plan, *, license: str, pretty_name: str, tree_root: Path | None = None) -> dict:
    configs = []
    for config in plan.configs:
        data_files = []
        for s in plan.splits_of(config):
            paths = list(s.repo_paths())
            data_files.append({"split": s.name, "path": paths[0] if len(paths) == 1 else paths})
        entry: dict = {"config_name": config, "data_files": data_files}
        if config == plan.default_config:
            entry["default"] = True
        configs.append(entry)
    meta = {
        "pretty_name": pretty_name,
        "license": license,
        "language": ["en"],
        "task_categories": list(TASK_CATEGORIES),
        "tags": list(TAGS),
        "size_categories": [_size_category(sum(s.rows for s in plan.splits))],
        "configs": configs,
    }
    if tree_root is not None:
        meta["dataset_info"] = dataset_info(plan, tree_root)
    return meta


_SHOWN = ("prompt", "reward_model", "extra_info", "messages", "response")


def _first_row(path: Path) -> dict:
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    wanted = [c for c in _SHOWN if c in pf.schema_arrow.names]
    for batch in pf.iter_batches(batch_size=1, columns=wanted):
        if batch.num_rows:
            return {"_index": 0, **batch.to_pylist()[0]}
    return {}


def _first_prefixed_row(paths: list[Path]) -> dict:
    """The split's first row with a teacher-forced assistant prefix, or {} (reads one column until found)."""
    import pyarrow.parquet as pq

    start = 0  # index of the current file's first row within the split
    for path in paths:
        pf = pq.ParquetFile(path)
        names = pf.schema_arrow.names
        extra = pf.schema_arrow.field("extra_info").type if "extra_info" in names else None
        if extra is None or extra.get_field_index("assistant_prefix") < 0:
            return {}
        # ParquetFile, not pq.read_table: the latter imports pyarrow.dataset and pandas (seconds).
        # Both passes cut the file into the same batches, so (batch, offset) names one row.
        for b, batch in enumerate(pf.iter_batches(batch_size=4096, columns=["extra_info.assistant_prefix"])):
            prefixes = batch.column(0).field("assistant_prefix").to_pylist()
            hit = next((i for i, p in enumerate(prefixes) if p), None)
            if hit is not None:
                wanted = [c for c in _SHOWN if c in names]
                rows = next(itertools.islice(pf.iter_batches(batch_size=4096, columns=wanted), b, None))
                return {"_index": start + hit, **rows.slice(hit, 1).to_pylist()[0]}
            start += len(prefixes)
    return {}


def _example(s: Split, row: dict) -> str:
    if not row:
        return "_(the split is empty)_"
    parts = [f"From config `{s.config}`, split `{s.name}`, row {row['_index']}:"]
    for msg in row.get("prompt") or []:
        parts += [f"**prompt — {msg.get('role')}:**", _fence(_clip(str(msg.get("content", ""))))]
    prefix = (row.get("extra_info") or {}).get("assistant_prefix") or ""
    if prefix:
        parts += ["**teacher-forced assistant prefix** (`extra_info.assistant_prefix`):", _fence(_clip(prefix))]
    if row.get("response"):
        parts += ["**gold answer** (`response`; `messages` holds the user and assistant turns):",
                  _fence(_clip(row["response"]))]
    raw = (row.get("reward_model") or {}).get("ground_truth")
    if raw:
        try:
            shown = json.dumps(truth.read(raw), indent=2, ensure_ascii=False)
        except truth.GroundTruthError:  # not a JSON object (another project's row), or nested too deep: as text
            shown = raw
        parts += ["**`reward_model.ground_truth`** (JSON text; the scorer runs `ref_code` / each task's program):",
                  _fence(_clip(shown), "json")]
    return "\n\n".join(parts)


def _formats(plan: Plan, tree_root: Path) -> str:
    # A teacher-forced prefix (probe 1b) changes what the model is asked to do, so rows with one
    # count as a format of their own.
    seen: dict[tuple[str, str, str, str, bool], tuple[Split, dict]] = {}
    for s in plan.splits:
        key = (s.kind, s.mode, s.prompt_format, s.answer_format)
        row = _first_row(tree_root / s.repo_paths()[0])
        prefixed = bool((row.get("extra_info") or {}).get("assistant_prefix"))
        seen.setdefault((*key, prefixed), (s, row))
        if not prefixed and (*key, True) not in seen:
            other = _first_prefixed_row([tree_root / p for p in s.repo_paths()])
            if other:
                seen[key + (True,)] = (s, other)
    blocks = []
    for (kind, mode, pf, af, prefixed), (s, row) in seen.items():
        title = f"### {kind} · {mode} · prompt `{pf}` → answer `{af}`"
        title += " · teacher-forced prefix" if prefixed else ""
        blocks.append(f"{title}\n\n{_example(s, row)}")
    return "\n\n".join(blocks)


def _histogram(counts: dict, label: str) -> str:
    items = sorted(((int(k), int(v)) for k, v in counts.items()), key=lambda kv: kv[0])
    if not items:
        return ""
    top = max(v for _, v in items) or 1
    width = max(len(label), *(len(str(k)) for k, _ in items))
    nwidth = max(len("rows"), *(len(str(v)) for _, v in items))
    lines = [f"{label.rjust(width)}  {'rows'.rjust(nwidth)}"]
    lines += [f"{str(k).rjust(width)}  {str(v).rjust(nwidth)}  {'█' * max(1, round(_BAR * v / top)) if v else ''}"
              for k, v in items]
    return _fence("\n".join(lines).rstrip())


def _counts_line(counts: dict, numeric: bool) -> str:
    def key(kv: tuple[str, object]) -> tuple:
        k = kv[0]
        return (int(k),) if numeric and str(k).lstrip("-").isdigit() else (1 << 30, str(k))

    return ", ".join(f"{k or '(none)'}: {v}" for k, v in sorted(counts.items(), key=key))


def _counts(plan: Plan) -> str:
    blocks = []
    for s in plan.splits:
        info = s.info
        counts = info.get("counts") or {}
        lines = [f"### `{s.config}` / `{s.name}` — {s.rows:,} rows"]
        ol = info.get("output_length") or {}
        if ol:
            known = ("min", "median", "p99", "max")
            order = [k for k in known if k in ol] + sorted(set(ol) - set(known))
            lines.append("Output length (characters): " + ", ".join(f"{k} {ol[k]}" for k in order) + ".")
        if counts.get("depth"):
            lines += ["Depth (max over a row's tasks):", _histogram(counts["depth"], "depth")]
        if counts.get("k"):
            lines.append("Distinct operators per row (k): " + _counts_line(counts["k"], True) + ".")
        if counts.get("condition"):
            lines.append("Probe conditions: " + _counts_line(counts["condition"], False) + ".")
        if counts.get("op"):
            position = plan.library.position
            by_op = sorted(counts["op"].items(), key=lambda kv: (position.get(kv[0], len(position)), kv[0]))
            lines.append("Rows using each operator: " + ", ".join(f"{k} {v}" for k, v in by_op) + ".")
        if info.get("rejections"):
            lines.append("Rejected candidates while sampling: " + _counts_line(info["rejections"], False) + ".")
        blocks.append("\n\n".join(lines))
    return "\n\n".join(blocks)


def _split_section(plan: Plan) -> list[str]:
    from opgen.splits.report import card_section

    text = card_section(plan.manifest)
    return [] if text is None else ["## Compositional split\n\n" + text]


def _operators(lib: OperatorLibrary) -> str:
    rows = [[f"`{op.id}`", f"`{op.id}{op.signature}`", op.arity, op.split, op.gloss] for op in lib.operators]
    return _table(["id", "signature", "arity", "split", "gloss"], rows)


def _recipe_description(plan: Plan, build_name: str) -> str:
    for r in plan.manifest.get("recipes") or []:
        resolved = r.get("resolved") or {}
        split = (resolved.get("splits") or {}).get(build_name)
        if isinstance(split, dict):  # the recipe's own description covers all its families: not used here
            return str(split.get("description") or "").strip()
    return ""


def _generic(s: Split) -> str:
    if s.mode == "forward":
        return f"forward-prediction rows ({s.kind}): given a program and an input, predict the output"
    return f"program rows ({s.kind}): write a standalone main_solution for the shown call"


def _build_files(s: Split) -> str:
    if len(s.files) == 1:
        return f"`{s.files[0].path}`"
    return f"`{s.files[0].path}` … ({len(s.files)} shards)"


def _configs(plan: Plan) -> str:
    rows = []
    for s in plan.splits:
        rows.append([f"`{s.config}`", f"`{s.name}`", f"{s.rows:,}", s.kind, s.mode,
                     f"{s.prompt_format} → {s.answer_format}", _build_files(s), describe(s.config)[1] or "—"])
    notes = []
    for config in plan.configs:
        what, _ = describe(config)
        members = plan.splits_of(config)
        families = sorted({s.family for s in members})
        said = [d for d in (_recipe_description(plan, s.build_name) for s in members) if d]
        what = what or (said[0] if said else "") or _generic(members[0])
        notes.append(f"- **`{config}`** (family {', '.join(f'`{f}`' for f in families)}): {what.rstrip('.')}.")
    header = ["config", "split", "rows", "kind", "mode", "format (prompt → answer)", "build file", "serves"]
    return _table(header, rows) + "\n\n" + "\n".join(notes)


def _role(s: Split) -> str:
    """train or eval: the manifest's role, else guessed from the names (older manifests)."""
    role = s.info.get("role")
    if role in ("train", "eval"):
        return role
    return "train" if s.name == "train" or s.config.startswith(("rl", "sft", "stage")) else "eval"


def _verl(plan: Plan, repo_id: str) -> str:
    rl = [s for s in plan.splits if s.kind == "rl"]
    sft = [s for s in plan.splits if s.kind == "sft"]
    local = repo_id.split("/")[1]
    out = [
        "Download the tree once; verl reads local parquet files:",
        _fence(f"hf download {repo_id} --repo-type dataset --local-dir {local}", "bash"),
    ]
    if rl:
        pools = [s for s in rl if _role(s) == "train"]
        evals = [s for s in rl if s not in pools]
        train_files = ",".join(f"{local}/{p}" for s in pools for p in s.repo_paths()) or "<your RL pool>"
        val_files = ",".join(f"{local}/{p}" for s in (evals or pools)[:4] for p in s.repo_paths())
        out += [
            "RL (GRPO/PPO) rows are graded by opgen's reward, `compute_score` in `opgen.reward` "
            "(opgen must be installed where verl runs): it runs the model's program in an isolated process "
            "and compares its output with the ground truth. Point verl's custom reward at it "
            "(verl 0.7.1 and later read the `reward.*` keys):",
            _fence("\n".join([
                "python -m verl.trainer.main_ppo \\",
                f"  data.train_files=[{train_files}] \\",
                f"  data.val_files=[{val_files}] \\",
                "  data.prompt_key=prompt data.reward_fn_key=data_source data.return_raw_chat=true \\",
                "  data.filter_overlong_prompts=true data.truncation=error \\",
                "  reward.custom_reward_function.path=pkg://opgen.reward \\",
                "  reward.custom_reward_function.name=compute_score \\",
                "  reward.reward_manager.name=naive \\",
                "  ...  # model, rollout and trainer settings",
            ]), "bash"),
            "Older verl (before 0.7.1) reads the top-level keys instead, with a file path: "
            "`custom_reward_function.path=$(python -c \"import opgen.reward as r; print(r.__file__)\")` and "
            "`custom_reward_function.name=compute_score`. verl 0.9 accepts those old keys but ignores them, "
            "so use the ones that match your verl. Validation metrics are grouped by `data_source` "
            "(`opgen/<family>`).",
        ]
    if sft:
        s = next((s for s in sft if _role(s) == "train"), sft[0])
        out += [
            "SFT rows carry `messages` (the user turn and the gold assistant turn), which verl's multi-turn "
            "SFT dataset reads:",
            _fence("\n".join([
                "python -m verl.trainer.sft_trainer \\",
                f"  data.train_files=[{','.join(f'{local}/{p}' for p in s.repo_paths())}] \\",
                "  data.messages_key=messages data.truncation=error \\",
                "  ...  # model.path and trainer settings",
            ]), "bash"),
            "Older verl: `torchrun -m verl.trainer.fsdp_sft_trainer` with `data.multiturn.enable=true "
            "data.multiturn.messages_key=messages`.",
        ]
    return "\n\n".join(out)


def _provenance(plan: Plan) -> str:
    m = plan.manifest
    out = [f"- opgen version that built the data: `{m.get('opgen_version')}` (card written by opgen `{__version__}`)",
           f"- seed: `{m.get('seed')}`",
           f"- `manifest.json` sha256: `{plan.manifest_sha256}` (the manifest is in this repository, byte for byte)"]
    recipes = m.get("recipes") or []
    if recipes:
        out.append("- recipes:")
        out += [f"  - `{r.get('name')}` (`{r.get('path')}`, sha256 `{r.get('sha256')}`)" for r in recipes]
        for r in recipes:
            if r.get("resolved"):
                # The resolved recipe (defaults filled in) is what rebuilds this data with `opgen build`.
                text = yaml.safe_dump(r["resolved"], sort_keys=False, allow_unicode=True, width=1000)
                out += ["", f"<details><summary>recipe <code>{r.get('name')}</code>, resolved</summary>", "",
                        _fence(text, "yaml"), "", "</details>"]
    leak = m.get("leakage")
    if isinstance(leak, dict):
        pairs = leak.get("checked_pairs")
        violations = leak.get("violations") or []
        allowed = sum(1 for v in violations if isinstance(v, dict) and v.get("allowed"))
        out.append(f"- leakage check (evaluation rows against training rows): ok = `{leak.get('ok')}`, "
                   f"{len(pairs) if isinstance(pairs, list) else pairs} split pairs checked, "
                   f"{len(violations)} violations ({allowed} allowed by the recipe)")
    rows = [[f"`{rel}`", f"`{f.path}`", f.rows, f.bytes, f"`{f.sha256}`"] for f, rel in plan.placements()]
    out += ["", "Every data file is the build's file byte for byte (its sha256 is the manifest's):", "",
            _table(["file", "build file", "rows", "bytes", "sha256"], rows)]
    return "\n".join(out)


def _load(plan: Plan, repo_id: str) -> str:
    s = plan.splits_of(plan.default_config)[0] if plan.default_config else plan.splits[0]
    lines = ["from datasets import load_dataset", "",
             f'ds = load_dataset("{repo_id}", "{s.config}", split="{s.name}")',
             'row = ds[0]  # prompt, reward_model.ground_truth (JSON text), extra_info (depth, k, ops, ...)',
             "", f'# no config name: the default config, "{plan.default_config}"',
             f'# load_dataset("{repo_id}", split="{s.name}")', "", "# every config:"]
    lines += [f'# load_dataset("{repo_id}", "{c}")' for c in plan.configs]
    return _fence("\n".join(lines), "python")


def render(plan: Plan, tree_root: Path, repo_id: str, *, license: str = "apache-2.0",
           pretty_name: str | None = None) -> str:
    """The card for a tree whose data files are already in place under ``tree_root``."""
    recipes = [str(r.get("name")) for r in plan.manifest.get("recipes") or [] if r.get("name")]
    pretty_name = pretty_name or ("opgen " + " + ".join(recipes) if recipes else "opgen string-operator tasks")
    meta = yaml.safe_dump(front_matter(plan, license=license, pretty_name=pretty_name, tree_root=tree_root),
                          sort_keys=False, allow_unicode=True, width=1000)
    total = sum(s.rows for s in plan.splits)
    lib = plan.library
    n_train, n_held = len(lib.train_ids), len(lib.heldout_ids)
    names = (f"with opaque names `func_0` … `func_{len(lib) - 1}`" if lib.is_study else
             f"(library `{lib.name}`, digest `{lib.digest[:12]}`: {', '.join(f'`{o}`' for o in lib.ids)})")
    sections = [
        f"---\n{meta}---",
        f"# {pretty_name}",
        f"Synthetic compositional string-operator tasks built with opgen "
        f"{plan.manifest.get('opgen_version')}: {total:,} rows in {len(plan.configs)} "
        f"config{'' if len(plan.configs) == 1 else 's'}. A library of "
        f"{len(lib)} string operators {names} "
        f"({n_train} train, {n_held} held-out) is learned as atomic skills; models are trained on compositions "
        "of the train operators only and tested on compositions of the held-out ones. Answers follow the "
        "recall-then-assemble format where the format says `ra`: one `Recall func_N: <gloss>` block per "
        "operator, then one `Assemble:` block with every definition and `main_solution`. This is the data of "
        "the compgen-checkpoints study (Qwen3-4B-Base); config names keep the study's file names "
        "(`heldout_trees_d1-8.parquet` → config `heldout_trees`; the table below maps every split to its "
        "build file).",
        "## Configs\n\nOne config per split family. A config's one split of role train is named `train` and "
        "its one eval split `test`; where a config holds several splits of one role, each keeps the build's "
        "split name with dashes replaced by underscores (the Hub rejects dashes). "
        f"The default config (loaded without a config name) is `{plan.default_config}`.\n\n" + _configs(plan),
        "## Loading\n\n" + _load(plan, repo_id),
        "## Training with verl\n\n" + _verl(plan, repo_id),
        "## Formats\n\nOne real row of each format in this build.\n\n" + _formats(plan, tree_root),
        "## Operators\n\nEach operator's shown source (`opgen ops show func_N`) is the code the scorer runs.\n\n"
        + _operators(lib),
        "## Row schema\n\nColumns of every row: `data_source` (`opgen/<family>`), `prompt` (chat messages), "
        "`ability` (`code` or `code_io`), `reward_model` (`style` = `rule`, `ground_truth` = JSON text), "
        "`extra_info` (`index`, `split`, `family`, `depth`, `k`, `ops`, `structure`, `prompt_format`, "
        "`answer_format`, `mode`, `condition`, `n_tasks`, `assistant_prefix`, `opgen_version`, `recipe`, "
        "`row_id`, `target_op`, `tail_chars`, `tail_calls`). SFT rows add `messages`, `response` and "
        "`prompt_text`.",
        "## Counts\n\n" + _counts(plan),
        *_split_section(plan),
        "## Provenance\n\n" + _provenance(plan),
    ]
    return "\n\n".join(sections) + "\n"
