"""The operator library's errors: one class each, all ``ValueError`` and exit status 2 (the user
must name, register or fix a library)."""

from __future__ import annotations

from opgen.errors import USAGE, OpgenError


class LibraryError(ValueError, OpgenError):
    """A library that cannot be loaded, stored or found; the message names the file, spec or digest
    and, where it can, the operator and field."""

    exit_code = USAGE


class LibraryMismatch(LibraryError):
    """Rows (or recipes of one build) that name another library than the one given."""


class StoreWarning(UserWarning):
    """A build whose library could not be registered in the user's store (the build is complete)."""


class UnknownLibrary(LibraryError):
    """Rows that name a library by a digest that is neither the one given nor in the user's store;
    the message says how to provide it (nothing named by data is ever loaded)."""
