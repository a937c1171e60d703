"""Figures of estimates, rooflines, searches and validations (matplotlib).

Every function returns a :class:`matplotlib.figure.Figure` and draws into
``ax`` when one is given (then the figure is ``ax.figure``). Figures are made
without :mod:`matplotlib.pyplot`: nothing is shown, no global figure list
grows, and a notebook displays the returned figure. matplotlib is imported
inside the functions, so ``import costmodel`` stays light.

Estimates must be concrete and unbatched (the output of an un-jitted
:func:`costmodel.estimate`, or one element of a batch).
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence

import numpy as np

from costmodel._src.specs.hardware import Hardware
from costmodel._src.step import algorithms
from costmodel._src.step.result import MEMORY_PARTS
from costmodel._src.step.result import PARTS
from costmodel._src.step.result import Estimate
from costmodel._src.units import GIB
from costmodel._src.units import TERA

# Stage colours stay the same across figures and plans.
_STAGE_ORDER = algorithms.STAGE_NAMES
_LABEL_MAX = 20  # error_plot annotates points when there are at most this many
_CHARS_PER_AXES = 110  # characters of 8 pt text across the timeline's axes


def _new_axes(ax, figsize):
  """``(figure, axes)``: ``ax``'s figure, or a new pyplot-free figure."""
  if ax is not None:
    return ax.figure, ax
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
  fig = Figure(figsize=figsize, layout="constrained")
  return fig, fig.add_subplot()


def _palette(n: int, name: str = "tab10") -> list:
  import matplotlib  # pylint: disable=g-import-not-at-top
  cmap = matplotlib.colormaps[name]
  return [cmap(i % cmap.N) for i in range(n)]


def _stage_colors(names: Sequence[str]) -> dict:
  known = list(_STAGE_ORDER) + [n for n in names if n not in _STAGE_ORDER]
  colors = _palette(len(known))
  return {n: colors[known.index(n)] for n in names}


def _check_estimate(estimate) -> None:
  if not isinstance(estimate, Estimate):
    raise ValueError(f"estimate={type(estimate).__name__} must be a costmodel.Estimate")
  if np.ndim(np.asarray(estimate.start_s)) != 1:
    raise ValueError(f"estimate: start_s has shape {np.shape(estimate.start_s)}; plots need "
                     "a single (unbatched, concrete) Estimate with one value per stage")


def _positive_1d(name: str, values) -> np.ndarray:
  a = np.asarray(values, dtype=float)
  if a.ndim != 1 or a.size == 0:
    raise ValueError(f"{name} has shape {a.shape}; it must be a non-empty 1-D sequence")
  if not np.all(np.isfinite(a) & (a > 0)):
    raise ValueError(f"{name}={a.tolist()} must hold finite values > 0 (log axes)")
  return a


def timeline(estimate: Estimate, ax=None):
  """Gantt chart of one steady-state step: one row per pool, one bar per stage.

  Bars run from ``estimate.start_s`` to ``estimate.end_s`` on the row of the
  stage's pool (a ``cpu`` row is added when a stage runs on the CPU), coloured
  per stage and labelled when wide enough (the legend names every stage). In
  synchronous mode the weight sync also holds the rollout pool; that copy is
  drawn hatched. A vertical line marks the step time. With staleness >= 1 the
  step is the busiest pool's time per step, not the makespan of this timeline.

  Args:
    estimate: A concrete, unbatched :class:`Estimate`.
    ax: Axes to draw into (default: a new figure).

  Returns:
    The :class:`matplotlib.figure.Figure`.

  Raises:
    ValueError: for a batched or traced estimate.
  """
  _check_estimate(estimate)
  start = np.asarray(estimate.start_s, float)
  end = np.asarray(estimate.end_s, float)
  step = float(estimate.step_time_s)
  names, pools = estimate.stage_names, estimate.stage_pools
  cpu = algorithms.CPU_POOL
  rows = list(estimate.pool_names) + ([cpu] if cpu in pools else [])
  gpus = dict(zip(estimate.pool_names, np.asarray(estimate.pool_gpus, float), strict=True))
  colors = _stage_colors(names)
  fig, ax = _new_axes(ax, (10, 1.2 + 0.7 * len(rows)))
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
  ax.set_yticks(range(len(rows)))
  ax.set_yticklabels([f"{r} ({gpus[r]:.0f} GPUs)" if r in gpus else r for r in rows])
  ax.invert_yaxis()
  ax.set_ylim(len(rows) - 0.5, -0.5)
  ax.set_xlim(0, 1.03 * span)
  ax.set_xlabel("time within the step (s)")
  ax.set_title(f"{estimate.mode}: step {step:.2f} s")
  ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
  ax.grid(axis="x", alpha=0.3)
  return fig


