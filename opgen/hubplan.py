"""Where every file of a build goes in its Hub tree: the types opgen.hub plans and opgen.card reads.

A leaf module (it imports nothing of opgen but the operator library's value), so the card can read a
plan and the hub can write the card without either importing the other's module back.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from opgen.ops import STUDY, OperatorLibrary

DATA = "data"  # the tree's folder of parquet files: data/<config>/<split>-NNNNN-of-NNNNN.parquet


@dataclass(frozen=True)
class BuildFile:
    path: str  # relative to the build directory, as in the manifest
    rows: int
    sha256: str
    bytes: int


@dataclass(frozen=True)
class Split:
    """One split of the build, placed in the tree."""

    build_name: str  # the manifest's split name (the study's file name, e.g. heldout_trees_d1-8)
    name: str  # the Hub split name: no dashes
    config: str
    family: str
    kind: str
    mode: str
    prompt_format: str
    answer_format: str
    rows: int
    files: tuple[BuildFile, ...]
    info: dict  # the manifest's whole entry (counts, output_length, rejections)
    file_name: str = ""  # the build name made Hub-safe (heldout_trees_d1_8); ``name`` may be a role

    @property
    def role(self) -> str:
        return str(self.info.get("role", ""))

    def repo_paths(self) -> tuple[str, ...]:
        n = len(self.files)
        return tuple(f"{DATA}/{self.config}/{self.name}-{i:05d}-of-{n:05d}.parquet" for i in range(n))


@dataclass(frozen=True)
class Plan:
    """Where every file of a build goes; what the card and the upload are made from."""

    build_dir: Path
    manifest: dict
    manifest_sha256: str
    splits: tuple[Split, ...]  # sorted by (config, name)
    # The config ``load_dataset(repo)`` loads without a config name: that of the build's first
    # split (the first recipe's first split, e.g. heldout_trees for the eval suite).
    default_config: str = ""
    # The build's operator library: the one its manifest names, found by digest (opgen.library.library_of),
    # never loaded from the folder. A library not the study's ships as the tree's library.yaml.
    library: OperatorLibrary = STUDY

    @property
    def configs(self) -> tuple[str, ...]:
        return tuple(sorted({s.config for s in self.splits}))

    def splits_of(self, config: str) -> tuple[Split, ...]:
        return tuple(s for s in self.splits if s.config == config)

    def placements(self) -> list[tuple[BuildFile, str]]:
        """(build file, path in the repo) for every data file, in tree order."""
        return [(f, p) for s in self.splits for f, p in zip(s.files, s.repo_paths())]
