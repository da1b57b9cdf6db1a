"""A curriculum over the generators' knobs: keep each bucket's pass rate in a target band.

A *bucket* is one kind of task (a recipe's split) with a *ladder*: its generator's options from
easiest to hardest (depths, chain lengths, co-occurrence widths, held-out share ... any options the
split's generator takes). The controller sees the rewards a trainer reports and moves each bucket
along its ladder:

- after ``window`` reports at one level, the mean reward decides: above ``band[1]`` one rung
  harder, below ``band[0]`` one rung easier, inside the band stay; the window then starts over.
  A level never leaves ``[0, len(ladder) - 1]``.
- a prompt (``row_id``) reported ``drop_after`` times or more with a pass rate of at least
  ``drop_at`` is dropped: never drawn again.
- every report appends one state record to ``log`` (a callable, e.g. a JSONL writer).

Everything is a function of the reward stream: the same reports in the same order give the same
levels, the same drops and the same next rows, on any machine. Rows are drawn from the bucket's
current level as ``opgen build`` builds them (:func:`opgen.create_dataset` with the rung's options
and a seed named by bucket and level), each level's rows in order, so no row repeats.

In-process: :meth:`Curriculum.batches` / iterate a :class:`CurriculumDataset` and call
:meth:`Curriculum.report`; over HTTP: ``opgen serve`` with a curriculum (``/curriculum/tasks``,
``/curriculum/report``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


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
            raise ValueError(f"bucket {self.name!r}: the ladder needs at least one level")


@dataclass(frozen=True)
class Settings:
    band: tuple[float, float] = (0.3, 0.7)
    window: int = 32  # reports per decision
    drop_at: float = 0.95  # a prompt passing this often ...
    drop_after: int = 4  # ... over at least this many reports is dropped
    seed: int = 0
    start_level: int = 0

    def __post_init__(self) -> None:
        lo, hi = self.band
        if not 0.0 <= lo < hi <= 1.0:
            raise ValueError(f"band must be 0 <= low < high <= 1, got {self.band}")
        if self.window < 1 or self.drop_after < 1:
            raise ValueError("window and drop_after must be positive")
        if not 0.0 < self.drop_at <= 1.0:
            raise ValueError(f"drop_at must be in (0, 1], got {self.drop_at}")


@dataclass
class _State:
    level: int
    rewards: list[float] = field(default_factory=list)
    cursor: dict[int, int] = field(default_factory=dict)  # level -> rows drawn at that level
    moves: int = 0


class Curriculum:
    """The controller (see the module docstring). ``rows_at(bucket, level, seed, size)`` -> rows
    is how rows are made (default: :func:`opgen.create_dataset`); tests give a fast stand-in."""

    def __init__(self, buckets: Sequence[Bucket], settings: Settings | None = None,
                 log: Callable[[dict], None] | None = None,
                 rows_at: Callable[[Bucket, int, int, int], list[dict]] | None = None):
        if not buckets:
            raise ValueError("a curriculum needs at least one bucket")
        names = [b.name for b in buckets]
        if len(set(names)) != len(names):
            raise ValueError(f"bucket names repeat: {names}")
        self.settings = settings or Settings()
        self.buckets = {b.name: b for b in buckets}
        self._state = {b.name: _State(min(max(self.settings.start_level, 0), len(b.ladder) - 1)) for b in buckets}
        self._prompts: dict[str, list[int]] = {}  # row_id -> [reports, passes]
        self.dropped: set[str] = set()
        self.step = 0
        self._log = log
        self._rows_at = rows_at or _build_rows
        self._cache: dict[tuple[str, int], list[dict]] = {}

    # ---------------------------------------------------------------- rewards in

    def report(self, bucket: str, reward: float, row_id: str | None = None) -> dict:
        """One reward (0..1) for a row of ``bucket``; returns (and logs) the new state."""
        if bucket not in self.buckets:
            raise KeyError(f"unknown bucket {bucket!r} (buckets: {', '.join(self.buckets)})")
        r = float(reward)
        if not 0.0 <= r <= 1.0:
            raise ValueError(f"reward must be in [0, 1], got {reward!r}")
        st = self._state[bucket]
        st.rewards.append(r)
        s = self.settings
        if len(st.rewards) >= s.window:
            rate = sum(st.rewards) / len(st.rewards)
            top = len(self.buckets[bucket].ladder) - 1
            if rate > s.band[1] and st.level < top:
                st.level += 1
                st.moves += 1
            elif rate < s.band[0] and st.level > 0:
                st.level -= 1
                st.moves += 1
            st.rewards = []
        if row_id is not None:
            seen = self._prompts.setdefault(str(row_id), [0, 0])
            seen[0] += 1
            seen[1] += r >= 1.0
            if seen[0] >= s.drop_after and seen[1] / seen[0] >= s.drop_at:
                self.dropped.add(str(row_id))
        self.step += 1
        state = self.state()
        if self._log is not None:
            self._log(state)
        return state

    def report_rows(self, rows: Sequence[Mapping], rewards: Sequence[float]) -> dict:
        """Rewards for rows this curriculum gave (their ``extra_info.curriculum_bucket`` and ``row_id``)."""
        if len(rows) != len(rewards):
            raise ValueError(f"{len(rewards)} rewards for {len(rows)} rows")
        state = self.state()
        for row, r in zip(rows, rewards):
            extra = row.get("extra_info") or {}
            state = self.report(str(extra.get("curriculum_bucket", "")), r, extra.get("row_id"))
        return state

    def state(self) -> dict:
        return {"step": self.step, "dropped": len(self.dropped),
                "buckets": {n: {"level": st.level, "levels": len(self.buckets[n].ladder),
                                "window": len(st.rewards),
                                "pass_rate": (sum(st.rewards) / len(st.rewards)) if st.rewards else None,
                                "moves": st.moves, "options": dict(self.buckets[n].ladder[st.level])}
                            for n, st in sorted(self._state.items())}}

    # ---------------------------------------------------------------- rows out

    def next_rows(self, n: int) -> list[dict]:
        """``n`` rows from the buckets' current levels, round-robin over buckets (sorted names),
        skipping dropped prompts; each row's ``extra_info`` names its bucket and level."""
        if n < 1:
            raise ValueError(f"n must be positive, got {n}")
        out: list[dict] = []
        names = sorted(self.buckets)
        k = 0
        stalls = 0
        while len(out) < n:
            name = names[k % len(names)]
            k += 1
            row = self._draw(name)
            if row is None:
                stalls += 1
                if stalls >= len(names):
                    raise RuntimeError("every bucket's current level has run out of rows; give a larger ladder "
                                       "level (rows / per_depth) or fewer drops")
                continue
            stalls = 0
            out.append(row)
        return out

    def _draw(self, name: str) -> dict | None:
        st = self._state[name]
        level = st.level
        rows = self._level_rows(name, level)
        i = st.cursor.get(level, 0)
        while i < len(rows):
            row = rows[i]
            i += 1
            rid = str((row.get("extra_info") or {}).get("row_id", ""))
            if rid in self.dropped:
                continue
            st.cursor[level] = i
            extra = {**dict(row.get("extra_info") or {}), "curriculum_bucket": name, "curriculum_level": level}
            return {**row, "extra_info": extra}
        st.cursor[level] = i
        return None

    def _level_rows(self, name: str, level: int) -> list[dict]:
        key = (name, level)
        if key not in self._cache:
            b = self.buckets[name]
            self._cache[key] = self._rows_at(b, level, self.settings.seed, 0)
        return self._cache[key]

    def batches(self, size: int) -> Iterator[list[dict]]:
        while True:
            yield self.next_rows(size)


