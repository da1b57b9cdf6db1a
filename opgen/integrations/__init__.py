"""Adapters for the trainers and harnesses users train and evaluate with (docs/integrations.md).

Each module imports its library only when used, and every one grades through opgen's public scorer
(:func:`opgen.reward.compute_score` / :func:`opgen.score_answers`), so a reward here is the grade
``opgen score`` gives the same row and response.

- :mod:`opgen.integrations.trl` — a TRL reward function and dataset views for GRPOTrainer / SFTTrainer;
- :mod:`opgen.integrations.verifiers` — ``load_environment(recipe=...)`` with opgen's rubric;
- :mod:`opgen.integrations.lm_eval` — lm-eval task files per build, and the metric they call;
- :mod:`opgen.integrations.openrlhf` — the ``--remote_rm_url`` request/response shape (``opgen serve``).
"""
