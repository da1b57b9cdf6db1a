"""Nothing opgen reads picks the code it runs (issue 31, items 1-3): an operator library is known by
its digest, loaded only from what the user chose (``--library``, ``library=``, ``OPGEN_LIBRARY``, a
recipe file given on the command line) or registered in their own store (``opgen ops add``, every
build), and found there by digest from any directory, after the build folder moved.

The attacks: a row whose ground truth names a library by a YAML path or a ``module:obj`` spec, a
manifest whose recorded recipe names one, and the YAML and module shipped beside the parquet. A
sentinel file that the hostile library writes when it is executed (or imported) proves whether it
ran; every command runs on the poisoned folder from inside it (where a ``module:obj`` spec would
import from the working directory) and from elsewhere.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest
import user_libraries as U
from click.testing import CliRunner
from opgen.cli import cli

FAKE_DIGEST = "e" * 64  # what a hostile row claims; nothing checks it before the old code loads the spec

# A study row's ground truth: func_3 (sort) on "cab"; the gold program returns func_3(x).
STUDY_TASK = {"entry": "main_solution", "expr": "func_3(x)", "input": "cab", "output": "abc", "ops": ["func_3"],
              "depth": 1}
GOLD = "```python\ndef func_3(s):\n    return ''.join(sorted(s))\n\ndef main_solution(x):\n    return func_3(x)\n```"


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh, empty library store (the user's own; nothing registered yet)."""
    home = tmp_path / "opgen-home"
    monkeypatch.setenv("OPGEN_HOME", str(home))
    monkeypatch.delenv("OPGEN_LIBRARY", raising=False)
    return home


def _evil_yaml(sentinel: Path) -> str:
    return textwrap.dedent(f"""\
        name: evil
        operators:
          - id: rev
            gloss: reverse
            split: train
            source: |
              import pathlib
              pathlib.Path({str(sentinel)!r}).write_text("the YAML library ran")
              def rev(s):
                  return s[::-1]
        """)


def _evil_module(sentinel: Path) -> str:
    return (f"import pathlib\npathlib.Path({str(sentinel)!r}).write_text('the module was imported')\n"
            "from opgen import ops\nLIB = ops.STUDY\n")


