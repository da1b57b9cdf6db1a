"""``imports``: the import allowlist, enforced in the zygote before the first request.

``builtins.__import__`` serves only :data:`ALLOWED_IMPORTS` (the preloaded pure modules, and the
harmless ones every worker has loaded and answers did import before) from a dict of its own;
``sys.modules`` holds only them; the import machinery has no finder, hook, loader or spec left, and
``_imp``'s loaders are gone (the extension cache would hand back ``_ctypes`` without its file);
ctypes' namespace is emptied. So no route — ``import``, ``__import__``, ``sys.modules``,
``importlib``, ``_imp``, a loader, ``__builtins__`` — reaches ctypes, gc, marshal, os, signal,
resource, select... :mod:`.hiddenclasses` takes the classes of every other module out of sight.
"""

from __future__ import annotations

import builtins
import re
import sys

from .base import Jail, Mechanism

TYPE_CHECKING = False  # (no ``typing`` in the worker: it would cost every worker start)
if TYPE_CHECKING:
    from typing import Any

RISK = ("model code can import every module the sandbox loaded (ctypes, gc, marshal, os, signal...), not only the "
        "documented allowlist")
# Modules model code commonly imports: loaded before the chroot, after which nothing can be read
# from disk (an import of anything else fails inside the sandbox, as it should).
# Each module makes every fork a little slower (more pages to map), so the list stays short.
PRELOAD = ("bisect", "collections", "collections.abc", "functools", "heapq", "itertools", "math", "operator", "re",
           "string", "unicodedata")
# The modules model code may import (ALL others fail, whatever the route: ``import``, ``__import__``,
# ``sys.modules``, the import machinery, the classes ``object.__subclasses__()`` lists): the preloaded
# pure modules and the harmless ones every worker has loaded anyway, which answers did import
# before (``from __future__ import annotations``, ``sys.setrecursionlimit``, ``time``...). Not:
# ctypes, _ctypes, gc, marshal, os, posix, signal, resource, select, platform, importlib, _imp...
ALLOWED_IMPORTS = PRELOAD + ("__future__", "abc", "builtins", "codecs", "copyreg", "enum", "io",
                             "keyword", "reprlib", "struct", "sys", "time", "types")


def preload() -> None:
    """The serving worker, first: import what model code may import (before the chroot)."""
    for name in PRELOAD:
        __import__(name)


def _typing_stand_in() -> Any:
    """The module ``import typing`` gets in the sandbox: annotations only. The real ``typing`` imports
    ``contextlib``, which holds ``os``; answers that annotate (``from typing import List, Optional``)
    must still run, so this stand-in maps the common names onto builtins, ``collections`` and
    ``collections.abc`` (subscriptable since 3.9) and the rest onto one inert form that takes any
    subscript, call or ``|``. Its functions run with a globals dict of their own (builtins only): nothing of
    this worker is reachable through them."""
    import collections
    import collections.abc as abc

    space: dict = {"__builtins__": builtins}  # reachable from model code anyway

    def fresh(fn: Any) -> Any:
        return type(fn)(fn.__code__, space, fn.__name__, fn.__defaults__)

    def _init(self: Any, name: Any = "form", *args: Any, **kwargs: Any) -> None:
        self.name = name

    def _same(self: Any, *args: Any, **kwargs: Any) -> Any:
        return self

    def _repr(self: Any) -> str:
        return "typing." + str(self.name)

    def _cast(tp: Any, value: Any) -> Any:
        return value

    def _new_type(name: Any, tp: Any) -> Any:
        return tp

    def _identity(fn: Any) -> Any:
        return fn

    form = type("_Form", (), {"__module__": "typing", "__slots__": ("name",), "__init__": fresh(_init),
                              "__getitem__": fresh(_same), "__call__": fresh(_same), "__or__": fresh(_same),
                              "__ror__": fresh(_same), "__repr__": fresh(_repr)})
    module = type(sys)("typing")
    names: dict[str, Any] = {
        "List": list, "Dict": dict, "Set": set, "FrozenSet": frozenset, "Tuple": tuple, "Type": type,
        "Text": str, "DefaultDict": collections.defaultdict, "Deque": collections.deque,
        "Counter": collections.Counter, "OrderedDict": collections.OrderedDict, "ChainMap": collections.ChainMap,
        "Pattern": re.Pattern, "Match": re.Match, "TYPE_CHECKING": False, "TypeVar": form,
        "cast": fresh(_cast), "NewType": fresh(_new_type), "overload": fresh(_identity),
        "no_type_check": fresh(_identity), "final": fresh(_identity),
    }
    names["AbstractSet"] = abc.Set
    for name in ("Iterable", "Iterator", "Sequence", "MutableSequence", "Mapping", "MutableMapping", "MutableSet",
                 "Collection", "Container", "Callable", "Generator", "Hashable",
                 "Sized", "Reversible", "KeysView", "ValuesView", "ItemsView"):
        names[name] = getattr(abc, name)
    for name in ("Any", "Union", "Optional", "Literal", "Final", "ClassVar", "NoReturn", "Never", "Annotated",
                 "TypeAlias", "AnyStr", "SupportsInt", "SupportsFloat", "SupportsIndex"):
        names[name] = form(name)
    vars(module).update(names)
    return module


