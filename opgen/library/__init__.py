"""Operator libraries: one home for the value, loading, identity, wire form, store and lookup (issues 25, 31).

A library is a value, :class:`OperatorLibrary` (``opgen.ops``; the study's 25 are :data:`STUDY`),
and its identity is its content digest. What this package owns:

- loading (:mod:`~opgen.library.files`): :func:`load` a spec the user chose (a YAML file,
  ``module:obj``, ``study``), :func:`from_yaml`, :func:`from_import`, :func:`build`,
  :func:`compile_operators`; the canonical library file (:func:`canonical_text`, read back as data
  by :func:`digest_of_file`) a build folder keeps as :data:`LIBRARY_FILE`;
- identity (:mod:`~opgen.library.identity`): :class:`Ref`, ``{name, digest}``, how rows, manifests,
  certificates and cards name a library: never a path or import string that gets loaded;
- the user's store (:mod:`~opgen.library.store`): ``opgen ops add`` and every build register a
  library there by digest;
- the lookup (:mod:`~opgen.library.lookup`): :func:`given` (what the user chose), :func:`library_of`
  (which library a reference means: the given one, the study's or the store's; else
  :class:`UnknownLibrary` or :class:`LibraryMismatch`), :func:`ref_of_truth`,
  :func:`ref_of_manifest`, :func:`ref_of_rows`;
- the wire form to grading processes (:mod:`~opgen.library.wire`).

docs/security.md says who may choose the code opgen runs; docs/operators.md how to write a library.
"""

from __future__ import annotations

from opgen.library import store
from opgen.library.errors import LibraryError, LibraryMismatch, StoreWarning, UnknownLibrary
from opgen.library.files import (
    PARAM_KINDS,
    build,
    canonical_text,
    compile_operators,
    digest_of_file,
    from_import,
    from_yaml,
    load,
)
from opgen.library.identity import Ref, parse_ref, ref_of
from opgen.library.lookup import given, library_of, library_of_rows, ref_of_manifest, ref_of_rows, ref_of_truth
from opgen.ops import STUDY, OperatorLibrary
from opgen.outdir import LIBRARY_FILE

__all__ = ["LIBRARY_FILE", "PARAM_KINDS", "STUDY", "LibraryError", "LibraryMismatch", "OperatorLibrary", "Ref",
           "StoreWarning", "UnknownLibrary", "build", "canonical_text", "compile_operators", "digest_of_file",
           "from_import", "from_yaml", "given", "library_of", "library_of_rows", "load", "parse_ref", "ref_of",
           "ref_of_manifest", "ref_of_rows", "ref_of_truth", "store"]
