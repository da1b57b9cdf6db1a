"""How anything anyone reads names an operator library: by its name and content digest, never by a
path or an import string (issue 31).

A row's ground truth of a library other than the study's ends with ``"library": {"name": ...,
"digest": ...}``; a manifest's ``library`` section, a split certificate and a card name it the same
way. The study's rows name none (their bytes are those of before libraries). A reference is read
as data only: :func:`parse_ref` checks its shape and nothing else is done with it here; which
library it means is :func:`opgen.library.library_of`'s to say (the one given, the user's store).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from opgen.library.errors import LibraryError
from opgen.ops import STUDY, OperatorLibrary

_HEX64 = re.compile(r"[0-9a-f]{64}")
MAX_NAME = 200
# Rows built before issue 31 also carry "spec" (a path or module:obj as the build was given it): it
# is read past, never loaded.
_LEGACY_KEYS = frozenset({"spec"})


@dataclass(frozen=True)
class Ref:
    """A library as data names it: its name (for people) and its content digest (its identity)."""

    name: str
    digest: str

    def as_json(self) -> dict[str, str]:
        return {"name": self.name, "digest": self.digest}

    @property
    def is_study(self) -> bool:
        return self.digest == STUDY.digest

    def __str__(self) -> str:
        return f"{self.name!r} (digest {self.digest[:12]})"


def ref_of(lib: OperatorLibrary) -> Ref:
    return Ref(lib.name, lib.digest)


class RefError(LibraryError):
    """A library reference that is not ``{"name": str, "digest": 64 hex digits}``."""


def parse_ref(value: object, where: str = "library") -> Ref:
    """The :class:`Ref` a JSON value names; :class:`RefError` naming ``where`` and the field
    otherwise. Read as data: nothing in it is loaded, opened or imported."""
    if not isinstance(value, Mapping):
        raise RefError(f"{where}: an object with 'name' and 'digest', got {type(value).__name__}")
    unknown = sorted(str(k)[:40] for k in value if k not in ("name", "digest") and k not in _LEGACY_KEYS)
    if unknown:
        raise RefError(f"{where}: unknown field(s) {', '.join(unknown)} (a library is named by name and digest)")
    name, digest = value.get("name"), value.get("digest")
    if not isinstance(name, str) or not name or len(name) > MAX_NAME:
        raise RefError(f"{where}.name: a non-empty string of at most {MAX_NAME} characters")
    if not isinstance(digest, str) or not _HEX64.fullmatch(digest):
        raise RefError(f"{where}.digest: 64 lowercase hex digits (the library's sha256)")
    return Ref(name, digest)