def memory(estimate: Estimate, ax=None):
  """Memory per GPU of each GPU stage: 7 stacked parts (GiB) and the limit.

  Parts: weights, gradients, optimizer (including what other roles keep
  resident on the pool), activations, logits, kv_cache, workspace. A black
  tick marks the limit per GPU; a stage that does not fit gets a red outline,
  a red label and the shortfall written above its bar. CPU stages are left
  out.

  Args:
    estimate: A concrete, unbatched :class:`Estimate`.
    ax: Axes to draw into (default: a new figure).

  Returns:
    The :class:`matplotlib.figure.Figure`.

  Raises:
    ValueError: for a batched or traced estimate.
  """
  _check_estimate(estimate)
  idx = [i for i, p in enumerate(estimate.stage_pools) if p != algorithms.CPU_POOL]
  mem = np.asarray(estimate.memory_bytes, float)[idx] / GIB
  limit = np.asarray(estimate.memory_limit_bytes, float)[idx] / GIB
  over = mem.sum(-1) > limit * (1 + 1e-6)
  fig, ax = _new_axes(ax, (max(6.0, 1.1 * len(idx) + 2.5), 4.5))
  x = np.arange(len(idx))
  bottom = np.zeros(len(idx))
  colors = _palette(len(MEMORY_PARTS), "Set2")
  for j, (part, color) in enumerate(zip(MEMORY_PARTS, colors, strict=True)):
    ax.bar(x, mem[:, j], 0.7, bottom=bottom, color=color, label=part, edgecolor="white",
           linewidth=0.5)
    bottom = bottom + mem[:, j]
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
  ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
  ax.grid(axis="y", alpha=0.3)
  return fig


def stage_breakdown(estimate: Estimate, ax=None):
  """Time of each stage split into compute, memory, comm, bubble, overhead.

  One horizontal bar per stage, the 5 parts of ``estimate.time_parts_s``
  stacked, the stage's total written at the end of its bar.

  Args:
    estimate: A concrete, unbatched :class:`Estimate`.
    ax: Axes to draw into (default: a new figure).

  Returns:
    The :class:`matplotlib.figure.Figure`.

  Raises:
    ValueError: for a batched or traced estimate.
  """
  _check_estimate(estimate)
  parts = np.asarray(estimate.time_parts_s, float)
  names = estimate.stage_names
  fig, ax = _new_axes(ax, (9, 1.0 + 0.45 * len(names)))
  y = np.arange(len(names))
  left = np.zeros(len(names))
  for j, (part, color) in enumerate(zip(PARTS, _palette(len(PARTS), "Set1"), strict=True)):
    ax.barh(y, parts[:, j], 0.7, left=left, color=color, label=part, edgecolor="white",
            linewidth=0.5)
    left = left + parts[:, j]
  span = max(float(left.max()), 1e-9)
  for k in range(len(names)):
    ax.text(left[k] + 0.01 * span, y[k], f"{left[k]:.1f} s", va="center", fontsize=8)
  ax.set_yticks(y)
  ax.set_yticklabels([f"{n} ({p})" for n, p in zip(names, estimate.stage_pools, strict=True)])
  ax.invert_yaxis()
  ax.set_xlim(0, 1.12 * span)
  ax.set_xlabel("stage time (s)")
  ax.set_title(f"time by stage and bound: step {float(estimate.step_time_s):.2f} s")
  ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
  ax.grid(axis="x", alpha=0.3)
  return fig


