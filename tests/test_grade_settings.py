"""GradeSettings: the grading options as one record, checked once, built the same way by every edge."""

from __future__ import annotations

import dataclasses
import importlib
import json
import marshal
import pickle

import pytest

import opgen
from opgen import choices
from opgen.score import batch as B
from opgen.score import report as R
from opgen.score.settings import CHOICES, FLAGS, GradeSettings, SettingsError

GT = {"tasks": [{"entry": "main_solution", "expr": "func_0(x)", "input": "ab", "output": "ba", "ops": ["func_0"],
                 "depth": 1}], "mode": "forward"}
ROW = {"data_source": "opgen/t", "prompt": [{"role": "user", "content": "q"}],
       "reward_model": {"ground_truth": json.dumps(GT)}, "extra_info": {"split": "t"}}
# One set of loose options, and the record every edge must build from it.
LOOSE = {"policy": "output_structure", "group": "all", "mode": "forward", "namespace": "native", "static": False}
WANT = GradeSettings(**LOOSE)


class Captured(Exception):
    def __init__(self, settings):
        super().__init__("captured")
        self.settings = settings


def _capture(*args, settings, **kwargs):
    raise Captured(settings)


@pytest.fixture
def captured(monkeypatch):
    """Every path to the grading processes stops at ``grade_many`` with the record it was given."""
    monkeypatch.setattr(B, "grade_many", _capture)
    monkeypatch.setattr(R, "grade_many", _capture)


@pytest.mark.parametrize("name,bad", [("policy", "outputs"), ("group", "some"), ("mode", "backward"),
                                      ("namespace", "loose"), ("policy", None), ("static", "false"),
                                      ("diagnose", 0), ("static", None), ("returned", 1)])
def test_each_field_is_checked_with_an_error_naming_it(name, bad):
    with pytest.raises(SettingsError, match=f"^{name} must be"):
        GradeSettings(**{name: bad})


def test_every_field_is_checked_and_defaults_are_the_documented_ones():
    # library: checked (loaded) by opgen.score.libs.resolve; tests/test_user_library_grading.py
    assert set(CHOICES) | set(FLAGS) | {"library"} == set(GradeSettings.names())
    assert choices.GRADE_OPTIONS == GradeSettings.names()  # the one home's list, in the record's order
    assert (CHOICES, FLAGS) == (choices.GRADE_CHOICES, choices.GRADE_FLAGS)
    assert GradeSettings().to_wire() == {"policy": "output", "group": "fraction", "mode": "auto",
                                         "namespace": "strict", "static": True, "diagnose": True}
    with pytest.raises(dataclasses.FrozenInstanceError):
        GradeSettings().policy = "all"  # type: ignore[misc]


def test_the_wire_form_round_trips_through_marshal_and_pickle():
    s = GradeSettings(policy="output_structure", group="all", mode="program", namespace="native", static=False,
                      diagnose=False)
    wire = s.to_wire()
    assert all(type(v) in (str, bool) for v in wire.values())
    assert GradeSettings.from_wire(marshal.loads(marshal.dumps(wire))) == s
    assert pickle.loads(pickle.dumps(s)) == s
    told = GradeSettings(returned=True)
    assert told.to_wire()["returned"] is True and GradeSettings.from_wire(told.to_wire()) == told
    with pytest.raises(SettingsError, match="unknown grading settings: timeout"):
        GradeSettings.from_wire({**wire, "timeout": 2})
    with pytest.raises(SettingsError, match="^mode must be"):
        GradeSettings.from_wire({**wire, "mode": "both"})


def test_settings_and_loose_options_together_are_refused():
    assert GradeSettings.resolve(WANT) is WANT
    assert GradeSettings.resolve(WANT, policy="output", static=True) is WANT  # defaults: nothing given
    with pytest.raises(SettingsError, match="policy, static, not both"):
        GradeSettings.resolve(WANT, policy="output_structure", static=False)
    with pytest.raises(SettingsError, match="settings must be a GradeSettings"):
        GradeSettings.resolve({"policy": "output"})  # type: ignore[arg-type]


def _record(call, **kw) -> GradeSettings:
    with pytest.raises(Captured) as got:
        call(**kw)
    return got.value.settings


def test_every_public_edge_builds_the_same_record(captured, tmp_path):
    from opgen import reward
    from opgen.integrations.common import grade_batch

    edges = {
        "opgen.score.grade": lambda **kw: opgen.score.grade(GT, "x", **kw),
        "compute_score": lambda **kw: reward.compute_score("d", "x", json.dumps(GT), None, **kw),
        "compute_score_batch": lambda **kw: reward.compute_score_batch(["d"], ["x"], [json.dumps(GT)], **kw),
        "score_answers": lambda **kw: opgen.score_answers([ROW], ["x"], **kw),
        "score_answer": lambda **kw: opgen.score_answer(ROW, "x", **kw),
        "adapters": lambda **kw: grade_batch([json.dumps(GT)], ["x"], [None], **kw),
    }
    for name, edge in edges.items():
        assert _record(edge, **LOOSE) == WANT, name
        assert _record(edge, settings=WANT) == WANT, name
        assert _record(edge) == GradeSettings(), name


