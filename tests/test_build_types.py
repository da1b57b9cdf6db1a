"""What crosses the build's boundaries is named: the phases exchange typed records (ShardFacts,
FinishTask, Finished, Resolved) and one process-state record (Shards); what the CLI reacts to is
an exception type (OnlyError, SignalAfterSwap), never the text of a message."""

from __future__ import annotations

import dataclasses
import signal
from pathlib import Path

import numpy as np
import pytest
from test_build_paths import PATCHED  # 1,200 rows in shards of 300: later shards hold rows redrawn in phase 2

from opgen import build as B
from opgen import outdir
from opgen import recipe as R
from opgen.rows import Facts

SMALL = """\
name: small
seed: 1
defaults: {role: eval}
splits:
  one:
    generator: atomic
    options: {ops: [func_3], rows: 20, input_len: [3, 3]}
  two:
    generator: atomic
    options: {ops: [func_9], rows: 20, input_len: [3, 3]}
"""


def _recipe(tmp_path: Path, text: str, name: str) -> R.Recipe:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return R.load(str(path))


# ---------------------------------------------------------------- the phases' records


def test_shard_facts_name_every_column_phase_2_patches():
    fields = {f.name for f in dataclasses.fields(B.ShardFacts)}
    # every per-row fact of a row (Facts) is a column, the program keys flattened into prog/prog_rows
    assert set(Facts._fields) - {"prog_keys", "condition"} <= fields
    assert set(B._PATCHED) <= fields and {"prog", "prog_rows", "conditions", "condition_of"} <= fields
    for cls in (B.ShardFacts, B.Shards, B.Plan, B.Unit):
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, cls


def test_phases_exchange_records_and_phase_2_copies_read_only_facts(tmp_path: Path, monkeypatch):
    """Ray hands a worker's arrays back read-only (zero-copy); phase 2 must not write into them."""
    monkeypatch.setattr(B, "_SHARDS", None)
    recipe = _recipe(tmp_path, PATCHED, "patched")
    tmp_dir = tmp_path / "stage"
    tmp_dir.mkdir()
    B.adopt([recipe], (), None, tmp_dir)
    shards = B.current()
    assert [u.stop - u.start for u in shards.units] == [300] * 4 and shards.plans[0].units == (0, 1, 2, 3)
    produced = [B._produce(uid) for uid in range(len(shards.units))]
    assert all(type(p) is B.ShardFacts for p in produced)
    for p in produced:
        for f in dataclasses.fields(p):
            value = getattr(p, f.name)
            if isinstance(value, np.ndarray):
                value.flags.writeable = False
    before = [p.ukey.copy() for p in produced]
    resolved = B._resolve(shards.plans, shards.units, produced)
    assert isinstance(resolved, B.Resolved) and resolved.patches and 0 not in resolved.patches
    for uid, patches in resolved.patches.items():
        assert np.array_equal(produced[uid].ukey, before[uid])  # the input is left as it was
        rows = [local for local, _ in patches]
        assert not np.array_equal(resolved.shards[uid].ukey[rows], before[uid][rows])
    keys = np.concatenate([s.ukey for s in resolved.shards])
    assert len(np.unique(keys)) == keys.size == 1200  # no duplicate left across the build
    finished = [B._finish(task) for task in B.finish_tasks(produced, resolved)]
    assert [t.uid for t in B.finish_tasks(produced, resolved)] == [0, 1, 2, 3]
    assert all(type(f) is B.Finished and f.uid == uid and len(f.sha256) == 64 for uid, f in enumerate(finished))
    assert all(B._content(p, f) for p, f in zip(resolved.shards, finished))


def test_a_build_leaves_no_process_state_behind(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(B, "_SHARDS", None)
    B.build([_recipe(tmp_path, SMALL, "small")], tmp_path / "out")
    with pytest.raises(RuntimeError, match="no build is under way"):
        B.current()


# ---------------------------------------------------------------- errors by type


def test_only_naming_no_split_is_an_only_error(tmp_path: Path):
    with pytest.raises(B.OnlyError, match="names no split"):
        B.build([_recipe(tmp_path, SMALL, "small")], tmp_path / "out", only=("nope",))


def test_only_over_a_build_of_other_recipes_is_an_only_error(tmp_path: Path):
    out = tmp_path / "out"
    B.build([_recipe(tmp_path, SMALL, "small")], out)
    other = _recipe(tmp_path, SMALL.replace("seed: 1", "seed: 2"), "other")
    with pytest.raises(B.OnlyError, match="--only updates a build of the same recipes"):
        B.build([other], out, only=("one",))


def test_other_build_errors_are_not_only_errors(tmp_path: Path):
    recipe = _recipe(tmp_path, SMALL.replace("name: small", "name: twice"), "twice")
    with pytest.raises(B.BuildError) as info:
        B.build([recipe, recipe], tmp_path / "out")  # one split defined twice
    assert not isinstance(info.value, B.OnlyError)


def test_the_cli_maps_build_errors_by_type_not_by_their_text(runner, cli, tmp_path: Path, monkeypatch):
    """A BuildError that merely mentions --only is exit 1; an OnlyError is a bad --only (exit 2)."""
    path = tmp_path / "small.yaml"
    path.write_text(SMALL)

    def fails_with(exc: BaseException):
        def fake(*args, **kwargs):
            raise exc
        return fake

    monkeypatch.setattr(B, "build", fails_with(B.BuildError("leakage check failed (try --only fewer splits)")))
    r = runner.invoke(cli, ["build", str(path), "--out", str(tmp_path / "o")])
    assert r.exit_code == 1 and "Invalid value for --only" not in r.output, r.output
    monkeypatch.setattr(B, "build", fails_with(B.OnlyError("no such split")))
    r = runner.invoke(cli, ["build", str(path), "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "Invalid value for --only" in r.output, r.output


@pytest.mark.parametrize("sig, expected, base", [(signal.SIGINT, B.InterruptedAfterSwap, KeyboardInterrupt),
                                                 (signal.SIGTERM, B.TerminatedAfterSwap, outdir.Terminated)])
def test_a_signal_during_the_swap_is_raised_after_it_as_its_own_type(tmp_path: Path, monkeypatch, sig, expected,
                                                                     base):
    out = tmp_path / "out"
    real = outdir.swap

    def swap_then_signal(stage, target):
        real(stage, target)
        signal.raise_signal(sig)  # held by outdir.signals_held until the swap is done

    monkeypatch.setattr(outdir, "swap", swap_then_signal)
    old = signal.getsignal(signal.SIGTERM)
    outdir.install_sigterm()
    try:
        with pytest.raises(expected) as info:
            B.build([_recipe(tmp_path, SMALL, "small")], out)
    finally:
        signal.signal(signal.SIGTERM, old)
    assert isinstance(info.value, base) and isinstance(info.value, B.SignalAfterSwap)
    assert info.value.out == out and (out / "manifest.json").is_file()


def test_a_signal_before_the_swap_is_not_an_after_swap_signal(tmp_path: Path, monkeypatch):
    def interrupted(stage, target):
        raise KeyboardInterrupt

    monkeypatch.setattr(outdir, "swap", interrupted)
    with pytest.raises(KeyboardInterrupt) as info:
        B.build([_recipe(tmp_path, SMALL, "small")], tmp_path / "out")
    assert not isinstance(info.value, B.SignalAfterSwap)
    assert not (tmp_path / "out").exists()
