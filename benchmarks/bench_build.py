"""Benchmark `opgen build`: rows/s and peak RSS, whole process, as the native generator was measured.

    python benchmarks/bench_build.py            # the default suite, the three native splits, 500k 1 vs 2 workers
    python benchmarks/bench_build.py --quick    # smaller sizes, for a smoke run
    python benchmarks/bench_build.py --no-big --compile opgen   # issue 23's targets, byte-compiled first

The first lines are the README's main command, ``opgen build --out DIR`` (the default suite,
9,728 rows, default workers) and the same with ``--limit 32``, whole process, against issue 23's
targets (<= 3 s and <= 1 s on 2 cores); then stage 1 / stage 2 against the native generator's
rows/s (target >= 10x) in the same run.
    python benchmarks/bench_build.py --opgen "/path/to/other/opgen"   # another checkout, same machine
    python benchmarks/bench_build.py --scale 50000,500000,2400000 --workers 2   # issue 32: linear at scale

``--scale`` builds one depth 1-8 trees split (the native stage-2 test's formats, every operator) at
each row count and prints wall, CPU per row, and the peak RSS and CPU of every process of the build
(the main process and each worker, sampled from /proc every 0.2 s), with the load average before
and after: CPU per row should not grow with the rows (target: 2.4 M within 1.1x of 50,000) and no
process should pass 1 GiB.

The ``opgen`` run is the console script installed beside this Python, not a version manager's
shim found on PATH (a pyenv shim is a bash script that adds 0.15-0.3 s to every process).

Each build runs as its own `opgen build` process (start-up included) under a helper process, so
``resource.getrusage(RUSAGE_CHILDREN)`` gives that build's CPU time and peak RSS alone. CPU rows/s
(rows / (user + sys)) is printed beside wall rows/s because shared machines make wall time noisy.
Reference (native generator, one core, whole process): stage-1 depth-1 50,000 rows 24.7 s
(2,024 rows/s, 508 MiB); stage-2 depth 1-2 train 50,000 rows 29.8 s (1,676 rows/s, 402 MiB);
depth 1-8 test 2,048 rows 5.45 s (376 rows/s).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

NATIVE = {"stage1_l1_train": 2024.0, "stage2_l12_train": 1676.0, "stage2_l18_test": 376.0}

BIG = """\
name: bench-big
splits:
  big_train:
    generator: trees
    role: train
    prompt_format: forward
    options: {{ops: train, depths: [1, 2], rows: {rows}}}
"""


SCALE = """\
name: bench-scale-build
seed: 0
defaults:
  kind: rl
  prompt_format: closed_book_forward
  answer_format: json_output
  unique: task
  generator: trees
splits:
  scale:
    role: eval
    options: {{ops: all, depths: [1, 2, 3, 4, 5, 6, 7, 8], rows: {rows}}}
"""


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants, now."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            todo += [int(k) for k in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except OSError:
            pass
    return out


def _sample(pid: int) -> tuple[int, float] | None:
    """(peak RSS in KiB so far, CPU seconds) of one process, or None once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    hwm = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), 0)
    return hwm, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child(argv: list[str]) -> None:
    """Run one build and report its own resource use (it is this helper's only child), with every
    process of the build's peak RSS and CPU, sampled from /proc."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: dict[int, tuple[int, float]] = {}
    reader = threading.Thread(target=lambda: setattr(proc, "captured", proc.communicate()), daemon=True)
    reader.start()
    while proc.poll() is None:
        for pid in _tree(proc.pid):
            got = _sample(pid)
            if got is not None:
                seen[pid] = (max(got[0], seen.get(pid, (0, 0.0))[0]), got[1])
        time.sleep(0.2)
    reader.join()
    wall = time.perf_counter() - start
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    _, stderr = getattr(proc, "captured", ("", ""))
    processes = [{"role": "main" if pid == proc.pid else "worker", "pid": pid, "peak_rss_mib": round(hwm / 1024),
                  "cpu_s": round(cpu, 1)} for pid, (hwm, cpu) in seen.items()]
    print(json.dumps({"rc": proc.returncode, "wall": wall, "cpu": use.ru_utime + use.ru_stime,
                      "rss_mib": use.ru_maxrss / 1024, "stderr": stderr[-2000:], "processes": processes}))


OPGEN = ["opgen"]


def default_opgen() -> list[str]:
    script = Path(sys.executable).parent / "opgen"
    return [str(script)] if script.exists() else ["opgen"]


def measure(recipe: str, split: str, out: Path, workers: int | None, limit: int | None = None) -> dict:
    """``workers`` None: the command's default (min(4, CPUs)), what a user who sets nothing waits for."""
    argv = [*OPGEN, "build", recipe, "--only", split, "--out", str(out), "--no-progress"]
    if workers is not None:
        argv += ["--workers", str(workers)]
    if limit:
        argv += ["--limit", str(limit)]
    return measure_argv(argv, out)


