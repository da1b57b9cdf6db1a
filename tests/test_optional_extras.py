"""Each optional dependency, absent, degrades to one line naming the extra that installs it (issue 24, item 4).

Absence is simulated in a fresh interpreter with ``sys.modules[name] = None`` (``import name`` then
raises ImportError), so the test runs wherever the package is installed too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_without(missing: tuple[str, ...], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    code = ("import sys\n"
            f"for name in {missing!r}:\n"
            "    sys.modules[name] = None\n"
            "from opgen.cli import main\n"
            f"sys.argv = ['opgen', *{list(args)!r}]\n"
            "main()\n")
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=300)


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("extras") / "b"
    r = subprocess.run([sys.executable, "-m", "opgen", "build", "native-stage1", "--out", str(out), "--limit", "8",
                        "--workers", "1", "--no-progress"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out


def _one_clear_line(r: subprocess.CompletedProcess, extra: str, code: int) -> None:
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr + r.stdout
    lines = [ln for ln in r.stderr.splitlines() if f"opgen[{extra}]" in ln]
    assert len(lines) == 1, r.stderr


@pytest.mark.parametrize("missing", ["transformers", "jinja2"])
def test_stats_tokenizer_without_the_tokens_extra_names_it(build, tmp_path, missing):
    (tmp_path / "tok").mkdir()
    r = run_without((missing,), "stats", str(build), "--tokenizer", str(tmp_path / "tok"))
    _one_clear_line(r, "tokens", 2)
    assert missing in r.stderr


def test_build_tokenizer_without_the_tokens_extra_names_it_before_building(tmp_path):
    (tmp_path / "tok").mkdir()
    r = run_without(("jinja2",), "build", "native-stage1", "--out", str(tmp_path / "o"), "--limit", "4",
                    "--tokenizer", str(tmp_path / "tok"), "--no-progress")
    _one_clear_line(r, "tokens", 2)
    assert not (tmp_path / "o").exists()


def test_push_without_the_hub_extra_names_it_and_dry_run_needs_none(build, tmp_path):
    r = run_without(("huggingface_hub",), "push", str(build), "--repo-id", "org/name")
    _one_clear_line(r, "hub", 1)
    r = run_without(("huggingface_hub",), "push", str(build), "--repo-id", "org/name",
                    "--dry-run", str(tmp_path / "tree"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "tree" / "README.md").is_file()


def test_ray_executor_without_ray_names_the_extra(tmp_path):
    r = run_without(("ray",), "build", "native-stage1", "--out", str(tmp_path / "o"), "--limit", "4",
                    "--executor", "ray", "--no-progress")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "opgen[ray]" in r.stderr


@pytest.mark.parametrize("backend, missing, extra", [("vllm", ("vllm",), "vllm"), ("hf", ("torch",), "hf"),
                                                     ("hf", ("transformers",), "hf")])
def test_eval_backend_without_its_extra_names_it(build, tmp_path, backend, missing, extra):
    model = tmp_path / "model"
    model.mkdir()
    data = build / "stage1_l1_test.parquet"
    r = run_without(missing, "eval", "--model", str(model), "--data", str(data), "--out", str(tmp_path / "e"),
                    "--backend", backend, "--no-progress")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and f"opgen[{extra}]" in r.stderr


@pytest.mark.slow
def test_score_without_matplotlib_says_so_once_and_writes_its_results(build, tmp_path):
    import json

    data = build / "stage1_l1_test.parquet"
    (tmp_path / "r.jsonl").write_text(json.dumps({"index": 0, "response": "x"}) + "\n")
    r = run_without(("matplotlib",), "score", "--data", str(data), "--responses", str(tmp_path / "r.jsonl"),
                    "--out", str(tmp_path / "s"))
    _one_clear_line(r, "plots", 0)
    assert [ln for ln in r.stderr.splitlines() if "matplotlib" in ln] == [
        "warning: plots skipped: matplotlib is not installed (pip install 'opgen[plots]'); "
        "scores.jsonl, summary.json and summary.csv are complete"]
    for name in ("summary.json", "scores.jsonl", "summary.csv"):
        assert (tmp_path / "s" / name).is_file(), name
    assert not list((tmp_path / "s").glob("*.png"))
    # --no-plots asked for none: nothing to say
    r = run_without(("matplotlib",), "score", "--data", str(data), "--responses", str(tmp_path / "r.jsonl"),
                    "--out", str(tmp_path / "s2"), "--no-plots")
    assert r.returncode == 0 and "matplotlib" not in r.stderr, r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("models", [1, 2])
def test_eval_without_matplotlib_says_so_once_and_writes_every_result(build, tmp_path, models):
    import json

    import pyarrow.parquet as pq

    data = build / "stage1_l1_test.parquet"
    args = []
    for m in range(models):
        src = tmp_path / f"m{m}.jsonl"
        src.write_text("".join(json.dumps({"index": i, "response": "x"}) + "\n"
                               for i in range(pq.read_metadata(data).num_rows)))
        args += ["--model", str(src)]
    r = run_without(("matplotlib",), "eval", "--backend", "replay", *args, "--data", str(data),
                    "--out", str(tmp_path / "e"), "--no-progress")
    _one_clear_line(r, "plots", 0)
    line = [ln for ln in r.stderr.splitlines() if "matplotlib" in ln]
    assert len(line) == 1 and line[0].startswith("warning: plots skipped: matplotlib is not installed"), r.stderr
    for m in range(models):
        assert (tmp_path / "e" / f"m{m}" / "metrics.json").is_file()
        assert list((tmp_path / "e" / f"m{m}").rglob("summary.json"))
    assert not list((tmp_path / "e").rglob("*.png"))
    assert (tmp_path / "e" / "sweep.json").is_file() == (models > 1)


def test_every_extra_installs_what_its_feature_imports():
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]

    def names(extra: str) -> set[str]:
        return {d.split(">")[0].split("=")[0].split("<")[0].split("[")[0].strip().lower() for d in extras[extra]}

    assert {"transformers", "tokenizers", "jinja2"} <= names("tokens")
    assert {"torch", "transformers", "tokenizers", "jinja2"} <= names("hf")
    assert {"huggingface_hub", "datasets"} <= names("hub")
    assert names("vllm") == {"vllm"}  # vLLM pins its own torch; a second torch floor only makes pip backtrack
    assert "matplotlib" in names("plots") and "scipy" in names("fit") and "ray" in names("ray")
    assert names("check") == {"hypothesis"}


def test_ops_check_without_hypothesis_names_the_check_extra():
    r = run_without(("hypothesis",), "ops", "check", "--examples", "1")
    _one_clear_line(r, "check", 2)
