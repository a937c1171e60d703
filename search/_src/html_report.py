"""A self-contained HTML page of one plan: its settings, the settings each
framework would run, the stage timeline, memory per GPU and the comparison
with the rules of thumb. Figures are :mod:`costmodel.plot`'s, embedded as
base64 PNG, so the page is one file to share.
"""

from __future__ import annotations

import base64
import html
import io

import numpy as np

import costmodel as cm
from costmodel import plot
import export
from search._src import framework_settings
from search._src.result import SearchResult


def png_data_uri(fig) -> str:
  """A matplotlib figure as a ``data:image/png;base64,...`` URI."""
  buf = io.BytesIO()
  fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
  return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _rules_figure(step_s: float, rules: tuple[SearchResult, ...]):
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
  names = ["this plan"] + [r.method for r in rules]
  times = [step_s] + [float(r.best_estimate.step_time_s) if r.best_estimate is not None
                      else np.nan for r in rules]
  fig = Figure(figsize=(6, 0.5 + 0.45 * len(names)))
  ax = fig.add_subplot()
  ax.barh(names[::-1], [0 if np.isnan(t) else t for t in times[::-1]],
          color=["#888"] * len(rules) + ["#1f77b4"])
  for i, t in enumerate(times[::-1]):
    ax.text(0 if np.isnan(t) else t, i, " no plan fits" if np.isnan(t) else f" {t:.1f} s",
            va="center", fontsize=8)
  ax.set_xlabel("step time (s)")
  ax.set_title("rules of thumb")
  return fig


def _table(rows: list[tuple], head: tuple) -> str:
  cells = "".join(f"<th>{html.escape(str(h))}</th>" for h in head)
  body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>"
                 for r in rows)
  return f"<table><tr>{cells}</tr>{body}</table>"


def _layout_rows(plan: cm.Plan) -> list[tuple]:
  s = export.plan_settings(plan)
  rows = []
  for role, r in s["roles"].items():
    for phase in ("train", "infer"):
      lay = r[phase]
      if lay is None:
        continue
      rows.append((role, phase, r["pool"], *(lay[k] for k in (
          "tp", "pp", "cp", "ep", "vpp", "micro_batch", "zero_stage", "recompute", "offload"))))
  return rows


def render(job: cm.RLJob, cluster: cm.Cluster, plan: cm.Plan, estimate: cm.Estimate,
           rules: tuple[SearchResult, ...] = (), title: str = "rlcost plan") -> str:
  """The report as one HTML string (figures inline)."""
  from search._src import report  # pylint: disable=g-import-not-at-top
  step = float(estimate.step_time_s)
  figs = {"timeline": plot.timeline(estimate), "memory per GPU": plot.memory(estimate),
          "stage breakdown": plot.stage_breakdown(estimate)}
  if rules:
    figs["rules of thumb"] = _rules_figure(step, rules)
  parts = [f"<h1>{html.escape(title)}</h1>",
           f"<pre>{html.escape(report.format_job(job, cluster))}</pre>",
           "<h2>plan</h2>", f"<p>{html.escape(export.describe(plan))}</p>",
           _table([(p.name, int(float(p.gpus))) for p in plan.pools], ("pool", "GPUs")),
           _table(_layout_rows(plan), ("role", "phase", "pool", "tp", "pp", "cp", "ep", "vpp",
                                       "micro-batch", "ZeRO", "recompute", "offload")),
           _table([(k, v) for k, v in export.plan_settings(plan)["engine"].items()],
                  ("engine", "value")),
           f"<p>mode: {html.escape(plan.mode.name)}; rollout on pool "
           f"{html.escape(plan.rollout_pool)}</p>",
           "<h2>estimate</h2>", f"<pre>{html.escape(estimate.summary())}</pre>"]
  for name, fig in figs.items():
    if name == "rules of thumb":
      continue
    parts.append(f'<h3>{html.escape(name)}</h3><img alt="{html.escape(name)}" '
                 f'src="{png_data_uri(fig)}">')
  if rules:
    times = [None if r.best_estimate is None else float(r.best_estimate.step_time_s)
             for r in rules]
    rows = [(r.method, "-" if t is None else f"{t:.2f}", "-" if t is None else f"{t / step:.2f}x",
             "no plan fits" if r.best_plan is None else export.describe(r.best_plan))
            for r, t in zip(rules, times, strict=True)]
    parts += ["<h2>rules of thumb</h2>",
              _table(rows, ("rule", "step (s)", "this plan is faster by", "plan")),
              f'<img alt="rules of thumb" src="{png_data_uri(figs["rules of thumb"])}">']
  parts.append("<h2>settings per framework</h2>")
  for fw, (text, reason, changes) in framework_settings.exports(plan, job, cluster).items():
    e = export.get(fw)
    parts.append(f"<h3>{html.escape(e.framework)} <small>({html.escape(e.version)})</small></h3>")
    if changes:  # what the framework forces on this plan, and the code that forces it
      parts.append(f"<p>{html.escape(e.framework)} adapts the plan:</p><ul>" + "".join(
          f"<li>{html.escape(c)}</li>" for c in changes) + "</ul>")
    parts.append(f"<pre>{html.escape(text)}</pre>" if text is not None else
                 f'<p class="refused">cannot run this plan: {html.escape(reason)}</p>')
  style = ("body{font-family:sans-serif;max-width:70em;margin:auto}pre{background:#f4f4f4;"
           "padding:.5em;overflow-x:auto;white-space:pre-wrap}table{border-collapse:collapse;"
           "margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 6px}.refused{color:#a00}"
           "img{max-width:100%}")
  return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>'
          f"{html.escape(title)}</title><style>{style}</style></head><body>\n"
          + "\n".join(parts) + "\n</body></html>\n")


def write(path: str, job: cm.RLJob, cluster: cm.Cluster, plan: cm.Plan, estimate: cm.Estimate,
          rules: tuple[SearchResult, ...] = (), title: str = "rlcost plan") -> None:
  """Writes :func:`render` to ``path``."""
  with open(path, "w", encoding="utf-8") as f:
    f.write(render(job, cluster, plan, estimate, rules, title))
