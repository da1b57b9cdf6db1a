"""The curriculum: RLVE's difficulty windows settle at a learner's frontier and stay; rows never run
out and are a function of the settings and the calls; reports count once, for served rows only;
the state exports, restores and survives a restart of the server (kill -9 included)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opgen import rng
from opgen.curriculum import (
    AXES,
    Bucket,
    Curriculum,
    CurriculumDataset,
    CurriculumError,
    ReportedTwice,
    Settings,
    UnservedRow,
    bucket_of,
    from_config,
)

CHUNK = 64


def _fake_rows(bucket, level, seed):
    """A chunk of CHUNK rows named by their chunk seed (so two chunks never share a row)."""
    return [{"prompt": f"{bucket.name}-{level}-{seed}-{i}", "extra_info": {"depth": level + 1}} for i in range(CHUNK)]


LADDER = tuple({"depths": [d]} for d in range(1, 11))


def _accuracy(frontier: int, level: int) -> float:
    return 1.0 if level < frontier else 0.0


def _run(cur: Curriculum, frontier: int, rounds: int, batch: int = 16) -> list[list[int]]:
    windows = []
    for _ in range(rounds):
        rows = cur.next_rows(batch)
        cur.report_rows(rows, [_accuracy(frontier, r["extra_info"]["curriculum_level"]) for r in rows])
        windows.append(cur.state()["buckets"]["trees"]["window"])
    return windows


@settings(max_examples=20, deadline=None)
@given(frontier=st.integers(0, 9), width=st.integers(1, 4), tau=st.integers(2, 8))
def test_the_window_settles_at_the_frontier_within_the_stated_reports_and_stays(frontier, width, tau):
    # A learner right below level `frontier` and wrong from it on: `high` climbs to the frontier (the
    # first level it fails) and stays. A rise needs tau rewards at high, about 1/width of a batch's 16
    # draws, and at least one batch (a batch's rows are drawn before their rewards come back): stated
    # bound, frontier * ceil(3 * tau * width / 16) batches (x3: the draws' spread over the window).
    cur = Curriculum([Bucket("trees", "x", "s", LADDER)], Settings(tau_num=tau, tau_acc=0.9, width=width),
                     rows_at=_fake_rows)
    bound = frontier * -(-(3 * tau * width) // 16)
    windows = _run(cur, frontier, bound + 30)
    settled = [max(0, frontier - width + 1), frontier]
    start = max(bound - 1, 0)
    assert windows[start:] == [settled] * (len(windows) - start)
    assert all(high - low + 1 <= width for low, high in windows)


def test_draws_mix_the_windows_levels_within_a_batch():
    cur = Curriculum([Bucket("trees", "x", "s", LADDER)], Settings(tau_num=2, width=4), rows_at=_fake_rows)
    _run(cur, 10, 30)
    assert cur.state()["buckets"]["trees"]["window"] == [6, 9]
    levels = [r["extra_info"]["curriculum_level"] for r in cur.next_rows(32)]
    assert set(levels) == {6, 7, 8, 9}
    assert levels != sorted(levels)  # not grouped by level


def test_a_report_counts_once_and_only_for_a_served_row():
    cur = Curriculum([Bucket("b", "x", "s", LADDER)], Settings(tau_num=1), rows_at=_fake_rows)
    rows = cur.next_rows(2)
    key = rows[0]["extra_info"]["curriculum_row"]
    with pytest.raises(UnservedRow, match="not a row this curriculum served"):
        cur.report("b/0/0/63", 1.0)
    with pytest.raises(UnservedRow):
        cur.report("b/5/0/0", 1.0)  # a made-up row at another level cannot move the window
    before = cur.export()
    with pytest.raises(ReportedTwice):  # all or nothing: the good report in the batch did not count
        cur.report_many([(key, 1.0), (key, 1.0)])
    assert cur.export() == before
    cur.report(key, 1.0)
    with pytest.raises(ReportedTwice, match="reported already"):
        cur.report(key, 1.0)
    with pytest.raises(CurriculumError, match=r"in \[0, 1\]"):
        cur.report(rows[1]["extra_info"]["curriculum_row"], 2.0)


@pytest.mark.slow
def test_20000_draws_at_one_level_never_run_out_and_are_deterministic():
    from integration_fixtures import RECIPE

    def draws():
        cur = Curriculum([Bucket("trees", RECIPE, "train", ({"depths": [2], "per_depth": 1024},))], Settings())
        rows = []
        while len(rows) < 20_000:
            rows += cur.next_rows(500)
        return cur, rows

    cur, a = draws()
    _, b = draws()
    assert len(a) == 20_000 and a == b
    assert {r["extra_info"]["depth"] for r in a} == {2}
    names = [r["extra_info"]["curriculum_row"] for r in a]
    assert len(set(names)) == 20_000 and names[-1].startswith("trees/0/19/")  # 20 chunks of 1,024
    programs = {r["reward_model"]["ground_truth"] for r in a}
    assert len(programs) > 19_000  # chunks are seeded apart: rows do not repeat (a few may, by chance)


def test_the_same_calls_give_the_same_rows_and_export_restore_continues_the_stream():
    def run(restart_at: int | None):
        cur = Curriculum([Bucket("a", "x", "s", LADDER), Bucket("b", "x", "s", LADDER[:3])],
                         Settings(tau_num=4, width=2), rows_at=_fake_rows)
        stream = rng.Rng("rewards", 7)
        seen = []
        for k in range(40):
            if k == restart_at:  # a new process: only the exported state carries over
                saved = json.loads(json.dumps(cur.export()))
                cur = Curriculum([Bucket("a", "x", "s", LADDER), Bucket("b", "x", "s", LADDER[:3])],
                                 Settings(tau_num=4, width=2), rows_at=_fake_rows)
                cur.restore(saved)
            rows = cur.next_rows(4)
            seen += [r["prompt"] for r in rows]
            cur.report_rows(rows, [float(stream.word() % 3 != 0) for _ in rows])
        return seen, cur.export()

    straight = run(None)
    assert run(17) == straight and run(3) == straight
    assert len(set(straight[0])) == len(straight[0])


def test_a_state_of_another_curriculum_or_malformed_is_refused():
    cur = Curriculum([Bucket("b", "x", "s", LADDER)], rows_at=_fake_rows)
    other = Curriculum([Bucket("b", "x", "s", LADDER[:2])], rows_at=_fake_rows)
    with pytest.raises(CurriculumError, match="another curriculum"):
        cur.restore(other.export())
    good = cur.export()
    for bad, message in (({**good, "streams": {"b": {**good["streams"]["b"], "high": 99}}}, "window"),
                         ({**good, "step": -1}, "step"), ({**good, "extra": 1}, "unknown fields"),
                         ([], "JSON object"), ({**good, "pending": ["zz/0/0/0"]}, "pending")):
        with pytest.raises(CurriculumError, match=message):
            cur.restore(bad)


def test_axes_make_ladders_and_bad_configs_name_the_field():
    from integration_fixtures import RECIPE

    b = bucket_of("t", {"recipe": RECIPE, "split": "train", "axes": {"depth": [1, 2, 3], "literal_len": [3, 4, 5]}})
    assert b.ladder == ({"depths": [1], "literal_len": [3, 3]}, {"depths": [2], "literal_len": [4, 4]},
                        {"depths": [3], "literal_len": [5, 5]})
    ops = bucket_of("t", {"recipe": RECIPE, "split": "train", "axes": {"operators": [2, 5]}}).ladder
    assert [len(x["ops"]) for x in ops] == [2, 5]
    assert set(AXES) == {"depth", "operators", "width", "literal_len", "heldout"}
    for config, message in (
            ({"buckets": {"t": {"recipe": RECIPE, "split": "train", "axes": {"depht": [1]}}}}, "unknown axis"),
            ({"buckets": {"t": {"recipe": RECIPE, "split": "train", "axes": {"depth": [1, 2], "width": [1]}}}},
             "same number of levels"),
            ({"buckets": {"t": {"recipe": RECIPE, "split": "train", "axes": {"depth": [0]}}}}, r"depth\[0\]"),
            ({"buckets": {"t": {"recipe": RECIPE, "split": "train"}}}, "ladder or axes"),
            ({"settings": {"band": [0.3, 0.7]}, "buckets": {}}, "settings.band: removed"),
            ({"settings": {"tau_acc": 2}, "buckets": {"t": {"recipe": RECIPE, "split": "train", "ladder": [{}]}}},
             "tau_acc"),
            ({"bucket": {}}, "unknown keys bucket")):
        with pytest.raises(CurriculumError, match=message):
            from_config(config)


def test_real_rows_follow_the_window_and_the_dataset_iterates():
    from integration_fixtures import RECIPE

    ladder = ({"depths": [1], "per_depth": 6}, {"depths": [3], "per_depth": 6})
    cur = Curriculum([Bucket("trees", RECIPE, "train", ladder)], Settings(tau_num=2, width=1))
    rows = cur.next_rows(2)
    assert [r["extra_info"]["depth"] for r in rows] == [1, 1]
    cur.report_rows(rows, [1.0, 1.0])  # mastered: one level up
    it = iter(CurriculumDataset(cur))
    assert next(it)["extra_info"]["depth"] == 3 and cur.state()["buckets"]["trees"]["window"] == [1, 1]


# ---------------------------------------------------------------- over HTTP, across restarts


def _serve(args: list[str]):
    from test_serve import start_server as _start

    return _start(args)


def _policy_round(url: str, frontier: int) -> tuple[list[str], list[int]]:
    from test_serve_hardening import request

    status, body = request(url + "/curriculum/tasks", {"n": 8})
    assert status == 200, body
    rows = body["rows"]
    reports = [{"row": r["extra_info"]["curriculum_row"],
                "reward": _accuracy(frontier, r["extra_info"]["curriculum_level"])} for r in rows]
    status, body = request(url + "/curriculum/report", {"reports": reports})
    assert status == 200, body
    return [r["reward_model"]["ground_truth"] for r in rows], body["state"]["buckets"]["trees"]["window"]


@pytest.mark.slow
def test_a_scripted_policy_drives_the_window_over_http_and_kill_9_resumes_the_same_stream(tmp_path):
    import yaml
    from integration_fixtures import RECIPE

    config = tmp_path / "curriculum.yaml"
    # depth d+1 at level d; the policy solves depths 1-3 and fails from 4 on: its frontier is level 3
    config.write_text(yaml.safe_dump({"settings": {"tau_num": 4, "tau_acc": 0.9, "width": 2, "seed": 5},
                                      "buckets": {"trees": {"recipe": RECIPE, "split": "train",
                                                            "axes": {"depth": [1, 2, 3, 4, 5, 6]}}}}))

    def run(kill_after: int | None, folder):
        folder.mkdir()
        args = ["--curriculum", str(config), "--curriculum-log", str(folder / "log.jsonl")]
        proc, url = _serve(args)
        stream, windows = [], []
        try:
            for k in range(14):
                if k == kill_after:
                    proc.send_signal(signal.SIGKILL)
                    proc.wait(timeout=30)
                    proc, url = _serve(args)
                rows, window = _policy_round(url, 3)
                stream += rows
                windows.append(window)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        return stream, windows

    straight, windows = run(None, tmp_path / "a")
    # 8 rows a round, half of them at high once the window is two wide: 4 rewards at high a rise,
    # at most 3 rises: settled by round 8 (64 reports), then it stays
    assert windows[7:] == [[2, 3]] * 7, windows
    assert run(9, tmp_path / "b") == (straight, windows)
    assert os.path.exists(tmp_path / "b" / "log.jsonl.state.json")


def test_the_state_travels_over_http(tmp_path):
    import yaml
    from integration_fixtures import RECIPE
    from test_serve_hardening import request

    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"settings": {"tau_num": 2, "width": 1},
                                      "buckets": {"trees": {"recipe": RECIPE, "split": "train",
                                                            "ladder": [{"depths": [1]}, {"depths": [2]}]}}}))
    proc, url = _serve(["--curriculum", str(config)])
    try:
        first = request(url + "/curriculum/state", method="GET")[1]
        rows = request(url + "/curriculum/tasks", {"n": 2})[1]["rows"]
        request(url + "/curriculum/report",
                {"reports": [{"row": r["extra_info"]["curriculum_row"], "reward": 1.0} for r in rows]})
        moved = request(url + "/curriculum/state", method="GET")[1]
        assert moved["streams"]["trees"]["high"] == 1 and moved["step"] == 2
        assert request(url + "/curriculum/state", first)[1] == first  # a trainer's checkpoint, loaded back
        again = request(url + "/curriculum/tasks", {"n": 2})[1]["rows"]
        assert [r["prompt"] for r in again] == [r["prompt"] for r in rows]
        status, reply = request(url + "/curriculum/state", {**first, "config": "0" * 64})
        assert status == 422 and "another curriculum" in reply["error"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_an_unreadable_saved_state_stops_the_server_at_start(tmp_path):
    import yaml
    from integration_fixtures import RECIPE

    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"buckets": {"t": {"recipe": RECIPE, "split": "train", "ladder": [{}]}}}))
    state = tmp_path / "s.json"
    state.write_text("{not json")
    got = subprocess.run([sys.executable, "-m", "opgen", "serve", "--curriculum", str(config), "--curriculum-state",
                          str(state)], capture_output=True, text=True, timeout=120)
    assert got.returncode == 2 and "s.json" in got.stderr, got.stderr
