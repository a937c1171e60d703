"""A plan adapted to a framework, with one line per setting the framework forces.

Each exporter's ``adapt`` sets what its framework fixes for a placement and has
no key for (its weight sync, where it keeps a role's state between stages);
:func:`adapt` applies it, checks that the result is still a valid plan, and
says what changed and why, each reason naming the framework code that forces
it (:attr:`Exporter.forces`). What a framework cannot run at all stays a
refusal of its ``to_config``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import costmodel as cm
from export._src.registry import get

_SYNC = "engine.sync_backend"


def _word(v: Any) -> str:
  """A setting's value as the change line writes it (flags and degrees as integers)."""
  if isinstance(v, str):
    return repr(v)
  f = float(v)
  return str(int(f)) if f.is_integer() else repr(f)


def _layout_changes(before: cm.Plan, after: cm.Plan) -> list[tuple[str, str, Any, Any]]:
  """``(role, setting, old, new)`` for every layout field that differs, both phases."""
  out = []
  for old, new in zip(before.roles, after.roles, strict=True):
    for phase, attr in (("train", "train"), ("infer", "infer_layout")):
      a, b = getattr(old, attr), getattr(new, attr)
      if a is None or b is None or (phase == "infer" and old.infer is None and
                                    new.infer_layout == new.train):
        continue  # no layout, or inference that follows the training layout
      for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if x != y:
          out.append((old.role, f"{old.role}.{phase}.{f.name}", x, y))
  return out


def adapt(framework: str, job: cm.RLJob, plan: cm.Plan, cluster: cm.Cluster,
          **options: Any) -> tuple[cm.Plan, list[str]]:
  """``plan`` as ``framework`` runs it, and one line per setting that changed.

  Each line reads ``"<setting>: <old> -> <new> (<framework> forces it: <source>)"``;
  an already-conforming plan has none. ``options`` are the exporter's (veRL's
  ``strategy``, ...). The adapted plan passes ``costmodel.validate_plan``; its
  estimate is the run's.

  Raises:
    ValueError: an unknown ``framework``, or an invalid plan (``validate_plan``'s
      message, before or after adapting).

  Example:
    >>> plan, changes = adapt("nemo_rl", job, plan, cluster)  # doctest: +SKIP
    >>> changes  # doctest: +SKIP
    ["actor.train.swap: 0 -> 1 (NeMo-RL forces it: ...)"]
  """
  e = get(framework)
  cm.validate_plan(job, plan, cluster)
  adapted = e.adapt(plan, **options)
  cm.validate_plan(job, adapted, cluster)
  lines = []
  for role, setting, old, new in _layout_changes(plan, adapted):
    field = setting.rsplit(".", 1)[1]
    lines.append(_line(e, setting, f"{role}.{field}", old, new))
  if plan.engine.sync_backend != adapted.engine.sync_backend:
    lines.append(_line(e, _SYNC, _SYNC, plan.engine.sync_backend, adapted.engine.sync_backend))
  return adapted, lines


def _line(e, setting: str, key: str, old: Any, new: Any) -> str:
  try:
    source = e.forces[key]
  except KeyError:
    raise ValueError(f"export.adapt: {e.framework} changed {setting} and names no source for "
                     f"{key!r} in its forces table") from None
  return f"{setting}: {_word(old)} -> {_word(new)} ({e.framework} forces it: {source})"
