"""Token lengths of prompts and gold answers, measured the way verl measures them.

verl drops (``filter_overlong_prompts``) or refuses (``truncation: error``) any prompt longer than
``data.max_prompt_length`` tokens, where a prompt's length is its chat messages rendered with the
tokenizer's chat template plus the assistant generation header, tokenized without extra special
tokens. This module counts exactly that, per split, from a local tokenizer folder, and turns the
counts into the ``data.*`` lengths a verl config needs so that no row is dropped or cut.

    from opgen import tokens
    tok = tokens.load_tokenizer("path/to/model")
    report = tokens.build_token_report("build/rl-r1", tok)
    report["recommended"]   # {"data.max_prompt_length": ..., "data.max_response_length": ..., ...}

transformers is imported only inside :func:`load_tokenizer`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opgen import truth
from opgen.library import OperatorLibrary, given, library_of, ref_of_truth

# Prompts and answers are rendered and then encoded in batches of this many rows: fast tokenizers
# encode a batch in parallel, and a batch bounds the memory one split needs.
_BATCH = 512


def load_tokenizer(path: str | Path) -> Any:
    """A transformers tokenizer from a local folder (never the network); it must have a chat template."""
    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"tokenizer folder {str(folder)!r} does not exist")
    try:
        # chat templates are Jinja: transformers imports jinja2 only when a template is first applied,
        # which would fail after the work started
        import jinja2  # noqa: F401
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise ImportError(f"token statistics need transformers, tokenizers and jinja2 (the 'tokens' extra: "
                          f"pip install 'opgen[tokens]'): {exc}") from None
    try:
        tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{str(folder)!r} is not a tokenizer folder transformers can load: {exc}") from exc
    if not getattr(tok, "chat_template", None):
        raise ValueError(
            f"tokenizer in {str(folder)!r} has no chat_template: verl renders every prompt with it, "
            "so lengths without it would not be the lengths verl checks"
        )
    return tok


def tokenizer_id(tokenizer: Any) -> dict[str, str]:
    """``{name, sha256}`` of a loaded tokenizer's folder: machine-independent (no absolute path),
    and the digest changes whenever the files that decide token counts change."""
    import hashlib

    folder = Path(getattr(tokenizer, "name_or_path", "") or ".")
    h = hashlib.sha256()
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "vocab.json", "merges.txt",
                 "special_tokens_map.json"):
        path = folder / name
        if path.is_file():
            h.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return {"name": folder.name, "sha256": h.hexdigest()}


def _encode_lengths(tokenizer: Any, texts: Sequence[str]) -> list[int]:
    if not texts:
        return []
    # add_special_tokens=False is what apply_chat_template(tokenize=True) does: the template
    # already wrote every special token the model sees.
    backend = getattr(tokenizer, "backend_tokenizer", None) if getattr(tokenizer, "is_fast", False) else None
    if backend is not None:
        # The Rust tokenizer a fast tokenizer wraps gives the same ids without building Python
        # lists of them (a third of the time on long answers).
        return [len(e.ids) for e in backend.encode_batch(list(texts), add_special_tokens=False)]
    ids = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    return [len(x) for x in ids]


def prompt_lengths(tokenizer: Any, prompts: Iterable[Sequence[Mapping[str, str]]]) -> list[int]:
    """Tokens of each chat prompt with the generation header, as verl's RLHFDataset counts them."""
    return _chat_lengths(tokenizer, prompts, add_generation_prompt=True)


def conversation_lengths(tokenizer: Any, conversations: Iterable[Sequence[Mapping[str, str]]]) -> list[int]:
    """Tokens of each whole conversation (SFT ``messages``), which verl's SFT ``data.max_length`` bounds."""
    return _chat_lengths(tokenizer, conversations, add_generation_prompt=False)


