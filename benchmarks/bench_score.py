"""Program-grading throughput with full isolation, side by side with one fresh `python` per program.

    python benchmarks/bench_score.py [--n 2000] [--baseline-n 200] [--workers 2] [--repeat 3]
                                     [--mix-timeouts 0.001] [--cli-n 20000]

Typical RA answers: gold recall-then-assemble answers of depth 2-4 trees (2-4 distinct operators),
graded by ``opgen.score.grade`` through the warm sandbox pool (one isolated child per response,
recall probes included), from as many threads as the pool has workers x 2. The baseline runs each
program in a fresh ``python -I`` subprocess (the common approach), the same number in parallel.
Prints programs/s, CPU per program, the ratio (medians over ``--repeat`` rounds, each round
measuring both side by side), whether the targets are met, and peak RSS.

The static path (opgen/score/static.py: programs of library code only, graded without running)
is measured in the same rounds: (a) the same canonical answers with it on, (b) a realistic mix —
70% canonical, 10% chimeras (another operator's body under a name), 10% correct but with a
renamed variable (graded statically since the alpha-renamed recalls), 10% broken (syntax errors, exceptions and, at
``--mix-timeouts`` of all responses, programs that loop until the wall clock stops them) — and
(c) sandbox only (``static=False``: the canonical answers, as before the static path); (d) 100
honest responses alone and with one of each stall shape of tests/hostile/ mixed in (the compiler's
quadratic keyword arguments and f-string fields, a folded huge ``//``, a megabyte of statements):
the wall clock against the 100 alone plus that response's own budget (target within 1.5x); and (e)
the whole ``opgen score`` command on ``--cli-n`` canonical answers, start to exit (target >= 5,000/s).
``--alpha`` measures only the mix before/after the static path's alpha-renamed recalls (the same
rows, the same sandbox, alternating rounds in one run): the share that still needs a child and
responses/s.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from opgen import expr as E
from opgen import ops
from opgen.score import batch as B
from opgen.score import grade
from opgen.score.sandbox import Sandbox
from opgen.score.settings import GradeSettings


def _param(p: ops.Param, rng: random.Random) -> object:
    if p.kind == "int":
        return rng.randint(p.lo, p.hi)
    if p.kind == "choice":
        return rng.choice(p.choices)
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(p.lo, p.hi)))


def _tree(depth: int, rng: random.Random) -> E.Expr:
    if depth == 0:
        return E.Var()
    op = rng.choice(ops.OPERATORS)
    params = tuple(_param(p, rng) for p in op.params)
    args = [_tree(depth - 1, rng)] + [_tree(rng.randint(0, depth - 1), rng) for _ in range(op.n_inputs - 1)]
    return E.call(op.id, *args, params=params)


def typical_rows(n: int, seed: int = 0) -> list[tuple[dict, str]]:
    """(ground truth, gold RA answer) pairs: depth 2-4, 2-4 distinct operators, outputs <= 1,000 chars."""
    rng = random.Random(seed)
    rows: list[tuple[dict, str]] = []
    while len(rows) < n:
        tree = _tree(rng.randint(2, 4), rng)
        used = E.ops_used(tree)
        if not 2 <= len(used) <= 4:
            continue
        x = "".join(rng.choice("abcdeHIJK xyz") for _ in range(rng.randint(3, 10)))
        try:
            with E.recursion_headroom():
                out = E.evaluate(tree, x, max_len=1000)
        except (E.OutputTooLong, RecursionError):
            continue
        gt = {"mode": "program", "tasks": [{"entry": "main_solution", "expr": E.render(tree), "input": x,
                                             "output": out, "ops": list(used), "depth": E.depth(tree)}]}
        recalls = "\n".join(f"Recall {o}: {ops.get(o).gloss}\n```python\n{ops.get(o).source}```\n" for o in used)
        code = "\n".join(ops.get(o).source for o in used) + "\n" + E.render_program(tree)
        rows.append((gt, f"{recalls}\nAssemble:\n```python\n{code}\n```"))
    return rows


def _renamed_var(source: str) -> str:
    """The operator's source with its first parameter renamed: the same function, another AST."""
    import ast

    tree = ast.parse(source)
    old = tree.body[0].args.args[0].arg
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.arg == old:
            node.arg = "text"
        elif isinstance(node, ast.Name) and node.id == old:
            node.id = "text"
    return ast.unparse(tree) + "\n"


