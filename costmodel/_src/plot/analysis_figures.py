"""Figures beyond one estimate: an accelerator's roofline, a search's
trajectory, predictions against published values, and scaling with GPUs (see
:mod:`costmodel._src.plot.figures`)."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence

import numpy as np

from costmodel._src.plot.axes import new_axes
from costmodel._src.plot.axes import palette_colors
from costmodel._src.plot.axes import positive_1d
from costmodel._src.specs.hardware import Hardware
from costmodel._src.units import TERA

_LABEL_MAX = 20  # error_plot annotates points when there are at most this many


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
  fig, ax = new_axes(ax, (7, 5))
  for p_s, b_s, style, label in ((peak, bw, "--", "peak"),
                                 (peak_eff, bw_eff, "-", "best measured efficiency")):
    r = p_s / b_s
    x = np.array([lo, r, hi])
    ax.plot(x, np.minimum(p_s, x * b_s) / TERA, style, color="black", linewidth=1.5,
            label=f"{label}: {p_s / TERA:,.0f} TFLOP/s, {b_s / 1e9:,.0f} GB/s")
  colors = palette_colors(max(len(pts), 1))
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
                       "1-D array with at least one finite step time (a search whose "
                       "relaxed phase did not run, result.relaxed False, has none)")
    series[str(family)] = np.where(np.isfinite(a), a, np.nan)
  optima = dict(optima or {})
  for label, v in optima.items():
    if not np.isfinite(float(v)):
      raise ValueError(f"optima[{label!r}]={v!r} must be finite")
  fig, ax = new_axes(ax, (8, 4.5))
  colors = palette_colors(len(series))
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
  pred = positive_1d("predicted", predicted)
  pub = positive_1d("published", published)
  if pred.size != pub.size:
    raise ValueError(f"predicted has {pred.size} values but published has {pub.size}; "
                     "they must match")
  for name, seq in (("labels", labels), ("groups", groups)):
    if seq is not None and len(seq) != pred.size:
      raise ValueError(f"{name} has {len(seq)} entries but predicted has {pred.size}; "
                       "they must match")
  groups = list(groups) if groups is not None else [""] * pred.size
  fig, ax = new_axes(ax, (6, 6))
  lo = min(pred.min(), pub.min()) / 1.5
  hi = max(pred.max(), pub.max()) * 1.5
  x = np.geomspace(lo, hi, 50)
  for band, alpha in ((0.2, 0.15), (0.1, 0.3)):
    ax.fill_between(x, x * (1 - band), x * (1 + band), color="tab:green", alpha=alpha,
                    linewidth=0, label=f"\u00b1{band:.0%}")
  ax.plot(x, x, color="black", linewidth=1.0, label="y = x")
  names = list(dict.fromkeys(groups))
  colors = palette_colors(len(names))
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
  x = positive_1d("gpus", gpus)
  if isinstance(step_times, Mapping):
    labels = list(step_times) if labels is None else labels
    step_times = list(step_times.values())
  if isinstance(step_times, str) or not isinstance(step_times, (Sequence, np.ndarray)) or (
      len(step_times) == 0):
    raise ValueError(f"step_times={step_times!r} must be a non-empty series or list of series")
  series = [step_times] if np.ndim(step_times[0]) == 0 else list(step_times)
  ys = []
  for k, s in enumerate(series):
    y = positive_1d(f"step_times[{k}]", s)
    if y.size != x.size:
      raise ValueError(f"step_times[{k}] has {y.size} values but gpus has {x.size}; "
                       "they must match")
    ys.append(y)
  if labels is not None and len(labels) != len(ys):
    raise ValueError(f"labels has {len(labels)} entries for {len(ys)} series; they must match")
  fig, ax = new_axes(ax, (7, 4.5))
  colors = palette_colors(len(ys))
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
