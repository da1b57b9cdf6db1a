"""opgen: synthetic compositional string-operator tasks — build, score, publish."""

__version__ = "0.1.0"