def _parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([ROW]), tmp_path / "d.parquet")
    return tmp_path / "d.parquet"


def test_score_files_and_the_cli_build_the_same_record(captured, tmp_path, monkeypatch, cli, runner):
    from opgen.cli import score_cmd

    from opgen.score import report

    data, responses = _parquet(tmp_path), tmp_path / "r.jsonl"
    responses.write_text('{"index": 0, "response": "x"}\n', encoding="utf-8")
    got = _record(lambda: report.score_files(data, responses, tmp_path / "o", plots=False, **LOOSE))
    assert got == WANT
    assert score_cmd.settings_of("forward", "output_structure", "all", "native", True) == WANT
    seen = []
    monkeypatch.setattr(report, "score_files", lambda *a, settings, **kw: seen.append(settings) or {})
    runner.invoke(cli, ["score", "--data", str(data), "--responses", str(responses), "--out", str(tmp_path / "o"),
                        "--mode", "forward", "--policy", "output_structure", "--group", "all",
                        "--namespace", "native", "--no-static", "--allow-weak-sandbox"])
    assert seen == [WANT]


def test_eval_builds_its_scorer_record_once(tmp_path, monkeypatch, cli, runner):
    eval_cmd = importlib.import_module("opgen.cli.eval_cmd")  # the module the cli fixture runs

    data = _parquet(tmp_path)
    model = tmp_path / "m.jsonl"
    model.write_text('{"index": 0, "response": "x"}\n', encoding="utf-8")
    seen = []
    monkeypatch.setattr(eval_cmd, "_evaluate", lambda run: seen.append(run.config.grading))
    res = runner.invoke(cli, ["eval", "--model", str(model), "--data", str(data), "--out", str(tmp_path / "o"),
                              "--backend", "replay", "--no-score", "--namespace", "native", "--no-static"])
    assert res.exit_code == 0, res.output
    assert seen == [GradeSettings(namespace="native", static=False)]


def test_the_cli_choices_are_the_records():
    from opgen.cli import build_cmd, eval_cmd, score_cmd

    from opgen.score.metrics import MetricDefs

    params = {p.name: p for p in score_cmd.score.params}
    for name in ("mode", "policy", "group", "namespace"):
        assert tuple(params[name].type.choices) == CHOICES[name], name
    metric = {"drift_call": choices.DRIFT_CALLS, "pass_k": tuple(choices.PASS_K_ESTIMATORS),
              "interval": tuple(choices.INTERVALS)}
    for command in (score_cmd.score, eval_cmd.eval_):
        params = {p.name: p for p in command.params}
        assert tuple(params["namespace"].type.choices) == choices.NAMESPACES
        assert tuple(params["executor"].type.choices) == choices.EXECUTORS
        for name, allowed in metric.items():
            assert tuple(params[name].type.choices) == allowed, name
            for value in allowed:  # every CLI choice is a value the record takes, and nothing else is
                MetricDefs(**{name: value})
            with pytest.raises(ValueError):
                MetricDefs(**{name: "other"})
    assert tuple({p.name: p for p in build_cmd.build.params}["executor"].type.choices) == choices.EXECUTORS


def test_the_cli_reads_the_choices_without_loading_the_scorer():
    import subprocess
    import sys

    code = ("import sys, opgen.cli, opgen.cli.score_cmd, opgen.cli.eval_cmd, opgen.integrations.common, opgen.serve; "
            "print(sorted(m for m in sys.modules if m.startswith('opgen.score')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_adapters_and_verl_read_the_records_options():
    from opgen.integrations.common import SETTINGS
    from opgen.reward import reward_options

    assert SETTINGS == (*reward_options(), "allow_weak_sandbox", "settings")
    assert reward_options() == choices.REWARD_OPTIONS
    assert set(reward_options()) == set(GradeSettings.names()) - {"diagnose", "returned"}
    from opgen import serve

    assert serve.SETTINGS == tuple(CHOICES)  # the HTTP service's settings: the record's text options


def test_a_wrong_setting_is_the_callers_error_at_every_reward_entry_point(captured):
    from opgen import reward

    for call in (lambda **kw: reward.compute_score_float("d", "x", json.dumps(GT), **kw),
                 lambda **kw: reward.compute_score_batch(["d"], ["x"], [json.dumps(GT)], **kw)):
        with pytest.raises(SettingsError, match="^namespace must be"):
            call(namespace="loose")
        with pytest.raises(SettingsError, match="not both"):
            call(settings=WANT, group="all")
