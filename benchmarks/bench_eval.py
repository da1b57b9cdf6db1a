"""`opgen eval`'s own cost beyond generation, and how a sweep scales with Ray replicas.

    python benchmarks/bench_eval.py [--rows 2048] [--ray] [--hf] [--hf-rows 48]

1. Overhead: the local loop over built rows (the eval suite's held-out trees) with a backend that
   answers at once (replay of one short answer per row): reading the parquet, prompt digests,
   requests, lines, one fsync per batch. Printed as microseconds per row, without and with
   grading (the scorer's sandbox), so it can be set against a GPU's rows/s.
2. With ``--ray`` (needs ray): the same rows through ``--executor ray`` on 1 and 2 replicas
   (replay), rows/s over the generation phase and the replicas' idle share. With ``--hf`` also
   the tiny random-weight model of tests/tiny_model.py with the hf backend (needs torch and
   transformers), 16 new tokens, ``--hf-rows`` rows, graded (scoring pipelined: the share of the
   wall time the replicas waited on it is printed, and the grader's busy time).
The local cluster is started on 127.0.0.1 for each run and stopped after it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def build_rows(out: Path, rows: int) -> Path:
    from opgen import build as B
    from opgen import recipe as R

    B.build([R.load("eval-suite", None)], out, only=("heldout_trees_d1-8",), limit=rows)
    return out / "heldout_trees_d1-8.parquet"


def instant_model(folder: Path, data: Path) -> Path:
    """A replay "model" answering every row at once with a short wrong answer."""
    import pyarrow.parquet as pq

    n = pq.ParquetFile(data).metadata.num_rows
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{data.stem}_responses.jsonl", "w", encoding="utf-8") as fh:
        for i in range(n):
            fh.write(json.dumps({"index": i, "response": "Assemble:\n```python\ndef main_solution(x):\n"
                                                          "    return x\n```"}) + "\n")
    return folder


def overhead(data: Path, model: Path, work: Path, score: bool) -> tuple[int, float]:
    from opgen.infer.base import Sampling
    from opgen.infer.evaluate import EvalConfig, evaluate_model

    cfg = EvalConfig(backend="replay", sampling=Sampling(), score=score, progress=False, workers=2)
    t0 = time.perf_counter()
    m = evaluate_model(model, "instant", [data], work / f"overhead-{score}", cfg)
    return m["data"][data.stem]["rows"], time.perf_counter() - t0


def ray_run(models: list[Path], data: list[Path], out: Path, backend: str, replicas: int, extra: list[str]) -> dict:
    from click.testing import CliRunner
    from opgen.cli import cli

    args = ["eval", "--backend", backend, "--out", str(out), "--executor", "ray", "--replicas", str(replicas),
            "--quiet", *extra]
    for m in models:
        args += ["--model", str(m)]
    for d in data:
        args += ["--data", str(d)]
    res = CliRunner().invoke(cli, args, catch_exceptions=False)
    if res.exit_code != 0:
        raise SystemExit(res.output)
    return json.loads((out / "ray_report.json").read_text())


def _show(label: str, rep: dict) -> None:
    idle = ", ".join(f"{r['idle_share']:.0%}" for r in rep["replicas"])
    print(f"  {label}: {rep['rows_generated']} rows in {rep['generation_s']:.2f} s = {rep['rows_per_s']:.1f} rows/s "
          f"(idle {idle}; model loads {sum(r['model_loads'] for r in rep['replicas'])}; waiting on scoring "
          f"{rep['replicas_waiting_on_scoring_share']:.1%} of {rep['wall_s']:.1f} s; grader busy "
          f"{rep.get('scoring_s', 0.0):.1f} s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2048, help="rows of heldout_trees_d1-8 (at most 2,048)")
    ap.add_argument("--ray", action="store_true", help="also 1 and 2 Ray replicas (replay)")
    ap.add_argument("--hf", action="store_true", help="with --ray: also the tiny model on the hf backend")
    ap.add_argument("--hf-rows", type=int, default=48)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-eval-") as tmp:
        work = Path(tmp)
        data = build_rows(work / "data", args.rows)
        model = instant_model(work / "instant", data)
        import pyarrow.parquet as pq

        rows = pq.ParquetFile(data).metadata.num_rows
        print(f"opgen eval overhead, local loop, instant (replay) backend, {rows} rows of heldout_trees_d1-8:")
        for score in (False, True):
            n, secs = overhead(data, model, work, score)
            what = "generate + grade" if score else "generate only (opgen's own loop)"
            print(f"  {what}: {secs:.2f} s = {1e6 * secs / n:.0f} us/row ({n / secs:.0f} rows/s)")
        if not args.ray:
            return
        print("ray executor, replay backend (rows/s of the generation phase):")
        for k in (1, 2):
            rep = ray_run([model], [data], work / f"ray-replay-{k}", "replay", k,
                          ["--ray-num-cpus", "2", "--chunk-rows", "1024", "--no-score"])
            _show(f"{k} replica{'s' * (k > 1)}", rep)
        if args.hf:
            sys.path.insert(0, str(REPO / "tests"))
            import tiny_model as tm

            tiny = tm.build(work / "tiny-model")
            small = tm.write_trees(work / "small.parquet", n=args.hf_rows)
            print(f"ray executor, hf backend, tiny random model, {args.hf_rows} rows, 16 new tokens, graded:")
            outs = []
            for k in (1, 2):
                out = work / f"ray-hf-{k}"
                rep = ray_run([tiny], [small], out, "hf", k,
                              ["--ray-num-cpus", "2", "--chunk-rows", "8", "--max-new-tokens", "16",
                               "--dtype", "float32", "--hf-batch-size", "8"])
                _show(f"{k} replica{'s' * (k > 1)}", rep)
                outs.append((out / "tiny-model" / "small_generations.jsonl").read_bytes())
            print(f"  1- and 2-replica generations identical: {outs[0] == outs[1]}")


if __name__ == "__main__":
    main()
