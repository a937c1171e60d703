"""Figures of one estimate: the step's timeline, memory per GPU by stage and
time by stage and bound (see :mod:`costmodel._src.plot.figures`)."""

from __future__ import annotations

import functools

import numpy as np

from costmodel._src.plot.axes import check_estimate
from costmodel._src.plot.axes import finish_rows
from costmodel._src.plot.axes import legend_outside
from costmodel._src.plot.axes import new_axes
from costmodel._src.plot.axes import palette_colors
from costmodel._src.plot.axes import stage_colors
from costmodel._src.step import algorithms
from costmodel._src.step.result import MEMORY_PARTS
from costmodel._src.step.result import PARTS
from costmodel._src.step.result import Estimate
from costmodel._src.units import GIB

_CHARS_PER_AXES = 110  # characters of 8 pt text across the timeline's axes

_FIGURE_DOC = """
  Args:
    estimate: A concrete, unbatched :class:`Estimate`.
    ax: Axes to draw into (default: a new figure).

  Returns:
    The :class:`matplotlib.figure.Figure`.

  Raises:
    ValueError: for a batched or traced estimate.
"""


def _figure_of_estimate(draw):
  """A figure of one estimate: ``draw(estimate, ax)`` runs on a checked
  estimate (:func:`check_estimate`), and its docstring gains the arguments,
  return value and errors every such figure shares."""

  @functools.wraps(draw)
  def figure(estimate: Estimate, ax=None):
    check_estimate(estimate)
    return draw(estimate, ax)

  figure.__doc__ = draw.__doc__.rstrip() + "\n" + _FIGURE_DOC
  return figure


@_figure_of_estimate
def timeline(estimate: Estimate, ax=None):
  """Gantt chart of one steady-state step: one row per pool, one bar per stage.

  Bars run from ``estimate.start_s`` to ``estimate.end_s`` on the row of the
  stage's pool (a ``cpu`` row is added when a stage runs on the CPU), coloured
  per stage and labelled when wide enough (the legend names every stage). In
  synchronous mode the weight sync also holds the rollout pool; that copy is
  drawn hatched. A vertical line marks the step time. With staleness >= 1 the
  step is the busiest pool's time per step, not the makespan of this timeline.

  """
  start = np.asarray(estimate.start_s, float)
  end = np.asarray(estimate.end_s, float)
  step = float(estimate.step_time_s)
  names, pools = estimate.stage_names, estimate.stage_pools
  cpu = algorithms.CPU_POOL
  rows = list(estimate.pool_names) + ([cpu] if cpu in pools else [])
  gpus = dict(zip(estimate.pool_names, np.asarray(estimate.pool_gpus, float), strict=True))
  colors = stage_colors(names)
  fig, ax = new_axes(ax, (10, 1.2 + 0.7 * len(rows)))
  span = max(step, float(end.max()), 1e-9)
  for i, name in enumerate(names):
    y = rows.index(pools[i])
    width = end[i] - start[i]
    ax.barh(y, width, left=start[i], height=0.6, color=colors[name], edgecolor="black",
            linewidth=0.5, label=name)
    # About _CHARS_PER_AXES characters of 8 pt text fit across the axes.
    for text in (f"{name}\n{width:.1f} s", f"{width:.1f} s"):
      if width / span * _CHARS_PER_AXES >= max(map(len, text.split("\n"))) + 1:
        ax.text(start[i] + width / 2, y, text, ha="center", va="center", fontsize=8)
        break
  sync, gen = algorithms.WEIGHT_SYNC, algorithms.GENERATE
  if estimate.mode.startswith("sync") and sync in names and gen in names:
    i = names.index(sync)
    rollout = pools[names.index(gen)]
    if pools[i] != rollout:
      ax.barh(rows.index(rollout), end[i] - start[i], left=start[i], height=0.6,
              color=colors[sync], edgecolor="black", linewidth=0.5, hatch="//",
              alpha=0.6)
  ax.axvline(step, color="black", linestyle="--", linewidth=1.2, label=f"step {step:.1f} s")
  finish_rows(ax, range(len(rows)),
               [f"{r} ({gpus[r]:.0f} GPUs)" if r in gpus else r for r in rows], 1.03 * span,
               "time within the step (s)", f"{estimate.mode}: step {step:.2f} s")
  ax.set_ylim(len(rows) - 0.5, -0.5)
  return fig


