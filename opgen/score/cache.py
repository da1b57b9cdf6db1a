"""A thread-safe cache bounded in bytes (the scorer's caches: compiled chunks, recall verdicts).

Each entry is charged a size the caller computes (its key text and value, see each use); when the
total passes ``max_bytes`` the oldest entries go first. An entry larger than a sixteenth of the
bound is not kept at all, so one long text cannot flush everything else.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class BoundedCache(Generic[K, V]):
    def __init__(self, max_bytes: int):
        self.max_bytes = int(max_bytes)
        self._data: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            hit = self._data.get(key)
        return None if hit is None else hit[0]

    def put(self, key: K, value: V, size: int) -> None:
        if size > self.max_bytes // 16:
            return
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._data[key] = (value, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (_, dropped) = self._data.popitem(last=False)
                self._bytes -= dropped

    @property
    def bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._bytes = 0
