"""Responses aimed at the grader itself: a structure check fooled by a later binding, a recall
verdict poisoned through the cache, nesting and lone surrogates that crashed the run, and the native
namespace (func_0 as the native benchmark shows it, calling gcd with no import)."""

from __future__ import annotations

import json
import uuid
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_grade import ra_answer, truth

from opgen import ops
from opgen.reward import KEYS, compute_score
from opgen.score import diagnose as D
from opgen.score import grade
from opgen.score.judge import ERRORS, MAX_RESPONSE_CHARS, grade_in_process
from opgen.score.sandbox import Sandbox

GOLD = truth(("func_5(func_3(x), 'ab')", "hostile"))
OUTPUT = GOLD["tasks"][0]["output"]


@pytest.fixture(scope="module")
def box():
    with Sandbox(workers=2, timeout_s=2.0) as b:
        yield b


# ------------------------------------------------------------ the structure check follows the called binding

REBINDINGS = {
    "lambda": f"main_solution = lambda x: {OUTPUT!r}\n",
    "reassigned": f"def other(x):\n    return {OUTPUT!r}\n\nmain_solution = other\n",
    "redefined_by_class": f"class main_solution:\n    def __new__(cls, x):\n        return {OUTPUT!r}\n",
    "globals": f"globals()['main_solution'] = lambda x: {OUTPUT!r}\n",
    "global_statement": f"def hook():\n    global main_solution\n    main_solution = lambda x: {OUTPUT!r}\n\nhook()\n",
    "dunder_globals": f"func_3.__globals__['main_solution'] = lambda x: {OUTPUT!r}\n",
    "for_loop": f"for main_solution in [lambda x: {OUTPUT!r}]:\n    pass\n",
    "import_alias": "from os.path import basename as main_solution\n",
    "walrus": f"(main_solution := lambda x: {OUTPUT!r})\n",
    # NFKC folds fullwidth letters into ``globals``: the text's fast path must not miss it.
    "fullwidth_globals": f"\uff47\uff4c\uff4f\uff42\uff41\uff4c\uff53()['main_solution'] = lambda x: {OUTPUT!r}\n",
}


@pytest.mark.parametrize("kind", sorted(REBINDINGS))
def test_structure_follows_the_binding_that_is_called(box, kind):
    honest = ra_answer(GOLD)
    assert grade(GOLD, honest, sandbox=box, policy="output_structure")["score"] == 1.0
    # The checked def is the reference expression, but what runs is bound after it.
    attack = honest[:honest.rindex("```")] + "\n" + REBINDINGS[kind] + "```"
    g = grade(GOLD, attack, sandbox=box, policy="output_structure")
    assert g["structure_ok"] is False, kind
    assert g["score"] == 0.0, kind


def test_decorated_entry_fails_structure(box):
    answer = ra_answer(GOLD).replace("def main_solution(x):",
                                     f"def d(f):\n    return lambda x: {OUTPUT!r}\n\n@d\ndef main_solution(x):")
    g = grade(GOLD, answer, sandbox=box, policy="output_structure")
    assert g["acc"] == 1.0 and g["structure_ok"] is False and g["score"] == 0.0


def test_honest_mentions_of_the_entry_still_pass(box):
    answer = ra_answer(GOLD).replace("def main_solution(x):", "# main_solution composes the two\ndef main_solution(x):")
    assert grade(GOLD, answer, sandbox=box, policy="output_structure")["score"] == 1.0


def test_a_redefinition_as_a_def_is_followed():
    code = "def main_solution(x):\n    return x\n\ndef main_solution(x):\n    return func_3(x)\n"
    assert D.structure_matches(code, "main_solution", "func_3(x)")
    assert not D.structure_matches(code, "main_solution", "x")


# ------------------------------------------------------------ recall verdicts cannot be poisoned