def measure_argv(argv: list[str], out: Path) -> dict:
    """One whole ``opgen build`` process (``argv``, writing ``out``): wall, CPU, peak RSS, rows built."""
    if out.exists():
        import shutil

        shutil.rmtree(out)
    res = subprocess.run([sys.executable, __file__, "--child", json.dumps(argv)], capture_output=True, text=True,
                         check=True)
    data = json.loads(res.stdout.strip().splitlines()[-1])
    if data["rc"] != 0:
        raise SystemExit(f"build failed: {data['stderr']}")
    manifest = json.loads((out / "manifest.json").read_text())
    data["rows"] = sum(s["rows"] for s in manifest["splits"].values())
    return data


def median_argv(n: int, argv: list[str], out: Path) -> dict:
    runs = [measure_argv(argv, out) for _ in range(max(1, n))]
    got = dict(runs[0])
    for key in ("wall", "cpu", "rss_mib"):
        got[key] = statistics.median(r[key] for r in runs)
    got["best_wall"] = min(r["wall"] for r in runs)
    return got


def target(label: str, value: float, limit: float, unit: str, at_most: bool = True) -> str:
    met = value <= limit if at_most else value >= limit
    sign = "<=" if at_most else ">="
    return f"  {label}: {value:.2f}{unit} (target {sign} {limit:g}{unit}): {'met' if met else 'NOT met'}"


def median_of(n: int, *args) -> dict:
    runs = [measure(*args) for _ in range(max(1, n))]
    out = dict(runs[0])
    for key in ("wall", "cpu", "rss_mib"):
        out[key] = statistics.median(r[key] for r in runs)
    return out


