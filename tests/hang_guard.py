"""A hang guard: a call that must end, run so that a regression fails its test instead of hanging
the suite. Never a speed claim (tests never time anything): the limit is minutes, and how long
these calls take is what benchmarks/bench_bounds.py prints."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

HANG_S = 600.0


def ends(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, or a failure if it has not returned after :data:`HANG_S` seconds
    (the call goes on in a daemon thread, which the interpreter drops at exit)."""
    done: dict[str, Any] = {}

    def call() -> None:
        try:
            done["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # re-raised in the test's thread
            done["error"] = exc

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(HANG_S)
    if thread.is_alive():
        pytest.fail(f"{getattr(fn, '__qualname__', fn)} did not end in {HANG_S:.0f} s: it hangs")
    if "error" in done:
        raise done["error"]
    return done["value"]
