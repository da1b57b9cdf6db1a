"""`opgen --version` and `opgen ops list|show|eval`, driven through click's runner."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from opgen import __version__, ops
from opgen import expr as E

# The console script's entry point, run by this interpreter (no reliance on PATH).
OPGEN = [sys.executable, "-c", "import sys; from opgen.cli import main; sys.argv[0] = 'opgen'; main()"]


def test_version(runner, cli):
    result = runner.invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert result.stdout == f"opgen, version {__version__}\n"


def test_help_lists_ops(runner, cli):
    result = runner.invoke(cli, ["--help"])
    assert result.exit_code == 0 and "ops" in result.stdout


# ------------------------------------------------------------------ ops list


def test_list_json_has_25_rows_with_all_fields(runner, cli):
    result = runner.invoke(cli, ["ops", "list", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["id"] for r in rows] == list(ops.ALL_IDS)
    for row, op in zip(rows, ops.OPERATORS):
        assert set(row) == {"id", "name", "arity", "signature", "params", "split", "gloss"}
        assert (row["name"], row["arity"], row["signature"], row["split"], row["gloss"]) == (
            op.name, op.arity, op.signature, op.split, op.gloss)
        assert row["params"] == [p.describe() for p in op.params]
    assert json.loads(runner.invoke(cli, ["ops", "list", "--json"]).stdout)[1]["params"] == ["n in 2..4"]
    assert rows[13]["params"] == ["sep in {'-', '_', '|'}"]
    assert rows[5]["params"] == ["pre: 2-4 lowercase letters"]


def test_list_table_has_a_header_and_one_line_per_operator(runner, cli):
    result = runner.invoke(cli, ["ops", "list"])
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["id", "name", "arity", "params", "split", "gloss"]
    assert set(lines[1].replace(" ", "")) == {"-"}
    body = lines[2:]
    assert len(body) == len(ops.STUDY)
    for line, op in zip(body, ops.OPERATORS):
        cells = line.split()
        assert cells[:3] == [op.id, op.name, str(op.arity)]
        assert op.split in cells and line.endswith(op.gloss)
    # Columns line up: every row's name column starts where the header's does.
    start = lines[0].index("name")
    assert all(line[start:].startswith(op.name) for line, op in zip(body, ops.OPERATORS))


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_list_filters_by_split(runner, cli, split):
    rows = json.loads(runner.invoke(cli, ["ops", "list", "--json", "--split", split]).stdout)
    assert tuple(r["id"] for r in rows) == (ops.TRAIN_IDS if split == "train" else ops.HELDOUT_IDS)


def test_list_rejects_an_unknown_split(runner, cli):
    result = runner.invoke(cli, ["ops", "list", "--split", "eval"])
    assert result.exit_code == 2 and "eval" in result.stderr


# ------------------------------------------------------------------ ops show


@pytest.mark.parametrize("op", ops.OPERATORS, ids=ops.ALL_IDS)
def test_show_prints_exactly_the_source(runner, cli, op):
    result = runner.invoke(cli, ["ops", "show", op.id])
    assert result.exit_code == 0
    assert result.stdout == op.source
    assert result.stderr == ""


def test_show_output_runs_standalone(tmp_path):
    # In a real process: what a user pipes to a file is a working program.
    src = subprocess.run([*OPGEN, "ops", "show", "func_0"], capture_output=True, text=True, check=True).stdout
    script = tmp_path / "f.py"
    script.write_text(src + "\nprint(func_0('abcdefg'))\n", encoding="utf-8")
    out = subprocess.run([sys.executable, "-I", str(script)], capture_output=True, text=True, check=True).stdout
    assert out == ops.call("func_0", "abcdefg") + "\n"


@pytest.mark.parametrize("bad", ["func_25", "func_-1", "3", "sort_chars", "FUNC_3", ""])
def test_show_unknown_id_is_a_usage_error(runner, cli, bad):
    result = runner.invoke(cli, ["ops", "show", bad])
    assert result.exit_code == 2
    assert "unknown operator" in result.stderr and repr(bad) in result.stderr
    assert result.stdout == ""


# ------------------------------------------------------------------ ops eval


@pytest.mark.parametrize(("expression", "x"), [
    ("func_3(func_1(x, 2))", "cab"),
    ("func_5(func_3(func_1(x, 2)), 'ab')", "cab"),
    ("(func_2(x)).upper()", "banana"),
    ("(x + 'abc')", ""),
    ("func_20(x, func_17(x))", "abc"),
    ("func_15(x)", "ßé\U0001f600"),
    ("func_4(x)", "  two   words\t"),
])
def test_eval_prints_the_value(runner, cli, expression, x):
    result = runner.invoke(cli, ["ops", "eval", expression, "--input", x])
    assert result.exit_code == 0, result.output
    assert result.stdout == E.evaluate(E.parse(expression), x) + "\n"


def test_eval_json_reports_value_and_measures(runner, cli):
    result = runner.invoke(cli, ["ops", "eval", "func_5(func_3(func_1(x, 2)),'ab')", "--input", "cab", "--json"])
    assert result.exit_code == 0
    assert json.loads(result.stdout) == {
        "expression": "func_5(func_3(func_1(x, 2)), 'ab')", "input": "cab", "output": "abaabbcc",
        "depth": 3, "k": 3, "ops": ["func_5", "func_3", "func_1"],
    }


def test_eval_json_keeps_unicode_readable(runner, cli):
    result = runner.invoke(cli, ["ops", "eval", "func_15(x)", "--input", "ß", "--json"])
    assert json.loads(result.stdout)["output"] == "«ß»" and "«ß»" in result.stdout


@pytest.mark.parametrize(("expression", "message"), [
    ("func_3(", "not a Python expression"),
    ("func_99(x)", "unknown operator 'func_99'"),
    ("func_1(x)", "func_1 takes 2 arguments"),
    ("__import__('os').system('true')", "unknown method .system()"),
    ("(lambda: 1)()", "not part of the expression grammar"),
    ("x.encode()", "unknown method"),
    ("func_3(y)", "unknown name 'y'"),
    ("", "not a Python expression"),
])
def test_eval_unparsable_expression_is_a_usage_error(runner, cli, expression, message):
    result = runner.invoke(cli, ["ops", "eval", expression, "--input", "abc"])
    assert result.exit_code == 2
    assert "EXPRESSION" in result.stderr and message in result.stderr
    assert result.stdout == ""


def test_eval_needs_input(runner, cli):
    result = runner.invoke(cli, ["ops", "eval", "func_3(x)"])
    assert result.exit_code == 2 and "--input" in result.stderr


def test_eval_operator_failing_at_runtime_exits_1(runner, cli):
    # func_17 recurses once per character: past the interpreter headroom it cannot finish.
    result = runner.invoke(cli, ["ops", "eval", "func_17(x)", "--input", "a" * 25_000])
    assert result.exit_code == 1
    assert "evaluation failed: RecursionError" in result.stderr
    assert result.stdout == ""


def test_eval_long_recursive_input_within_headroom_succeeds(runner, cli):
    s = "ab" * 4000
    result = runner.invoke(cli, ["ops", "eval", "func_17(x)", "--input", s])
    assert result.exit_code == 0 and result.stdout == s[::-1] + "\n"


def test_eval_refuses_an_explosive_expression_before_allocating(runner, cli):
    result = runner.invoke(cli, ["ops", "eval", "func_1(x, 1000000000000)", "--input", "abc"])
    assert result.exit_code == 1
    assert "exceeds the limit of 1000000" in result.stderr and "--max-len" in result.stderr


def test_eval_max_len_is_adjustable(runner, cli):
    args = ["ops", "eval", "func_1(x, 4)", "--input", "abc"]
    assert runner.invoke(cli, [*args, "--max-len", "11"]).exit_code == 1
    assert runner.invoke(cli, [*args, "--max-len", "12"]).stdout == "abc" * 4 + "\n"
    assert runner.invoke(cli, [*args, "--max-len", "0"]).stdout == "abc" * 4 + "\n"
    assert runner.invoke(cli, [*args, "--max-len", "-1"]).exit_code == 2


def test_ops_commands_import_nothing_heavy():
    code = textwrap.dedent("""\
        import sys
        from click.testing import CliRunner
        from opgen.cli import cli
        r = CliRunner()
        for args in (['--help'], ['ops', 'list'], ['ops', 'show', 'func_3'],
                     ['ops', 'eval', 'func_3(x)', '--input', 'ba']):
            assert r.invoke(cli, args).exit_code == 0, args
        heavy = ('torch', 'vllm', 'datasets', 'transformers', 'matplotlib', 'huggingface_hub', 'pyarrow')
        print(sorted(m for m in heavy if m in sys.modules))
        """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_eval_result_with_a_lone_surrogate_needs_json(runner, cli):
    plain = runner.invoke(cli, ["ops", "eval", "('\\ud800' + x)", "--input", "a"])
    assert plain.exit_code == 1 and "lone surrogate" in plain.stderr and "--json" in plain.stderr
    as_json = runner.invoke(cli, ["ops", "eval", "('\\ud800' + x)", "--input", "a", "--json"])
    assert as_json.exit_code == 0
    assert json.loads(as_json.stdout)["output"] == "\ud800a"


def test_eval_passes_undecodable_input_bytes_through():
    # argv bytes that are not UTF-8 reach x as surrogate escapes and come back out unchanged.
    proc = subprocess.run([*OPGEN, b"ops", b"eval", b"func_3(x)", b"--input", b"b\xffa"], capture_output=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b"ab\xff\n"


@pytest.mark.parametrize("expression", ["func_19(x, 1000000000000)", "func_18('', 1000000000000)"])
def test_eval_gives_up_after_the_timeout(runner, cli, expression):
    # The loops run their parameter's count of iterations: a huge count must end, with exit 1.
    result = runner.invoke(cli, ["ops", "eval", expression, "--input", "abc", "--timeout", "0.3"])
    assert result.exit_code == 1
    assert "still running after 0.3s" in result.stderr
    assert result.stdout == ""


def test_eval_timeout_leaves_no_alarm_behind(runner, cli):
    import signal

    before = signal.getsignal(signal.SIGALRM)
    assert runner.invoke(cli, ["ops", "eval", "func_3(x)", "--input", "ba", "--timeout", "5"]).stdout == "ab\n"
    assert signal.getsignal(signal.SIGALRM) == before
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
