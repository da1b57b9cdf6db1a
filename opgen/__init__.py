"""opgen: synthetic compositional string-operator tasks — build, score, publish.

The notebook API (docs/api.md) is importable from here: ``opgen.create_dataset``,
``opgen.build_splits``, ``opgen.score_answers``, ``opgen.register_generator``, ``opgen.load_recipe``,
``opgen.Generator``. They are loaded on first use, so ``import opgen`` stays as light as it was.
"""

from opgen._version import __version__

_API = ("Dataset", "Generator", "Scores", "build_splits", "create_dataset", "load_recipe", "register_generator",
        "score_answers")
# The training-side additions (opgen/notebook.py: it imports opgen.api, so api cannot re-export it).
_NOTEBOOK = ("gold_answer", "list_recipes", "mix_datasets", "score_answer")
__all__ = ["__version__", *_API, *_NOTEBOOK]


def __getattr__(name: str):
    if name in _API:
        from opgen import api

        return getattr(api, name)
    if name in _NOTEBOOK:
        from opgen import notebook

        return getattr(notebook, name)
    raise AttributeError(f"module 'opgen' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API, *_NOTEBOOK])
