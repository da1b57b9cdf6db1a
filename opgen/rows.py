"""Row kinds and their pyarrow schemas (from schemas/rows.json), and Item → columns.

Columns are built directly (flat lists → arrays → struct/list arrays) rather than through
``Table.from_pylist`` of nested dicts, which costs several times more per row.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import string
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from opgen import expr as E
from opgen import ops
from opgen._version import __version__
from opgen.formats import Formatter, SingleRenderer, Text, ops_text, prepare, scan, text
from opgen.generate.measure import call_distances, scan_measured, task_unchanged_calls, unchanged_calls
from opgen.ops import STUDY, OperatorLibrary
from opgen.resources import schema_path
from opgen.tasks import Item

KINDS = ("rl", "sft")
_OP_BIT = {op.id: 1 << op.index for op in ops.OPERATORS}


def _arrow_type(spec: Any) -> pa.DataType:
    if spec == "string":
        return pa.string()
    if spec == "int64":
        return pa.int64()
    if isinstance(spec, dict) and "list" in spec:
        return pa.list_(_arrow_type(spec["list"]))
    if isinstance(spec, dict) and "struct" in spec:
        return pa.struct([pa.field(k, _arrow_type(v)) for k, v in spec["struct"].items()])
    raise ValueError(f"schemas/rows.json: unknown column type {spec!r}")


@functools.cache
def _spec() -> dict:
    return json.loads(schema_path("rows.json").read_text())


@functools.cache
def schema(kind: str) -> pa.Schema:
    """The one pyarrow schema of a row kind (``rl`` or ``sft``): every file of the kind has it exactly."""
    if kind not in KINDS:
        raise ValueError(f"unknown row kind {kind!r} (known: {', '.join(KINDS)})")
    cols = dict(_spec()["rl"])
    if kind == "sft":
        cols.update(_spec()["sft_extra"])
    return pa.schema([pa.field(name, _arrow_type(t)) for name, t in cols.items()])


@functools.cache
def verl_minimal_schema() -> pa.Schema:
    return pa.schema([pa.field(n, _arrow_type(t)) for n, t in _spec()["verl_minimal"].items()])


def h64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


def _probe_measures(meta: tuple) -> tuple[str, int, int]:
    """The probe measures that have columns of their own: (target_op, tail_chars, tail_calls)."""
    if not meta:
        return "", -1, -1
    found = dict(meta)
    return str(found.get("target_op", "")), int(found.get("tail_chars", -1)), int(found.get("tail_calls", -1))


@dataclass(frozen=True)
class RowSpec:
    """How a split's items become rows (everything but the item itself)."""

    split: str
    family: str
    kind: str
    prompt_format: str
    answer_format: str
    recipe: str
    unique: str = "program"  # program | task | none
    data_source: str = "opgen/{family}"  # template: {family}, {depth} (the row's depth; a group's deepest task)
    # composition program keys of training recipes a row may not share (leakage.avoid_programs, opt-in)
    avoid: Any = None
    ability: str = ""  # "" = code (program rows) / code_io (forward rows)
    prompt_template: str | None = None  # a user's prompt wording (opgen.formats.TEMPLATE_FIELDS)
    # the recipe's operator library and the ground truth's member naming it (``, "library":
    # {...}``; "" for the study, whose rows are as they always were)
    library: OperatorLibrary = STUDY
    library_tag: str = ""


class RowRecord(NamedTuple):
    """One buffered row: its texts, then its ``extra_info`` values (each field named as its column).

    :meth:`RowBuffer.table` transposes a chunk of them into columns by these names with one
    ``zip``. The single-task fast path appends a plain tuple of the same values in this order
    (a named tuple's constructor would add ~0.2 µs to a ~15 µs row); tests/test_formats.py checks
    that its rows equal the general path's RowRecords field for field.
    """

    prompt: Text
    ground_truth: Text
    answer: Text | None  # the gold answer (sft rows), else None
    index: int  # type: ignore[assignment]  # a column named like tuple.index, which it shadows
    depth: int
    k: int
    ops: tuple[str, ...]
    structure: str
    n_tasks: int
    condition: str
    assistant_prefix: str
    row_id: str
    target_op: str
    tail_chars: int
    tail_calls: int
    unchanged_calls: int
    output_is_input: int
    call_ops: tuple[str, ...]
    call_chars: tuple[int, ...]
    call_tails: tuple[int, ...]




