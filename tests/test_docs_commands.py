"""The docs' command lines, examples and numbers agree with the code: every command of README.md,
docs/*.md and examples/*/README.md parses with the CLI's own parser and runs as written (a page at a
time, in its order, in a scratch folder), every Python and YAML example runs or loads, every quoted
signature is the function's (tests/doc_blocks.py says how a block is read and how a page marks what
cannot run here); and issue 24's mismatches (recipes.md `--only heldout`, operators.md
`func_19(x, 10**12)`, the sft-matched step counts in cells.md)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import doc_blocks
import pytest
import yaml

from opgen import ops
from opgen import recipe as R

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
BUNDLED = {p.stem for p in (ROOT / "datasets").glob("*.yaml")}


def _build_lines() -> list[tuple[str, str, str]]:
    """(doc, recipe, --only value) of every `opgen build <bundled recipe> ... --only X` in the docs."""
    found = []
    for doc in DOCS:
        for line in doc.read_text(encoding="utf-8").splitlines():
            m = re.search(r"opgen build (?:datasets/)?([\w.-]+?)(?:\.yaml)?\s.*?--only[ =]([\w.,-]+)", line)
            if m and m.group(1) in BUNDLED:
                found.append((doc.name, m.group(1), m.group(2)))
    return found


def test_the_docs_show_some_only_lines():
    assert len(_build_lines()) >= 1


@pytest.mark.parametrize("doc, recipe, only", _build_lines())
def test_every_only_in_the_docs_names_a_split_of_its_recipe(doc, recipe, only):
    names = {s.name for s in R.load(recipe, None).splits}
    for name in only.split(","):
        assert name in names, f"{doc}: --only {name} is no split of {recipe} ({sorted(names)})"


def test_operator_calls_in_the_operator_docs_take_literal_parameters():
    text = (ROOT / "docs" / "operators.md").read_text(encoding="utf-8")
    calls = re.findall(r"`(func_\d+)\(([^`]*)\)`", text)
    assert calls
    arity = {op.id: len(op.signature.strip("()").split(",")) for op in ops.OPERATORS}
    for name, args in calls:
        parts = [a.strip() for a in args.split(",")]
        assert len(parts) == arity[name], (name, args)
        for a in parts[1:]:  # the first argument is the string; the rest are parameters, written as literals
            assert a.isidentifier() or isinstance(ast.literal_eval(a), int), (name, args)


def test_the_sft_matched_step_counts_in_cells_md_are_the_recipes():
    text = (ROOT / "docs" / "cells.md").read_text(encoding="utf-8")
    line = next(ln for ln in text.splitlines() if ln.startswith("opgen build datasets/sft-matched.yaml"))
    limit = int(re.search(r"--limit (\d+)", line).group(1))
    steps, iso_rows = map(int, re.search(r"first (\d+) steps \((\d+) rows a step\)", line).groups())
    grp_steps, grp_rows = re.search(r"([\d.]+) steps of (\d+)", line).groups()
    opts = {s.name: s.options for s in R.load("sft-matched", None).splits}
    iso, grp = opts["isolated"], opts["grouped"]
    assert iso_rows == iso["atomic_per_step"] + iso["comps_per_step"]
    assert int(grp_rows) == grp["grouped_rows_per_step"] + grp["comps_per_step"]
    assert steps == limit // iso_rows and limit % iso_rows == 0
    assert grp_steps == f"{limit / int(grp_rows):.1f}"


# ------------------------------------------------------------------ every documented command

COMMANDS = doc_blocks.all_commands()
BLOCKS = doc_blocks.all_blocks()
MARKED = "mark it <!-- not run: REASON --> above its block (or <!-- not run (TEXT): REASON --> for its lines)"


@pytest.mark.parametrize("cmd", COMMANDS, ids=[c.where for c in COMMANDS])
def test_every_documented_command_parses(cmd):
    """By the CLI's own click parser (an opgen line: its command, options and arguments) or, for
    another program, the checkout's file it names; run or not, a renamed option fails here."""
    problem = doc_blocks.check_command(cmd)
    assert problem is None, f"{cmd.where}: {cmd.text}\n{problem}"


INLINE = [c for page in doc_blocks.PAGES for c in doc_blocks.inline_commands(page)]