def _chat_lengths(tokenizer: Any, chats: Iterable[Sequence[Mapping[str, str]]],
                  add_generation_prompt: bool) -> list[int]:
    out: list[int] = []
    batch: list[str] = []
    for messages in chats:
        batch.append(tokenizer.apply_chat_template(
            [{"role": m["role"], "content": m["content"]} for m in messages],
            add_generation_prompt=add_generation_prompt, tokenize=False))
        if len(batch) == _BATCH:
            out += _encode_lengths(tokenizer, batch)
            batch = []
    return out + _encode_lengths(tokenizer, batch)


def answer_lengths(tokenizer: Any, answers: Iterable[str]) -> list[int]:
    """Tokens the policy must generate for each gold answer: the text, then the end-of-turn token."""
    out: list[int] = []
    batch: list[str] = []
    for text in answers:
        batch.append(text)
        if len(batch) == _BATCH:
            out += [n + 1 for n in _encode_lengths(tokenizer, batch)]
            batch = []
    return out + [n + 1 for n in _encode_lengths(tokenizer, batch)]


def gold_answer_of_row(row: Mapping[str, Any], library: OperatorLibrary | str | None = None) -> str | None:
    """The gold answer of an opgen row, re-rendered from its ground truth and formats.

    RL rows store no answer text, but their ground truth (the expressions, inputs and outputs)
    and ``extra_info`` (prompt/answer format, teacher-forced prefix) determine it: this rebuilds
    the row's Item and renders it with the same :class:`opgen.formats.Formatter` the build used.
    None for rows that are not opgen's own (native benchmark rows carry no expression trees).
    A row of a user operator library (``ground_truth.library``) is rendered with that library
    (opgen.library.library_of: ``library``, the one the user gave, else the user's store's by
    digest; UnknownLibrary or LibraryMismatch when it cannot be had: nothing the row names is loaded).
    """
    from opgen import expr, formats
    from opgen.tasks import Item, Task

    info = row.get("extra_info") or {}
    if not info.get("prompt_format") or not info.get("answer_format"):
        return None
    gt = truth.read(row["reward_model"]["ground_truth"])
    if not gt.get("tasks"):
        return None
    lib = library_of(ref_of_truth(gt), given(library))
    item = Item(tasks=tuple(Task(program=expr.parse(t["expr"], lib=lib), input=t["input"], output=t["output"])
                            for t in gt["tasks"]),
                assistant_prefix=info.get("assistant_prefix") or "")
    # the answer alone: no ground truth is rendered, so no library member (build.library_tag) is needed
    fmt = formats.Formatter(info["prompt_format"], info["answer_format"], library=lib)
    return fmt.answer(item, formats.prepare(item, lib))


def summarize(lengths: Sequence[int]) -> dict[str, int] | None:
    """``{min, median, p99, max}`` by nearest rank (always an observed length); None when empty."""
    if not lengths:
        return None
    s = sorted(lengths)
    n = len(s)

    def rank(q: float) -> int:
        return s[max(0, math.ceil(q * n) - 1)]

    return {"min": s[0], "median": rank(0.5), "p99": rank(0.99), "max": s[-1]}


@dataclass
class SplitLengths:
    """Per-row token lengths of one split; ``answer``/``conversation`` are empty when unknown."""

    kind: str  # "rl" or "sft"
    prompt: list[int] = field(default_factory=list)
    answer: list[int] = field(default_factory=list)
    conversation: list[int] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return len(self.prompt)

    def summary(self) -> dict[str, Any]:
        return {"kind": self.kind, "rows": self.rows, "prompt_tokens": summarize(self.prompt),
                "answer_tokens": summarize(self.answer), "conversation_tokens": summarize(self.conversation)}


