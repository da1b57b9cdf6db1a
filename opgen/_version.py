"""opgen's version, in one place: the package metadata (pyproject.toml), ``opgen.__version__`` and
every row's ``extra_info.opgen_version`` read it from here.

A leaf module: opgen's modules import the version from here, not from the package ``opgen``,
whose lazily loaded notebook API imports them back (tests/test_import_cycles.py).
"""

__version__ = "0.3.0"