def test_every_command_the_prose_quotes_names_options_it_has():
    problems = [f"{c.where}: `{c.text}`: {p}" for c in INLINE if (p := doc_blocks.check_command(c))]
    assert len(INLINE) >= 100 and not problems, "\n".join(problems)


def test_the_docs_have_commands_of_every_kind():
    assert sum(1 for c in COMMANDS if not c.synopsis and not c.not_run) >= 30
    assert sum(1 for c in COMMANDS if c.not_run) >= 5 and sum(1 for c in COMMANDS if c.synopsis) >= 3


@pytest.mark.parametrize("argv, problem", [
    (["leakage", "out/a", "--against", "out/b"], None),
    (["build", "sft-eco", "--out", "o", "--worker", "2"], "No such option '--worker'"),
    (["ops", "lists"], "no command 'lists'"),
    (["score", "--data", "d", "--responses", "r"], "missing '--out'"),
    (["verify", "a", "b"], "unexpected extra arguments"),
    (["fit", "--compute", "rollout|step", "--out", "o"], None),
])
def test_the_command_check_fails_on_a_renamed_option_or_command(argv, problem):
    got = doc_blocks.check_opgen_argv(argv)
    assert got is None if problem is None else problem in got, got


def test_a_synopsis_names_only_options_and_choices_the_command_has():
    assert doc_blocks.check_opgen_argv(["fit", "--compute", "rollout|step|given", "[--no-plots]"], loose=True) is None
    assert "its choices are" in doc_blocks.check_opgen_argv(["fit", "--compute", "rollout|step"], loose=True)
    assert "no option --colour" in doc_blocks.check_opgen_argv(["score", "[--colour]"], loose=True)


def test_every_block_marked_not_run_says_why():
    for b in BLOCKS:
        for reason in (b.not_run, *(why for _, why in b.skips)):
            assert reason is None or len(reason) > 5, f"{b.where}: say why it is not run"
        for text, _ in b.skips:
            assert any(text in c.text for c in doc_blocks.commands(b)), f"{b.where}: no line holds {text!r}"


# ------------------------------------------------------------------ Python, YAML and JSON examples

PYTHON = [b for b in BLOCKS if b.lang == "python"]
YAML = [b for b in BLOCKS if b.lang == "yaml"]
JSON = [b for b in BLOCKS if b.lang == "json"]


@pytest.mark.parametrize("block", PYTHON, ids=[b.where for b in PYTHON])
def test_python_examples_bind_to_the_code(block):
    """Compiles; its opgen imports resolve; each call of an opgen function binds to its signature
    (the run below executes the runnable ones too)."""
    problems = doc_blocks.check_python(block.text, doc_blocks.python_context(block))
    assert not problems, f"{block.where}:\n" + "\n".join(problems)


def test_the_python_check_fails_on_a_stale_call():
    code = ("import opgen\nfrom opgen.score import grade\nopgen.create_dataset('eval-suite', sizes=3)\n"
            "grade(1, 2, 3)\nopgen.no_such_function()\nyaml.safe_load('')\n")
    problems = "\n".join(doc_blocks.check_python(code))
    for part in ("unexpected keyword argument 'sizes'", "too many positional arguments",
                 "opgen.no_such_function: no such attribute", "the module yaml is used but not imported"):
        assert part in problems, problems


@pytest.mark.parametrize("block", YAML, ids=[b.where for b in YAML])
def test_yaml_examples_load(block, tmp_path):
    yaml.safe_load(block.text)
    if block.not_run:
        return
    kind = block.marks.get("load")
    assert kind in doc_blocks.LOADERS, (f"{block.where}: say how to check it: <!-- load: KIND --> (one of "
                               f"{sorted(doc_blocks.LOADERS)}) or <!-- not run: REASON -->")
    path = tmp_path / block.marks.get("file", "example.yaml")
    path.write_text(block.text + "\n", encoding="utf-8")
    doc_blocks.LOADERS[kind](path)


@pytest.mark.parametrize("block", JSON, ids=[b.where for b in JSON])
def test_json_examples_parse(block):
    doc_blocks.parse_json(block.text)


