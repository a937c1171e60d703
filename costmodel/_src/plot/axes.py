"""Shared set-up of the figures: new pyplot-free axes, palettes, input checks
and the finish of the one-row-per-stage charts."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from costmodel._src.step import algorithms
from costmodel._src.step.result import Estimate

# Stage colours stay the same across figures and plans.
_STAGE_ORDER = algorithms.STAGE_NAMES


def new_axes(ax, figsize):
  """``(figure, axes)``: ``ax``'s figure, or a new pyplot-free figure."""
  if ax is not None:
    return ax.figure, ax
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
  fig = Figure(figsize=figsize, layout="constrained")
  return fig, fig.add_subplot()


def palette_colors(n: int, name: str = "tab10") -> list:
  import matplotlib  # pylint: disable=g-import-not-at-top
  cmap = matplotlib.colormaps[name]
  return [cmap(i % cmap.N) for i in range(n)]


def stage_colors(names: Sequence[str]) -> dict:
  known = list(_STAGE_ORDER) + [n for n in names if n not in _STAGE_ORDER]
  colors = palette_colors(len(known))
  return {n: colors[known.index(n)] for n in names}


def check_estimate(estimate) -> None:
  if not isinstance(estimate, Estimate):
    raise ValueError(f"estimate={type(estimate).__name__} must be a costmodel.Estimate")
  if np.ndim(np.asarray(estimate.start_s)) != 1:
    raise ValueError(f"estimate: start_s has shape {np.shape(estimate.start_s)}; plots need "
                     "a single (unbatched, concrete) Estimate with one value per stage")


def positive_1d(name: str, values) -> np.ndarray:
  a = np.asarray(values, dtype=float)
  if a.ndim != 1 or a.size == 0:
    raise ValueError(f"{name} has shape {a.shape}; it must be a non-empty 1-D sequence")
  if not np.all(np.isfinite(a) & (a > 0)):
    raise ValueError(f"{name}={a.tolist()} must hold finite values > 0 (log axes)")
  return a


def legend_outside(ax) -> None:
  """The legend to the right of the axes, outside them."""
  ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)


def finish_rows(ax, ticks, labels, x_max: float, xlabel: str, title: str) -> None:
  """Finishes a chart of horizontal rows read top down: row labels, the x range
  ``[0, x_max]``, axis label, title, the legend outside and a vertical grid."""
  ax.set_yticks(ticks)
  ax.set_yticklabels(labels)
  ax.invert_yaxis()
  ax.set_xlim(0, x_max)
  ax.set_xlabel(xlabel)
  ax.set_title(title)
  legend_outside(ax)
  ax.grid(axis="x", alpha=0.3)
