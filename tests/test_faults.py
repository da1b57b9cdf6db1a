"""Fault injection (test-only): one variable, OPGEN_FAULT, one parser and a registry of named points
(opgen/faults.py); every registered point fires somewhere, and a point that is not one is an error."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

import opgen
from opgen import faults


def test_points_parse_to_signals_and_counts_and_several_arm_at_once():
    got = faults.armed("produced:TERM, kill-replica-after:2,shard-worker")
    assert got == {"produced": signal.SIGTERM, "kill-replica-after": 2, "shard-worker": signal.SIGKILL}
    assert faults.armed("before-swap:sigstop") == {"before-swap": signal.SIGSTOP}
    assert faults.armed("") == {}


@pytest.mark.parametrize("spec, says", [
    ("kill-replica-afterr:1", "no fault point 'kill-replica-afterr' (points: abort-after, after-swap"),
    ("produced:KILLL", "produced: 'KILLL' is not a signal name"),
    ("abort-after:three", "abort-after: 'three' is not a count"),
    ("abort-after", "abort-after: '' is not a count"),  # a count has no default
])
def test_a_point_or_value_that_is_not_registered_is_an_error_naming_the_variable(spec, says):
    with pytest.raises(faults.FaultSpecError, match=re.escape(says)) as info:
        faults.armed(spec)
    assert str(info.value).startswith(f"OPGEN_FAULT={spec!r}: ") and info.value.exit_code == 2


def test_value_reads_the_environment(monkeypatch):
    monkeypatch.setenv(faults.ENV, "abort-after:3")
    assert faults.value("abort-after") == 3 and faults.value("kill-replica-after") is None
    monkeypatch.delenv(faults.ENV)
    assert faults.value("abort-after") is None


def test_every_registered_point_fires_somewhere_in_the_package():
    source = "\n".join(p.read_text() for p in Path(opgen.__file__).parent.rglob("*.py"))
    fired = set(re.findall(r"faults\.(?:signal_at|value)\(\"([a-z-]+)\"", source))
    numbered = set(re.findall(r"faults\.signal_nth\(\"([a-z-]+)\"", source))
    assert fired | numbered == set(faults.POINTS)
    assert numbered == {name for name, p in faults.POINTS.items() if p.numbered}


def test_a_numbered_point_is_armed_every_time_or_its_n_th_time(monkeypatch):
    faults.register("test-numbered", "a test's own point", faults.signal_value, "KILL", numbered=True)
    try:
        assert faults.armed("test-numbered-2:TERM") == {"test-numbered-2": signal.SIGTERM}
        assert faults.armed("test-numbered") == {"test-numbered": signal.SIGKILL}
        with pytest.raises(faults.FaultSpecError, match="no fault point 'test-numbered-x'"):
            faults.armed("test-numbered-x")
        with pytest.raises(faults.FaultSpecError, match="no fault point 'produced-2'"):
            faults.armed("produced-2")  # not a numbered point
        monkeypatch.setenv(faults.ENV, "test-numbered-2")
        assert faults.value("test-numbered-2") == signal.SIGKILL and faults.value("test-numbered-1") is None
        got: list[int] = []
        previous = signal.signal(signal.SIGUSR1, lambda signum, frame: got.append(signum))
        try:
            for spec, sent in (("test-numbered-2:USR1", [2]), ("test-numbered:USR1", [1, 2, 3]), ("", [])):
                monkeypatch.setenv(faults.ENV, spec)
                for n in (1, 2, 3):
                    faults.signal_nth("test-numbered", n)
                    assert got == [signal.SIGUSR1] * (n in sent), (spec, n)
                    got.clear()
        finally:
            signal.signal(signal.SIGUSR1, previous)
    finally:
        del faults.POINTS["test-numbered"]


def test_a_typo_in_the_variable_stops_a_command_with_a_usage_error(runner, cli, tmp_path, monkeypatch):
    monkeypatch.setenv(faults.ENV, "prodcued:KILL")
    r = runner.invoke(cli, ["build", "native-stage1", "--out", str(tmp_path / "o"), "--limit", "5",
                            "--workers", "1", "--no-progress"])
    assert r.exit_code == 2 and "no fault point 'prodcued'" in r.output, r.output
    assert not (tmp_path / "o").exists()
