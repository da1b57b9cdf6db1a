"""Scoring: parse a response, run its code in the sandbox, compare, diagnose, report.

``grade`` scores one response; ``score_files`` scores a parquet file against a responses JSONL and
writes the report (see docs/scoring.md).
"""

from __future__ import annotations

from opgen.score.batch import grade
from opgen.score.report import score_files

__all__ = ["grade", "score_files"]
