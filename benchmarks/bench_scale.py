"""Interplay scale (issue 32): build and score 50,000 to 2,400,000 rows/responses, every process measured.

    python benchmarks/bench_scale.py [--sizes 20000,50000,500000,2400000] [--what build,score,floor]
                                     [--answers canonical,mix] [--work DIR] [--keep] [--workers 2]
                                     [--mix-timeouts 0.0001] [--floor-n 50000] [--opgen "PYTHON"]
    python benchmarks/bench_scale.py --ray --sizes 1000000      # the Ray scorer against local, rows and summaries

For each size N: ``opgen build`` of one eval split of N rows (trees, every operator, depths 1-8,
closed-book RA answers: the Interplay release's kind of row), then ``opgen score`` of N responses
to it, canonical (each row's gold answer, as ``benchmarks/bench_score.py``'s (a)) and the realistic
mix (``bench_score.mixed_rows``: 70% canonical, 10% chimeras, 10% renamed variables, 10% broken,
``--mix-timeouts`` of them loops). Printed per run: wall, CPU per row or response (the whole command;
``opgen score``'s own process alone), the peak RSS of every process (the command's own, exactly, from
its ``getrusage`` at exit; the others' ``VmHWM``, sampled every 0.5 s from /proc, by kind: build
workers, grading processes, sandbox workers), the load average, and the ratio of the whole command's
CPU per canonical response to the one-process floor (``benchmarks/floor_score.py`` on the same rows
and responses). The targets of issue 32 are checked at the end.

The rows scored at a size are N rows drawn over the largest build (a seeded uniform sample in row
order: the same mix of depths at every size; scoring reads one file); the builds themselves are
measured at every size. ``--opgen`` runs another checkout's Python (its
``-m opgen``) for the scoring runs, e.g. the code before streaming, which must not be run beyond
~100,000 responses (it holds every record: ~20 KiB a response).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

RECIPE = """\
name: bench-scale
seed: 7
splits:
  scale:
    generator: trees
    role: eval
    kind: rl
    family: scale
    prompt_format: closed_book
    answer_format: ra
    options: {{ops: all, depths: [1, 2, 3, 4, 5, 6, 7, 8], rows: {rows}}}
"""

# The command's own process reports its peak RSS and CPU at exit, where sampling /proc would miss
# the last half second. The peak is its VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss
# across execve, so a child started by a large parent (this benchmark, after writing a million
# answers) would report the parent's size as its own.
WRAPPER = """\
import atexit, json, os, resource, sys
def _report(path=os.environ["OPGEN_BENCH_SELF"]):
    use = resource.getrusage(resource.RUSAGE_SELF)
    with open("/proc/self/status") as fh:
        hwm = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
    with open(path, "w") as fh:
        json.dump({"rss_mib": hwm / 1024, "cpu": use.ru_utime + use.ru_stime}, fh)
atexit.register(_report)
sys.argv = ["opgen", *sys.argv[1:]]
from opgen.cli import main
main()
"""


def _kind(cmdline: bytes) -> str:
    text = cmdline.replace(b"\0", b" ")
    if b"opgen.score.batch" in text:
        return "grading process"
    if b"worker.py" in text or b"-I -S" in text:
        return "sandbox worker"
    return "other (workers, zygotes, children)"


def _children(pid: int) -> list[int]:
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                out += [int(c) for c in fh.read().split()]
    except OSError:
        pass
    return out


def _descendants(pid: int) -> Iterator[int]:
    todo = _children(pid)
    while todo:
        p = todo.pop()
        yield p
        todo += _children(p)


class Sampler(threading.Thread):
    """Every 0.5 s: the VmHWM (peak RSS) of each process below ``pid``, kept per process."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.stop, self.peaks = pid, threading.Event(), {}

    def run(self) -> None:
        while not self.stop.wait(0.5):
            for p in _descendants(self.pid):
                try:
                    status = Path(f"/proc/{p}/status").read_text()
                    cmd = Path(f"/proc/{p}/cmdline").read_bytes()
                except OSError:
                    continue
                hwm = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), 0)
                kind = _kind(cmd)
                self.peaks[p] = (kind, max(hwm / 1024, self.peaks.get(p, (kind, 0.0))[1]))

    def by_kind(self) -> dict[str, tuple[int, float]]:
        out: dict[str, tuple[int, float]] = {}
        for kind, mib in self.peaks.values():
            n, top = out.get(kind, (0, 0.0))
            out[kind] = (n + 1, max(top, mib))
        return out