def row(label: str, d: dict, native: float | None = None) -> str:
    wall_rps, cpu_rps = d["rows"] / d["wall"], d["rows"] / d["cpu"]
    vs = f"{wall_rps / native:6.1f}x / {cpu_rps / native:6.1f}x" if native else " " * 17
    return (f"{label:<34} {d['rows']:>9,} {d['wall']:8.2f} {d['cpu']:8.2f} {wall_rps:>11,.0f} {cpu_rps:>11,.0f} "
            f"{vs}  {d['rss_mib']:7.0f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--big", type=int, default=500_000, help="rows of the split built with 1 and 2 workers")
    ap.add_argument("--opgen", help="command that runs opgen (default: the console script beside this Python)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each build; the median wall/cpu/RSS is printed")
    ap.add_argument("--no-big", action="store_true", help="skip the 1-vs-2-worker split")
    ap.add_argument("--scale", metavar="ROWS,...", help="only the scale runs: one depth 1-8 split at these row counts")
    ap.add_argument("--workers", type=int, default=2, help="--scale: worker processes")
    ap.add_argument("--keep", metavar="DIR", help="--scale: keep each build's manifest as DIR/<rows>.json (its files' "
                                                  "sha256: compare two checkouts' builds)")
    ap.add_argument("--compile", action="append", default=[], metavar="DIR",
                    help="byte-compile this package folder first, as installing a wheel does (repeatable); "
                         "with PYTHONDONTWRITEBYTECODE set, an editable checkout otherwise recompiles every "
                         "opgen module in every run (~60 ms)")
    args = ap.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    if args.compile:
        import compileall

        for folder in args.compile:
            if not compileall.compile_dir(folder, quiet=1):
                raise SystemExit(f"--compile {folder}: byte-compiling failed")
        print(f"(opgen byte-compiled first: {', '.join(args.compile)})")
    global OPGEN
    OPGEN = shlex.split(args.opgen) if args.opgen else default_opgen()
    if args.scale:
        scale([int(r) for r in args.scale.split(",")], args.workers, args.keep)
        return
    big_rows = 100_000 if args.quick else args.big
    limit = 10_000 if args.quick else None
    print(f"{'build':<34} {'rows':>9} {'wall s':>8} {'cpu s':>8} {'rows/s wall':>11} {'rows/s cpu':>11} "
          f"{'vs native wall/cpu':>17}  {'RSS MiB':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        # issue 23: the README's main command, whole process, default workers (2 on a 2-core machine)
        suite = median_argv(args.repeat, [*OPGEN, "build", "--out", str(tmp / "suite-all"), "--no-progress"],
                            tmp / "suite-all")
        print(row("default suite (opgen build --out)", suite), flush=True)
        small = median_argv(args.repeat, [*OPGEN, "build", "--out", str(tmp / "suite-32"), "--limit", "32",
                                          "--no-progress"], tmp / "suite-32")
        print(row("default suite --limit 32", small), flush=True)
        ratios: dict[str, float] = {}
        defaults: dict[str, float] = {}
        for recipe, split in (("native-stage1", "stage1_l1_train"), ("native-stage2", "stage2_l12_train"),
                              ("native-stage2", "stage2_l18_test")):
            d = median_of(args.repeat, recipe, split, tmp / split, 1, limit)
            print(row(f"{split} (1 worker)", d, NATIVE[split]), flush=True)
            ratios[split] = d["rows"] / d["wall"] / NATIVE[split]
            if split != "stage2_l18_test":  # the command as a user runs it: default workers
                d = median_of(args.repeat, recipe, split, tmp / f"{split}-default", None, limit)
                print(row(f"{split} (default workers)", d, NATIVE[split]), flush=True)
                defaults[split] = d["rows"] / d["wall"] / NATIVE[split]
        d = median_of(args.repeat, "eval-suite", "heldout_trees_d1-8", tmp / "suite", 1)
        print(row("heldout_trees_d1-8 (1 worker)", d), flush=True)
        import os

        print(f"issue 23 targets ({os.cpu_count()} CPUs here; wall times on a shared machine read high, "
              "CPU s beside them):")
        print(target("default suite, wall", suite["wall"], 3.0, " s"))
        print(target("default suite --limit 32, wall", small["wall"], 1.0, " s"))
        for split in ("stage1_l1_train", "stage2_l12_train"):
            print(target(f"{split} vs native, wall rows/s, 1 worker", ratios[split], 10.0, "x", at_most=False))
            print(target(f"{split} vs native, wall rows/s, default workers", defaults[split], 10.0, "x",
                         at_most=False))
            # The native generator is not on this machine: its rows/s are its recorded times, and it
            # ran 1.6x faster than those on this machine when it was (DEVELOPERS.md).
            print(f"    the same against the native generator as it ran here (recorded x 1.6): "
                  f"{ratios[split] / 1.6:.2f}x with 1 worker, {defaults[split] / 1.6:.2f}x with default workers")
        if args.no_big:
            return
        big = tmp / "big.yaml"
        big.write_text(BIG.format(rows=big_rows))
        one = median_of(args.repeat, str(big), "big_train", tmp / "big1", 1)
        print(row("big_train (1 worker)", one), flush=True)
        # The same split at a tenth of the rows: peak memory should not grow with the row count.
        small = tmp / "small.yaml"
        small.write_text(BIG.format(rows=big_rows // 10))
        tenth = median_of(args.repeat, str(small), "big_train", tmp / "small1", 1)
        print(row("big_train, a tenth (1 worker)", tenth), flush=True)
        two = median_of(args.repeat, str(big), "big_train", tmp / "big2", 2)
        print(row("big_train (2 workers)", two), flush=True)
        same = all(a["sha256"] == b["sha256"] for a, b in zip(
            json.loads((tmp / "big1" / "manifest.json").read_text())["splits"]["big_train"]["files"],
            json.loads((tmp / "big2" / "manifest.json").read_text())["splits"]["big_train"]["files"]))
        print(f"2 workers vs 1 on {big_rows:,} rows: {one['wall'] / two['wall']:.2f}x wall "
              f"(files identical: {same})")
        print(f"peak RSS, 1 worker: {tenth['rss_mib']:.0f} MiB at {big_rows // 10:,} rows, "
              f"{one['rss_mib']:.0f} MiB at {big_rows:,} rows ({one['rss_mib'] / tenth['rss_mib']:.2f}x)")


def scale(counts: list[int], workers: int, keep: str | None) -> None:
    """Issue 32: CPU per row and every process's peak RSS at each row count, and the ratio to the first."""
    print(f"{'rows':>10} {'wall s':>8} {'cpu s':>8} {'cpu us/row':>10} {'vs first':>8}  {'load before -> after':<22} "
          f"processes (peak RSS MiB / CPU s)")
    first = None
    with tempfile.TemporaryDirectory() as tmp:
        for rows in counts:
            recipe = Path(tmp) / f"scale-{rows}.yaml"
            recipe.write_text(SCALE.format(rows=rows))
            out = Path(tmp) / str(rows)
            load = open("/proc/loadavg").read().split()[:3]
            d = measure_argv([*OPGEN, "build", str(recipe), "--out", str(out), "--no-progress",
                              "--workers", str(workers)], out)
            after = open("/proc/loadavg").read().split()[:3]
            per_row = d["cpu"] / d["rows"] * 1e6
            first = first or per_row
            procs = sorted(d["processes"], key=lambda p: (p["role"] != "main", p["pid"]))
            shown = ", ".join(f"{p['role']} {p['peak_rss_mib']}/{p['cpu_s']}" for p in procs)
            print(f"{d['rows']:>10,} {d['wall']:8.1f} {d['cpu']:8.1f} {per_row:10.1f} {per_row / first:8.3f}  "
                  f"{' '.join(load) + ' -> ' + ' '.join(after):<22} {shown}", flush=True)
            if keep:
                Path(keep).mkdir(parents=True, exist_ok=True)
                (Path(keep) / f"{rows}.json").write_bytes((out / "manifest.json").read_bytes())
            import shutil

            shutil.rmtree(out)


if __name__ == "__main__":
    main()