def _build_rows(bucket: Bucket, level: int, seed: int, size: int) -> list[dict]:
    """The rows of one rung: the bucket's split with the rung's options, seeded by bucket and level."""
    from opgen import api, rng

    loaded = api.load_recipe(bucket.recipe)
    raw = json.loads(json.dumps(loaded.raw))
    split = raw["splits"][bucket.split]
    split["options"] = {**(split.get("options") or {}), **dict(bucket.ladder[level])}
    raw["splits"] = {bucket.split: split}
    level_seed = rng.counter_key("curriculum", seed, bucket.name, level) % (1 << 31)
    return api.create_dataset(raw, bucket.split, seed=level_seed, size=size or None,
                              library=loaded.library).to_pylist()


def from_config(config: Mapping[str, Any], log: Callable[[dict], None] | None = None) -> Curriculum:
    """A curriculum from its YAML/JSON form::

        settings: {band: [0.3, 0.7], window: 32, drop_at: 0.95, drop_after: 4, seed: 0}
        buckets:
          trees: {recipe: eval-suite, split: trainop_trees_d1-8,
                  ladder: [{depths: [1, 2]}, {depths: [3, 4]}, {depths: [5, 6]}]}
    """
    if not isinstance(config, Mapping):
        raise ValueError("a curriculum config is a mapping with 'buckets' (and 'settings')")
    unknown = sorted(set(config) - {"settings", "buckets"})
    if unknown:
        raise ValueError(f"curriculum config: unknown keys {', '.join(unknown)}")
    raw = dict(config.get("settings") or {})
    known = {"band", "window", "drop_at", "drop_after", "seed", "start_level"}
    if set(raw) - known:
        raise ValueError(f"curriculum settings: unknown keys {', '.join(sorted(set(raw) - known))}")
    if "band" in raw:
        band = raw["band"]
        if not isinstance(band, (list, tuple)) or len(band) != 2:
            raise ValueError("curriculum settings.band: [low, high]")
        raw["band"] = (float(band[0]), float(band[1]))
    settings = Settings(**raw)
    buckets = []
    specs = config.get("buckets")
    if not isinstance(specs, Mapping) or not specs:
        raise ValueError("curriculum config: buckets must be a non-empty mapping of name -> {recipe, split, ladder}")
    for name, b in specs.items():
        if not isinstance(b, Mapping) or not {"recipe", "split", "ladder"} <= set(b):
            raise ValueError(f"curriculum buckets.{name}: needs recipe, split and ladder")
        ladder = b["ladder"]
        if not isinstance(ladder, list) or not all(isinstance(x, Mapping) for x in ladder):
            raise ValueError(f"curriculum buckets.{name}.ladder: a list of option mappings, easiest first")
        buckets.append(Bucket(str(name), b["recipe"], str(b["split"]), tuple(dict(x) for x in ladder)))
    return Curriculum(buckets, settings, log=log)


class CurriculumDataset:
    """An endless iterable of rows drawn from a curriculum's state (``torch.utils.data.IterableDataset``
    duck type: wrap it with ``datasets.IterableDataset.from_generator(lambda: iter(ds))`` for TRL, or
    name it in verl's ``data.custom_cls``); report rewards with ``ds.curriculum.report_rows``."""

    def __init__(self, curriculum: Curriculum, batch: int = 1):
        self.curriculum = curriculum
        self.batch = batch

    def __iter__(self) -> Iterator[dict]:
        for rows in self.curriculum.batches(self.batch):
            yield from rows
