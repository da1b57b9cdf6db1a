"""`opgen eval --namespace`: native-text answers (func_0 calling gcd with no import, as the native
benchmark shows it) through generation replay, scoring, the warning and the sweep table."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import tiny_model as tm

from opgen import ops

ROWS = [("func_0(func_3(x))", "hello world"), ("func_3(func_0(x))", "abcdef"), ("func_0(x)", "banana split"),
        ("func_3(x)", "zebra")]
NATIVE_FUNC_0 = ops.get("func_0").source.replace("    from math import gcd\n", "")


def _model(folder: Path) -> Path:
    folder.mkdir(parents=True)
    lines = [json.dumps({"index": i, "response": tm.ra_answer(e).replace(ops.get("func_0").source, NATIVE_FUNC_0)})
             for i, (e, _x) in enumerate(ROWS)]
    (folder / "d_generations.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def test_eval_warns_counts_and_sweeps_missing_import_and_native_fixes_it(runner, cli, tmp_path):
    data = tm.write_rows(tmp_path / "d.parquet", [tm.program_row(i, e, x) for i, (e, x) in enumerate(ROWS)])
    models = [_model(tmp_path / "m" / "step1"), _model(tmp_path / "m" / "step2")]
    base = ["eval", "--backend", "replay", "--quiet", "--data", str(data)]
    for m in models:
        base += ["--model", str(m)]
    res = runner.invoke(cli, [*base, "--out", str(tmp_path / "strict")], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert res.output.count("--namespace native") == 2  # one warning per model (3 of 4 programs)
    summary = json.loads((tmp_path / "strict" / "step1" / "d" / "summary.json").read_text())
    assert summary["namespace"] == "strict" and summary["missing_import"]["responses"] == 3
    assert summary["overall"]["acc"] == 0.25
    with open(tmp_path / "strict" / "sweep.csv", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert [float(r["missing_import_rate"]) for r in rows] == [0.75, 0.75]
    res = runner.invoke(cli, [*base, "--out", str(tmp_path / "native"), "--namespace", "native"],
                        catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "--namespace native" not in res.output
    summary = json.loads((tmp_path / "native" / "step1" / "d" / "summary.json").read_text())
    assert summary["namespace"] == "native" and summary["overall"]["acc"] == 1.0
