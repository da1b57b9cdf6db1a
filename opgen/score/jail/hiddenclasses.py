"""``hiddenclasses``: the classes of every module outside the allowlist are taken out of their
bases' subclass registries (in the zygote, with :mod:`.imports`), so the classic walk from
``().__class__.__base__.__subclasses__()`` finds no class whose functions' globals hold ``os``
(``os._wrap_close``) and none of ctypes' (whose ``from_address`` reads any memory).

CPython 3.10/3.11 keep those registries in ``tp_subclasses`` (checked against
``object.__subclasses__()`` before use); later CPythons keep built-in types' registries in the
interpreter's state, out of reach: there it is reported missing, and ``full`` does not need it (the
clean zygote leaves such a walk nothing to find).
"""

from __future__ import annotations

import struct
import sys

from .base import Jail, Mechanism
from .imports import ALLOWED_IMPORTS

TYPE_CHECKING = False  # (no ``typing`` in the worker: it would cost every worker start)
if TYPE_CHECKING:
    from typing import Any

# Classes left visible to ``type.__subclasses__`` (walked from ``object``): those of the allowed
# modules and of the interpreter's own harmless internals. The classes of every other module (ctypes,
# _ctypes, os, posix, signal, the import machinery, this worker...) are taken out of their bases'
# subclass registries, so no walk finds them or the functions (and ``__globals__``) they hold.
VISIBLE_CLASS_MODULES = frozenset(ALLOWED_IMPORTS + (
    "_abc", "abc", "_collections", "_collections_abc", "_contextvars", "_functools", "_io", "io", "_operator",
    "_sre", "_thread", "_weakref", "_weakrefset", "weakref", "Token", "codecs", "_codecs", "encodings",
    "encodings.utf_8", "enum", "re._parser", "re._compiler", "re._constants", "re._casefix", "reprlib",
    "keyword", "copyreg", "types", "pickle", "_struct", "_string"))




def _subclass_registry(ctypes: Any, cls: type, offset: int) -> dict | None:
    pointer = ctypes.c_void_p.from_address(id(cls) + offset).value
    if not pointer:
        return None
    registry = ctypes.cast(pointer, ctypes.py_object).value
    return registry if type(registry) is dict else None


# ``PyTypeObject.tp_subclasses`` (CPython 3.10/3.11): a dict {id(subclass): weakref}.
_TP_SUBCLASSES = 45 * 8


def _hide_classes(ctypes: Any) -> bool:
    """Take every class of a module outside VISIBLE_CLASS_MODULES out of its bases' subclass
    registries. Checked on ``object`` first (the registry found must be exactly what
    ``object.__subclasses__()`` lists); False where it cannot be done (another CPython)."""
    if sys.version_info[:2] not in ((3, 10), (3, 11)) or struct.calcsize("P") != 8:
        return False
    try:
        root = _subclass_registry(ctypes, object, _TP_SUBCLASSES)
        if root is None or {id(r()) for r in root.values()} != {id(c) for c in object.__subclasses__()}:
            return False
        seen: dict[int, type] = {}
        todo: list[type] = [object]
        while todo:
            cls = todo.pop()
            for sub in type.__subclasses__(cls):  # type: ignore[var-annotated]
                if id(sub) not in seen:
                    seen[id(sub)] = sub
                    todo.append(sub)
        for found in seen.values():
            if getattr(found, "__module__", None) in VISIBLE_CLASS_MODULES:
                continue
            for base in found.__bases__:
                registry = _subclass_registry(ctypes, base, _TP_SUBCLASSES)
                if registry is not None:
                    registry.pop(id(found), None)
        return all(getattr(c, "__module__", None) in VISIBLE_CLASS_MODULES for c in object.__subclasses__())
    except Exception:
        return False



def setup(jail: Jail) -> bool:
    """The zygote, before the imports are locked (ctypes is still whole)."""
    if not jail.lock_imports:
        return False
    import ctypes  # loaded by the worker already (Jail.lib): a lookup in sys.modules

    return _hide_classes(ctypes)


MECHANISM = Mechanism("hiddenclasses", None, steps=(setup,))