def test_forged_probe_results_do_not_reach_another_responses_verdict(box):
    # A text no other test has judged, so the cache holds nothing for it yet.
    tag = uuid.uuid4().hex
    canonical = ops.get("func_3").source.replace('characters in the string."""', f'characters. {tag}"""')
    # The first block patches a builtin the second one uses, so the second block's probes (same
    # child) return wrong values: that verdict holds for this response only.
    patcher = ("import builtins\nbuiltins.sorted = lambda s, **k: list(s)[::-1]\n\n" + ops.get("func_5").source)
    attack = ra_answer(GOLD, {"func_5": patcher, "func_3": canonical})
    attack = attack.replace(f"Recall func_3: {ops.get('func_3').gloss}", "Recall func_3: sort", 1)
    recalls = grade(GOLD, attack, sandbox=box)["recalls"]
    assert [r["op"] for r in recalls] == ["func_5", "func_3"]  # the patcher's block comes first
    assert {r["op"]: r["verdict"] for r in recalls}["func_3"] != "correct"  # what the poisoned child reported
    honest = ra_answer(GOLD, {"func_3": canonical})
    verdicts = {r["op"]: r["verdict"] for r in grade(GOLD, honest, sandbox=box)["recalls"]}
    assert verdicts["func_3"] == "correct", verdicts


def test_caches_are_bounded_in_bytes():
    from opgen.score import sandbox as S
    from opgen.score.cache import BoundedCache

    c: BoundedCache[str, str] = BoundedCache(10_000)
    for i in range(1000):
        c.put(str(i), "v", 100)
    assert c.bytes <= 10_000 and len(c) == 100
    c.put("huge", "v", 5_000)  # over a sixteenth of the bound: not kept
    assert c.get("huge") is None
    for i in range(300):
        S._compile_chunks(f"X = {i}\n\ndef f_{i}():\n    return '{'y' * 2000}'\n")
    assert S._CHUNKS.bytes <= S.CHUNK_CACHE_BYTES
    assert D._VERDICTS.bytes <= D.VERDICT_CACHE_BYTES


# ------------------------------------------------------------ nesting and lone surrogates


def _at_depth(depth, fn):
    return fn() if depth == 0 else _at_depth(depth - 1, fn)


@pytest.mark.parametrize("n", [150, 500, 980, 990, 5000])
def test_deeply_nested_json_is_an_error_class_at_any_stack_depth(n):
    fwd = truth(("func_3(x)", "abc"), mode="forward")
    for response in ('{"output": ' + "[" * n + "]" * n + "}", '{"output": ' + '{"a": ' * n + "1" + "}" * n + "}"):
        for depth in (0, 40, 400):
            g = _at_depth(depth, lambda r=response: grade(fwd, r))
            assert g["error"] == "nesting" and g["score"] == 0.0, (n, depth, g["error"])
    assert grade(fwd, '{"output": "abc"}')["score"] == 1.0


def test_shallow_nested_json_still_graded():
    fwd = {"ref_output": [[["x"]]]}
    assert grade(fwd, '{"output": [[["x"]]]}')["score"] == 1.0
    assert grade(fwd, "[" * 150 + '{"output": [[["x"]]]}')["score"] == 1.0


def test_deep_program_nesting_never_raises(box):
    for deep in ("(" * 990 + "x" + ")" * 990, "x" + " + x" * 990, "-" * 990 + "1", "[" * 990 + "]" * 990):
        g = grade(GOLD, ra_answer(GOLD).replace("return func_5(func_3(x), 'ab')", f"return {deep}"), sandbox=box)
        assert g["score"] == 0.0


# ------------------------------------------------------------ the native namespace

NATIVE_FUNC_0 = ops.get("func_0").source.replace("    from math import gcd\n", "")
NATIVE_GT = truth(("func_0(func_3(x))", "hello world"), ("func_21(func_0(x))", "Abcdef"))


def native_text_answer(gt: dict) -> str:
    return ra_answer(gt, {"func_0": NATIVE_FUNC_0})


def test_native_func_0_text_is_the_shown_source_without_its_import():
    assert "gcd(" in NATIVE_FUNC_0 and "import" not in NATIVE_FUNC_0
    assert D.native_imports() == (("math", "gcd"),)


def test_native_text_strict_is_missing_import_native_scores_one(box):
    strict = grade(NATIVE_GT, native_text_answer(NATIVE_GT), sandbox=box)
    verdicts = {r["op"]: r["verdict"] for r in strict["recalls"]}
    assert verdicts["func_0"] == "missing_import", strict["recalls"]
    assert all(v == "correct" for op, v in verdicts.items() if op != "func_0")
    assert strict["score"] == 0.0 and strict["error"] == "missing_import"
    assert strict["recall"]["missing_import"] == 1 and strict["recall"]["wrong_body"] == 0
    native = grade(NATIVE_GT, native_text_answer(NATIVE_GT), sandbox=box, namespace="native")
    assert native["score"] == 1.0 and native["error"] == ""
    assert {r["op"]: r["verdict"] for r in native["recalls"]}["func_0"] == "correct"
    # The gold answer (func_0 with its import) scores 1 in both; a truly wrong body stays wrong_body.
    for namespace in ("strict", "native"):
        assert grade(NATIVE_GT, ra_answer(NATIVE_GT), sandbox=box, namespace=namespace)["score"] == 1.0
    broken = NATIVE_FUNC_0.replace("multiplier += 2", "multiplier += 1")
    g = grade(NATIVE_GT, ra_answer(NATIVE_GT, {"func_0": broken}), sandbox=box)
    assert {r["op"]: r["verdict"] for r in g["recalls"]}["func_0"] in ("wrong_body", "missing_import")