_MODULES: dict = {}  # (what _guarded_import reads: its own globals hold the allowed modules, see setup)


def _guarded_import(name: str, globals: object = None, locals: object = None, fromlist: object = (),
                    level: int = 0) -> object:
    # Runs with a globals dict of its own (setup): _MODULES, the allowed modules only.
    module = _MODULES.get(name) if level == 0 and type(name) is str else None
    if module is None:
        raise ImportError(f"import of {name!r} is not allowed in the sandbox", name=name)
    if not fromlist and "." in name:
        return _MODULES[name.partition(".")[0]]
    return module


def prepare(jail: Jail) -> None:
    """The zygote, first: the modules the guard will serve (``typing`` as a stand-in), chosen while
    every module is still importable."""
    if jail.lock_imports:
        jail.allowed = {name: sys.modules[name] for name in ALLOWED_IMPORTS if name in sys.modules}
        jail.allowed["typing"] = _typing_stand_in()


def setup(jail: Jail) -> bool:
    """The zygote, before any child (after :mod:`.hiddenclasses`, which needs ctypes): only
    ALLOWED_IMPORTS can be imported from here on. The modules' loaders and specs (a way to the
    machinery's globals) are dropped; ctypes' namespace is emptied (the zygote keeps only the few
    functions it calls, on the jail, and each child drops those too). Each child then empties the
    worker modules' globals before model code runs (child.py)."""
    if not jail.lock_imports:
        return False
    modules = jail.allowed
    for module in list(sys.modules.values()) + [builtins, sys]:
        for attr in ("__loader__", "__spec__"):
            try:
                setattr(module, attr, None)
            except Exception:
                pass
    sys.meta_path.clear()
    sys.path_hooks.clear()
    sys.path_importer_cache.clear()
    sys.path.clear()
    imp = sys.modules.get("_imp")
    if imp is not None:
        for attr in [a for a in vars(imp) if not a.startswith("__")]:
            setattr(imp, attr, None)
    for name in ("_frozen_importlib", "_frozen_importlib_external"):
        machinery = sys.modules.get(name)
        if machinery is not None:
            space = vars(machinery)
            for attr in ("_os", "_imp", "marshal", "_io", "sys", "_thread", "_warnings", "_weakref", "winreg",
                         "posix", "_bootstrap", "_bootstrap_external", "_pathseps_with_colon"):
                if attr in space:
                    space[attr] = None
    guard_globals = {"__builtins__": builtins, "_MODULES": modules, "ImportError": ImportError, "type": type,
                     "str": str}
    make: Any = type(_guarded_import)  # types.FunctionType
    guard = make(_guarded_import.__code__, guard_globals, "__import__", _guarded_import.__defaults__)
    builtins.__import__ = guard
    for name in [n for n in sys.modules if n.startswith("ctypes")]:
        vars(sys.modules[name]).clear()
    sys.modules.clear()
    sys.modules.update(modules)
    return builtins.__import__ is guard and not sys.modules.keys() - modules.keys()


MECHANISM = Mechanism("imports", "imports", RISK, steps=(prepare, setup))