def roofline(hardware: Hardware, points=(), ax=None):
  """The roofline of one accelerator, with optional measured or modelled points.

  Attainable FLOP/s at arithmetic intensity I (FLOP per HBM byte) is
  ``min(peak, I * bandwidth)`` (Williams et al. 2009). Solid: the ceiling at
  the best measured efficiencies (``peak * matmul_efficiency_max``,
  ``bandwidth * hbm_efficiency_max``); dashed: the raw peaks.

  Args:
    hardware: The accelerator.
    points: ``(label, intensity_flops_per_byte, achieved_flops_per_s)``
      triples, e.g. from :func:`roofline_points`.
    ax: Axes to draw into (default: a new figure).

  Returns:
    The :class:`matplotlib.figure.Figure` (log-log, y in TFLOP/s).

  Raises:
    ValueError: for a point that is not a triple of a label and two finite
      positive numbers.

  Example:
    >>> fig = roofline(cm.hardware.get("H100"), roofline_points(job, plan, cluster))
  """
  pts = []
  for p in points:
    if not (isinstance(p, Sequence) and len(p) == 3):
      raise ValueError(f"points: {p!r} must be (label, intensity_flops_per_byte, "
                       "achieved_flops_per_s)")
    label, i_fb, rate = p[0], float(p[1]), float(p[2])
    if not (np.isfinite(i_fb) and np.isfinite(rate) and i_fb > 0 and rate > 0):
      raise ValueError(f"points: {label!r} has intensity={i_fb} and achieved={rate}; both "
                       "must be finite and > 0 (log axes)")
    pts.append((str(label), i_fb, rate))
  peak = float(hardware.peak_flops_per_s)
  bw = float(hardware.hbm_bandwidth_bytes_per_s)
  peak_eff = peak * float(hardware.matmul_efficiency_max)
  bw_eff = bw * float(hardware.hbm_efficiency_max)
  ridge = peak / bw
  xs = [ridge / 1e2, ridge * 30] + [p[1] for p in pts]
  lo, hi = 10 ** np.floor(np.log10(min(xs))), 10 ** np.ceil(np.log10(max(xs)))
  fig, ax = _new_axes(ax, (7, 5))
  for p_s, b_s, style, label in ((peak, bw, "--", "peak"),
                                 (peak_eff, bw_eff, "-", "best measured efficiency")):
    r = p_s / b_s
    x = np.array([lo, r, hi])
    ax.plot(x, np.minimum(p_s, x * b_s) / TERA, style, color="black", linewidth=1.5,
            label=f"{label}: {p_s / TERA:,.0f} TFLOP/s, {b_s / 1e9:,.0f} GB/s")
  colors = _palette(max(len(pts), 1))
  for k, (label, i_fb, rate) in enumerate(pts):
    ax.scatter([i_fb], [rate / TERA], color=colors[k], s=40, zorder=3, label=label)
    # Labels of points within 0.1 decade of each other stack downwards.
    near = sum(abs(np.log10(i_fb / q[1])) < 0.1 and abs(np.log10(rate / q[2])) < 0.1
               for q in pts[:k])
    ax.annotate(label, (i_fb, rate / TERA), textcoords="offset points",
                xytext=(6, -12 * (near + 1)), fontsize=8, color=colors[k])
  ax.set_xscale("log")
  ax.set_yscale("log")
  ax.set_xlim(lo, hi)
  ax.set_xlabel("arithmetic intensity (FLOP/byte of HBM traffic)")
  ax.set_ylabel("attainable (TFLOP/s)")
  ax.set_title(f"{hardware.name} roofline (ridge {ridge:.0f} FLOP/byte at peak)")
  ax.legend(loc="lower right", fontsize=8)
  ax.grid(True, which="major", alpha=0.3)
  return fig