class Facts(NamedTuple):
    """What the builder needs to know of a row without reading it back: keys and measures.

    A named tuple (one per row, built in the hot loop): cheaper to make than a dataclass, and a
    shard's facts transpose into columns with one ``zip``.
    """

    ukey: int
    pkey: int
    prog_keys: tuple[int, ...]
    depth: int
    k: int
    opmask: int
    composed: int  # operators that occur in a composed task (not a single call)
    out_len: int
    condition: str
    unchanged: int = 0  # operator calls that return their first argument unchanged (all tasks)
    identity: int = 0  # tasks whose output equals their input
    target_chars: int = -1  # a probe's name→argument distance of its target (extra_info.tail_chars)


_LEAF = (E.Var, E.Lit)
_Call, _Var = E.Call, E.Var
_NO_PROBE = ("", -1, -1)
_PROGRAM_CACHE = 16384  # programs kept per buffer (a few hundred bytes each; cleared when full)


_CALL = re.compile(r"func_[0-9]+\(")


def n_calls(expr: str) -> int:
    """Operator calls in a canonical program text (what ``opgen leakage`` counts in files)."""
    return len(_CALL.findall(expr))


def structure_of(e: E.Expr) -> str:
    """``expr.structure`` without walking the whole tree (tested equal)."""
    if type(e) is not E.Call:
        return "mixed"
    if all(type(a) in _LEAF for a in e.args):
        return "atomic"
    node: E.Expr = e
    while type(node) is E.Call and len(node.args) == 1:
        node = node.args[0]
    return "chain" if type(node) is E.Var else "mixed"


@functools.lru_cache(maxsize=65536)
def _mask(op_ids: tuple[str, ...]) -> int:
    mask = 0
    for o in op_ids:
        mask |= _OP_BIT[o]
    return mask


