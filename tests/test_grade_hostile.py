"""Responses aimed at the grader itself: a structure check fooled by a later binding, a recall
verdict poisoned through the cache, nesting and lone surrogates that crashed the run, and the native
namespace (func_0 as the native benchmark shows it, calling gcd with no import)."""

from __future__ import annotations

import json
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_grade import ra_answer, truth

from opgen import ops
from opgen.reward import KEYS, compute_score
from opgen.score import diagnose as D
from opgen.score import grade
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