def search_trajectory(history: Mapping, optima: Mapping | None = None, ax=None):
  """Best relaxed step time against optimisation step, one line per family.

  Args:
    history: Placement family -> 1-D array of the best relaxed step time (s)
      after each optimisation step. Non-finite entries (diverged starts) are
      left as gaps.
    optima: Optional label -> step time (s) drawn as horizontal lines, e.g.
      ``{"rounded": 41.2, "exhaustive": 40.8}``.
    ax: Axes to draw into (default: a new figure).

  Returns:
    The :class:`matplotlib.figure.Figure`; the y axis is logarithmic when
    the values span more than a factor of 10.

  Raises:
    ValueError: for an empty ``history``, a family whose array is empty, not
      1-D or has no finite value, or an ``optima`` value that is not finite.
  """
  if not isinstance(history, Mapping) or not history:
    raise ValueError(f"history={history!r} must be a non-empty dict family -> 1-D array")
  series = {}
  for family, values in history.items():
    a = np.asarray(values, dtype=float)
    if a.ndim != 1 or a.size == 0 or not np.isfinite(a).any():
      raise ValueError(f"history[{family!r}] has shape {a.shape}; it must be a non-empty "
                       "1-D array with at least one finite step time")
    series[str(family)] = np.where(np.isfinite(a), a, np.nan)
  optima = dict(optima or {})
  for label, v in optima.items():
    if not np.isfinite(float(v)):
      raise ValueError(f"optima[{label!r}]={v!r} must be finite")
  fig, ax = _new_axes(ax, (8, 4.5))
  colors = _palette(len(series))
  for k, (family, a) in enumerate(series.items()):
    ax.plot(np.arange(a.size), a, color=colors[k], linewidth=1.5,
            label=f"{family} (best {np.nanmin(a):.2f} s)")
  for k, (label, v) in enumerate(optima.items()):
    ax.axhline(float(v), color="black", linestyle=("--", ":", "-.")[k % 3], linewidth=1.0,
               label=f"{label}: {float(v):.2f} s")
  values = np.concatenate([a[np.isfinite(a)] for a in series.values()]
                          + [np.asarray(list(optima.values()), float)])
  if values.min() > 0 and values.max() / values.min() > 10:
    ax.set_yscale("log")
  ax.set_xlabel("optimisation step")
  ax.set_ylabel("best relaxed step time (s)")
  ax.set_title("layout search by placement family")
  ax.legend(fontsize=8)
  ax.grid(True, alpha=0.3)
  return fig


def error_plot(predicted, published, labels=None, groups=None, ax=None,
               quantity: str = "step time (s)"):
  """Predicted against published values on log-log axes.

  Draws ``y = x``, shaded bands for +-10% and +-20%, one colour per group,
  and the labels next to the points when there are at most 20 of them. The
  title gives the median absolute relative error ``median |pred / pub - 1|``.

  Args:
    predicted: Predicted values.
    published: Published values, same length.
    labels: Optional name per point.
    groups: Optional group per point (e.g. the source paper); colours.
    ax: Axes to draw into (default: a new figure).
    quantity: What is compared, with its unit, for the axis labels.

  Returns:
    The :class:`matplotlib.figure.Figure`.

  Raises:
    ValueError: naming the argument for mismatched lengths or values that
      are not finite and positive.
  """
  pred = _positive_1d("predicted", predicted)
  pub = _positive_1d("published", published)
  if pred.size != pub.size:
    raise ValueError(f"predicted has {pred.size} values but published has {pub.size}; "
                     "they must match")
  for name, seq in (("labels", labels), ("groups", groups)):
    if seq is not None and len(seq) != pred.size:
      raise ValueError(f"{name} has {len(seq)} entries but predicted has {pred.size}; "
                       "they must match")
  groups = list(groups) if groups is not None else [""] * pred.size
  fig, ax = _new_axes(ax, (6, 6))
  lo = min(pred.min(), pub.min()) / 1.5
  hi = max(pred.max(), pub.max()) * 1.5
  x = np.geomspace(lo, hi, 50)
  for band, alpha in ((0.2, 0.15), (0.1, 0.3)):
    ax.fill_between(x, x * (1 - band), x * (1 + band), color="tab:green", alpha=alpha,
                    linewidth=0, label=f"\u00b1{band:.0%}")
  ax.plot(x, x, color="black", linewidth=1.0, label="y = x")
  names = list(dict.fromkeys(groups))
  colors = _palette(len(names))
  for k, g in enumerate(names):
    sel = np.array([gg == g for gg in groups])
    ax.scatter(pub[sel], pred[sel], color=colors[k], s=30, zorder=3,
               label=str(g) if g != "" else None, edgecolor="black", linewidth=0.4)
  if labels is not None and pred.size <= _LABEL_MAX:
    for k, lab in enumerate(labels):
      ax.annotate(str(lab), (pub[k], pred[k]), textcoords="offset points", xytext=(4, 4),
                  fontsize=7)
  ax.set_xscale("log")
  ax.set_yscale("log")
  ax.set_xlim(lo, hi)
  ax.set_ylim(lo, hi)
  ax.set_aspect("equal")
  ax.set_xlabel(f"published {quantity}")
  ax.set_ylabel(f"predicted {quantity}")
  err = np.abs(pred / pub - 1.0)
  ax.set_title(f"{pred.size} points: median |error| {np.median(err):.1%}, "
               f"{np.mean(err <= 0.2):.0%} within 20%")
  ax.legend(loc="upper left", fontsize=8)
  ax.grid(True, which="major", alpha=0.3)
  return fig