class RowBuffer:
    """Accumulates one chunk of rows of one split: one tuple per row, transposed into columns once."""

    def __init__(self, spec: RowSpec):
        self.spec = spec
        self.fmt = Formatter(spec.prompt_format, spec.answer_format, spec.prompt_template, spec.library,
                             spec.library_tag)
        self.lib = lib = self.fmt.lib
        self._study = lib.is_study  # the study's masks are cached per operator tuple (_mask)
        # an operator's bit in the row's mask: its position in the library
        self._bit = _OP_BIT if self._study else {o: 1 << i for o, i in lib.position.items()}
        self.schema = schema(spec.kind)
        # a template with {depth} is filled per row when the table is made (opgen.recipe checks it)
        self.per_depth_source = any(f == "depth" for _, f, _, _ in string.Formatter().parse(spec.data_source))
        self.data_source = spec.data_source.format(family=spec.family, depth="{depth}")
        self.ability = spec.ability or ("code_io" if self.fmt.mode == "forward" else "code")
        self.kind_sft = spec.kind == "sft"
        self.format_id = f"{spec.prompt_format}\x00{spec.answer_format}\x00"
        if spec.prompt_template is not None:  # another wording, other prompts: other prompt keys and row ids
            self.format_id += f"{h64(spec.prompt_template):016x}\x00"
        self.format_key = h64(self.format_id)
        self.single = SingleRenderer(self.fmt)
        self._programs: dict[tuple, tuple] = {}
        self.rows: list[tuple] = []  # RowRecords (the fast path's: plain tuples of the same fields)
        self.avoid_programs: Any = spec.avoid
        self.avoided = False  # whether the last refused row was refused for sharing a training program
        self._add_single = self._single_adder()

    def clear(self) -> None:
        self.rows.clear()  # in place: the single-row adder keeps the list

    @property
    def n(self) -> int:
        return len(self.rows)

    def add(self, index: int, item: Item, seen: set[int] | None = None) -> Facts | None:
        """Render ``item`` as row ``index``; with ``seen``, refuse (return None, add nothing) a row
        whose unique key is in it, else add the key to it."""
        tasks = item.tasks
        if len(tasks) == 1 and not item.assistant_prefix:
            return self._add_single(index, item, tasks[0], seen)
        return self._add_general(index, item, seen)

    def _add_general(self, index: int, item: Item, seen: set[int] | None = None) -> Facts | None:
        tasks = item.tasks
        p = prepare(item, self.lib)
        exprs = p.exprs
        # The prompt and ground truth are functions of (formats, programs, inputs), so short
        # identities hash as well as the long texts and cost a fraction.
        if len(tasks) == 1:
            task_id = exprs[0] + "\x00" + tasks[0].input
            prog_keys: tuple[int, ...] = (h64(exprs[0]),)
        else:
            task_id = "\x01".join(e + "\x00" + t.input for e, t in zip(exprs, tasks))
            prog_keys = tuple(h64(e) for e in exprs)
        unique = self.spec.unique
        tkey = h64(task_id)
        self.avoided = False
        if self.avoid_programs is not None and any(
                k in self.avoid_programs for k, d in zip(prog_keys, p.depths) if d >= 2):
            self.avoided = True
            return None
        if unique == "task":
            ukey = tkey
        elif unique == "program":
            ukey = prog_keys[0] if len(prog_keys) == 1 else h64("\x01".join(exprs))
        else:
            ukey = 0
        if seen is not None and unique != "none":
            if ukey in seen:
                return None
            seen.add(ukey)

        fmt = self.fmt
        prompt = fmt.prompt(item, p)
        depths = p.depths
        depth = depths[0] if len(depths) == 1 else max(depths)
        k = len(p.recall)
        condition, prefix = item.condition, item.assistant_prefix
        # The prompt is a function of the formats and the tasks: its key mixes the two hashes.
        pkey = tkey ^ self.format_key
        row_id = (f"{pkey:016x}" if not condition and not prefix else
                  f"{h64(f'{self.format_id}{task_id}{chr(2)}{condition}{chr(2)}{prefix}'):016x}")
        target, tail_chars, tail_calls = _probe_measures(item.meta or tasks[0].meta)
        unchanged = identity = 0
        call_ops: list[str] = []
        call_chars: list[int] = []
        call_tails: list[int] = []
        for t in tasks:
            unchanged += task_unchanged_calls(t, self.lib)
            identity += t.output == t.input
            for op, chars, tails in call_distances(t.program):
                call_ops.append(op)
                call_chars.append(chars)
                call_tails.append(tails)
        self.rows.append(RowRecord(
            prompt=prompt, ground_truth=fmt.ground_truth(item, p),
            answer=fmt.answer(item, p) if self.kind_sft else None,
            index=index, depth=depth, k=k, ops=p.ops_sorted,
            structure=structure_of(tasks[0].program) if len(tasks) == 1 else "group", n_tasks=len(tasks),
            condition=condition, assistant_prefix=prefix, row_id=row_id,
            target_op=target, tail_chars=tail_chars, tail_calls=tail_calls,
            unchanged_calls=unchanged, output_is_input=identity,
            call_ops=tuple(call_ops), call_chars=tuple(call_chars), call_tails=tuple(call_tails),
        ))

        opmask = 0
        bit = self._bit
        for o in p.recall:
            opmask |= bit[o]
        composed = 0
        out_len = 0
        for t, used in zip(tasks, p.task_ops):
            prog = t.program
            if not (type(prog) is E.Call and all(type(a) in _LEAF for a in prog.args)):
                for o in used:
                    composed |= bit[o]
            if len(t.output) > out_len:
                out_len = len(t.output)
        return Facts(ukey, pkey, prog_keys, depth, k, opmask, composed, out_len, condition, unchanged, identity,
                     tail_chars)

    def _single_adder(self):
        """``add`` for the common row (one task, no teacher-forced prefix): the same row, fewer steps.

        A closure over everything that is fixed per buffer, because it runs once per row.
        """
        programs, rows_append = self._programs, self.rows.append
        remember, program_facts, render = self._remember, self._program_facts, self.single.render
        unique, format_key, format_id, sft = self.spec.unique, self.format_key, self.format_id, self.kind_sft
        checked = unique != "none"
        avoid_programs = self.avoid_programs
        lib = self.lib

        def add_single(index: int, item: Item, task, seen: set[int] | None) -> Facts | None:
            prog = task.program
            # Programs repeat across a split (most depth-1 ones, many without literals): their texts
            # and measures are made once. One call on x alone is known by (operator, parameters)
            # without rendering it; any other program by its text.
            if type(prog) is _Call and len(prog.args) == 1 and type(prog.args[0]) is _Var:
                key: Any = (prog.op, prog.params, prog.args[0].name)
                facts = programs.get(key)
                if facts is None:
                    used: dict[str, None] = {}
                    facts = remember(key, program_facts(prog, *scan(prog, used), used))
            else:
                used = {}
                # text, depth and per-call distances in one walk (a repeated program's are cached)
                key, depth, dist = scan_measured(prog, used)
                facts = programs.get(key)
                if facts is None:
                    facts = remember(key, program_facts(prog, key, depth, used, dist))
            expr, depth, pk, k, opmask, composed, structure, ops_sorted, parts, dist = facts
            x = task.input
            task_id = expr + "\x00" + x
            tkey = h64(task_id)
            ukey = tkey if unique == "task" else pk if unique == "program" else 0
            self.avoided = False
            if avoid_programs is not None and depth >= 2 and pk in avoid_programs:
                self.avoided = True
                return None
            if seen is not None and checked:
                if ukey in seen:
                    return None
                seen.add(ukey)
            out = task.output
            condition = item.condition
            pkey = tkey ^ format_key
            row_id = (f"{pkey:016x}" if not condition else
                      f"{h64(f'{format_id}{task_id}{chr(2)}{condition}{chr(2)}'):016x}")
            meta = item.meta or task.meta
            target, tail_chars, tail_calls = _probe_measures(meta) if meta else _NO_PROBE
            prompt, gt, answer = render(parts, x, out, sft)
            known = task.__dict__.get("_unchanged")  # measure.task_unchanged_calls, inlined
            unchanged = unchanged_calls(prog, x, out, lib) if known is None else known
            identity = int(out == x)
            # RowRecord's fields in order (call_ops, call_chars, call_tails are ``dist``), as a plain tuple
            rows_append((prompt, gt, answer, index, depth, k, ops_sorted, structure, 1, condition, "", row_id,
                         target, tail_chars, tail_calls, unchanged, identity, *dist))
            return Facts(ukey, pkey, (pk,), depth, k, opmask, composed, len(out), condition, unchanged, identity,
                         tail_chars)

        return add_single

    def _program_facts(self, prog: E.Expr, expr: str, depth: int, used: dict[str, None],
                       dist: tuple | None = None) -> tuple:
        t = ops_text(tuple(used), self.lib)
        k = len(t.recall)
        if self._study:
            opmask = _mask(t.recall)
        else:
            opmask = 0
            for o in t.recall:
                opmask |= self._bit[o]
        if depth == 1 and type(prog) is E.Call:  # one call on leaves: not composed
            composed = 0
            structure = "atomic"
        else:
            structure = structure_of(prog)
            composed = 0 if type(prog) is E.Call and all(type(a) in _LEAF for a in prog.args) else opmask
        program = "def main_solution(x):\n    return " + expr
        parts = self.single.parts(t, expr, program, depth)
        if dist is None:
            dist = call_distances(prog)
        dist_cols = (tuple(d[0] for d in dist), tuple(d[1] for d in dist), tuple(d[2] for d in dist))
        return expr, depth, h64(expr), k, opmask, composed, structure, t.ops_sorted, parts, dist_cols

    def _remember(self, key: Any, facts: tuple) -> tuple:
        if len(self._programs) >= _PROGRAM_CACHE:
            self._programs.clear()
        self._programs[key] = facts
        return facts

    def table(self) -> pa.Table:
        n = len(self.rows)
        spec = self.spec
        cols = dict(zip(RowRecord._fields, zip(*self.rows))) if n else {f: () for f in RowRecord._fields}
        prompts, gts, answers, depth = cols["prompt"], cols["ground_truth"], cols["answer"], cols["depth"]
        lists = {"ops": cols["ops"], "call_ops": cols["call_ops"]}
        int_lists = {"call_chars": cols["call_chars"], "call_tails": cols["call_tails"]}
        const = {"prompt_template": "" if spec.prompt_template is None else f"{h64(spec.prompt_template):016x}",
                 "split": spec.split, "family": spec.family, "prompt_format": spec.prompt_format,
                 "answer_format": spec.answer_format, "mode": self.fmt.mode, "opgen_version": __version__,
                 "recipe": spec.recipe}
        extra_type = self.schema.field("extra_info").type
        arrays = []
        for f in extra_type:
            if f.name in lists:
                arrays.append(_list_of_strings(lists[f.name]))
            elif f.name in int_lists:
                arrays.append(_list_of_ints(int_lists[f.name]))
            elif f.name in const:
                arrays.append(_repeat(const[f.name], n))
            elif f.type == pa.int64():
                arrays.append(_ints(cols[f.name]))
            else:
                arrays.append(_strings(cols[f.name]))
        extra = pa.StructArray.from_arrays(arrays, fields=list(extra_type))
        prompt_texts = _texts(prompts)
        prompt = _messages(_repeat("user", n), prompt_texts, 1)
        reward = pa.StructArray.from_arrays([_repeat("rule", n), _texts(gts)], names=["style", "ground_truth"])
        if self.per_depth_source:
            names = {d: spec.data_source.format(family=spec.family, depth=d) for d in sorted(set(depth))}
            source = _strings([names[d] for d in depth])
        else:
            source = _repeat(self.data_source, n)
        columns = [source, prompt, _repeat(self.ability, n), reward, extra]
        if spec.kind == "sft":
            contents = [t for pair in zip(prompts, answers) for t in pair]
            roles = _strings(["user", "assistant"] * n)
            columns += [_messages(roles, _texts(contents), 2), _texts(answers), prompt_texts]
        return pa.Table.from_arrays(columns, schema=self.schema)