def plant(folder: Path, sentinel: Path) -> None:
    """The hostile library beside the data: a YAML file and an importable module."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "evil.yaml").write_text(_evil_yaml(sentinel))
    (folder / "evil_mod.py").write_text(_evil_module(sentinel))


@pytest.fixture
def poison(tmp_path: Path, store: Path, monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """The hostile library in ``bad/``, the process inside that folder with it on sys.path (as
    ``python -m`` puts the working directory), and the sentinel it writes."""
    folder = tmp_path / "bad"
    sentinel = tmp_path / "SENTINEL"
    plant(folder, sentinel)
    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(folder))
    sys.modules.pop("evil_mod", None)
    yield SimpleNamespace(folder=folder, sentinel=sentinel)
    sys.modules.pop("evil_mod", None)


SPECS = ["evil.yaml", "ABS", "evil_mod:LIB"]


def _spec(poison: SimpleNamespace, spec: str) -> str:
    return str(poison.folder / "evil.yaml") if spec == "ABS" else spec


def poisoned_truth(spec: str) -> dict:
    return {"mode": "program", "tasks": [STUDY_TASK], "library": {"name": "evil", "digest": FAKE_DIGEST, "spec": spec}}


def _raised(fn, *args: object) -> BaseException | None:
    try:
        fn(*args)
    except Exception as exc:  # the test looks at which one below, after the sentinel
        return exc
    return None


def _unknown(exc: BaseException | None) -> None:
    """The one named error of a row whose library is neither given nor registered."""
    from opgen.library import UnknownLibrary

    assert isinstance(exc, UnknownLibrary), f"{type(exc).__name__}: {exc}"
    text = str(exc)
    assert FAKE_DIGEST[:12] in text and "opgen ops add" in text and "--library" in text


# ---------------------------------------------------------------- a poisoned row, in code


ENTRY_POINTS = ["compute_score", "compute_score_async", "compute_score_batch", "compute_score_float"]


def _call(entry: str, gt: object, **kw: object) -> object:
    from opgen import reward

    if entry == "compute_score":
        return reward.compute_score("opgen/x", GOLD, gt, {"answer_format": "prose_code"}, **kw)
    if entry == "compute_score_async":
        return asyncio.run(reward.compute_score_async("opgen/x", GOLD, gt, {"answer_format": "prose_code"}, **kw))
    if entry == "compute_score_batch":
        return reward.compute_score_batch(["opgen/x"], [GOLD], [gt], [{"answer_format": "prose_code"}], **kw)
    return reward.compute_score_float("opgen/x", GOLD, gt, {"answer_format": "prose_code"}, **kw)


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("spec", SPECS)
def test_a_poisoned_row_runs_nothing_in_any_compute_score_entry_point(poison, entry, spec):
    gt = json.dumps(poisoned_truth(_spec(poison, spec)))
    err = _raised(lambda: _call(entry, gt, allow_weak_sandbox=True))
    assert not poison.sentinel.exists(), poison.sentinel.read_text()
    _unknown(err)


def _adapter(kind: str, gt: str) -> object:
    from opgen.integrations import lm_eval, openrlhf
    from opgen.integrations import trl as otrl
    from opgen.integrations import verifiers as ovf

    row = {"data_source": "opgen/x", "prompt": [{"role": "user", "content": "write main_solution"}],
           "reward_model": {"style": "rule", "ground_truth": gt}, "extra_info": {"answer_format": "prose_code"}}
    if kind == "trl":
        return otrl.make_reward(allow_weak_sandbox=True)(prompts=["p"], completions=[GOLD], ground_truth=[gt],
                                                         extra_info=[row["extra_info"]])
    if kind == "lm_eval":
        return lm_eval.process_results(row, [GOLD])
    if kind == "verifiers":
        trace = SimpleNamespace(assistant_messages=[SimpleNamespace(role="assistant", content=GOLD)], info={})
        return ovf.grade_trace(SimpleNamespace(**ovf.task_fields(row)), trace, allow_weak_sandbox=True)
    return openrlhf.rewards({"query": [GOLD], "labels": [gt]}, allow_weak_sandbox=True)


@pytest.mark.parametrize("kind", ["trl", "lm_eval", "verifiers", "openrlhf"])
@pytest.mark.parametrize("spec", SPECS)
def test_a_poisoned_row_runs_nothing_in_any_integration(poison, kind, spec):
    err = _raised(_adapter, kind, json.dumps(poisoned_truth(_spec(poison, spec))))
    assert not poison.sentinel.exists(), poison.sentinel.read_text()
    _unknown(err)


def _asgi_post(app: object, path: str, body: dict) -> tuple[int, dict]:
    """One POST through the ASGI app, in process (no network, no httpx)."""
    sent: list[dict] = []
    data = json.dumps(body).encode()

    async def run() -> None:
        async def receive() -> dict:
            return {"type": "http.request", "body": data, "more_body": False}

        async def send(message: dict) -> None:
            sent.append(message)

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                 "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
                 "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())],
                 "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8000)}
        await app(scope, receive, send)  # type: ignore[operator]

    asyncio.run(run())
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    raw = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, json.loads(raw or b"{}")


@pytest.mark.parametrize("spec", SPECS)
def test_serve_refuses_a_poisoned_ground_truth_and_a_library_option_before_any_load(poison, spec):
    pytest.importorskip("starlette")
    from opgen.serve import Service, create_app

    app = create_app(Service(allow_weak_sandbox=True))
    gt = json.dumps(poisoned_truth(_spec(poison, spec)))
    status, reply = _asgi_post(app, "/score", {"items": [{"ground_truth": gt, "response": GOLD}]})
    assert 400 <= status < 500 and "opgen ops add" in reply["error"], (status, reply)
    status, reply = _asgi_post(app, "/reward", {"query": [GOLD], "labels": [gt]})
    assert 400 <= status < 500 and "opgen ops add" in reply["error"], (status, reply)
    study = json.dumps({"mode": "program", "tasks": [STUDY_TASK]})
    status, reply = _asgi_post(app, "/score", {"items": [{"ground_truth": study, "response": GOLD}],
                                               "library": _spec(poison, spec)})
    assert 400 <= status < 500 and "library" in reply["error"], (status, reply)
    assert not poison.sentinel.exists(), poison.sentinel.read_text()


# ---------------------------------------------------------------- a poisoned folder, through every command

RECIPE = {
    "name": "small", "seed": 5, "leakage": {"heldout_ops": None},
    "splits": {
        "train": {"generator": "trees", "role": "train", "kind": "sft", "options": {"ops": "train", "depths": [1, 2],
                                                                                    "per_depth": 3}},
        "test": {"generator": "trees", "role": "eval", "kind": "rl", "options": {"ops": "heldout", "depths": [1, 2],
                                                                                 "per_depth": 3}},
    },
}


def _build(out: Path, recipe: dict = RECIPE, *extra: str, cwd: Path | None = None) -> Path:
    import yaml

    where = out.parent
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"{recipe['name']}.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    old = Path.cwd()
    os.chdir(cwd or where)
    try:
        res = CliRunner().invoke(cli, ["build", path.name if cwd is None else str(path), "--out", str(out),
                                       "--workers", "1", "--no-progress", *extra])
    finally:
        os.chdir(old)
    assert res.exit_code == 0, res.output
    return out


@pytest.fixture(scope="module")
def study_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(tmp_path_factory.mktemp("study") / "build")


def poison_folder(build: Path, folder: Path, spec: str, sentinel: Path) -> Path:
    """A copy of ``build`` as an attacker ships it: every row's ground truth names the hostile
    library by ``spec`` (the manifest's sizes and sha256 made to match), the manifest's library and
    its recorded recipe name it too, and the library lies beside the parquet."""
    from opgen.write import sha256_of

    shutil.copytree(build, folder)
    man = json.loads((folder / "manifest.json").read_text())
    tag = {"name": "evil", "digest": FAKE_DIGEST, "spec": spec}
    for section in man["splits"].values():
        for f in section["files"]:
            path = folder / f["path"]
            table = pq.read_table(path)
            rows = table.to_pylist()
            for r in rows:
                gt = json.loads(r["reward_model"]["ground_truth"])
                gt["library"] = tag
                r["reward_model"]["ground_truth"] = json.dumps(gt)
            import pyarrow as pa

            pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)
            f["sha256"], f["bytes"] = sha256_of(path), path.stat().st_size
    man["library"] = {**man.get("library", {}), **tag}
    for r in man["recipes"]:
        r["resolved"]["library"] = spec
    (folder / "manifest.json").write_text(json.dumps(man, indent=2))
    plant(folder, sentinel)
    return folder


COMMANDS = {
    "validate": ["validate", "{d}"],
    "stats": ["stats", "{d}"],
    "leakage": ["leakage", "{d}/train.parquet", "--against", "{d}/test.parquet"],
    "verify": ["verify", "{d}"],
    "push": ["push", "{d}", "--repo-id", "org/name", "--dry-run", "{o}/tree"],
    "export": ["export", "lm-eval", "{d}", "{o}/lm"],
    "split-stats": ["split-stats", "{d}/train.parquet", "{d}/test.parquet"],
    "score": ["score", "--data", "{d}/test.parquet", "--responses", "{o}/r.jsonl", "--out", "{o}/scored",
              "--allow-weak-sandbox", "--no-plots"],
}


def _run(args: list[str], cwd: Path, home: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "OPGEN_LIBRARY"}
    env["OPGEN_HOME"] = str(home)
    return subprocess.run([sys.executable, "-m", "opgen", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("inside", [True, False], ids=["inside", "elsewhere"])
@pytest.mark.parametrize("spec", ["evil.yaml", "evil_mod:LIB"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_poisoned_folder_runs_nothing_in_any_command(study_build, tmp_path, command, spec, inside):
    sentinel = tmp_path / "SENTINEL"
    folder = poison_folder(study_build, tmp_path / "downloaded", spec, sentinel)
    out = tmp_path / "out"
    out.mkdir()
    (out / "r.jsonl").write_text(json.dumps({"index": 0, "response": GOLD}) + "\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    args = [a.format(d=folder, o=out) for a in COMMANDS[command]]
    done = _run(args, folder if inside else elsewhere, tmp_path / "empty-store")
    assert not sentinel.exists(), f"{command} ran the folder's library: {sentinel.read_text()}"
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "opgen ops add" in done.stderr and FAKE_DIGEST[:12] in done.stderr, done.stderr


def test_a_poisoned_folder_runs_nothing_in_validate_and_stats_in_process(study_build, tmp_path, store,
                                                                         monkeypatch):
    sentinel = tmp_path / "SENTINEL"
    folder = poison_folder(study_build, tmp_path / "downloaded", "evil.yaml", sentinel)
    monkeypatch.chdir(folder)
    for args in (["validate", "."], ["stats", "."], ["split-stats", "train.parquet", "test.parquet"]):
        res = CliRunner().invoke(cli, args)
        assert not sentinel.exists(), (args, sentinel.read_text())
        assert res.exit_code == 2 and "opgen ops add" in res.output, (args, res.output)


def test_a_manifest_recipe_naming_a_library_is_refused_by_verify(study_build, tmp_path, store, monkeypatch):
    """Rows of the study, but the manifest's recorded recipe names a library: verify rebuilds from
    the recorded recipe and must not load it, from inside the folder or elsewhere."""
    sentinel = tmp_path / "SENTINEL"
    folder = tmp_path / "downloaded"
    shutil.copytree(study_build, folder)
    plant(folder, sentinel)
    man = json.loads((folder / "manifest.json").read_text())
    man["recipes"][0]["resolved"]["library"] = "evil.yaml"
    (folder / "manifest.json").write_text(json.dumps(man, indent=2))
    monkeypatch.chdir(folder)
    res = CliRunner().invoke(cli, ["verify", "."])
    assert not sentinel.exists(), sentinel.read_text()
    assert res.exit_code == 2 and "library" in res.output, res.output


# ---------------------------------------------------------------- an honest user's library build


SIX_RECIPE = {
    "name": "mine", "seed": 3, "library": "six.yaml", "leakage": {"heldout_ops": None},
    "splits": {
        "train": {"generator": "trees", "role": "train", "kind": "sft",
                  "options": {"ops": "train", "depths": [1, 2], "per_depth": 4}},
        "test": {"generator": "chains", "role": "eval", "kind": "sft", "prompt_format": "shown",
                 "options": {"ops": "heldout", "depths": [1, 2], "per_depth": 4}},
    },
}


def _six_build(tmp_path: Path) -> Path:
    """A user-library build, made from the recipe's own folder (its rows once named ``six.yaml``
    relative to there); the library is registered in the store (the build given it)."""
    (tmp_path / "work").mkdir(exist_ok=True)
    U.write_six(tmp_path / "work")
    return _build(tmp_path / "work" / "build", SIX_RECIPE)


def _sft_rows(build: Path, split: str = "test") -> list[dict]:
    return pq.read_table(build / f"{split}.parquet").to_pylist()


def _score(row: dict, **kw: object) -> dict:
    from opgen import reward

    return reward.compute_score(row["data_source"], row["response"], row["reward_model"]["ground_truth"],
                                row["extra_info"], allow_weak_sandbox=True, **kw)


@pytest.mark.slow
def test_a_user_library_build_grades_gold_1_from_elsewhere_and_after_a_move(tmp_path, store, monkeypatch):
    build = _six_build(tmp_path)
    moved = tmp_path / "moved" / "b"
    moved.parent.mkdir()
    shutil.move(str(build), moved)
    shutil.rmtree(tmp_path / "work")  # the recipe and six.yaml are gone too
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    rows = _sft_rows(moved)
    assert rows
    for row in rows[:3]:
        got = _score(row)  # found in the store by its digest: no flag
        assert got["score"] == 1.0 and got["error"] == "", got
    # the folder carries its canonical library file; given explicitly, it grades with an empty store too
    monkeypatch.setenv("OPGEN_HOME", str(tmp_path / "another-store"))
    for row in rows[:2]:
        assert _score(row, library=str(moved / "library.yaml"))["score"] == 1.0
    monkeypatch.setenv("OPGEN_LIBRARY", str(moved / "library.yaml"))
    assert _score(rows[0])["score"] == 1.0


def test_a_row_of_an_unregistered_library_is_the_named_error_and_ops_add_registers_it(tmp_path, store,
                                                                                      monkeypatch):
    from opgen import reward
    from opgen.library import LibraryMismatch, UnknownLibrary

    build = _six_build(tmp_path)
    row = _sft_rows(build)[0]
    monkeypatch.setenv("OPGEN_HOME", str(tmp_path / "fresh"))  # another user's machine: nothing registered
    with pytest.raises(UnknownLibrary, match="opgen ops add") as err:
        _score(row)
    assert "six" in str(err.value) and "--library" in str(err.value)
    with pytest.raises(UnknownLibrary):
        reward.compute_score_float(row["data_source"], row["response"], row["reward_model"]["ground_truth"],
                                   row["extra_info"], allow_weak_sandbox=True)
    # a given library of another digest: the mismatch error
    (tmp_path / "toy.yaml").write_text(U.TOY)
    with pytest.raises(LibraryMismatch):
        _score(row, library=str(tmp_path / "toy.yaml"))
    # the user vouches for the folder's copy: then every entry point finds it
    res = CliRunner().invoke(cli, ["ops", "add", str(build / "library.yaml")])
    assert res.exit_code == 0, res.output
    assert _score(row)["score"] == 1.0
    listed = CliRunner().invoke(cli, ["ops", "libraries"])
    assert listed.exit_code == 0 and "six" in listed.output


def test_the_store_is_the_users_own(tmp_path, store):
    """Entries are written atomically, mode 0600 in a 0700 folder; a folder others may write is
    refused (another user could plant a library there), and so is an entry whose content is not
    its digest."""
    from opgen import library as L

    lib = L.load(str(U.write_six(tmp_path)))
    path = L.store.add(lib)
    assert path.parent == store / "libraries" and path.name == f"{lib.digest}.yaml"
    assert (path.stat().st_mode & 0o777) == 0o600 and (path.parent.stat().st_mode & 0o777) == 0o700
    assert L.store.get(lib.digest).digest == lib.digest
    path.write_text(path.read_text().replace("reverse the string", "something else"))
    L.store.forget_cache()
    with pytest.raises(L.LibraryError, match="not the digest"):
        L.store.get(lib.digest)
    L.store.add(lib)
    os.chmod(path.parent, 0o777)
    L.store.forget_cache()
    with pytest.raises(L.LibraryError, match="writable by others"):
        L.store.get(lib.digest)
    os.chmod(path.parent, 0o700)


def test_the_canonical_library_file_has_the_librarys_digest(tmp_path):
    from opgen import library as L
    from opgen import ops

    for lib in (L.load(str(U.write_six(tmp_path))), ops.OperatorLibrary("study-copy", ops.STUDY.operators)):
        text = L.canonical_text(lib)
        (tmp_path / "c.yaml").write_text(text)
        assert L.digest_of_file(tmp_path / "c.yaml") == lib.digest  # read as data: nothing executed
        assert L.load(str(tmp_path / "c.yaml")).digest == lib.digest


@pytest.mark.slow
def test_verify_and_split_stats_of_an_untouched_user_library_build(tmp_path, store):
    build = _six_build(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = _run(["verify", str(build)], elsewhere, store)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "library" in done.stdout
    done = _run(["split-stats", str(build / "train.parquet"), str(build / "test.parquet")], elsewhere, store)
    assert done.returncode == 0, done.stdout + done.stderr
    for args in (["validate", str(build)], ["stats", str(build)],
                 ["leakage", str(build / "train.parquet"), "--against", str(build / "test.parquet")],
                 ["push", str(build), "--repo-id", "org/six", "--dry-run", str(tmp_path / "tree")]):
        done = _run(args, elsewhere, store)
        assert done.returncode == 0, (args, done.stdout + done.stderr)
    assert (tmp_path / "tree" / "library.yaml").read_bytes() == (build / "library.yaml").read_bytes()
    # another machine: the folder alone; verify names the way to provide the library, and --library works
    fresh = tmp_path / "fresh-store"
    done = _run(["verify", str(build)], elsewhere, fresh)
    assert done.returncode == 2 and "opgen ops add" in done.stderr, done.stderr
    done = _run(["verify", str(build), "--library", str(build / "library.yaml")], elsewhere, fresh)
    assert done.returncode == 0, done.stdout + done.stderr


def test_split_stats_of_a_user_library_build_in_process(tmp_path, store):
    build = _six_build(tmp_path)
    res = CliRunner().invoke(cli, ["split-stats", str(build / "train.parquet"), str(build / "test.parquet")])
    assert res.exit_code == 0, res.output


def test_the_study_rows_and_manifest_name_no_path(study_build):
    man = json.loads((study_build / "manifest.json").read_text())
    assert "spec" not in man["library"] and not (study_build / "library.yaml").exists()
    gt = json.loads(pq.read_table(study_build / "test.parquet").to_pylist()[0]["reward_model"]["ground_truth"])
    assert "library" not in gt


def test_a_user_library_rows_name_it_by_name_and_digest_only(tmp_path, store):
    from opgen import library as L

    build = _six_build(tmp_path)
    lib = L.load(str(tmp_path / "work" / "six.yaml"))
    for split in ("train", "test"):
        for row in _sft_rows(build, split):
            assert json.loads(row["reward_model"]["ground_truth"])["library"] == {"name": "six", "digest": lib.digest}
    man = json.loads((build / "manifest.json").read_text())
    assert man["library"]["digest"] == lib.digest and "spec" not in man["library"]
    assert "library" not in json.dumps(man["recipes"])
    assert L.digest_of_file(build / "library.yaml") == lib.digest
    assert L.store.get(lib.digest).digest == lib.digest  # the build registered what it was given


def _evil_generator_module(sentinel: Path) -> str:
    return (f"import pathlib\npathlib.Path({str(sentinel)!r}).write_text('the generator module was imported')\n"
            "from opgen.generate import Generator\nclass Gen(Generator):\n    NAME = 'evil'\n")


@pytest.mark.parametrize("where", ["recipe", "avoid"])
def test_verify_imports_no_generator_a_manifest_names(study_build, tmp_path, store, monkeypatch, where):
    """A manifest's recorded recipe (or a training recipe its leakage.avoid_programs names) may name a
    generator by import path: verify rebuilds from the manifest and must import nothing it names."""
    sentinel = tmp_path / "SENTINEL"
    folder = tmp_path / "downloaded"
    shutil.copytree(study_build, folder)
    (folder / "evil_gen.py").write_text(_evil_generator_module(sentinel))
    man = json.loads((folder / "manifest.json").read_text())
    resolved = man["recipes"][0]["resolved"]
    if where == "recipe":
        next(iter(resolved["splits"].values()))["generator"] = "evil_gen:Gen"
    else:
        (folder / "train.yaml").write_text("name: t\nsplits:\n  a: {generator: 'evil_gen:Gen', role: train}\n")
        resolved["leakage"]["avoid_programs"] = [str(folder / "train.yaml")]
    (folder / "manifest.json").write_text(json.dumps(man, indent=2))
    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(folder))
    sys.modules.pop("evil_gen", None)
    res = CliRunner().invoke(cli, ["verify", "."])
    sys.modules.pop("evil_gen", None)
    assert not sentinel.exists(), sentinel.read_text()
    assert res.exit_code == 2 and "import path" in res.output, res.output


@pytest.mark.parametrize("spec", SPECS)
def test_a_recipe_object_naming_a_library_is_refused_before_any_load(poison, spec):
    """A recipe given as data (a request's, a dict in code) loads no library it names: /tasks
    answers 4xx, and the API asks for library= (only a recipe file the user gives loads its own)."""
    pytest.importorskip("starlette")
    import opgen
    from opgen.recipe import RecipeError
    from opgen.serve import Service, create_app

    recipe = {"name": "r", "library": _spec(poison, spec),
              "splits": {"a": {"generator": "atomic", "role": "train", "options": {"per_op": 1}}}}
    status, reply = _asgi_post(create_app(Service(allow_weak_sandbox=True)), "/tasks", {"recipe": recipe, "n": 1})
    assert 400 <= status < 500 and "library" in reply["error"], (status, reply)
    with pytest.raises(RecipeError, match="library="):
        opgen.create_dataset(recipe, "a")
    assert not poison.sentinel.exists(), poison.sentinel.read_text()


@pytest.mark.slow
def test_a_store_that_cannot_be_written_is_one_warning_and_the_build_completes(tmp_path, monkeypatch):
    monkeypatch.setenv("OPGEN_HOME", "/dev/null/not-a-folder")
    (tmp_path / "work").mkdir()
    U.write_six(tmp_path / "work")
    (tmp_path / "work" / "r.yaml").write_text("name: r\nlibrary: six.yaml\nsplits:\n"
                                             "  a: {generator: atomic, role: train, options: {per_op: 1}}\n")
    done = _run(["build", "r.yaml", "--out", str(tmp_path / "out"), "--no-progress"], tmp_path / "work",
                Path("/dev/null/not-a-folder"))
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("warning: cannot register library 'six'")
    assert "opgen ops add" in done.stderr and (tmp_path / "out" / "library.yaml").is_file()