def measure_rows(rows: Iterable[Mapping[str, Any]], tokenizer: Any, *, kind: str,
                 gold_answers: Iterable[str | None] | None = None) -> SplitLengths:
    """Lengths of verl rows held in memory (what ``opgen build`` has before it writes a split).

    Gold answers come from ``gold_answers`` (aligned with ``rows``; None where unknown), else
    from each row's ``response`` column (SFT rows), else from :func:`gold_answer_of_row`.
    """
    rows = list(rows)
    if gold_answers is None:
        gold_answers = [r["response"] if r.get("response") is not None else gold_answer_of_row(r) for r in rows]
    answers = list(gold_answers)
    if len(answers) != len(rows):
        raise ValueError(f"{len(answers)} gold answers for {len(rows)} rows")
    known = [a for a in answers if a is not None]
    out = SplitLengths(kind=kind, prompt=prompt_lengths(tokenizer, (r["prompt"] for r in rows)),
                       answer=answer_lengths(tokenizer, known))
    if kind == "sft":
        out.conversation = conversation_lengths(tokenizer, (r["messages"] for r in rows))
    return out


def measure_files(paths: Sequence[str | Path], tokenizer: Any, *, kind: str,
                  gold_answer: Callable[[dict], str] | None = None) -> SplitLengths:
    """Lengths of the rows of one split's parquet shards, read in record batches.

    ``gold_answer(row)`` overrides how a row's gold answer is found (see :func:`measure_rows`).
    """
    import pyarrow.parquet as pq

    out = SplitLengths(kind=kind)
    for path in paths:
        pf = pq.ParquetFile(str(path))
        names = set(pf.schema_arrow.names)
        if "prompt" not in names:
            raise ValueError(f"{path}: no 'prompt' column (columns: {', '.join(sorted(names))})")
        if kind == "sft" and "messages" not in names:
            raise ValueError(f"{path}: an SFT split needs a 'messages' column")
        for batch in pf.iter_batches(batch_size=_BATCH):
            rows = batch.to_pylist()
            answers = [gold_answer(r) for r in rows] if gold_answer is not None else None
            part = measure_rows(rows, tokenizer, kind=kind, gold_answers=answers)
            out.prompt += part.prompt
            out.answer += part.answer
            out.conversation += part.conversation
    return out


