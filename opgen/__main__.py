"""``python -m opgen``: the same command line as the ``opgen`` script, without needing it on PATH."""

from opgen.cli import main

if __name__ == "__main__":
    main()