def mixed_rows(rows: list[tuple[dict, str]], timeouts: float, seed: int = 1) -> list[tuple[dict, str]]:
    """(b): 70% canonical, 10% chimeras, 10% renamed variables, 10% broken (``timeouts`` of all loop)."""
    rng = random.Random(seed)
    out = []
    for gt, answer in rows:
        used = gt["tasks"][0]["ops"]
        victim = rng.choice(used)
        src = ops.get(victim).source
        u = rng.random()
        if u < 0.7:
            out.append((gt, answer))
        elif u < 0.8:
            same = [o for o in ops.OPERATORS if o.arity == ops.get(victim).arity and o.id != victim]
            other = rng.choice(same).source
            out.append((gt, answer.replace(src, f"def {victim}(" + other.split("(", 1)[1])))
        elif u < 0.9:
            out.append((gt, answer.replace(src, _renamed_var(src))))
        elif u < 0.9 + timeouts:
            out.append((gt, answer.replace("def main_solution(x):\n", "def main_solution(x):\n    while True:\n"
                                                                        "        pass\n")))
        elif rng.random() < 0.5:
            out.append((gt, answer.replace("def main_solution(x):", "def main_solution(x)")))  # syntax
        else:  # an exception inside a recalled body
            out.append((gt, answer.replace(src, src.replace('"""\n', '"""\n    [][0]\n', 1))))
    return out


def _cpu(which: str = "all") -> float:
    # The scorer's own CPU plus that of every reaped descendant (workers are reaped when the pool closes).
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    scorer, sandbox = own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime
    return {"all": scorer + sandbox, "scorer": scorer}[which]


