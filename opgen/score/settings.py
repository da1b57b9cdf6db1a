"""How a response is graded: one frozen record of the grading options, checked once.

Every entry point that grades (``opgen.score.grade``, ``score_files``, verl's ``compute_score*``,
``opgen.score_answers``/``score_answer``, the adapters, ``opgen score``/``opgen eval``) builds one
:class:`GradeSettings` from its options at its edge and hands that record down; nothing below the
edge takes the options one by one. A grading process (``python -m opgen.score.batch``) receives the
record as the plain dict :meth:`GradeSettings.to_wire` (a ``marshal`` payload, no pickle) and reads
it back with :meth:`GradeSettings.from_wire`, which checks it again.

This module imports the standard library, opgen.errors, opgen.choices and opgen.library (the
library's value and wire form) only (a grading process loads it).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from opgen.choices import GRADE_CHOICES as CHOICES
from opgen.choices import GRADE_FLAGS as FLAGS
from opgen.choices import GROUP_POLICIES, MODES, NAMESPACES, POLICIES
from opgen.errors import OpgenError
from opgen.library import STUDY, OperatorLibrary, given, library_of, ref_of_truth, wire
from opgen.truth import parse

# The choices of each text option, by field name, and the flags: their home is opgen.choices (the
# CLI's choices are these, read there without loading the scorer).
__all__ = ["CHOICES", "FLAGS", "GROUP_POLICIES", "MODES", "NAMESPACES", "POLICIES", "GradeSettings", "SettingsError"]


class SettingsError(ValueError, OpgenError):
    """A grading option that is not valid; the message names the option."""

    exit_code = 2


@dataclass(frozen=True)
class GradeSettings:
    """The grading options (docs/scoring.md).

    ``policy``: reward output match only (``output``) or output and structure
    (``output_structure``); ``group``: a group row's score as the fraction of its tasks correct
    (``fraction``) or 1 only when all are (``all``); ``mode``: ``auto`` follows the ground truth,
    ``forward``/``program`` force one (native rows are always forward); ``namespace``: ``strict``
    runs programs on their own, ``native`` binds first what the native benchmark's module had
    imported; ``static``: programs of library code only are evaluated without running them
    (False: every program runs in the sandbox; the same grades); ``diagnose``: the recall
    diagnostics (False: none are computed); ``returned``: each task's entry carries ``returned``,
    what the program returned (None when it raised or did not run), for execution feedback
    (opgen.episode; False: no entry has it, as before); ``library``: the operator library grading
    reads (the study's by default). Entry points put a row's library here (opgen.library.library_of);
    one built with another library than the study's counts as the user's choice there."""

    policy: str = "output"
    group: str = "fraction"
    mode: str = "auto"
    namespace: str = "strict"
    static: bool = True
    diagnose: bool = True
    returned: bool = False
    # The operator library (docs/scoring.md, "Your own operator library"); the study's wire form
    # names none, so its grades and payloads are those of before libraries.
    library: OperatorLibrary = STUDY

    def __post_init__(self) -> None:
        if not isinstance(self.library, OperatorLibrary):
            raise SettingsError(f"library must be an opgen OperatorLibrary (entry points load a spec given as "
                                f"library=), got {type(self.library).__name__}")
        for name, allowed in CHOICES.items():
            value = getattr(self, name)
            if not isinstance(value, str) or value not in allowed:
                raise SettingsError(f"{name} must be one of {allowed}, got {value!r}")
        for name in FLAGS:
            flag = getattr(self, name)
            if not isinstance(flag, bool):  # a string "false" must not read as true
                raise SettingsError(f"{name} must be true or false, got {flag!r}")

    def for_row(self, ground_truth: object, where: str = "", *, env: bool = False) -> GradeSettings:
        """This record with the library a row is graded with (opgen.library.library_of): the one
        given (this record's, when it is not the study's; else, with ``env``, ``OPGEN_LIBRARY``) when
        the row names its digest, else the study's or the user's store's entry of the digest the
        row names. Raises GroundTruthError (a malformed ground truth), UnknownLibrary or
        LibraryMismatch (``where`` prefixes them): a row is never graded 0 for want of its library."""
        chosen = given(None if self.library.is_study else self.library, env=env)
        lib = library_of(ref_of_truth(parse(ground_truth)), chosen, where)
        return self if lib is self.library else replace(self, library=lib)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The options' names, in the record's order."""
        return tuple(f.name for f in fields(cls))

    def to_wire(self) -> dict:
        """The record as a dict of plain values (str and bool; the library as the plain dict of
        :func:`opgen.library.wire.to_wire`, present only for a user library, and ``returned`` only
        when set: the default wire form is the options it always was), what a grading process receives."""
        out: dict = {name: getattr(self, name) for name in self.names()
                     if name != "library" and (name != "returned" or self.returned)}
        if not self.library.is_study:
            out["library"] = wire.to_wire(self.library)
        return out

    @classmethod
    def from_wire(cls, payload: object) -> GradeSettings:
        """The record of :meth:`to_wire`'s dict; a dict with other keys, or values that are not
        valid, raises :class:`SettingsError`."""
        if not isinstance(payload, dict):
            raise SettingsError(f"grading settings must be a dict, got {type(payload).__name__}")
        unknown = sorted(map(str, set(payload) - set(cls.names())))
        if unknown:
            raise SettingsError(f"unknown grading settings: {', '.join(unknown)} (known: {', '.join(cls.names())})")
        if isinstance(payload.get("library"), dict):
            payload = {**payload, "library": wire.from_wire(payload["library"])}
        elif "library" in payload:
            raise SettingsError(f"library on the wire must be a dict, got {type(payload['library']).__name__}")
        return cls(**payload)

    @classmethod
    def resolve(cls, settings: GradeSettings | None = None, **options: object) -> GradeSettings:
        """The record a public entry point grades with: ``settings`` when given (then every loose
        option must be left at its default: giving both is an error naming the options), else the
        record of the loose ``options``. ``library`` may be a spec the user gave (loaded here, the
        user's own file or module) or None (the study's)."""
        unknown = sorted(set(options) - set(cls.names()))
        if unknown:
            raise TypeError(f"unknown grading settings: {', '.join(unknown)} (known: {', '.join(cls.names())})")
        if "library" in options:  # a spec the user gave: their own file or module (LibraryError if it fails)
            options["library"] = given(options["library"]) or STUDY  # type: ignore[arg-type]
        if settings is None:
            return cls(**options)  # type: ignore[arg-type]
        if not isinstance(settings, GradeSettings):
            raise SettingsError(f"settings must be a GradeSettings, got {type(settings).__name__}")
        default = cls()
        loose = sorted(k for k, v in options.items() if not _same(v, getattr(default, k)))
        if loose:
            raise SettingsError(f"give settings= or the options {', '.join(loose)}, not both")
        return settings


def _same(a: object, b: object) -> bool:
    return type(a) is type(b) and a == b


DEFAULT = GradeSettings()
