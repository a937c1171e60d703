"""Figures of estimates, rooflines, searches and validations (matplotlib).

Every function returns a :class:`matplotlib.figure.Figure` and draws into
``ax`` when one is given (then the figure is ``ax.figure``). Figures are made
without :mod:`matplotlib.pyplot`: nothing is shown, no global figure list
grows, and a notebook displays the returned figure. matplotlib is imported
inside the functions, so ``import costmodel`` stays light.

Estimates must be concrete and unbatched (the output of an un-jitted
:func:`costmodel.estimate`, or one element of a batch).

The figures of one estimate live in :mod:`costmodel._src.plot.estimate_figures`,
the others in :mod:`costmodel._src.plot.analysis_figures`.
"""

from __future__ import annotations

from costmodel._src.plot.analysis_figures import error_plot
from costmodel._src.plot.analysis_figures import roofline
from costmodel._src.plot.analysis_figures import scaling
from costmodel._src.plot.analysis_figures import search_trajectory
from costmodel._src.plot.estimate_figures import memory
from costmodel._src.plot.estimate_figures import stage_breakdown
from costmodel._src.plot.estimate_figures import timeline

__all__ = ("error_plot", "memory", "roofline", "scaling", "search_trajectory",
           "stage_breakdown", "timeline")
