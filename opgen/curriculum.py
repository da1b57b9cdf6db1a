"""An adaptive curriculum over opgen's difficulty axes: RLVE's difficulty windows, per bucket.

A *bucket* is one kind of task (a recipe's split) with *levels*: the split generator's options from
easiest to hardest, given as a ``ladder`` (one options mapping per level) or as ``axes`` (values
along opgen's difficulty axes, :data:`AXES`: depth, operators, width, literal length, held-out
operators). Each bucket keeps a window ``[low, high]`` of levels (RLVE, Zeng et al. 2025,
arXiv 2511.07317):

- every row drawn for a bucket has a level drawn uniformly from its window, so a batch mixes the
  window's difficulties;
- a reward counts toward the decision only when its row was drawn at ``high``; after
  ``tau_num`` such rewards, if their mean is at least ``tau_acc``, ``high`` moves up one level
  (never past the last) and ``low`` follows so the window holds at most ``width`` levels
  (``low = max(low, high - width + 1)``); the count then starts over, whatever the decision;
- a reward counts only for a row this curriculum served and only once (:class:`UnservedRow`,
  :class:`ReportedTwice` otherwise).

Streams never run out: the rows of (bucket, level) are chunks, chunk ``c`` being the split built
with the level's options and a seed named by (seed, bucket, level, c), its rows in an order drawn
from the same name; a row is named ``bucket/level/chunk/position``. Everything is a function of
the settings and of the order of the calls (draws and reports): the same calls give the same rows
and windows on any machine, and :meth:`Curriculum.export` / :meth:`Curriculum.restore` carry the
whole state (a JSON value), so a run stopped and restarted from it serves the stream it would have
served. ``opgen serve --curriculum`` saves it atomically after every change and restores it at
start (docs/integrations.md, "A curriculum").
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from opgen import rng
from opgen.errors import USAGE, OpgenError

STATE_VERSION = 1


class CurriculumError(ValueError, OpgenError):
    """A curriculum config, state or report that cannot be used; the message names the field."""

    exit_code = USAGE


class UnservedRow(CurriculumError):
    """A report for a row this curriculum never served (or no longer remembers: see ``max_pending``)."""


class ReportedTwice(CurriculumError):
    """A second report for the same row."""


# ---------------------------------------------------------------- difficulty axes


@dataclass(frozen=True)
class Axis:
    """One of opgen's difficulty axes: the generator option a level's value sets."""

    name: str
    option: str
    doc: str
    value: Callable[[Any, Any], Any]  # (the level's value, the bucket's recipe) -> the option's value

    def options(self, value: Any, recipe: Any) -> dict:
        return {self.option: self.value(value, recipe)}


def _int(name: str) -> Callable[[Any, Any], Any]:
    def check(v: Any, recipe: Any) -> Any:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise CurriculumError(f"axis {name}: a positive integer per level, not {v!r}")
        return v
    return check


def _exact(name: str) -> Callable[[Any, Any], Any]:
    one = _int(name)
    return lambda v, recipe: [one(v, recipe)] * 2


def _first_operators(v: Any, recipe: Any) -> Any:
    _int("operators")(v, recipe)
    train = list(recipe.library.train_ids)
    if v > len(train):
        raise CurriculumError(f"axis operators: {v} operators, but the library has {len(train)} train operators")
    return train[:v]


def _op_set(v: Any, recipe: Any) -> Any:
    if v not in ("train", "heldout", "all"):
        raise CurriculumError(f"axis heldout: train, heldout or all per level, not {v!r}")
    return v


#: The difficulty axes a bucket's ``axes`` may name (one registry; an unknown name raises).
AXES = {a.name: a for a in (
    Axis("depth", "depths", "expression depth (trees, chains): depths [d]", lambda v, r: [_int("depth")(v, r)]),
    Axis("operators", "ops", "distinct operators to know: the first k train operators of the library",
         _first_operators),
    Axis("width", "width", "co-occurrence width (tasks per prompt, cells): width [w, w]", _exact("width")),
    Axis("literal_len", "literal_len", "literal length (trees, atomic): literal_len [n, n]", _exact("literal_len")),
    Axis("heldout", "ops", "train vs held-out operators: train, heldout or all", _op_set),
)}


# ---------------------------------------------------------------- config


@dataclass(frozen=True)
class Bucket:
    """One kind of task: ``recipe`` (a bundled name or a recipe dict), ``split``, ``ladder`` (the
    split's generator options per level, easiest first)."""

    name: str
    recipe: Any
    split: str
    ladder: tuple[Mapping[str, Any], ...]

    def __post_init__(self) -> None:
        if not self.ladder:
            raise CurriculumError(f"bucket {self.name!r}: at least one level")


@dataclass(frozen=True)
class Settings:
    """RLVE's parameters (defaults documented in docs/integrations.md, "A curriculum")."""

    tau_num: int = 32  # rewards at ``high`` per decision
    tau_acc: float = 0.9  # their mean that moves ``high`` up
    width: int = 4  # d_Δ: levels in the window, at most
    seed: int = 0
    start: int = 0  # the window at start: [start, start]
    max_pending: int = 65_536  # served rows awaiting a report, at most (the oldest are forgotten)

    def __post_init__(self) -> None:
        for name in ("tau_num", "width", "max_pending"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise CurriculumError(f"settings.{name}: a positive integer, not {v!r}")
        for name in ("seed", "start"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise CurriculumError(f"settings.{name}: a non-negative integer, not {v!r}")
        if isinstance(self.tau_acc, bool) or not isinstance(self.tau_acc, (int, float)) or \
                not 0.0 < self.tau_acc <= 1.0:
            raise CurriculumError(f"settings.tau_acc: a number in (0, 1], not {self.tau_acc!r}")


_REMOVED = {"band": "tau_acc", "window": "tau_num", "drop_at": None, "drop_after": None, "start_level": "start"}


def settings_of(raw: Mapping[str, Any]) -> Settings:
    known = {f for f in Settings.__dataclass_fields__}
    for key in raw:
        if key in _REMOVED:
            instead = _REMOVED[key]
            hint = f"use {instead} (RLVE's rule)" if instead else "rows never repeat, so none is dropped"
            raise CurriculumError(f"curriculum settings.{key}: removed (RLVE windows replaced the band rule); {hint}")
        if key not in known:
            raise CurriculumError(f"curriculum settings: unknown key {key!r} (known: {', '.join(sorted(known))})")
    try:
        return Settings(**dict(raw))
    except TypeError as exc:
        raise CurriculumError(f"curriculum settings: {exc}") from None


def bucket_of(name: str, spec: Any, recipe_of: Callable[[Any], Any] | None = None) -> Bucket:
    """A bucket from its config: ``{recipe, split, ladder: [options, ...]}`` or ``{recipe, split,
    axes: {axis: [value per level, ...], ...}}`` (every axis with one value per level)."""
    where = f"curriculum buckets.{name}"
    if not isinstance(spec, Mapping):
        raise CurriculumError(f"{where}: a mapping with recipe, split and ladder or axes")
    unknown = sorted(set(spec) - {"recipe", "split", "ladder", "axes"})
    if unknown:
        raise CurriculumError(f"{where}: unknown keys {', '.join(unknown)}")
    if not {"recipe", "split"} <= set(spec) or ("ladder" in spec) == ("axes" in spec):
        raise CurriculumError(f"{where}: needs recipe, split and one of ladder or axes")
    if not isinstance(spec["split"], str):
        raise CurriculumError(f"{where}.split: a split's name")
    if "ladder" in spec:
        ladder = spec["ladder"]
        if not isinstance(ladder, list) or not ladder or not all(isinstance(x, Mapping) for x in ladder):
            raise CurriculumError(f"{where}.ladder: a non-empty list of option mappings, easiest first")
        return Bucket(str(name), spec["recipe"], spec["split"], tuple(dict(x) for x in ladder))
    return Bucket(str(name), spec["recipe"], spec["split"], _ladder_of_axes(where, spec, recipe_of or _load))


def _ladder_of_axes(where: str, spec: Mapping, recipe_of: Callable[[Any], Any]) -> tuple[dict, ...]:
    axes = spec["axes"]
    if not isinstance(axes, Mapping) or not axes:
        raise CurriculumError(f"{where}.axes: a mapping of axis -> [value per level] (axes: {', '.join(AXES)})")
    lengths = set()
    for axis, values in axes.items():
        if axis not in AXES:
            raise CurriculumError(f"{where}.axes.{axis}: unknown axis (axes: {', '.join(AXES)})")
        if not isinstance(values, list) or not values:
            raise CurriculumError(f"{where}.axes.{axis}: a non-empty list, one value per level")
        lengths.add(len(values))
    if len(lengths) != 1:
        raise CurriculumError(f"{where}.axes: every axis needs the same number of levels")
    options = [a.option for a in (AXES[x] for x in axes)]
    if len(set(options)) != len(options):
        raise CurriculumError(f"{where}.axes: two axes set the same option ({', '.join(options)})")
    recipe = recipe_of(spec["recipe"])
    ladder = []
    for level in range(lengths.pop()):
        rung: dict = {}
        for axis, values in axes.items():
            try:
                rung.update(AXES[axis].options(values[level], recipe))
            except CurriculumError as exc:
                raise CurriculumError(f"{where}.axes.{axis}[{level}]: {exc}") from None
        ladder.append(rung)
    return tuple(ladder)


def _load(recipe: Any) -> Any:
    from opgen import api

    return api.load_recipe(recipe)


def from_config(config: Any, **kw: Any) -> Curriculum:
    """A curriculum from its YAML/JSON form (``kw``: :class:`Curriculum`'s keywords)::

        settings: {tau_num: 32, tau_acc: 0.9, width: 4, seed: 0}
        buckets:
          trees: {recipe: eval-suite, split: trainop_trees_d1-8, axes: {depth: [1, 2, 3, 4, 5, 6, 7, 8]}}
          chains: {recipe: eval-suite, split: trainop_chains_d1-20, ladder: [{depths: [2]}, {depths: [4]}]}
    """
    if not isinstance(config, Mapping):
        raise CurriculumError("a curriculum config is a mapping with 'buckets' (and 'settings')")
    unknown = sorted(map(str, set(config) - {"settings", "buckets"}))
    if unknown:
        raise CurriculumError(f"curriculum config: unknown keys {', '.join(unknown)}")
    raw = config.get("settings") or {}
    if not isinstance(raw, Mapping):
        raise CurriculumError("curriculum settings: a mapping")
    settings = settings_of(raw)
    specs = config.get("buckets")
    if not isinstance(specs, Mapping) or not specs:
        raise CurriculumError("curriculum config: buckets must be a non-empty mapping of name -> "
                              "{recipe, split, ladder or axes}")
    buckets = [bucket_of(str(name), spec) for name, spec in specs.items()]
    return Curriculum(buckets, settings, **kw)


# ---------------------------------------------------------------- the controller


@dataclass
class _Stream:
    low: int
    high: int
    n: int = 0  # rewards counted at high since the last decision
    total: float = 0.0  # their sum
    draws: int = 0  # rows drawn for this bucket
    moves: int = 0
    at: dict[int, list[int]] = field(default_factory=dict)  # level -> [chunk, position] of its next row


RowsAt = Callable[[Bucket, int, int], list[dict]]  # (bucket, level, chunk seed) -> the chunk's rows


class Curriculum:
    """The controller (module docstring). ``rows_at(bucket, level, seed)`` makes a chunk's rows
    (default: :func:`build_chunk`, in this process); ``on_change(curriculum)`` is called after every
    draw and every report (``opgen serve`` saves :meth:`export` there); ``log(state)`` gets the
    summary after every report."""

    def __init__(self, buckets: Sequence[Bucket], settings: Settings | None = None, *,
                 rows_at: RowsAt | None = None, log: Callable[[dict], None] | None = None,
                 on_change: Callable[[Curriculum], None] | None = None):
        if not buckets:
            raise CurriculumError("a curriculum needs at least one bucket")
        names = [b.name for b in buckets]
        if len(set(names)) != len(names):
            raise CurriculumError(f"bucket names repeat: {names}")
        self.settings = settings or Settings()
        self.buckets = {b.name: b for b in buckets}
        self._order = sorted(self.buckets)
        self._rows_at = rows_at or build_chunk
        self._log, self._on_change = log, on_change
        start = self.settings.start
        self._streams = {b.name: _Stream(min(start, len(b.ladder) - 1), min(start, len(b.ladder) - 1))
                         for b in buckets}
        self.step = 0  # rewards counted
        self.served = 0  # rows served
        self._pending: OrderedDict[str, None] = OrderedDict()  # served rows awaiting their report
        self._done: OrderedDict[str, None] = OrderedDict()  # rows reported (the last max_pending)
        self._chunk: dict[tuple[str, int], tuple[int, list[dict]]] = {}  # (bucket, level) -> (chunk, rows)

    # ---------------------------------------------------------------- rows out

    def next_rows(self, n: int) -> list[dict]:
        """``n`` rows, buckets in turn (sorted names), each at a level drawn from its bucket's window;
        each row's ``extra_info`` names it (``curriculum_row``), its bucket and level. All or nothing:
        when a chunk cannot be made, nothing is drawn."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise CurriculumError(f"n must be a positive integer, got {n!r}")
        at = {name: {lv: list(p) for lv, p in st.at.items()} for name, st in self._streams.items()}
        draws = {name: st.draws for name, st in self._streams.items()}
        plan = []
        for k in range(self.served, self.served + n):
            name = self._order[k % len(self._order)]
            st = self._streams[name]
            word = rng.counter_key("curriculum-draw", self.settings.seed, name, draws[name])
            draws[name] += 1
            level = st.low + word % (st.high - st.low + 1)
            chunk, pos = at[name].get(level, [0, 0])
            rows = self._rows(name, level, chunk)
            if pos >= len(rows):
                chunk, pos = chunk + 1, 0
                rows = self._rows(name, level, chunk)
            at[name][level] = [chunk, pos + 1]
            plan.append((name, level, chunk, pos, rows[pos]))
        out = []
        for name, level, chunk, pos, row in plan:
            key = f"{name}/{level}/{chunk}/{pos}"
            extra = {**dict(row.get("extra_info") or {}), "curriculum_row": key, "curriculum_bucket": name,
                     "curriculum_level": level}
            out.append({**row, "extra_info": extra})
            self._remember(self._pending, key)
        for name, st in self._streams.items():
            st.at, st.draws = at[name], draws[name]
        self.served += n
        self._changed()
        return out

    def _rows(self, name: str, level: int, chunk: int) -> list[dict]:
        hit = self._chunk.get((name, level))
        if hit is not None and hit[0] == chunk:
            return hit[1]
        b = self.buckets[name]
        key = rng.counter_key("curriculum", self.settings.seed, name, level, chunk)
        rows = list(self._rows_at(b, level, key % (1 << 31)))
        if not rows:
            raise CurriculumError(f"bucket {name!r}, level {level}: the split builds no rows")
        order = _permutation(len(rows), key)
        rows = [rows[i] for i in order]
        self._chunk[(name, level)] = (chunk, rows)
        return rows

    def _remember(self, table: OrderedDict[str, None], key: str) -> None:
        table[key] = None
        while len(table) > self.settings.max_pending:
            table.popitem(last=False)

    def batches(self, size: int) -> Iterator[list[dict]]:
        while True:
            yield self.next_rows(size)

    # ---------------------------------------------------------------- rewards in

    def report(self, row: str, reward: float) -> dict:
        """One reward (0..1) for a served row (its ``extra_info.curriculum_row``)."""
        return self.report_many([(row, reward)])

    def report_rows(self, rows: Sequence[Mapping], rewards: Sequence[float]) -> dict:
        """Rewards for rows this curriculum gave (each row's ``extra_info.curriculum_row``)."""
        if len(rows) != len(rewards):
            raise CurriculumError(f"{len(rewards)} rewards for {len(rows)} rows")
        keys = [str((r.get("extra_info") or {}).get("curriculum_row", "")) for r in rows]
        return self.report_many(list(zip(keys, rewards)))

    def report_many(self, reports: Sequence[tuple[str, float]]) -> dict:
        """Rewards for served rows, all or none: every report is checked (a row served and not yet
        reported, a reward in [0, 1]) before any counts. Returns (and logs) the state."""
        seen: set[str] = set()
        checked = []
        for i, (key, reward) in enumerate(reports):
            where = f"reports[{i}]"
            if not isinstance(key, str):
                raise CurriculumError(f"{where}.row: a row's extra_info.curriculum_row, not {key!r}")
            if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not 0.0 <= reward <= 1.0:
                raise CurriculumError(f"{where}.reward: a number in [0, 1], not {reward!r}")
            if key in seen or key in self._done:
                raise ReportedTwice(f"{where}.row: {key!r} was reported already (a row counts once)")
            if key not in self._pending:
                raise UnservedRow(f"{where}.row: {key!r} is not a row this curriculum served")
            seen.add(key)
            checked.append((key, float(reward)))
        s = self.settings
        for key, r in checked:
            del self._pending[key]
            self._remember(self._done, key)
            name, level = key.split("/")[:2]
            st = self._streams[name]
            self.step += 1
            if int(level) != st.high:
                continue
            st.n += 1
            st.total += r
            if st.n >= s.tau_num:
                if st.total / st.n >= s.tau_acc and st.high < len(self.buckets[name].ladder) - 1:
                    st.high += 1
                    st.low = max(st.low, st.high - s.width + 1)
                    st.moves += 1
                st.n, st.total = 0, 0.0
        state = self.state()
        self._changed()
        if self._log is not None:
            self._log(state)
        return state

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(self)

    # ---------------------------------------------------------------- state

    def state(self) -> dict:
        """A summary: each bucket's window, its progress at ``high`` and the options there."""
        return {"step": self.step, "served": self.served, "pending": len(self._pending),
                "buckets": {n: {"window": [st.low, st.high], "levels": len(self.buckets[n].ladder),
                                "at_high": st.n, "accuracy_at_high": (st.total / st.n) if st.n else None,
                                "moves": st.moves, "options": dict(self.buckets[n].ladder[st.high])}
                            for n, st in sorted(self._streams.items())}}

    def config_digest(self) -> str:
        """The sha256 of the settings and buckets: a state restores only into the curriculum it came from."""
        data = {"settings": asdict(self.settings),
                "buckets": [[b.name, b.recipe, b.split, [dict(x) for x in b.ladder]]
                            for b in (self.buckets[n] for n in self._order)]}
        return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()

    def export(self) -> dict:
        """The whole state, as a JSON value (:meth:`restore` takes it back)."""
        return {"version": STATE_VERSION, "config": self.config_digest(), "step": self.step, "served": self.served,
                "streams": {n: {"low": st.low, "high": st.high, "n": st.n, "total": st.total, "draws": st.draws,
                                "moves": st.moves, "at": {str(lv): p for lv, p in sorted(st.at.items())}}
                            for n, st in sorted(self._streams.items())},
                "pending": list(self._pending), "done": list(self._done)}

    def restore(self, data: Any, where: str = "state") -> None:
        """Replace the state by an :meth:`export` of this curriculum (CurriculumError naming the field
        when it is not one)."""
        try:
            streams, step, served, pending, done = _parse_state(data, self, where)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            if isinstance(exc, CurriculumError):
                raise
            raise CurriculumError(f"{where}: not a curriculum state ({type(exc).__name__}: {exc})") from None
        self._streams, self.step, self.served = streams, step, served
        self._pending = OrderedDict.fromkeys(pending)
        self._done = OrderedDict.fromkeys(done)
        self._changed()


def _parse_state(data: Any, cur: Curriculum, where: str) -> tuple:
    if not isinstance(data, Mapping):
        raise CurriculumError(f"{where}: a JSON object (Curriculum.export)")
    unknown = sorted(map(str, set(data) - {"version", "config", "step", "served", "streams", "pending", "done"}))
    if unknown:
        raise CurriculumError(f"{where}: unknown fields {', '.join(unknown)}")
    if data.get("version") != STATE_VERSION:
        raise CurriculumError(f"{where}.version: {data.get('version')!r}, this opgen reads {STATE_VERSION}")
    if data.get("config") != cur.config_digest():
        raise CurriculumError(f"{where}.config: the state is of another curriculum (its settings or buckets differ)")

    def count(v: Any, field_: str) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise CurriculumError(f"{where}.{field_}: a non-negative integer, not {v!r}")
        return v

    streams = {}
    raw = data["streams"]
    if not isinstance(raw, Mapping) or set(raw) != set(cur.buckets):
        raise CurriculumError(f"{where}.streams: one entry per bucket ({', '.join(cur._order)})")
    for name, s in raw.items():
        f = f"streams.{name}"
        top = len(cur.buckets[name].ladder) - 1
        low, high = count(s["low"], f + ".low"), count(s["high"], f + ".high")
        if not low <= high <= top or high - low + 1 > cur.settings.width:
            raise CurriculumError(f"{where}.{f}: window [{low}, {high}] is not a window of 0..{top}")
        total = s["total"]
        if isinstance(total, bool) or not isinstance(total, (int, float)) or total < 0:
            raise CurriculumError(f"{where}.{f}.total: a non-negative number")
        at = {}
        for lv, p in s["at"].items():
            if not (isinstance(p, list) and len(p) == 2):
                raise CurriculumError(f"{where}.{f}.at.{lv}: [chunk, position]")
            at[count(int(lv), f"{f}.at")] = [count(p[0], f"{f}.at.{lv}"), count(p[1], f"{f}.at.{lv}")]
        streams[name] = _Stream(low, high, count(s["n"], f + ".n"), float(total), count(s["draws"], f + ".draws"),
                                count(s["moves"], f + ".moves"), at)
    keys = []
    for field_ in ("pending", "done"):
        v = data[field_]
        if not isinstance(v, list) or not all(isinstance(k, str) and k.split("/")[0] in cur.buckets for k in v):
            raise CurriculumError(f"{where}.{field_}: a list of row names")
        keys.append(v)
    return streams, count(data["step"], "step"), count(data["served"], "served"), keys[0], keys[1]


def _permutation(n: int, key: int) -> list[int]:
    """A permutation of range(n) drawn from ``key`` (Fisher-Yates over counter words)."""
    order = list(range(n))
    for i in range(n - 1, 0, -1):
        j = rng.mix64((key + (i + 1) * rng.GAMMA) & ((1 << 64) - 1)) % (i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def level_recipe(bucket: Bucket, level: int) -> dict:
    """The recipe (a dict) of one level: the bucket's split alone, with the level's options."""
    from opgen import api

    loaded = api.load_recipe(bucket.recipe)
    raw = json.loads(json.dumps(loaded.raw))
    split = raw["splits"][bucket.split]
    split["options"] = {**(split.get("options") or {}), **dict(bucket.ladder[level])}
    raw["splits"] = {bucket.split: split}
    return raw


def build_chunk(bucket: Bucket, level: int, seed: int) -> list[dict]:
    """A chunk's rows in this process: the level's split (:func:`level_recipe`) with ``seed``."""
    from opgen import api

    # the bucket's recipe file names its library (loaded as the user's own); the level's dict carries
    # it along as data only, so it is given here (a recipe dict never loads the library it names)
    library = api.load_recipe(bucket.recipe).library
    return api.create_dataset(level_recipe(bucket, level), bucket.split, seed=seed, library=library).to_pylist()


def save_atomically(path: str, data: Any) -> None:
    """``data`` as JSON at ``path``, all or nothing: a temporary file in the same folder, flushed to
    disk, then renamed over ``path`` (a reader, or a restart after kill -9, sees the old or the new)."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".curriculum-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dfd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


class CurriculumDataset:
    """An endless iterable of rows drawn from a curriculum (``torch.utils.data.IterableDataset`` duck
    type: wrap it with ``datasets.IterableDataset.from_generator(lambda: iter(ds))`` for TRL, or name it
    in verl's ``data.custom_cls``); report rewards with ``ds.curriculum.report_rows``."""

    def __init__(self, curriculum: Curriculum, batch: int = 1):
        self.curriculum = curriculum
        self.batch = batch

    def __iter__(self) -> Iterator[dict]:
        for rows in self.curriculum.batches(self.batch):
            yield from rows
