"""The two heavy libraries of the reports, imported on first use: pandas (tables,
about 0.5 s) and matplotlib (figures, about 1 s). Every ``psbench`` command
imports the modules that use them, so importing them at the top would make
``psbench --help`` and every one-line error wait for both."""
from __future__ import annotations


def frame(*args, **kwargs):
    """``pandas.DataFrame(*args, **kwargs)``."""
    import pandas as pd  # deliberately lazy: see the module docstring

    return pd.DataFrame(*args, **kwargs)


def pyplot():
    """matplotlib.pyplot on the Agg backend (files only, no display)."""
    import matplotlib  # deliberately lazy: see the module docstring

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after use("Agg"), which must come first

    return plt