# Arrays are assembled from buffers: ``pa.array`` on Python objects imports pandas on first use
# (0.2 s and 60 MiB per process), which a build never needs.


def _strings(values) -> pa.Array:
    """A string array of short values (the long row texts go through :func:`_texts`)."""
    joined = "".join(values)
    if joined.isascii():  # one encode for the column: characters are bytes, so str lengths are offsets
        data, lengths = joined.encode("ascii"), map(len, values)
    else:
        encoded = [v.encode("utf-8") for v in values]
        data, lengths = b"".join(encoded), map(len, encoded)
    return _string_array(values, lengths, data)


def _string_array(values, byte_lengths, data: bytes) -> pa.Array:
    """Arrow strings from ``data`` cut at ``byte_lengths``; ``values`` (str or :data:`Text`) only
    when the column is too large for 32-bit offsets."""
    offsets = np.fromiter(accumulate(byte_lengths, initial=0), dtype=np.int64, count=len(values) + 1)
    if offsets[-1] >= 2**31:
        return pa.array([text(v) for v in values], pa.string())
    return pa.Array.from_buffers(pa.string(), len(values),
                                 [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)])


def _texts(values) -> pa.Array:
    """A string array of :data:`opgen.formats.Text` values (str, or pieces before/shared/after).

    A shared piece (a few operator tuples' sources, each ~1 KiB, in every row) is encoded once per
    column and the bytes are joined once: no row's full text is ever built as a str.
    """
    encoded: dict[str, bytes] = {}
    chunks: list[bytes] = []
    lengths: list[int] = []
    put, measure, get = chunks.append, lengths.append, encoded.get
    for v in values:
        if type(v) is str:
            b = v.encode("utf-8")
            put(b)
            measure(len(b))
            continue
        before, shared, after = v
        s = get(shared)
        if s is None:
            s = encoded[shared] = shared.encode("utf-8")
        b0, b2 = before.encode("utf-8"), after.encode("utf-8")
        put(b0)
        put(s)
        put(b2)
        measure(len(b0) + len(s) + len(b2))
    return _string_array(values, lengths, b"".join(chunks))


def _repeat(value: str, n: int) -> pa.Array:
    raw = value.encode("utf-8")
    offsets = np.arange(n + 1, dtype=np.int32) * len(raw)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)])


def _ints(values) -> pa.Array:
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(np.array(values, dtype=np.int64))])


def _offsets(counts) -> pa.Array:
    off = np.fromiter(accumulate(counts, initial=0), dtype=np.int32)
    return pa.Array.from_buffers(pa.int32(), len(off), [None, pa.py_buffer(off)])


def _list_of_ints(groups) -> pa.Array:
    return pa.ListArray.from_arrays(_offsets(map(len, groups)), _ints([v for g in groups for v in g]))


def _list_of_strings(groups) -> pa.Array:
    return pa.ListArray.from_arrays(_offsets(map(len, groups)), _strings([v for g in groups for v in g]))


def _messages(roles: pa.Array, contents: pa.Array, per_row: int) -> pa.Array:
    inner = pa.StructArray.from_arrays([roles, contents], names=["role", "content"])
    n = len(contents) // per_row
    return pa.ListArray.from_arrays(_offsets([per_row] * n), inner)
