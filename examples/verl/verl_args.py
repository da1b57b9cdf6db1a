"""Print the Hydra overrides that point a verl config at opgen builds, one per line.

    python examples/verl/verl_args.py --train build/rl-r1 --val build/eval --kind rl --tokenizer MODEL

prints ``data.train_files=[...]``, ``data.val_files=[...]`` (every shard of every split of that
kind, read from each build's manifest.json) and, with ``--tokenizer``, the ``data.*`` lengths
``opgen.tokens.recommend`` gives for all those files together. The launch scripts read the lines
into an array, so a build's split names and shard counts are never written by hand.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def shards(build_dir: Path, kind: str) -> dict[str, list[Path]]:
    """``{split: [shard paths]}`` of the splits of ``kind`` in one build."""
    manifest = build_dir / "manifest.json"
    if not manifest.is_file():
        raise SystemExit(f"verl_args: {manifest} does not exist (run opgen build first)")
    splits = json.loads(manifest.read_text())["splits"]
    out = {name: [(build_dir / f["path"]).resolve() for f in info["files"]]
           for name, info in sorted(splits.items()) if info.get("kind") == kind}
    if not out:
        raise SystemExit(f"verl_args: {manifest} has no {kind} split")
    return out


def hydra_list(paths: list[Path]) -> str:
    # Quoted items: Hydra's grammar would otherwise read '-' or '=' in a path as syntax.
    return "[" + ",".join(f"'{p}'" for p in paths) + "]"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", type=Path, required=True, action="append", help="build directory (repeatable)")
    ap.add_argument("--val", type=Path, action="append", default=[], help="build directory (repeatable)")
    ap.add_argument("--kind", choices=["rl", "sft"], required=True)
    ap.add_argument("--tokenizer", type=Path, help="model or tokenizer folder: also print data.* lengths")
    ap.add_argument("--response-headroom", type=float, default=1.5)
    args = ap.parse_args(argv)

    train = {(d, s): p for d in args.train for s, p in shards(d, args.kind).items()}
    val = {(d, s): p for d in args.val for s, p in shards(d, args.kind).items()}
    lines = [f"data.train_files={hydra_list([p for ps in train.values() for p in ps])}"]
    if val:
        lines.append(f"data.val_files={hydra_list([p for ps in val.values() for p in ps])}")
    if args.tokenizer is not None:
        from opgen import tokens

        tok = tokens.load_tokenizer(args.tokenizer)
        measured = {f"{d}:{s}": tokens.measure_files(ps, tok, kind=args.kind)
                    for (d, s), ps in {**train, **val}.items()}
        rec = tokens.recommend(measured, response_headroom=args.response_headroom)
        wanted = ["data.max_prompt_length", "data.max_response_length"] if args.kind == "rl" else ["data.max_length"]
        lines += [f"{key}={rec[key]}" for key in wanted if key in rec]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
