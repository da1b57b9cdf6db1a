"""The trainer command lines docs/integrations.md shows, checked by each tool's own parser (marker
``trl``: scripts/setup-trl.sh installs verifiers, and OpenRLHF 0.11 without its GPU dependencies), so a
renamed flag fails CI instead of a user.

- OpenRLHF: ``python -m openrlhf.cli.train_ppo_ray ...`` is parsed by the ``argparse`` parser that
  file builds (its ``__main__`` block up to ``parse_args``, run alone: the trainer needs GPUs);
- ``vf-eval ...`` runs with ``--dry-run`` (verifiers resolves and validates the whole config, then exits);
- ``vf-validate ...`` runs (the gold check on 3 rows).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "integrations.md"


def commands(prefix: str) -> list[list[str]]:
    """Every command line of the doc's bash blocks that starts with ``prefix`` (continuations joined)."""
    text = DOC.read_text()
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.split(" #")[0].strip().rstrip("&").strip()
            if line.startswith(prefix):
                out.append(shlex.split(line))
    return out


def test_the_doc_has_each_command_line():
    assert commands("python -m openrlhf.cli.train_ppo_ray") and commands("vf-eval") and commands("vf-validate")
    assert commands("opgen serve")


def _openrlhf_parser() -> argparse.ArgumentParser:
    import importlib.util

    spec = importlib.util.find_spec("openrlhf")
    if spec is None or not spec.submodule_search_locations:
        import tiny_model as tm

        tm.require("openrlhf")
    folder = Path(list(spec.submodule_search_locations)[0])  # type: ignore[union-attr]
    tree = ast.parse((folder / "cli" / "train_ppo_ray.py").read_text())
    main = next(n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test))
    body = []
    for stmt in main.body:
        if isinstance(stmt, ast.Assign) and "parse_args" in ast.unparse(stmt.value):
            break
        body.append(stmt)
    scope: dict = {"argparse": argparse}
    for stmt in tree.body:  # the file's own imports that need no GPU stack (argparse, os, datetime)
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            try:
                exec(compile(ast.Module(body=[stmt], type_ignores=[]), "train_ppo_ray.py", "exec"), scope)
            except ImportError:
                pass
    exec(compile(ast.Module(body=body, type_ignores=[]), "train_ppo_ray.py", "exec"), scope)  # the tool's own code
    return scope["parser"]


@pytest.mark.trl
def test_openrlhfs_own_parser_takes_the_documented_command_line():
    parser = _openrlhf_parser()
    parser.exit_on_error = False
    (cmd,) = commands("python -m openrlhf.cli.train_ppo_ray")
    args = vars(parser.parse_args(cmd[3:]))
    assert args["reward.remote_url"] == "http://127.0.0.1:8000/reward"
    assert args["data.label_key"] == "reward_model" and args["data.input_key"] == "prompt"
    assert args["data.apply_chat_template"] is True
    with pytest.raises(SystemExit):  # the flags of OpenRLHF < 0.11 are refused: the check can fail
        parser.parse_args(["--remote_rm_url", "http://127.0.0.1:8000/reward", "--label_key", "label"])


def _vf(tool: str) -> Path:
    import tiny_model as tm

    tm.require("verifiers.v1")
    return Path(sys.executable).with_name(tool)


@pytest.mark.trl
def test_vf_eval_resolves_the_documented_command_lines(tmp_path):
    exe = _vf("vf-eval")
    lines = commands("vf-eval")
    assert len(lines) == 2  # the single-turn taskset, and the multi-turn environment over it
    envs = []
    for k, cmd in enumerate(lines):
        out = tmp_path / str(k)
        got = subprocess.run([str(exe), *cmd[1:], "--dry-run", "--output-dir", str(out)], capture_output=True,
                             text=True, timeout=300, cwd=tmp_path)
        assert got.returncode == 0, got.stdout + got.stderr
        (config,) = out.glob("*/configs/resolved/eval.json")
        resolved = json.loads(config.read_text())
        assert resolved["env"]["taskset"]["id"] == "opgen-verifiers" and resolved["push"] is False
        assert resolved["env"]["agent"]["runtime"]["type"] == "subprocess"
        envs.append(resolved["env"]["id"])
    assert envs == ["", "opgen-episodes"]
    old = subprocess.run([str(exe), "opgen-verifiers", "--taskset.recipe", "rl-r1", "--no-push", "--dry-run",
                          "--output-dir", str(tmp_path / "old")], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    assert "Extra inputs are not permitted" in old.stdout + old.stderr  # the check can fail


@pytest.mark.trl
@pytest.mark.slow
def test_vf_validate_runs_the_documented_command_line(tmp_path):
    exe = _vf("vf-validate")
    (cmd,) = commands("vf-validate")
    got = subprocess.run([str(exe), *cmd[1:]], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert got.returncode == 0 and '"valid_rate": 1.0' in got.stdout, got.stdout + got.stderr
