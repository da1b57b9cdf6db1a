"""The ``opgen`` command line: a thin skin over the library.

Each command lives in its own module and is imported only when it runs (or when ``--help``
lists it), so ``opgen --help`` never pays for pyarrow, datasets, torch or vllm.
"""

from __future__ import annotations

import importlib
import importlib.util

import click

from opgen import __version__


class CommandError(click.ClickException):
    """An :class:`opgen.errors.OpgenError` as the command line reports it."""

    def __init__(self, exc: Exception):
        from opgen.errors import exit_code

        super().__init__(str(exc))
        self.exit_code = exit_code(exc)


# command name -> (module under opgen.cli, attribute)
COMMANDS: dict[str, tuple[str, str]] = {
    "ops": ("ops_cmd", "ops"),
    "build": ("build_cmd", "build"),
    "validate": ("build_cmd", "validate"),
    "stats": ("build_cmd", "stats"),
    "score": ("score_cmd", "score"),
    "eval": ("eval_cmd", "eval_"),
    "push": ("push_cmd", "push"),
    "fit": ("fit_cmd", "fit"),
    "leakage": ("leakage_cmd", "leakage"),
    "verify": ("verify_cmd", "verify"),
    "split-stats": ("split_cmd", "split_stats"),
    "split-sweep": ("split_cmd", "split_sweep"),
    "serve": ("serve_cmd", "serve"),
    "export": ("export_cmd", "export"),
}


class LazyGroup(click.Group):
    def invoke(self, ctx: click.Context):
        """Run the command; an opgen error that reaches here ends as ``Error: <message>`` and its
        class's ``exit_code`` (opgen.errors: the one place errors meet exit statuses), never a
        traceback. Commands still catch the errors whose message they add a parameter or context to."""
        from opgen.errors import OpgenError

        try:
            return super().invoke(ctx)
        except OpgenError as exc:
            raise CommandError(exc) from None

    def list_commands(self, ctx: click.Context) -> list[str]:
        present = [name for name, (mod, _) in COMMANDS.items()
                   if importlib.util.find_spec(f"{__name__}.{mod}") is not None]
        return sorted(set(present) | set(self.commands))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.commands:
            return self.commands[name]
        if name not in COMMANDS:
            return None
        mod, attr = COMMANDS[name]
        if importlib.util.find_spec(f"{__name__}.{mod}") is None:
            return None
        return getattr(importlib.import_module(f"{__name__}.{mod}"), attr)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="opgen")
def cli() -> None:
    """opgen: build, score and publish compositional string-operator datasets."""


def main() -> None:
    cli(prog_name="opgen")