def test_compute_score_namespace_kwarg_keeps_the_key_set():
    answer = native_text_answer(NATIVE_GT)
    strict = compute_score("opgen", answer, json.dumps(NATIVE_GT))
    native = compute_score("opgen", answer, json.dumps(NATIVE_GT), namespace="native")
    other = compute_score("opgen", "no answer", json.dumps(NATIVE_GT))
    assert tuple(strict) == tuple(native) == tuple(other) == KEYS
    assert strict["score"] == 0.0 and strict["recall_missing_import"] == 1.0 and strict["error"] == "missing_import"
    assert native["score"] == 1.0 and native["recall_missing_import"] == 0.0
    with pytest.raises(ValueError, match="namespace"):
        compute_score("opgen", answer, json.dumps(NATIVE_GT), namespace="loose")


# ------------------------------------------------------------ end to end through `opgen score`


def _table(path, gts):
    pq.write_table(pa.table({"data_source": ["opgen"] * len(gts),
                             "reward_model": [{"style": "rule", "ground_truth": json.dumps(g)} for g in gts],
                             "extra_info": [{"split": "t", "depth": 2} for _ in gts]}), path)


def _score(cli, runner, tmp_path, gts, responses, *extra):
    _table(tmp_path / "d.parquet", gts)
    rpath = tmp_path / "r.jsonl"
    rpath.write_text("".join(json.dumps({"index": i, "response": r}) + "\n" for i, r in enumerate(responses)))
    out = tmp_path / ("out" + "".join(extra))
    res = runner.invoke(cli, ["score", "--data", str(tmp_path / "d.parquet"), "--responses", str(rpath),
                              "--out", str(out), "--workers", "1", "--no-plots", *extra])
    return res, out


def test_opgen_score_namespace_and_warning(cli, runner, tmp_path):
    gts = [NATIVE_GT] * 3
    answers = [native_text_answer(NATIVE_GT)] * 3
    res, out = _score(cli, runner, tmp_path, gts, answers)
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["namespace"] == "strict"
    assert summary["missing_import"] == {"programs": 3, "responses": 3, "rate": 1.0, "recall_blocks": 3}
    assert summary["errors"] == {"missing_import": 3}
    assert "--namespace native" in res.output
    res, out = _score(cli, runner, tmp_path, gts, answers, "--namespace", "native")
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["overall"]["acc"] == 1.0 and summary["missing_import"]["responses"] == 0
    assert "--namespace native" not in res.output


def test_opgen_score_survives_lone_surrogates_and_deep_nesting(cli, runner, tmp_path):
    surrogate = "```python\ndef main_solution(x):\n    raise ValueError('bad \\ud800 text')\n```"
    deep = '{"output": ' + "[" * 990 + "]" * 990 + "}"
    fwd = truth(("func_3(x)", "abc"), mode="forward")
    gts = [GOLD, GOLD, fwd, fwd]
    res, out = _score(cli, runner, tmp_path, gts, [surrogate, ra_answer(GOLD), deep, '{"output": "abc"}'])
    assert res.exit_code == 0, res.output
    raw = (out / "scores.jsonl").read_bytes()
    raw.decode("utf-8")  # valid UTF-8
    scores = [json.loads(line) for line in raw.decode("utf-8").splitlines()]
    assert [s["score"] for s in scores] == [0.0, 1.0, 0.0, 1.0]
    assert scores[0]["error"] == "exception" and "\ud800" in scores[0]["tasks"][0]["detail"]
    assert scores[2]["error"] == "nesting"
    json.loads((out / "summary.json").read_text(encoding="utf-8"))



