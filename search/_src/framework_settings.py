"""The settings each framework would run for a plan, and what changes between two plans.

No flags here: the command lines (:mod:`search._src.cli`) and the HTML report use it.
"""

from __future__ import annotations

from typing import Any

import costmodel as cm
import export


def export_options(framework: str, plan: cm.Plan) -> dict[str, Any]:
  """The options a command-line export uses (the framework's record: its training backend,
  trainer or engine defaults for ``plan``)."""
  return export.record(framework).run_options(plan)


def exports(plan: cm.Plan, job: cm.RLJob, cluster: cm.Cluster,
            frameworks=export.FRAMEWORKS) -> dict[str, tuple[str | None, str | None, list[str]]]:
  """``{framework: (text, None, changes)}`` where it exports (``changes``: one line per
  setting :func:`export.adapt` changed, with the framework code that forces it),
  ``(None, reason, [])`` where it refuses."""
  out = {}
  for fw in frameworks:
    e = export.get(fw)
    opts = export_options(fw, plan)
    try:
      adapted, changes = export.adapt(fw, job, plan, cluster, **opts)
      out[fw] = (e.export(adapted, job, cluster, **opts), None, changes)
    except ValueError as err:
      out[fw] = (None, str(err), [])
  return out


# ----- a diff of settings --------------------------------------------------------------------


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
  if isinstance(d, dict):
    out = {}
    for k, v in d.items():
      out.update(_flat(v, f"{prefix}{k}."))
    return out
  return {prefix[:-1]: d}


def _as_run_keeps_them(framework: str, a: dict, b: dict, run: dict | None, job: cm.RLJob
                       ) -> None:
  """``a`` and ``b`` (settings of the current and the new plan) in the keys the run keeps
  (the framework record's ``run_keeps``: veRL's dynamic batch keeps token budgets)."""
  keeps = export.record(framework).run_keeps
  if keeps is not None and run:
    keeps(a, b, run, job)


def settings_diff(framework: str, current: cm.Plan, new: cm.Plan, job: cm.RLJob,
                  cluster: cm.Cluster, run_settings: dict | None = None) -> list[str]:
  """What to change in ``framework``'s settings to run ``new`` instead of ``current``:
  ``key: old -> new`` lines, or, where the framework cannot run ``new``, its reason and the
  plan's own settings that change. With ``run_settings`` (the run's own, as imported),
  the changes are in the keys the run keeps (veRL's dynamic batch: token budgets, not
  micro-batches it would ignore)."""
  e = export.get(framework)

  def settings(plan):
    opts = export_options(framework, plan)
    cfg = e.to_config(e.adapt(plan, **opts), job, cluster, **opts)
    if isinstance(cfg, list):  # an argv: --flag [value]
      out, i = {}, 0
      while i < len(cfg):
        value = cfg[i + 1] if i + 1 < len(cfg) and not cfg[i + 1].startswith("--") else True
        out[cfg[i]] = value
        i += 1 if value is True else 2
      return out
    return _flat(cfg)

  try:
    a, b = settings(current), settings(new)
    _as_run_keeps_them(framework, a, b, run_settings, job)
    note = []
  except ValueError as err:
    a = _flat(export.plan_settings(current))
    b = _flat(export.plan_settings(new))
    note = [f"  ({e.framework} cannot run it: {err}; the plan's settings:)"]
  lines = [f"  {k}: {a.get(k, '(unset)')} -> {b.get(k, '(unset)')}"
           for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
  return note + (lines or ["  (same settings)"])


def format_better(framework: str, current: cm.Plan, current_step_s: float, result: Any,
                  job: cm.RLJob, cluster: cm.Cluster, run_settings: dict | None = None) -> str:
  """The searched plans faster than the current run, each as a diff of settings
  (:func:`settings_diff`)."""
  name = export.get(framework).framework
  lines = [f"current {name} run: step {current_step_s:.2f} s  ({export.describe(current)})"]
  better = [(p, e, f) for (p, e), f in zip(result.top, result.top_families, strict=True)
            if float(e.step_time_s) < current_step_s]
  if not better:
    lines.append("no searched plan is faster than the current run")
  for i, (plan, est, family) in enumerate(better, 1):
    t = float(est.step_time_s)
    lines.append(f"better #{i}: step {t:.2f} s ({current_step_s / t:.2f}x faster, {family}); "
                 f"change:")
    lines += settings_diff(framework, current, plan, job, cluster, run_settings)
  return "\n".join(lines)