def _proc_cpu(pids: list[int]) -> float:
    """CPU seconds so far of the running processes ``pids`` (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def bench_sandbox(rows: list[tuple[dict, str]], workers: int, diagnose: bool, static: bool = False,
                  label: str = "", processes: int = 0) -> tuple[float, float, str, int]:
    """(programs/s wall clock, CPU seconds per program over all processes, isolation level, scored 1.0).
    ``processes`` > 0: the batch goes to ``grade_many`` with that many grading processes (whose
    CPU is counted with the sandbox's: they are reaped when the pool closes)."""
    with Sandbox(workers=workers, timeout_s=2.0) as box:
        level = box.level
        grade(rows[0][0], rows[0][1], sandbox=box)  # warm caches (true probe outputs)
        if processes:  # start the grading processes and warm their caches, outside the timing
            B.close_pool()
            B.grade_many([B.Item(gt, a) for gt, a in rows[:128]], sandbox=box, processes=processes)
        g0 = _proc_cpu(B.pool_pids())  # the grading processes' start and warm-up, not this batch
        c0, s0, t0 = _cpu(), _cpu("scorer"), time.perf_counter()
        if processes:
            scores = [g["score"] for g in B.grade_many([B.Item(gt, a) for gt, a in rows], sandbox=box,
                                                       processes=processes,
                                                       settings=GradeSettings(diagnose=diagnose, static=static))]
        else:
            with ThreadPoolExecutor(workers * 2) as pool:
                scores = list(pool.map(lambda r: grade(r[0], r[1], sandbox=box, diagnose=diagnose,
                                                       static=static)["score"], rows))
        dt = time.perf_counter() - t0
        scorer = _cpu("scorer") - s0
        if processes:
            B.close_pool()
    # Reaped descendants: the sandbox's workers and children, and the grading processes (their whole
    # life, less what they had spent before this batch).
    cpu = _cpu() - c0 - g0
    print(f"  ({label or ('with' if diagnose else 'without') + ' diagnostics'}: {len(rows) / dt:.0f} responses/s, "
          f"scorer process {scorer / len(rows) * 1e3:.2f} ms CPU per program, sandbox workers and children "
          f"{(cpu - scorer) / len(rows) * 1e3:.2f} ms)", flush=True)
    return len(rows) / dt, cpu / len(rows), level, sum(s == 1.0 for s in scores)


class _Counting:
    """A sandbox that counts the responses it is asked to run (those the static path declined)."""

    def __init__(self, box: Sandbox):
        import threading

        self._box, self.asked, self._lock = box, 0, threading.Lock()

    def __getattr__(self, name: str) -> object:
        return getattr(self._box, name)

    def run_units(self, units):
        with self._lock:
            self.asked += 1  # one call per response (grade's one run_units)
        return self._box.run_units(units)


def bench_alpha(mix: list[tuple[dict, str]], workers: int, repeat: int) -> dict[str, tuple[float, float]]:
    """Before/after the alpha-renamed recalls (``static._alpha`` off, then on), alternating rounds
    over the same rows and sandbox: side -> (median share of responses that needed a child, median
    responses/s of ``grade_in_process`` from ``workers`` x 2 threads). In-process grading: the
    benchmark's own generated text, the tests' reference path (grade_many's grading processes run
    the installed code and cannot be switched)."""
    from opgen.score import static as S
    from opgen.score.judge import grade_in_process

    on = S._alpha
    out: dict[str, list[tuple[float, float]]] = {"before": [], "after": []}
    with Sandbox(workers=workers, timeout_s=2.0) as box:
        grade_in_process(mix[0][0], mix[0][1], sandbox=box)
        for _ in range(repeat):
            for side in ("before", "after"):
                S._alpha = (lambda stmt, entries: None) if side == "before" else on  # type: ignore[assignment]
                counting = _Counting(box)
                t0 = time.perf_counter()
                with ThreadPoolExecutor(workers * 2) as pool:
                    list(pool.map(lambda r, c=counting: grade_in_process(r[0], r[1], sandbox=c), mix))
                dt = time.perf_counter() - t0
                out[side].append((counting.asked / len(mix), len(mix) / dt))
                print(f"  (alpha {side}: {counting.asked}/{len(mix)} need a child, {len(mix) / dt:.0f} responses/s)",
                      flush=True)
        S._alpha = on
    return {side: (_median([r[0] for r in rs]), _median([r[1] for r in rs])) for side, rs in out.items()}


def bench_subprocess(rows: list[tuple[dict, str]], workers: int) -> tuple[float, float, int]:
    """The baseline: write the program with a call and a print, run a fresh interpreter, compare stdout."""
    with tempfile.TemporaryDirectory() as tmp:
        def one(i_row: tuple[int, tuple[dict, str]]) -> bool:
            i, (gt, answer) = i_row
            task = gt["tasks"][0]
            code = answer.split("Assemble:\n```python\n", 1)[1].rsplit("```", 1)[0]
            path = Path(tmp) / f"p{i}.py"
            path.write_text(code + f"\nimport json\nprint(json.dumps(main_solution({task['input']!r})))\n")
            proc = subprocess.run([sys.executable, "-I", str(path)], capture_output=True, text=True, timeout=10,
                                  cwd=tmp)
            return proc.returncode == 0 and json.loads(proc.stdout) == task["output"]

        c0, t0 = _cpu(), time.perf_counter()
        with ThreadPoolExecutor(workers) as pool:
            ok = list(pool.map(one, enumerate(rows)))
        dt = time.perf_counter() - t0
    return len(rows) / dt, (_cpu() - c0) / len(rows), sum(ok)


def page_fault_cost_us(pages: int = 20_000) -> float:
    """Microseconds per first-touch page fault on this machine: the unit cost of forking a process
    that then writes to its memory (virtual machines pay several times bare metal's)."""
    import mmap

    m = mmap.mmap(-1, pages * 4096)
    t0 = time.perf_counter()
    for i in range(0, pages * 4096, 4096):
        m[i] = 1
    dt = time.perf_counter() - t0
    m.close()
    return dt / pages * 1e6


def child_faults(rows: list[tuple[dict, str]]) -> int | None:
    """Minor page faults of one sandbox child running a typical assembled program; None where the
    child may not import ``resource`` (the import allowlist of ``full``)."""
    from opgen.score.parse import parse_program_answer
    from opgen.score.sandbox import Job

    gt, answer = rows[0]
    code = parse_program_answer(answer).code + (
        "\nimport resource\ndef _faults(x):\n    main_solution(x)\n"
        "    return str(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)\n")
    with Sandbox(workers=1) as box:
        results = box.run([Job(code, "_faults", (gt["tasks"][0]["input"],)) for _ in range(5)])
    counts = sorted(int(r.value) for r in results if r.ok)
    return counts[len(counts) // 2] if counts else None


def worker_faults(rows: list[tuple[dict, str]], n: int = 300) -> float:
    """Minor page faults of a sandbox worker per response: after each fork every page the worker
    writes faults once more (copy-on-write), so this is the worker's share of a child's cost."""
    from opgen.score.parse import parse_program_answer
    from opgen.score.sandbox import Unit

    def minflt(pid: int) -> int:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[7])

    units = [Unit(parse_program_answer(a).code, (("main_solution", (gt["tasks"][0]["input"],)),))
             for gt, a in rows[:50]]
    with Sandbox(workers=1) as box:
        serving = box._all[0].pid  # the serving worker's host pid (its hello says it)
        assert serving > 1, "the serving worker's pid is not known here"
        for u in units:
            box.run_units([u])
        before = minflt(serving)
        for i in range(n):
            box.run_units([units[i % len(units)]])
        return (minflt(serving) - before) / n


STALL_KINDS = ("compiler_many_keywords", "compiler_fstring_fields", "optimizer_folds_huge_floordiv",
               "structure_walk_megabyte")


def stall_text(kind: str) -> str:
    """The response of a stall shape of tests/hostile/ (built by the file's program())."""
    namespace: dict = {}
    path = Path(__file__).resolve().parents[1] / "tests" / "hostile" / f"{kind}.py"
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return f"```python\n{namespace['program']()}\n```"


def bench_stalls(rows: list[tuple[dict, str]], workers: int, processes: int) -> list[tuple[str, float, float, str]]:
    """(d) 100 honest responses alone, then with one stall shape mixed in (the middle): per shape,
    (kind, wall with it, wall alone + its own budget, its error class)."""
    honest = [B.Item(gt, a) for gt, a in rows[:100]]
    out = []
    with Sandbox(workers=workers, timeout_s=2.0) as box:
        B.close_pool()
        B.grade_many(honest, sandbox=box, processes=processes)  # start and warm the grading processes
        t0 = time.perf_counter()
        B.grade_many(honest, sandbox=box, processes=processes)
        alone = time.perf_counter() - t0
        for kind in STALL_KINDS:
            items = honest[:50] + [B.Item(rows[0][0], stall_text(kind))] + honest[50:]
            B.grade_many(honest[:4], sandbox=box, processes=processes)  # every process warm again
            t0 = time.perf_counter()
            got = B.grade_many(items, sandbox=box, processes=processes)
            dt = time.perf_counter() - t0
            out.append((kind, dt, alone + B.RESPONSE_CPU_S, got[50]["error"]))
            print(f"  ((d) {kind}: {dt:.2f} s with it, {alone:.2f} s alone, graded {got[50]['error']!r})", flush=True)
        B.close_pool()
    return out


def write_score_inputs(rows: list[tuple[dict, str]], folder: Path) -> tuple[Path, Path]:
    """A parquet file of the rows and a responses file of their answers, for ``opgen score``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data, responses = folder / "d.parquet", folder / "r.jsonl"
    # The extra_info an opgen-built row carries (its operators and depth: the report's scopes
    # come from them; a foreign file without them has its programs parsed, ~0.05 ms a row).
    pq.write_table(pa.Table.from_pylist([{"data_source": "opgen/bench", "reward_model": {
        "style": "rule", "ground_truth": json.dumps(gt)}, "extra_info": {
            "answer_format": "ra", "split": "bench", "ops": gt["tasks"][0]["ops"],
            "depth": gt["tasks"][0]["depth"]}} for gt, _ in rows]), data)
    responses.write_text("".join(json.dumps({"index": i, "response": a}) + "\n" for i, (_, a) in enumerate(rows)))
    return data, responses


def bench_cli(n: int) -> tuple[float, float, float]:
    """(e) ``opgen score`` end to end on ``n`` canonical answers (one row each, one response): what
    a user waits for, from the command's start to its exit. (responses/s, wall s, CPU s of the
    command and everything it started)."""
    rows = typical_rows(n, seed=5)
    with tempfile.TemporaryDirectory() as tmp:
        data, responses = write_score_inputs(rows, Path(tmp))
        opgen = Path(sys.executable).with_name("opgen")
        argv = [str(opgen)] if opgen.exists() else [sys.executable, "-m", "opgen"]
        c0, t0 = _cpu(), time.perf_counter()
        proc = subprocess.run([*argv, "score", "--data", str(data), "--responses", str(responses),
                               "--out", str(Path(tmp) / "out")], capture_output=True, text=True)
        dt = time.perf_counter() - t0
        cpu = _cpu() - c0
        if proc.returncode != 0:
            raise SystemExit(f"opgen score failed ({proc.returncode}): {proc.stderr[-2000:]}")
    print(f"  ((e) opgen score, {n} canonical answers: {n / dt:.0f} responses/s, {dt:.2f} s wall, {cpu:.2f} s CPU)",
          flush=True)
    return n / dt, dt, cpu


def against_options(doc: str, n: int) -> argparse.ArgumentParser:
    """The command line of a benchmark of this tree against another checkout (``--against DIR``),
    over ``--n`` rows; the benchmark adds its own rounds and workers."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--against", type=Path, required=True, help="another opgen checkout (the 'before' tree)")
    ap.add_argument("--n", type=int, default=n)
    return ap


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000, help="responses for the sandbox runs")
    ap.add_argument("--baseline-n", type=int, default=200, help="programs for the subprocess baseline")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1, help="rounds of all the runs; medians are printed")
    ap.add_argument("--processes", type=int, default=os.cpu_count() or 1,
                    help="grading processes for the grade_many runs of (a) and (b)")
    ap.add_argument("--mix-timeouts", type=float, default=0.001,
                    help="share of (b)'s responses that loop until the wall clock (2 s) stops them")
    ap.add_argument("--cli-n", type=int, default=20_000, help="canonical answers for (e), opgen score end to end")
    ap.add_argument("--alpha", action="store_true",
                    help="only the mix before/after the alpha-renamed recalls (share needing a child, responses/s)")
    args = ap.parse_args()
    rows = typical_rows(args.n)
    mix = mixed_rows(rows, args.mix_timeouts)
    if args.alpha:
        load0 = os.getloadavg()
        sides = bench_alpha(mix, args.workers, args.repeat)
        import re

        renamed = sum(bool(re.search(r"def func_[0-9]+\(text", a)) for _, a in mix)
        print(f"mix of {len(mix)} ({renamed} with a renamed variable), medians of {args.repeat} alternating rounds")
        for side, (share, rate) in sides.items():
            print(f"alpha-renamed recalls {side:6s}: {share:6.1%} need a child, {rate:7.0f} responses/s")
        print(f"load average before {load0}, after {os.getloadavg()}")
        return
    runs: dict[str, list[tuple]] = {"full": [], "bare": [], "base": [], "a": [], "b": [], "a1": [], "b1": [],
                                    "b0": []}
    clean = mixed_rows(rows, 0.0)
    for round_ in range(args.repeat):
        # Side by side in every round, so that the ratio compares runs under the same load.
        runs["a"].append(bench_sandbox(rows, args.workers, diagnose=True, static=True, processes=args.processes,
                                       label=f"(a) static, canonical, grade_many on {args.processes} processes"))
        runs["a1"].append(bench_sandbox(rows, args.workers, diagnose=True, static=True,
                                        label="(a) static, canonical, grade() from threads"))
        runs["full"].append(bench_sandbox(rows, args.workers, diagnose=True, label="(c) sandbox only, canonical"))
        runs["b"].append(bench_sandbox(mix, args.workers, diagnose=True, static=True, processes=args.processes,
                                       label=f"(b) static, mix, grade_many on {args.processes} processes"))
        runs["b0"].append(bench_sandbox(clean, args.workers, diagnose=True, static=True, processes=args.processes,
                                        label="(b) static, mix without timeouts, grade_many"))
        runs["b1"].append(bench_sandbox(mix, args.workers, diagnose=True, static=True,
                                        label="(b) static, mix, grade() from threads"))
        runs["bare"].append(bench_sandbox(rows, args.workers, diagnose=False))
        runs["base"].append(bench_subprocess(rows[: args.baseline_n], args.workers))
        if args.repeat > 1:
            full, base = runs["full"][-1], runs["base"][-1]
            print(f"round {round_ + 1}: {full[0]:.1f} programs/s ({full[1] * 1e3:.2f} ms CPU), baseline "
                  f"{base[0]:.1f} programs/s ({base[1] * 1e3:.2f} ms CPU), ratio {full[0] / base[0]:.1f}x")
    stalls = bench_stalls(rows, args.workers, args.processes)
    cli_rate, cli_wall, cli_cpu = bench_cli(args.cli_n)
    full, full_cpu = (_median([r[i] for r in runs["full"]]) for i in (0, 1))
    rate_a, cpu_a = (_median([r[i] for r in runs["a"]]) for i in (0, 1))
    rate_b, cpu_b = (_median([r[i] for r in runs["b"]]) for i in (0, 1))
    rate_a1, cpu_a1 = (_median([r[i] for r in runs["a1"]]) for i in (0, 1))
    rate_b1, cpu_b1 = (_median([r[i] for r in runs["b1"]]) for i in (0, 1))
    rate_b0, cpu_b0 = (_median([r[i] for r in runs["b0"]]) for i in (0, 1))
    n_loops = sum("while True" in a for _, a in mix)
    bare, bare_cpu = (_median([r[i] for r in runs["bare"]]) for i in (0, 1))
    base, base_cpu = (_median([r[i] for r in runs["base"]]) for i in (0, 1))
    ratio = _median([f[0] / b[0] for f, b in zip(runs["full"], runs["base"])])
    level, ok_full = runs["full"][-1][2], runs["full"][-1][3]
    ok_bare, ok_base = runs["bare"][-1][3], runs["base"][-1][2]
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0]
    rss_self = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rss_kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"isolation: {level}   workers: {args.workers}   typical RA answers: depth 2-4, 2-4 operators"
          + (f"   medians of {args.repeat} rounds" if args.repeat > 1 else ""))
    print(f"machine: {cores} CPUs, load average {load:.2f} at the end (other processes share the CPUs)")
    print("                                          wall clock       CPU per program   CPU-bound capacity")
    table = (("(a) static path, canonical, grade_many", rate_a, cpu_a, runs["a"][-1][3], len(rows)),
             ("(a) static path, canonical, threads", rate_a1, cpu_a1, runs["a1"][-1][3], len(rows)),
             ("(b) static path, mix, grade_many", rate_b, cpu_b, runs["b"][-1][3], len(mix)),
             ("(b) mix without timeouts, grade_many", rate_b0, cpu_b0, runs["b0"][-1][3], len(clean)),
             ("(b) static path, mix, threads", rate_b1, cpu_b1, runs["b1"][-1][3], len(mix)),
             ("(c) sandbox only, canonical answers", full, full_cpu, ok_full, len(rows)),
             ("sandbox, grade without diagnostics", bare, bare_cpu, ok_bare, len(rows)),
             ("baseline, fresh python per program", base, base_cpu, ok_base, args.baseline_n))
    for label, rate, cpu, ok, n in table:
        print(f"{label:40s} {rate:8.1f} programs/s  {cpu * 1e3:7.2f} ms  {cores / cpu:10.1f} programs/s"
              f"   ({ok}/{n} correct)")
    print(f"speed-up vs baseline (wall clock, same round): {ratio:.1f}x with diagnostics, {bare / base:.1f}x without")
    print(f"speed-up vs baseline (CPU per program): {base_cpu / full_cpu:.1f}x with diagnostics, "
          f"{base_cpu / bare_cpu:.1f}x without")
    print(f"targets (>= 1,000 programs/s and >= 30x the baseline, with diagnostics): "
          f"{'met' if full >= 1000 and ratio >= 30 else 'NOT met'} ({full:.0f} programs/s, {ratio:.1f}x)")
    # The loops' own budgets: each holds a sandbox worker (and a CPU) for the 2 s timeout.
    budget = n_loops * 2.0 / args.workers
    rate_b_net = len(mix) / max(len(mix) / rate_b - budget, 1e-9)
    print(f"static path targets: (a) >= 10,000/s {'met' if rate_a >= 10_000 else 'NOT met'} ({rate_a:.0f}/s), "
          f"(b) >= 3,000/s {'met' if rate_b >= 3_000 else 'NOT met'} ({rate_b:.0f}/s; {n_loops} loops = "
          f"{args.mix_timeouts:.1%} of it, each holding a worker 2 s: {budget:.1f} s of the wall clock are their "
          f"own budgets, {rate_b_net:.0f}/s without them; {rate_b0:.0f}/s with no loops at all), "
          f"(c) sandbox only {full:.0f}/s")
    for kind, dt, allowed, error in stalls:
        print(f"(d) 100 honest + {kind:32s} {dt:6.2f} s vs {allowed:6.2f} s (alone + its {B.RESPONSE_CPU_S:g} s "
              f"budget): {dt / allowed:.2f}x, target <= 1.5x {'met' if dt <= 1.5 * allowed else 'NOT met'}; "
              f"graded {error!r}")
    print(f"(e) opgen score end to end, {args.cli_n} canonical answers: {cli_rate:.0f} responses/s ({cli_wall:.1f} s "
          f"wall, {cli_cpu:.1f} s CPU), target >= 5,000/s {'met' if cli_rate >= 5000 else 'NOT met'}")
    print(f"load average at the end: {os.getloadavg()}")
    print(f"peak RSS: scorer {rss_self:.0f} MiB, largest child {rss_kids:.0f} MiB")
    faults = child_faults(rows)
    child = "n/a (the import allowlist refuses resource)" if faults is None else f"{faults}"
    print(f"one sandbox child: {child} minor page faults, its worker {worker_faults(rows):.0f} per "
          f"response; a page fault here costs {page_fault_cost_us():.1f} us")


if __name__ == "__main__":
    main()