@_figure_of_estimate
def memory(estimate: Estimate, ax=None):
  """Memory per GPU of each GPU stage: 7 stacked parts (GiB) and the limit.

  Parts: weights, gradients, optimizer (including what other roles keep
  resident on the pool), activations, logits, kv_cache, workspace. A black
  tick marks the limit per GPU; a stage that does not fit gets a red outline,
  a red label and the shortfall written above its bar. CPU stages are left
  out.

  """
  idx = [i for i, p in enumerate(estimate.stage_pools) if p != algorithms.CPU_POOL]
  mem = np.asarray(estimate.memory_bytes, float)[idx] / GIB
  limit = np.asarray(estimate.memory_limit_bytes, float)[idx] / GIB
  over = mem.sum(-1) > limit * (1 + 1e-6)
  fig, ax = new_axes(ax, (max(6.0, 1.1 * len(idx) + 2.5), 4.5))
  x = np.arange(len(idx))
  bottom = _stacked_bars(ax, x, mem, MEMORY_PARTS, "Set2", horizontal=False)
  if over.any():
    ax.bar(x[over], bottom[over], 0.7, fill=False, edgecolor="red", linewidth=2.0,
           label="does not fit")
  ax.hlines(limit, x - 0.42, x + 0.42, colors="black", linewidths=2.0, label="limit per GPU")
  for k in np.flatnonzero(over):
    ax.text(x[k], bottom[k], f"+{bottom[k] - limit[k]:.1f}", ha="center", va="bottom",
            color="red", fontsize=8)
  ax.set_xticks(x)
  ax.set_xticklabels([f"{estimate.stage_names[i]} ({estimate.stage_pools[i]})" for i in idx],
                     rotation=30, ha="right", rotation_mode="anchor", fontsize=8)
  for k, tick in enumerate(ax.get_xticklabels()):
    if over[k]:
      tick.set_color("red")
  ax.set_ylim(0, 1.1 * max(float(bottom.max()), float(limit.max())))
  ax.set_ylabel("memory per GPU (GiB)")
  status = "fits" if not over.any() else f"{int(over.sum())} stage(s) do not fit"
  ax.set_title(f"memory per GPU by stage: {status}")
  legend_outside(ax)
  ax.grid(axis="y", alpha=0.3)
  return fig


@_figure_of_estimate
def stage_breakdown(estimate: Estimate, ax=None):
  """Time of each stage split into compute, memory, comm, bubble, overhead.

  One horizontal bar per stage, the 5 parts of ``estimate.time_parts_s``
  stacked, the stage's total written at the end of its bar.

  """
  parts = np.asarray(estimate.time_parts_s, float)
  names = estimate.stage_names
  fig, ax = new_axes(ax, (9, 1.0 + 0.45 * len(names)))
  y = np.arange(len(names))
  left = _stacked_bars(ax, y, parts, PARTS, "Set1", horizontal=True)
  span = max(float(left.max()), 1e-9)
  for k in range(len(names)):
    ax.text(left[k] + 0.01 * span, y[k], f"{left[k]:.1f} s", va="center", fontsize=8)
  finish_rows(ax, y, [f"{n} ({p})" for n, p in zip(names, estimate.stage_pools, strict=True)],
               1.12 * span, "stage time (s)",
               f"time by stage and bound: step {float(estimate.step_time_s):.2f} s")
  return fig


def _stacked_bars(ax, pos, values: np.ndarray, labels, palette: str, horizontal: bool
                  ) -> np.ndarray:
  """Draws ``values`` [bars, parts] as bars of stacked parts at ``pos`` (one
  colour and legend label per part); returns each bar's total."""
  total = np.zeros(len(pos))
  for j, (label, color) in enumerate(zip(labels, palette_colors(len(labels), palette), strict=True)):
    if horizontal:
      ax.barh(pos, values[:, j], 0.7, left=total, color=color, label=label, edgecolor="white",
              linewidth=0.5)
    else:
      ax.bar(pos, values[:, j], 0.7, bottom=total, color=color, label=label, edgecolor="white",
             linewidth=0.5)
    total = total + values[:, j]
  return total
