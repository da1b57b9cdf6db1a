# expect: wrong_output exception
import sys


def main_solution(x):
    # Around the import statement: the machinery's built-in loader, the extension cache, sys.modules.
    for attempt in (lambda: sys.modules["posix"], lambda: sys.modules["_frozen_importlib"]._imp.create_builtin,
                    lambda: sys.modules["math"].__loader__.create_module):
        try:
            found = attempt()
        except Exception:
            continue
        return repr(found)
    return x
