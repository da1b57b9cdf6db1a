"""Compositional splits with certified divergence (docs/splits.md, issue 26).

- :mod:`opgen.splits.compounds`: a row's atoms and compounds, from its typed trees (defined once).
- :mod:`opgen.splits.divergence`: Chernoff coefficients, atom and compound divergence (DBCA).
- :mod:`opgen.splits.rows`: atoms and compounds of built rows (parquet files, build folders).
- :mod:`opgen.splits.kinds`: the split kinds a recipe names (``split: {kind: ...}``) and their rules.
- :mod:`opgen.splits.mcd`: the maximum-compound-divergence search over a pool of rows.
- :mod:`opgen.splits.certificate`: what a build proves about its split, checked from its files.
"""
