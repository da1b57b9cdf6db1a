"""Replay: answer requests from recorded responses, to grade someone else's generations.

The source is a responses JSONL file (the scorer's format: ``{"index": i, "response": ...}`` or
``{"index": i, "responses": [...]}``) or a directory holding one per data file, named
``<data>_generations.jsonl`` (an earlier `opgen eval` output), ``<data>_responses.jsonl`` or
``<data>.jsonl``. Recall answers of a decomposed run (``"recalls": [{"op", "response"}]``) replay
the decomposed requests ``<index>/<op>``.

A ``.parquet`` source (or ``<data>_generations.parquet`` in a directory) is read as verl's
generation output (``verl.trainer.main_generation_server``): the data rows, in order, plus a
``responses`` column of n strings each (:func:`load_verl_generations`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from opgen.infer.base import STOP, Backend, BackendError, Generation, Request, Sampling, prompt_sha256
from opgen.infer.run import open_parquet

_NAMES = ("{}_generations.jsonl", "{}_responses.jsonl", "{}.jsonl", "{}_generations.parquet")
# verl's generation file records no finish reason: truncation is unknown, never counted as "length".
UNKNOWN_FINISH = "unknown"


def _as_list(value: object, what: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise ValueError(f"{what} must be a string or a list of strings")


def _record_of(raw: bytes, where: str) -> dict | None:
    """One JSONL line as a record with an integer ``index``; None for a blank line."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BackendError(f"{where}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at column "
                           f"{exc.start + 1})") from None
    if not line.strip():
        return None
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as exc:
        raise BackendError(f"{where}: not JSON ({exc.msg})") from None
    if not isinstance(rec, dict) or not isinstance(rec.get("index"), int):
        raise BackendError(f"{where}: each line needs an integer 'index'")
    return rec


def _entries_of(rec: dict) -> list[tuple[str, dict]]:
    """(key, entry) of a record's own responses (when it has any) and of each of its recalls."""
    if "responses" in rec and "response" in rec:  # which one was meant? never one of them silently
        raise ValueError("both 'response' and 'responses'; give one of them")
    if "responses" in rec:
        responses = _as_list(rec["responses"], "'responses'")
    elif "response" in rec:
        responses = _as_list(rec["response"], "'response'")
    else:
        responses = None
    entries = []
    if responses is not None:
        reasons = rec.get("finish_reasons", rec.get("finish_reason", STOP))
        reasons = _as_list(reasons, "'finish_reason'")
        if len(reasons) == 1 and len(responses) > 1:
            reasons = reasons * len(responses)
        entries.append((rec.get("key", str(rec["index"])), {
            "responses": responses, "finish_reasons": reasons,
            "prompt_sha256": rec.get("prompt_sha256", ""),
            "prompt_tokens": rec.get("prompt_tokens", -1),
            "completion_tokens": rec.get("completion_tokens", []),
        }))
    for recall in rec.get("recalls", []):
        entries.append((f"{rec['index']}/{recall['op']}", {
            "responses": _as_list(recall["response"], "recall 'response'"),
            "finish_reasons": _as_list(recall.get("finish_reason", STOP), "'finish_reason'"),
            "prompt_sha256": "", "prompt_tokens": recall.get("prompt_tokens", -1),
            "completion_tokens": recall.get("completion_tokens", []),
        }))
    return entries


def load_responses(path: Path) -> dict[str, dict]:
    """Key ("<index>" or "<index>/<op>") -> {responses, finish_reasons, prompt_sha256, ...}."""
    if Path(path).suffix == ".parquet":
        return load_verl_generations(Path(path))
    table: dict[str, dict] = {}
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise BackendError(f"{path}: cannot read the responses ({exc.strerror})") from None
    with fh:
        if fh.read(4) == b"PAR1":
            raise BackendError(f"{path}: is a parquet file; replay reads a responses JSONL "
                               f"({{\"index\": i, \"response\": ...}} per line)")
        fh.seek(0)
        for lineno, raw in enumerate(fh, 1):
            where = f"{path}:{lineno}"
            rec = _record_of(raw, where)
            if rec is None:
                continue
            try:
                entries = _entries_of(rec)
            except (ValueError, KeyError, TypeError) as exc:
                raise BackendError(f"{where}: {exc}") from None
            for key, entry in entries:
                if key in table:
                    raise BackendError(f"{where}: a second response for {key!r}")
                table[key] = entry
    return table


def _row_of(key: str) -> int | None:
    head = key.split("/", 1)[0]
    return int(head) if head.isdigit() else None


def _source_for(source: Path, data_name: str) -> Path:
    if source.is_file():
        return source
    candidates = [source / pat.format(data_name) for pat in _NAMES]
    found = [p for p in candidates if p.is_file()]
    if not found:
        raise BackendError(f"replay: none of {', '.join(str(c) for c in candidates)} exists")
    return found[0]


