"""The verifiers environment ``opgen-verifiers`` (``vf-eval opgen-verifiers ...``): verifiers' loader
imports a taskset id as a top-level module, so this one re-exports opgen.integrations.verifiers
(docs/integrations.md)."""

from opgen.integrations.verifiers import load_environment

# the classes are built on first use (__getattr__ below); verifiers' loader finds them in __all__
__all__ = [  # noqa: F822
    "OpgenEnv", "OpgenHarness", "OpgenTask", "OpgenTaskset", "load_environment"]


def __getattr__(name: str):
    from opgen.integrations import verifiers

    if name in __all__:
        return getattr(verifiers, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