def measure(argv: list[str], env: dict | None = None) -> dict:
    """One command run to its end: wall, CPU of it and everything it started (reaped), its own peak
    RSS and CPU (from the wrapper, when given), the other processes' peaks by kind."""
    load0 = os.getloadavg()
    self_path = Path(tempfile.mktemp(prefix="opgen-bench-self-"))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    # run from a neutral folder: ``python -c`` puts the working directory first on sys.path, and a
    # checkout's own opgen/ there would shadow the one the --opgen Python has installed
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {}), "OPGEN_BENCH_SELF": str(self_path)},
                            cwd=tempfile.gettempdir())
    sampler = Sampler(proc.pid)
    sampler.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - t0
    sampler.stop.set()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])} ... failed ({proc.returncode}): {err[-3000:]}")
    own = json.loads(self_path.read_text()) if self_path.exists() else None
    self_path.unlink(missing_ok=True)
    return {"wall": wall, "cpu": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
            "self": own, "others": sampler.by_kind(), "load": (load0, os.getloadavg()), "stdout": out,
            "stderr": err}


# ---------------------------------------------------------------- data


def build(rows: int, out: Path, workers: int, opgen: list[str]) -> dict:
    recipe = out.with_suffix(".yaml")
    recipe.write_text(RECIPE.format(rows=rows))
    shutil.rmtree(out, ignore_errors=True)
    got = measure([*opgen, "-c", WRAPPER, "build", str(recipe), "--out", str(out), "--workers", str(workers),
                   "--no-progress"])
    man = json.loads((out / "manifest.json").read_text())
    got["files"] = [out / f["path"] for f in man["splits"]["scale"]["files"]]
    return got


def spread_rows(files: list[Path], n: int, out: Path) -> Path:
    """``n`` rows drawn over the whole build (a seeded uniform sample, kept in row order), as one
    parquet file read and written batch by batch: every size holds the build's mix of depths (the
    first rows of a build, or every k-th, can all be of one depth)."""
    import numpy as np
    import pyarrow.parquet as pq

    total = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    chosen = np.sort(np.random.default_rng(n).choice(total, size=n, replace=False))
    writer = None
    seen = taken = 0
    for f in files:
        for batch in pq.ParquetFile(f, pre_buffer=False).iter_batches(batch_size=8192):
            lo, hi = np.searchsorted(chosen, [seen, seen + len(batch)])
            seen += len(batch)
            if lo == hi:
                continue
            part = batch.take(chosen[lo:hi] - (seen - len(batch)))
            if writer is None:
                writer = pq.ParquetWriter(out, part.schema)
            writer.write_batch(part)
            taken += hi - lo
    assert writer is not None and taken == n, (taken, n)
    writer.close()
    return out


def write_answers(data: Path, out: Path, kind: str, timeouts: float) -> int:
    """One response per row: its gold answer, or the realistic mix of them (bench_score.mixed_rows,
    drawn batch by batch with the batch's number as the seed)."""
    import pyarrow.parquet as pq
    from bench_score import mixed_rows

    from opgen.tokens import gold_answer_of_row

    n = 0
    with open(out, "w", encoding="utf-8") as fh:
        for b, batch in enumerate(pq.ParquetFile(data, pre_buffer=False).iter_batches(batch_size=4096,
                                                                     columns=["reward_model", "extra_info"])):
            rows = batch.to_pylist()
            pairs = [(json.loads(r["reward_model"]["ground_truth"]), gold_answer_of_row(r)) for r in rows]
            if kind == "mix":
                pairs = mixed_rows(pairs, timeouts, seed=b + 1)
            for _gt, answer in pairs:
                fh.write(json.dumps({"index": n, "response": answer}, ensure_ascii=False) + "\n")
                n += 1
    return n


