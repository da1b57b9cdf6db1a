"""The choices of the grading and metric options, in one light module.

The standard library only (not even opgen.score, whose package loads the scorer): the CLI reads it
when it builds its options (`cli/score_cmd.py`, `cli/options.py`), the HTTP service
(`opgen/serve.py`) and the adapters (`opgen/integrations/common.py`) read which options exist, and
the records check their values against it (`opgen.score.settings.GradeSettings`,
`opgen.score.metrics.MetricDefs`). tests/test_grade_settings.py ties every reader to it.
"""

from __future__ import annotations

# GradeSettings's text options: the choices of each, by field name (docs/scoring.md)
POLICIES = ("output", "output_structure")  # --policy
GROUP_POLICIES = ("fraction", "all")  # --group
MODES = ("auto", "forward", "program")  # --mode
NAMESPACES = ("strict", "native")  # --namespace
GRADE_CHOICES = {"policy": POLICIES, "group": GROUP_POLICIES, "mode": MODES, "namespace": NAMESPACES}
GRADE_FLAGS = ("static", "diagnose", "returned")  # GradeSettings's true/false options
# GradeSettings's fields, in its order: the text options, the flags, then the operator library
GRADE_OPTIONS = (*GRADE_CHOICES, *GRADE_FLAGS, "library")
# those a reward entry point reads from its keywords (verl's reward_kwargs, the adapters): all but
# diagnose (a reward always carries the recall diagnostics) and returned (a reward is a number; what
# a program returned is for execution feedback, opgen.episode)
REWARD_OPTIONS = tuple(name for name in GRADE_OPTIONS if name not in ("diagnose", "returned"))

# MetricDefs (docs/scoring.md, "Metric definitions")
DRIFT_CALLS = ("farthest", "nearest", "every")  # --drift-call
PASS_K_ESTIMATORS = {  # --pass-k: each estimator, as summary.json names it
    "unbiased": "unbiased (Chen et al. 2021: 1 - C(n-c, k) / C(n, k), over all n samples)",
    "earliest": "earliest-rank (the Interplay release's: a row passes at k when one of its first k samples, "
                "in generation order, is correct)",
}
INTERVALS = {  # --interval: how a 95% interval treats several samples of one row, as summary.json names it
    "rows": "by row: Wilson at the effective sample size of a cluster-robust variance over rows (a row's "
            "samples are not independent; with one sample per row, the per-sample Wilson interval)",
    "samples": "per sample: Wilson over every sample as an independent draw",
}

EXECUTORS = ("local", "ray")  # --executor of build, score and eval

# --op-budget (opgen build, opgen ops check): the seconds one operator call may run (opgen.opwatch);
# the study's operators take microseconds
OP_BUDGET_S = 10.0
