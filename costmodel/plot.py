"""Figures of estimates, rooflines, layout searches and validations.

matplotlib is imported when a function is called; each returns a
:class:`matplotlib.figure.Figure` and never shows it.

>>> from costmodel import plot
>>> fig = plot.timeline(cm.estimate(job, plan, cluster))
>>> fig.savefig("step.png")
"""

from costmodel._src.plot.figures import error_plot
from costmodel._src.plot.figures import memory
from costmodel._src.plot.figures import roofline
from costmodel._src.plot.figures import scaling
from costmodel._src.plot.figures import search_trajectory
from costmodel._src.plot.figures import stage_breakdown
from costmodel._src.plot.figures import timeline
from costmodel._src.plot.points import roofline_points

__all__ = (
    "error_plot",
    "memory",
    "roofline",
    "roofline_points",
    "scaling",
    "search_trajectory",
    "stage_breakdown",
    "timeline",
)