# ---------------------------------------------------------------- runs


def score(data: Path, responses: Path, out: Path, opgen: list[str], extra: list[str] = ()) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    return measure([*opgen, "-c", WRAPPER, "score", "--data", str(data), "--responses", str(responses),
                    "--out", str(out), "--no-progress", *extra])


def floor(data: Path, responses: Path, limit: int, python: str) -> dict:
    res = subprocess.run([python, str(HERE / "floor_score.py"), str(data), str(responses), "--limit", str(limit)],
                         capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def line(label: str, n: int, got: dict, unit: str = "response") -> str:
    own = got["self"] or {}
    others = "; ".join(f"{kind} x{count} <= {mib:.0f} MiB" for kind, (count, mib) in sorted(got["others"].items()))
    load = f"load {got['load'][0][0]:.1f}->{got['load'][1][0]:.1f}"
    return (f"{label:<30} {n:>9,} {got['wall']:9.1f} s  {got['cpu'] / n * 1e3:7.3f} ms/{unit} all, "
            f"{own.get('cpu', 0) / n * 1e3:7.3f} ms own  own peak {own.get('rss_mib', 0):7.0f} MiB  [{others}]  {load}")


def check(label: str, ok: bool, detail: str) -> str:
    return f"  {label}: {'met' if ok else 'NOT met'} ({detail})"


def score_size(n: int, files: list[Path], work: Path, args: argparse.Namespace, scorer: list[str],
               results: dict, floors: dict) -> None:
    """The scoring runs of one size: each kind of answers, the floor beside the canonical ones."""
    what = set(args.what.split(","))
    data = spread_rows(files, n, work / f"rows-{n}.parquet")
    for kind in args.answers.split(","):
        responses = work / f"{kind}-{n}.jsonl"
        write_answers(data, responses, kind, args.mix_timeouts)
        if "floor" in what and kind == "canonical":
            floors[n] = floor(data, responses, min(n, args.floor_n), sys.executable)
            print(f"floor (one process), {floors[n]['responses']:,} canonical responses: "
                  f"{floors[n]['cpu_ms_per_response']:.3f} ms CPU per response ({floors[n]['correct']:,} correct)",
                  flush=True)
        if "score" in what:
            out = work / f"scored-{kind}-{n}"
            got = score(data, responses, out, scorer, shlex.split(args.score_args))
            results[(kind, n)] = got
            print(line(f"opgen score, {kind}", n, got), flush=True)
            if kind == "canonical" and n in floors:
                per = floors[n]["cpu_s"] / floors[n]["responses"]
                print(f"    vs the floor: {got['cpu'] / n / per:.2f}x CPU per response", flush=True)
            if args.ray:
                compare_ray(data, responses, out, work / f"ray-{kind}-{n}", scorer, args, n, kind)
            if not args.keep:
                shutil.rmtree(out, ignore_errors=True)
        if not args.keep:
            responses.unlink(missing_ok=True)
    if not args.keep:
        data.unlink(missing_ok=True)


def compare_ray(data: Path, responses: Path, local: Path, out: Path, scorer: list[str], args: argparse.Namespace,
                n: int, kind: str) -> None:
    """``opgen score --executor ray`` of the same responses: its rows and summary against the local run's."""
    got = score(data, responses, out, scorer, ["--executor", "ray", *shlex.split(args.score_args)])
    print(line(f"opgen score --executor ray, {kind}", n, got), flush=True)
    same_rows = (local / "scores.jsonl").read_bytes() == (out / "scores.jsonl").read_bytes()
    a = json.loads((local / "summary.json").read_text())
    b = json.loads((out / "summary.json").read_text())
    differ = sorted(k for k in a if k not in ("isolation", "plots") and a[k] != b.get(k))
    print(f"    ray vs local: scores.jsonl identical: {same_rows}; summary keys that differ: {differ or 'none'}",
          flush=True)
    shutil.rmtree(out, ignore_errors=True)


def targets(results: dict, floors: dict) -> None:
    canon = {n: r for (k, n), r in results.items() if k == "canonical"}
    if not canon:
        return
    print("issue 32 targets (opgen score, canonical answers):")
    n_small = 20_000 if 20_000 in canon else min(canon)
    n_large = max(canon)
    small, large = canon[n_small], canon[n_large]
    rss_s, rss_l = small["self"]["rss_mib"], large["self"]["rss_mib"]
    print(check(f"main-process peak RSS at {n_large:,} <= 512 MiB", rss_l <= 512, f"{rss_l:.0f} MiB"))
    print(check(f"... within 10% of its figure at {n_small:,}", rss_l <= 1.1 * rss_s,
                f"{rss_l:.0f} vs {rss_s:.0f} MiB, {rss_l / rss_s:.2f}x"))
    cpu_s, cpu_l = small["cpu"] / n_small, large["cpu"] / n_large
    print(check(f"CPU per response at {n_large:,} within 1.1x of at {n_small:,}", cpu_l <= 1.1 * cpu_s,
                f"{cpu_l * 1e3:.3f} vs {cpu_s * 1e3:.3f} ms, {cpu_l / cpu_s:.2f}x"))
    if floors:
        f = floors[max(floors)]
        ratio = cpu_l / (f["cpu_s"] / f["responses"])
        print(check("whole-command CPU per canonical response <= 1.5x the floor", ratio <= 1.5, f"{ratio:.2f}x"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="20000,50000,500000,2400000")
    ap.add_argument("--what", default="build,score,floor", help="build, score, floor (comma-separated)")
    ap.add_argument("--answers", default="canonical,mix")
    ap.add_argument("--work", type=Path, default=None, help="folder for the data (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the data, responses and reports")
    ap.add_argument("--workers", type=int, default=2, help="build workers")
    ap.add_argument("--mix-timeouts", type=float, default=0.0001,
                    help="share of the mix's responses that loop until their 2 s timeout")
    ap.add_argument("--floor-n", type=int, default=50_000, help="responses the floor grades (CPU per response)")
    ap.add_argument("--opgen", default=sys.executable,
                    help="the Python whose opgen scores (another checkout's venv, to compare)")
    ap.add_argument("--score-args", default="", help="more options for opgen score")
    ap.add_argument("--ray", action="store_true",
                    help="score each size locally and with --executor ray (this Python must have ray), and "
                         "compare scores.jsonl and summary.json")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    work = args.work or Path(tempfile.mkdtemp(prefix="opgen-bench-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    me = [sys.executable]
    print(f"machine: {os.cpu_count()} CPUs; load average {os.getloadavg()}; work folder {work}", flush=True)
    try:
        if "build" in args.what.split(","):
            print("build: one eval split (trees, every operator, depths 1-8, closed_book/ra)", flush=True)
            for n in sizes:
                if n < 50_000 and max(sizes) >= 50_000:
                    continue
                print(line("opgen build", n, build(n, work / f"build-{n}", args.workers, me), "row"), flush=True)
                if n != max(sizes):
                    shutil.rmtree(work / f"build-{n}", ignore_errors=True)
        big = work / f"build-{max(sizes)}"
        if not (big / "manifest.json").exists():
            build(max(sizes), big, args.workers, me)
        man = json.loads((big / "manifest.json").read_text())
        files = [big / f["path"] for f in man["splits"]["scale"]["files"]]
        results: dict[tuple[str, int], dict] = {}
        floors: dict[int, dict] = {}
        for n in sizes:
            score_size(n, files, work, args, shlex.split(args.opgen), results, floors)
        print(f"load average at the end: {os.getloadavg()}")
        targets(results, floors)
    finally:
        if not args.keep and args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