def check_source(source: Path, data: Sequence[tuple[str, Sequence, int, bool]]) -> None:
    """Before any work: that the recorded responses belong to these data files.

    ``data`` holds (data name, rows, row count, decomposed) per --data file: the rows to be answered
    (with ``index`` and ``sha``, the prompt's sha256; fewer under --limit), the file's row count and
    whether a decomposed pass will replay it too.
    A single responses file answers one data file; every index must be a row of it; a recorded
    ``prompt_sha256`` must be its row's; an empty file is an error; ``--decomposed`` needs recall
    answers.
    """
    source = Path(source)
    if source.is_file() and len(data) > 1:
        raise BackendError(f"replay: {source} is one responses file, and {len(data)} --data files were given; its "
                           f"indices would be graded against each of them. Give one --data, or a folder "
                           f"holding <data>_generations.jsonl for each")
    for name, rows, n, decomposed in data:
        passes = [(name, False)] + ([(name + "_decomposed", True)] if decomposed else [])
        for pass_name, is_decomposed in passes:
            path = source if source.is_file() else _source_for(source, pass_name)
            table = load_responses(path)
            if not table:
                raise BackendError(f"replay: {path} holds no responses")
            shas = {r.index: r.sha for r in rows}
            for key, entry in table.items():
                i = _row_of(key)
                if i is None or i >= n:
                    raise BackendError(f"replay: {path} answers row {key!r}, but {name} has {n} rows "
                                       f"(0..{n - 1}); these responses were made for other data")
                recorded = entry["prompt_sha256"]
                if recorded and "/" not in key and i in shas and recorded != shas[i]:
                    raise BackendError(f"replay: {path} row {key} was generated for a different prompt "
                                       f"(prompt_sha256 {recorded[:12]}… vs {name}'s {shas[i][:12]}…)")
            if is_decomposed and not any("/" in k for k in table):
                raise BackendError(f"replay: --decomposed needs recall answers (\"recalls\" per line) in {path}; "
                                   f"it has none")


def load_verl_generations(path: Path) -> dict[str, dict]:
    """verl's generation parquet -> the table :func:`load_responses` returns, keyed by row position.

    ``verl.trainer.main_generation_server`` writes its data rows back in order (its
    ``data.train_files`` concatenated) with ``responses``: a list of ``actor_rollout_ref.rollout.n``
    strings per row. Each row's ``prompt_sha256`` is computed from the file's own ``prompt`` (and
    ``extra_info.assistant_prefix``), so replaying it against a different data file, or one whose
    rows were reordered, stops at the first row that differs.
    """
    import pyarrow as pa

    pf, names = open_parquet(path, BackendError)
    for col in ("responses", "prompt"):
        if col not in names:
            raise BackendError(f"{path} is a parquet file with no {col!r} column, so not verl's generation output "
                               f"(columns: {', '.join(sorted(names))})")
    cols = ["responses", "prompt"] + (["extra_info"] if "extra_info" in names else [])
    table: dict[str, dict] = {}
    try:
        _read_generations(pf, path, cols, table)
    except (OSError, ValueError, pa.ArrowException) as exc:  # a corrupt page, a bad value encoding
        raise BackendError(f"{path}: not a readable parquet file: unreadable after row {len(table)} "
                           f"({type(exc).__name__}: {exc})") from None
    return table


def _read_generations(pf, path: Path, cols: list[str], table: dict[str, dict]) -> None:
    for batch in pf.iter_batches(batch_size=4096, columns=cols):
        for rec in batch.to_pylist():
            i = len(table)
            where = f"{path}: row {i}"
            try:
                responses = _as_list(rec["responses"], "'responses'")
            except ValueError as exc:
                raise BackendError(f"{where}: {exc}") from None
            prompt = rec["prompt"]
            if not isinstance(prompt, list) or not all(
                    isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                    for m in prompt):
                raise BackendError(f"{where}: 'prompt' must be a list of {{role, content}}")
            prefix = str((rec.get("extra_info") or {}).get("assistant_prefix") or "")
            table[str(i)] = {"responses": responses, "finish_reasons": [UNKNOWN_FINISH] * len(responses),
                             "prompt_sha256": prompt_sha256(prompt, prefix), "prompt_tokens": -1,
                             "completion_tokens": []}


class ReplayBackend(Backend):
    name = "replay"

    def __init__(self, source: Path):
        self.source = Path(source)
        if not self.source.exists():
            raise BackendError(f"replay source {self.source} does not exist")
        self._table: dict[str, dict] | None = None
        self._file: Path | None = None

    def begin_data(self, data_name: str) -> None:
        path = _source_for(self.source, data_name)
        if path != self._file:
            self._table = load_responses(path)
            self._file = path

    def generate(self, requests: Sequence[Request], sampling: Sampling) -> list[Generation]:
        if self._table is None:
            raise BackendError("replay: begin_data() was not called")
        out = []
        for req in requests:
            entry = self._table.get(req.key)
            if entry is None:
                raise BackendError(f"replay: {self._file} has no response for row {req.key}")
            recorded = entry["prompt_sha256"]
            if recorded and req.prompt_sha256 and recorded != req.prompt_sha256:
                raise BackendError(f"replay: {self._file} row {req.key} was generated for a different prompt "
                                   f"(prompt_sha256 {recorded[:12]}… vs the data's {req.prompt_sha256[:12]}…)")
            if len(entry["responses"]) < sampling.n:
                raise BackendError(f"replay: {self._file} row {req.key} has {len(entry['responses'])} "
                                   f"responses, --n asks for {sampling.n}")
            tokens = entry["completion_tokens"]
            if isinstance(tokens, int):
                tokens = [tokens]
            out.append(Generation(
                key=req.key,
                responses=entry["responses"][: sampling.n],
                finish_reasons=(entry["finish_reasons"] + [STOP] * sampling.n)[: sampling.n],
                prompt_tokens=int(entry["prompt_tokens"]),
                completion_tokens=list(tokens)[: sampling.n],
            ))
        return out
