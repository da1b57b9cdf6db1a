"""Row kinds and their pyarrow schemas (from schemas/rows.json), and Item → columns.

Columns are built directly (flat lists → arrays → struct/list arrays) rather than through
``Table.from_pylist`` of nested dicts, which costs several times more per row.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from opgen import __version__, ops
from opgen import expr as E
from opgen.formats import Formatter, prepare
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


def extra_info_fields() -> list[str]:
    return list(_spec()["rl"]["extra_info"]["struct"])


def h64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


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


@dataclass
class Facts:
    """What the builder needs to know of a row without reading it back: keys and measures."""

    ukey: int
    pkey: int
    prog_keys: tuple[int, ...]
    depth: int
    k: int
    opmask: int
    composed: int  # operators that occur in a composed task (not a single call)
    out_len: int
    condition: str


def _msg_array(offsets: list[int], roles: list[str], contents: list[str]) -> pa.Array:
    inner = pa.StructArray.from_arrays([pa.array(roles, pa.string()), pa.array(contents, pa.string())],
                                       names=["role", "content"])
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), inner)


class RowBuffer:
    """Accumulates one chunk of rows of one split as flat column lists."""

    def __init__(self, spec: RowSpec):
        self.spec = spec
        self.fmt = Formatter(spec.prompt_format, spec.answer_format)
        self.schema = schema(spec.kind)
        self.data_source = f"opgen/{spec.family}"
        self.ability = "code_io" if self.fmt.mode == "forward" else "code"
        self.structure_group = "group"
        self.clear()

    def clear(self) -> None:
        self.n = 0
        self.p_off = [0]
        self.p_role: list[str] = []
        self.p_content: list[str] = []
        self.gt: list[str] = []
        self.cols: dict[str, list] = {name: [] for name in extra_info_fields()}
        self.ops_off = [0]
        self.ops_flat: list[str] = []
        self.response: list[str] = []

    def add(self, index: int, item: Item) -> Facts:
        p = prepare(item)
        fmt = self.fmt
        prompt = fmt.prompt(item, p)
        gt = fmt.ground_truth(item, p)
        self.n += 1
        self.p_role.append("user")
        self.p_content.append(prompt)
        self.p_off.append(len(self.p_role))
        self.gt.append(gt)
        if self.spec.kind == "sft":
            self.response.append(fmt.answer(item, p))
        tasks = item.tasks
        depth = max(p.depths)
        k = len(p.recall)
        c = self.cols
        c["index"].append(index)
        c["depth"].append(depth)
        c["k"].append(k)
        self.ops_flat.extend(p.ops_sorted)
        self.ops_off.append(len(self.ops_flat))
        structure = E.structure(tasks[0].program) if len(tasks) == 1 else self.structure_group
        c["structure"].append(structure)
        c["condition"].append(item.condition)
        c["n_tasks"].append(len(tasks))
        c["assistant_prefix"].append(item.assistant_prefix)
        c["row_id"].append(hashlib.blake2b((prompt + "\x00" + gt).encode("utf-8"), digest_size=8).hexdigest())
        meta = dict(item.meta) if item.meta else (dict(tasks[0].meta) if tasks[0].meta else {})
        c["target_op"].append(str(meta.get("target_op", "")))
        c["tail_chars"].append(int(meta.get("tail_chars", -1)))
        c["tail_calls"].append(int(meta.get("tail_calls", -1)))

        unique = self.spec.unique
        if unique == "program":
            ukey = h64("\x01".join(p.exprs))
        elif unique == "task":
            ukey = h64("\x01".join(e + "\x00" + t.input for e, t in zip(p.exprs, tasks)))
        else:
            ukey = 0
        opmask = 0
        for o in p.recall:
            opmask |= _OP_BIT[o]
        composed = 0
        for t, used in zip(tasks, p.task_ops):
            prog = t.program
            single = isinstance(prog, E.Call) and all(isinstance(a, (E.Var, E.Lit)) for a in prog.args)
            if not single:
                for o in used:
                    composed |= _OP_BIT[o]
        return Facts(ukey, h64(prompt), tuple(h64(e) for e in p.exprs), depth, k, opmask, composed,
                     max(len(t.output) for t in tasks), item.condition)

    def table(self) -> pa.Table:
        n = self.n
        spec = self.spec
        const = {"split": spec.split, "family": spec.family, "prompt_format": spec.prompt_format,
                 "answer_format": spec.answer_format, "mode": self.fmt.mode, "opgen_version": __version__,
                 "recipe": spec.recipe}
        extra_type = self.schema.field("extra_info").type
        arrays = []
        for f in extra_type:
            if f.name == "ops":
                arrays.append(pa.ListArray.from_arrays(pa.array(self.ops_off, pa.int32()),
                                                       pa.array(self.ops_flat, pa.string())))
            elif f.name in const:
                arrays.append(pa.array([const[f.name]] * n, f.type))
            else:
                arrays.append(pa.array(self.cols[f.name], f.type))
        extra = pa.StructArray.from_arrays(arrays, fields=list(extra_type))
        prompt = _msg_array(self.p_off, self.p_role, self.p_content)
        reward = pa.StructArray.from_arrays([pa.array(["rule"] * n, pa.string()), pa.array(self.gt, pa.string())],
                                            names=["style", "ground_truth"])
        columns = [pa.array([self.data_source] * n, pa.string()), prompt, pa.array([self.ability] * n, pa.string()),
                   reward, extra]
        if spec.kind == "sft":
            roles, contents = [], []
            for user, gold in zip(self.p_content, self.response):
                roles += ("user", "assistant")
                contents += (user, gold)
            columns += [_msg_array(list(range(0, 2 * n + 1, 2)), roles, contents),
                        pa.array(self.response, pa.string()), pa.array(self.p_content, pa.string())]
        return pa.Table.from_arrays(columns, schema=self.schema)
