"""Options several commands share are declared once (opgen.cli.options): same name, type, default
and help in every command that has them."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from opgen.cli import cli as root
from opgen.cli import options

CLI_DIR = Path(__file__).resolve().parent.parent / "cli"

# option -> the commands that take it
SHARED = {
    "--namespace": ["score", "eval"],
    "--no-static": ["score", "eval"],
    "--allow-weak-sandbox": ["score", "eval", "validate"],
    "--executor": ["build", "score", "eval"],
    "--ray-address": ["build", "score", "eval"],
    "--ray-num-cpus": ["build", "score", "eval"],
    "--progress": ["build", "eval", "validate", "verify", "score", "fit", "leakage", "stats", "split-stats", "push",
                   "ops check"],
    "--no-plots": ["score", "fit"],
    "--json": ["validate", "stats", "verify", "ops list", "ops eval"],
    "--library": ["build", "score", "eval", "validate", "stats", "leakage", "verify", "push", "split-stats",
                  "ops check"],
}


def _command(path: str) -> click.Command:
    ctx = click.Context(root)
    cmd: click.Command | None = root
    for name in path.split():
        assert isinstance(cmd, click.Group)
        cmd = cmd.get_command(ctx, name)
    assert cmd is not None, path
    return cmd


def _option(path: str, flag: str) -> click.Option:
    for p in _command(path).params:
        if isinstance(p, click.Option) and flag in p.opts:
            return p
    raise AssertionError(f"{path} has no {flag}")


def test_no_command_declares_a_shared_option_itself():
    declared = re.compile(r'click\.option\(\s*"(' + "|".join(re.escape(f) for f in SHARED) + r')[/"]')
    for path in sorted(CLI_DIR.glob("*.py")):
        if path.name == "options.py":
            continue
        hits = declared.findall(path.read_text())
        assert not hits, f"{path.name} declares {hits} itself; use opgen.cli.options"


@pytest.mark.parametrize("flag", sorted(SHARED))
def test_a_shared_option_has_one_type_and_default_everywhere(flag):
    found = [_option(c, flag) for c in SHARED[flag]]
    first = found[0]
    for opt in found[1:]:
        assert (opt.name, opt.opts, opt.secondary_opts, opt.default, opt.is_flag, opt.show_default) == \
            (first.name, first.opts, first.secondary_opts, first.default, first.is_flag, first.show_default)
        assert repr(opt.type) == repr(first.type)


def test_help_texts_come_from_the_one_home():
    assert _option("score", "--namespace").help == options.NAMESPACE_HELP
    assert _option("eval", "--namespace").help == "Scorer: " + options.NAMESPACE_HELP
    assert _option("score", "--no-static").help == options.NO_STATIC_HELP
    assert _option("eval", "--no-static").help == "Scorer: r" + options.NO_STATIC_HELP[1:]
    for cmd in ("score", "eval"):
        assert _option(cmd, "--allow-weak-sandbox").help == options.ALLOW_WEAK_SANDBOX_HELP
    for cmd in ("build", "score", "eval"):
        assert _option(cmd, "--ray-address").help == options.RAY_ADDRESS_HELP
        assert _option(cmd, "--ray-num-cpus").help == options.RAY_NUM_CPUS_HELP
    assert _option("build", "--progress").default is None and _option("eval", "--progress").default is None
    assert _option("score", "--namespace").default == "strict"
    assert list(_option("build", "--executor").type.choices) == ["local", "ray"]


def test_shared_options_still_parse(runner, tmp_path: Path):
    r = runner.invoke(root, ["score", "--data", str(tmp_path / "nope.parquet"), "--responses",
                             str(tmp_path / "r.jsonl"), "--out", str(tmp_path / "o"), "--namespace", "native",
                             "--no-static", "--allow-weak-sandbox", "--no-plots"])
    assert r.exit_code == 2 and "nope.parquet does not exist" in r.output, r.output
    r = runner.invoke(root, ["score", "--data", "d", "--responses", "r", "--out", "o", "--namespace", "loose"])
    assert r.exit_code == 2 and "'loose' is not one of 'strict', 'native'" in r.output, r.output
    r = runner.invoke(root, ["eval", "--model", "m", "--data", __file__, "--out", str(tmp_path / "o"),
                             "--ray-address", "auto"])
    assert r.exit_code == 2 and "--ray-address: only with --executor ray" in r.output, r.output