def test_quoted_signatures_are_the_functions():
    """Every `name(...)` the prose quotes that names an opgen function or method: a quoted signature
    lists its parameters (or says `...`), in order, with their kinds, annotations and defaults; a
    quoted call binds (docs/contracts.md, docs/api.md and every other page)."""
    problems, checked = [], 0
    for page in doc_blocks.PAGES:
        env = doc_blocks._page_names(page)
        for q in doc_blocks.quotes(page):
            checked += doc_blocks._lookup(q.text.split("(", 1)[0], env) is not None
            problem = doc_blocks.check_quote(q, env)
            if problem:
                problems.append(f"{q.where}: {problem}")
    assert checked >= 20
    assert not problems, "\n".join(problems)


def test_the_signature_check_fails_on_a_stale_signature():
    env: dict = {}
    for text, part in [
        ('opgen.score.grade(ground_truth: dict | str, response: str, *, policy="output", ...) -> dict',
         "response is str | bytes"),
        ('opgen.create_dataset(recipe, split=None, *, size=None, seed=None, workers=1)', "leaves out library"),
        ('opgen.create_dataset(recipe, split=None, *, size=None, seed=None, workers=2, ...)', "default is 1"),
        ('opgen.create_dataset(recipe, split=None, size=None, ...)', "size is keyword-only"),
        ('opgen.mix_datasets(datasets, weight=None, ...)', "'weight'"),
        ('opgen.mix_datasets(datasets, weights: list | None = None, ...)', "weights is Sequence[float] | None"),
        ('opgen.mix_datasets(datasets, weight: list = None, ...)', "no parameter 'weight'"),
        ('opgen.gold_answer(row, lib=x)', "unexpected keyword argument 'lib'"),
    ]:
        got = doc_blocks.check_quote(doc_blocks.Quote("x.md", 1, text), env)
        assert got is not None and part in got, (text, got)
    right = doc_blocks.Quote("x.md", 1, "opgen.gold_answer(row, library=None) -> str")
    assert doc_blocks.check_quote(right, env) is None


# ------------------------------------------------------------------ each page runs as written

RUN = [p for p in doc_blocks.PAGES if doc_blocks.runnable(p)]
# pages whose examples run in about a second; the others build, grade or fit (slow)
FAST = {"docs/contracts.md", "docs/eval.md"}


@pytest.fixture(scope="session")
def readme_builds(tmp_path_factory) -> Path:
    """The README's builds (out/eval-suite, out/sft-eco) by its own command lines, once a session,
    for the pages that read them without building them."""
    folder = tmp_path_factory.mktemp("readme-builds")
    env = doc_blocks.scratch(folder)
    for line in doc_blocks.readme_builds().values():
        done = subprocess.run(["bash", "-c", line], cwd=folder, env=env, capture_output=True, text=True,
                              timeout=doc_blocks.HANG_S)
        assert done.returncode == 0, f"README.md: {line}\n{done.stdout}{done.stderr}"
    return folder


@pytest.mark.parametrize("page", [pytest.param(p, id=doc_blocks.rel(p),
                                               marks=() if doc_blocks.rel(p) in FAST else pytest.mark.slow)
                                  for p in RUN])
def test_every_page_runs_as_written(page, tmp_path, request):
    """The page's commands and Python blocks, in its order, in a scratch folder like the checkout
    (tests/doc_blocks.py run_page), each to exit 0; what it marks not run was parsed above."""
    folder = tmp_path / "page"
    folder.mkdir()
    needed = doc_blocks.needs(page)
    if needed:
        doc_blocks.copy_builds(request.getfixturevalue("readme_builds"), folder, needed)
    done = subprocess.run([sys.executable, doc_blocks.__file__, doc_blocks.rel(page), str(folder)], cwd=folder,
                          capture_output=True, text=True, timeout=4 * doc_blocks.HANG_S)
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAILED ")]
    first = failed[0][len("FAILED "):] if failed else f"{doc_blocks.rel(page)}: the runner exited {done.returncode}"
    assert done.returncode == 0, (f"{first}\nfix the page (the docs are wrong) or, if it cannot run here, "
                                  f"{MARKED}\n--- the page's run\n{done.stdout[-8000:]}{done.stderr[-4000:]}")


def test_the_fast_pages_run_in_the_fast_loop():
    assert FAST <= {doc_blocks.rel(p) for p in RUN}