def _round_up(n: int, multiple: int) -> int:
    return max(multiple, -(-n // multiple) * multiple)


def recommend(splits: Mapping[str, SplitLengths], *, response_headroom: float = 1.5,
              multiple: int = 64) -> dict[str, int]:
    """verl ``data.*`` lengths that keep every row whole.

    - ``data.max_prompt_length``: the longest prompt of any split, rounded up to ``multiple``, so
      ``filter_overlong_prompts`` drops nothing (train and validation files share the setting).
    - ``data.max_response_length``: the longest gold answer times ``response_headroom`` (a policy
      that explores writes longer than the gold answer), rounded up; only when answers are known.
    - ``data.max_length`` (SFT): the longest whole conversation, rounded up; only for SFT splits.
    """
    if not splits:
        raise ValueError("no splits to recommend lengths for")
    rec = {"data.max_prompt_length": _round_up(max(max(s.prompt, default=0) for s in splits.values()), multiple)}
    answers = [max(s.answer) for s in splits.values() if s.answer]
    if answers:
        rec["data.max_response_length"] = _round_up(math.ceil(max(answers) * response_headroom), multiple)
    convs = [max(s.conversation) for s in splits.values() if s.conversation]
    if convs:
        rec["data.max_length"] = _round_up(max(convs), multiple)
    return rec


def truncation_warnings(splits: Mapping[str, SplitLengths], max_prompt_length: int) -> list[str]:
    """One line per split whose prompts would not fit in ``max_prompt_length`` tokens."""
    lines = []
    for name in sorted(splits):
        over = [n for n in splits[name].prompt if n > max_prompt_length]
        if over:
            lines.append(f"split {name!r}: {len(over)} of {splits[name].rows} prompts are longer than "
                         f"max_prompt_length={max_prompt_length} tokens (longest {max(over)}); verl would "
                         "drop them (filter_overlong_prompts) or stop (truncation: error)")
    return lines


def build_token_report(build_dir: str | Path, tokenizer: Any, *, splits: Sequence[str] | None = None,
                       gold_answer: Callable[[dict], str] | None = None,
                       max_prompt_length: int | None = None) -> dict[str, Any]:
    """Token statistics of a build directory (``manifest.json`` + shards), per split, JSON-ready.

    ``tokenizer`` is a loaded tokenizer or a folder path. ``gold_answer(row) -> str | None``
    overrides how gold answers are found (default: the ``response`` column, else
    :func:`gold_answer_of_row`). ``max_prompt_length`` (from a recipe) adds truncation warnings.
    """
    root = Path(build_dir)
    manifest_path = root / "manifest.json"
    if not manifest_path.is_file():
        raise FileNotFoundError(f"{manifest_path} does not exist: not an opgen build directory")
    manifest = json.loads(manifest_path.read_text())
    if isinstance(tokenizer, (str, Path)):
        tokenizer = load_tokenizer(tokenizer)
    known = manifest.get("splits") or {}
    chosen = sorted(known) if splits is None else list(splits)
    for name in chosen:
        if name not in known:
            raise KeyError(f"{manifest_path}: no split {name!r} (splits: {', '.join(sorted(known))})")
    measured = {}
    for name in chosen:
        info = known[name]
        measured[name] = measure_files([root / f["path"] for f in info["files"]], tokenizer,
                                       kind=info.get("kind", "rl"), gold_answer=gold_answer)
    report: dict[str, Any] = {
        "tokenizer": tokenizer_id(tokenizer),
        "splits": {name: measured[name].summary() for name in chosen},
        "recommended": recommend(measured),
    }
    if max_prompt_length is not None:
        report["warnings"] = truncation_warnings(measured, max_prompt_length)
    return report


def attach_to_build(build_dir: str | Path, tokenizer: Any, *, max_prompt_length: int | None = None) -> dict[str, Any]:
    """Measure a finished build and record the report under ``tokens`` in its ``manifest.json``.

    The manifest is rewritten through a temporary file, so a crash leaves the old one whole.
    """
    from opgen import manifest as M
    from opgen import write

    root = Path(build_dir)
    report = build_token_report(root, tokenizer, max_prompt_length=max_prompt_length)
    manifest = json.loads((root / "manifest.json").read_text(encoding="utf-8"))
    manifest["tokens"] = report
    write.atomic_write_text(root / "manifest.json", M.dumps(manifest))
    return report


def files_token_report(paths: Sequence[str | Path], tokenizer: Any, *,
                       max_prompt_length: int | None = None) -> dict[str, Any]:
    """The token report of loose parquet files (no manifest): one entry per file, its kind read
    from its columns (a ``messages`` column makes it SFT)."""
    import pyarrow.parquet as pq

    measured = {}
    for path in paths:
        names = set(pq.ParquetFile(str(path)).schema_arrow.names)
        measured[str(path)] = measure_files([path], tokenizer, kind="sft" if "messages" in names else "rl")
    report: dict[str, Any] = {
        "tokenizer": tokenizer_id(tokenizer),
        "splits": {name: lengths.summary() for name, lengths in measured.items()},
        "recommended": recommend(measured),
    }
    if max_prompt_length is not None:
        report["warnings"] = truncation_warnings(measured, max_prompt_length)
    return report


def render_report(report: Mapping[str, Any]) -> str:
    """A short human table of a token report: per split min / median / p99 / max, then advice."""
    lines = [f"tokens (tokenizer {report['tokenizer']['name']}, sha256 {report['tokenizer']['sha256'][:12]}):",
             f"  {'split':<32} {'part':<13} {'min':>6} {'median':>7} {'p99':>6} {'max':>6}"]
    for name, s in report["splits"].items():
        for part in ("prompt_tokens", "answer_tokens", "conversation_tokens"):
            stats = s.get(part)
            if stats:
                lines.append(f"  {name:<32} {part[:-7]:<13} {stats['min']:>6} {stats['median']:>7} "
                             f"{stats['p99']:>6} {stats['max']:>6}")
    lines += [f"  recommended {key} = {value}" for key, value in report["recommended"].items()]
    lines += [f"  WARNING {w}" for w in report.get("warnings", [])]
    return "\n".join(lines)
