"""One exception root: every error class of the package is an opgen.errors.OpgenError (in addition
to its own base), with the exit status the command line gives it, mapped in one place (cli)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import click
import pytest

import opgen
from opgen.errors import USAGE, OpgenError, exit_code

# Exempt, each for its reason: warnings are no errors; underscore classes
# are control flow inside one module; signals (Terminated, KeyboardInterrupt) are BaseExceptions
# whose statuses are outdir.exit_code's (130, 143).
EXEMPT: set[str] = set()


def _error_classes() -> dict[str, type]:
    found = {}
    for m in pkgutil.walk_packages(opgen.__path__, "opgen."):
        if m.name in ("opgen.__main__", "opgen.score.jail.__main__"):  # scripts
            continue
        if m.name == "opgen.integrations.verl_agent":  # verl's agent loop: imports verl, only verl loads it
            continue
        mod = importlib.import_module(m.name)
        for name, cls in vars(mod).items():
            if (inspect.isclass(cls) and issubclass(cls, Exception) and not issubclass(cls, Warning)
                    and cls.__module__ == m.name and not name.startswith("_")):
                found[f"{m.name}.{name}"] = cls
    return found


def test_every_error_class_of_the_package_is_an_opgen_error():
    classes = _error_classes()
    assert len(classes) >= 40  # the walk found the package's errors
    outside = sorted(name for name, cls in classes.items() if not issubclass(cls, OpgenError))
    assert outside == sorted(EXEMPT)
    for name, cls in classes.items():
        if name in EXEMPT:
            continue
        if OpgenError in cls.__bases__:  # a root of its own: it states its status
            assert "exit_code" in vars(cls), name
        assert cls.exit_code in (1, USAGE), name


def test_the_old_bases_are_kept():
    from opgen.infer.base import BackendError
    from opgen.outdir import OutputError
    from opgen.recipe import RecipeError
    from opgen.score.sandbox import SandboxError

    assert issubclass(RecipeError, ValueError) and issubclass(BackendError, RuntimeError)
    assert issubclass(OutputError, RuntimeError) and issubclass(SandboxError, RuntimeError)


def test_exit_codes_are_today_s():
    from opgen.build import BuildError, OnlyError
    from opgen.expr import ExprError
    from opgen.fit import FitInputError
    from opgen.infer.run import DataError, LogError
    from opgen.recipe import RecipeError
    from opgen.verify import VerifyError

    # the errors commands reported as a bad parameter (exit 2) keep 2; the others 1
    assert {c.exit_code for c in (RecipeError, OnlyError, ExprError, FitInputError, DataError, VerifyError)} == {2}
    assert {c.exit_code for c in (BuildError, LogError)} == {1}
    assert exit_code(RecipeError("x")) == 2 and exit_code(ValueError("x")) == 1


@pytest.mark.parametrize("cls", ["opgen.hub.HubError", "opgen.recipe.RecipeError", "opgen.infer.run.DataError",
                                 "opgen.leakage.LeakageInputError"])
def test_the_cli_maps_an_opgen_error_to_its_exit_code(cls, runner):
    from opgen.cli import LazyGroup

    module, name = cls.rsplit(".", 1)
    err = getattr(importlib.import_module(module), name)

    @click.command("boom")
    def boom():
        raise err("the file x.yaml: field y is wrong")

    @click.group(cls=LazyGroup)
    def group():
        pass

    group.add_command(boom)
    res = runner.invoke(group, ["boom"])
    assert res.exit_code == err.exit_code, res.output
    assert res.output == "Error: the file x.yaml: field y is wrong\n"
    assert res.exception is None or isinstance(res.exception, SystemExit)
