"""The verifiers environment ``opgen-episodes`` (``vf-eval opgen-verifiers --env.id opgen-episodes ...``):
multi-turn episodes with execution feedback over opgen's taskset (opgen.episode, docs/integrations.md).
verifiers' loader imports an env id as a top-level module exporting one ``Env`` subclass, so this
module re-exports that class of opgen.integrations.verifiers."""

# the class is built on first use (__getattr__ below); verifiers' loader finds it in __all__
__all__ = ["OpgenEpisodesEnv"]  # noqa: F822


def __getattr__(name: str):
    from opgen.integrations import verifiers

    if name in __all__:
        return getattr(verifiers, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
