"""The sandbox worker's script: ``python -I -S .../opgen/score/jail/__main__.py ARGS`` (see worker.py).

``-I -S``: no directory of the caller, no site-packages, no ``PYTHON*`` variable; the scorer also
gives it an empty environment and ``/`` as its working directory. The one directory added is the
one holding this package, after the standard library's, for ``import jail`` alone.
"""

import os
import sys

if __name__ == "__main__":
    sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from jail import base, worker

    _start = None
    try:
        worker.main(sys.argv)
    except base.ChildStart as _started:  # a child of the zygote: its stack is unwound to here
        _start = _started.args[0]
        _started.__traceback__ = None
        del _started
    if _start is not None:
        worker.start_child(_start)