def scaling(gpus, step_times, ax=None, labels=None, ideal: bool = True):
  """Step time against GPU count (log-log), one line per series.

  Args:
    gpus: GPU counts (x), shared by every series.
    step_times: One series (1-D, same length as ``gpus``), a list of them
      or a 2-D array ``[series, len(gpus)]``, or a dict label -> series.
    ax: Axes to draw into (default: a new figure).
    labels: Names of the series (default: the dict's keys, or none).
    ideal: Also draw perfect scaling (time proportional to 1 / GPUs) from
      the first series' first point, dotted.

  Returns:
    The :class:`matplotlib.figure.Figure`.

  Raises:
    ValueError: naming the argument for a series whose length differs from
      ``gpus``, a ``labels`` of the wrong length, or values that are not
      finite and positive.
  """
  x = _positive_1d("gpus", gpus)
  if isinstance(step_times, Mapping):
    labels = list(step_times) if labels is None else labels
    step_times = list(step_times.values())
  if isinstance(step_times, str) or not isinstance(step_times, (Sequence, np.ndarray)) or (
      len(step_times) == 0):
    raise ValueError(f"step_times={step_times!r} must be a non-empty series or list of series")
  series = [step_times] if np.ndim(step_times[0]) == 0 else list(step_times)
  ys = []
  for k, s in enumerate(series):
    y = _positive_1d(f"step_times[{k}]", s)
    if y.size != x.size:
      raise ValueError(f"step_times[{k}] has {y.size} values but gpus has {x.size}; "
                       "they must match")
    ys.append(y)
  if labels is not None and len(labels) != len(ys):
    raise ValueError(f"labels has {len(labels)} entries for {len(ys)} series; they must match")
  fig, ax = _new_axes(ax, (7, 4.5))
  colors = _palette(len(ys))
  for k, y in enumerate(ys):
    ax.plot(x, y, "o-", color=colors[k], linewidth=1.5, markersize=4,
            label=str(labels[k]) if labels is not None else None)
  if ideal:
    ax.plot(x, ys[0][0] * x[0] / x, ":", color="gray", linewidth=1.0, label="ideal (1/GPUs)")
  from matplotlib import ticker  # pylint: disable=g-import-not-at-top
  ax.set_xscale("log", base=2)
  ax.set_yscale("log")
  ax.set_xticks(x)
  plain = ticker.FuncFormatter(lambda v, _: f"{v:g}")
  ax.xaxis.set_major_formatter(plain)
  ax.xaxis.set_minor_formatter(ticker.NullFormatter())
  ax.yaxis.set_major_formatter(plain)
  ax.yaxis.set_minor_locator(ticker.LogLocator(base=10.0, subs=(2.0, 5.0)))
  ax.yaxis.set_minor_formatter(plain)
  ax.set_xlabel("GPUs")
  ax.set_ylabel("step time (s)")
  ax.set_title("step time against cluster size")
  if labels is not None or ideal:
    ax.legend(fontsize=8)
  ax.grid(True, which="both", alpha=0.3)
  return fig