def test_megabyte_blank_runs_are_graded_quickly(box):
    import time

    for response in ("Recall func_3:" + " " * 990_000 + "x\n" + ra_answer(GOLD),
                     "```" + " \t" * 495_000 + "x y\n" + ra_answer(GOLD)):
        t0 = time.monotonic()
        g = grade(GOLD, response, sandbox=box)
        assert time.monotonic() - t0 < 10.0  # the old regexes took minutes on these
        assert g["score"] == 1.0


# ------------------------------------------------------------ every entry point is total (issue #22)


def _hostile(kind: str) -> str:
    from pathlib import Path

    from test_hostile import load

    code, _ = load(kind, Path("/nonexistent"))
    return f"```python\n{code}\n```"


def _huge_int_answer() -> str:
    honest = ra_answer(GOLD)
    return honest.replace("def main_solution(x):", "def func_9(s):\n    return 0x" + "f" * 4_000
                          + "\n\ndef main_solution(x):")


def test_an_int_literal_too_long_to_print_is_graded_not_raised(box):
    # ast.dump of a > 4,300-digit int raised ValueError out of grade() (opgen score exited 1)
    g = grade(GOLD, _huge_int_answer(), sandbox=box)
    assert g["score"] == 1.0 and g["error"] == ""  # func_9 is not called: the program is right
    from opgen.reward import compute_score_batch

    got = compute_score_batch(["d"] * 3, [_huge_int_answer(), ra_answer(GOLD), "x"], [json.dumps(GOLD)] * 3)
    assert [r["score"] for r in got] == [1.0, 1.0, 0.0]


HOSTILE_TEXTS = {
    "huge_int": _huge_int_answer(),
    "too_large": "```python\ndef main_solution(x):\n    return x\n```" + " " * 1_000_001,
    "nul_bytes": "```python\ndef main_solution(x):\n    return x\0\n```",
    "lone_surrogate": "```python\ndef main_solution(x):\n    return '\udc80'\n```",
    "deep_brackets": "```python\ndef main_solution(x):\n    return " + "[" * 5_000 + "]" * 5_000 + "\n```",
    "deep_json": "[" * 100_000,
    "empty": "",
}


@pytest.mark.parametrize("kind", sorted(HOSTILE_TEXTS))
def test_every_entry_point_returns_a_grade_for_any_text(box, kind):
    import asyncio

    from opgen.reward import compute_score_async, compute_score_batch, compute_score_float

    text = HOSTILE_TEXTS[kind]
    for gt in (GOLD, dict(GOLD, mode="forward")):
        g = grade(gt, text, sandbox=box)
        assert 0.0 <= g["score"] <= 1.0 and g["error"] in ERRORS
        r = compute_score("d", text, json.dumps(gt))
        assert 0.0 <= r["score"] <= 1.0 and set(r) == set(KEYS)
        assert 0.0 <= compute_score_float("d", text, json.dumps(gt)) <= 1.0
        assert asyncio.run(compute_score_async("d", text, json.dumps(gt))) == r
        assert compute_score_batch(["d"], [text], [json.dumps(gt)]) == [r]
    # bytes are text too (undecodable bytes never match an answer)
    raw = text.encode("utf-8", "surrogatepass") + b"\xff"
    assert 0.0 <= grade(GOLD, raw, sandbox=box)["score"] <= 1.0


def test_a_response_over_the_cap_is_too_large():
    g = grade(GOLD, "x" * (MAX_RESPONSE_CHARS + 1))
    assert g["error"] == "too_large" and g["score"] == 0.0 and str(MAX_RESPONSE_CHARS) in g["detail"]
    assert compute_score("d", "x" * (MAX_RESPONSE_CHARS + 1), json.dumps(GOLD))["error"] == "too_large"


def test_no_response_changes_this_process_recursion_limit(box):
    """A static answer binding a recursive operator raised the process-wide recursion limit to
    20,000 while it was evaluated; a 59,000-deep ``x.a.a...`` compiled meanwhile on another thread
    overflowed the C stack (SIGSEGV). Both now grade, and the limit never moves here."""
    import sys
    import threading

    limit = sys.getrecursionlimit()
    recursive = truth(("func_17(x)", "r" * 900))
    answers = [ra_answer(recursive)] * 4
    seen: set[int] = set()
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            seen.add(sys.getrecursionlimit())

    watcher = threading.Thread(target=watch)
    watcher.start()
    deep = _hostile("deep_attribute_chain")
    try:
        with ThreadPoolExecutor(2) as pool:
            futures = [pool.submit(grade, recursive, a, sandbox=box) for a in answers]
            futures.append(pool.submit(grade, GOLD, deep, sandbox=box))
            got = [f.result() for f in futures]
    finally:
        stop.set()
        watcher.join()
    assert seen == {limit}
    assert [g["score"] for g in got[:-1]] == [1.0] * 4
    assert got[-1]["score"] == 0.0 and got[-1]["error"] in ERRORS


