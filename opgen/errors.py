"""The root of opgen's own errors, and what each means to the command line.

Every error class the package raises subclasses :class:`OpgenError` in addition to its own base
(``ValueError``, ``RuntimeError``...), so code that catches those keeps working and a caller can
catch all of opgen's errors at once. ``exit_code`` is the status `opgen` exits with when one reaches
the command line: 2 for input that names a file, field or parameter the user must change (as a
usage error), 1 for everything else. The CLI maps them in one place (``cli.LazyGroup.invoke``);
tests/test_errors.py walks the package so that no error class is left out.
"""

from __future__ import annotations


class OpgenError(Exception):
    """An error of opgen's own (never a bug): its message names the file, field, row or thing to fix."""

    exit_code: int = 1


USAGE = 2  # the exit status of bad input, as click's usage errors


def exit_code(exc: BaseException) -> int:
    """The status a command exits with for ``exc`` (1 for anything that is not an OpgenError)."""
    return exc.exit_code if isinstance(exc, OpgenError) else 1