def test_flags_are_booleans():
    for bad in ("false", "true", 0, None):
        with pytest.raises(ValueError, match="static"):
            grade(GOLD, ra_answer(GOLD), static=bad)
        with pytest.raises(ValueError, match="static"):
            compute_score("d", ra_answer(GOLD), json.dumps(GOLD), static=bad)


@pytest.mark.slow
def test_a_stall_costs_its_own_budget_and_its_neighbours_are_graded(box, monkeypatch):
    """30,000 distinct keyword arguments (~40 s in CPython 3.11's compiler) in a batch of honest
    answers: it is graded timeout; its grading process is replaced; the others are right."""
    from opgen.score import batch as B

    monkeypatch.setattr(B, "RESPONSE_CPU_S", 0.5)
    honest = [ra_answer(GOLD), "no code", ra_answer(GOLD).replace("func_3(x)", "x")]
    items = [B.Item(GOLD, t) for t in honest] + [B.Item(GOLD, _hostile("compiler_many_keywords"))] + \
        [B.Item(GOLD, t) for t in honest]
    got = B.grade_many(items, sandbox=box, processes=1)
    want = [grade_in_process(GOLD, t, sandbox=box) for t in honest]
    assert got[:3] == want and got[4:] == want
    assert got[3]["error"] == "timeout" and got[3]["score"] == 0.0
    assert "0.5 s of CPU" in got[3]["detail"]  # the CPU budget stopped it, not the 20 s wall clock


STALLS = ("compiler_many_keywords", "compiler_fstring_fields", "optimizer_folds_huge_floordiv",
          "structure_walk_megabyte")


@pytest.mark.slow
def test_every_stall_shape_mixed_into_a_batch(box, monkeypatch):
    from opgen.score import batch as B

    monkeypatch.setattr(B, "RESPONSE_CPU_S", 0.5)
    honest = [ra_answer(GOLD), ra_answer(GOLD).replace("func_3(x)", "x"), "no code", '{"output": "x"}'] * 5
    bad = {k: _hostile(k) for k in (*STALLS, "deep_attribute_chain", "oversized_response", "huge_int_literal")}
    items = [B.Item(GOLD, t) for t in honest]
    where = {}
    for k, text in bad.items():
        where[k] = len(items) // 2
        items.insert(where[k], B.Item(GOLD, text))
    where = {k: next(i for i, it in enumerate(items) if it.response == bad[k]) for k in bad}
    got = B.grade_many(items, sandbox=box, processes=2)
    bad_at = set(where.values())
    want = {t: grade_in_process(GOLD, t, sandbox=box) for t in set(honest)}
    assert all(got[i] == want[it.response] for i, it in enumerate(items) if i not in bad_at)
    for k in STALLS:
        assert got[where[k]]["error"] == "timeout", k
    assert got[where["oversized_response"]]["error"] == "too_large"
    assert got[where["deep_attribute_chain"]]["score"] == 0.0
    assert got[where["huge_int_literal"]]["error"] == "wrong_output"
    # the pool was not given up: the next batch is graded by grading processes as before
    assert B.grade_many(items[:5], sandbox=box, processes=2) == got[:5]


@pytest.mark.slow
def test_opgen_score_survives_hostile_responses(cli, runner, tmp_path, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from opgen.score import batch as B

    monkeypatch.setattr(B, "RESPONSE_CPU_S", 0.5)
    data = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist([{"data_source": "opgen/x", "reward_model": {
        "style": "rule", "ground_truth": json.dumps(GOLD)}, "extra_info": {"answer_format": "ra"}}]), data)
    texts = [ra_answer(GOLD), _huge_int_answer(), _hostile("compiler_many_keywords"), "x" * (MAX_RESPONSE_CHARS + 9)]
    (tmp_path / "r.jsonl").write_text(json.dumps({"index": 0, "responses": texts}) + "\n")
    out = tmp_path / "out"
    result = runner.invoke(cli, ["score", "--data", str(data), "--responses", str(tmp_path / "r.jsonl"),
                                 "--out", str(out)])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    assert [r["error"] for r in records] == ["", "", "timeout", "too_large"]
