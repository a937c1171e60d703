"""Inputs that a published run leaves out, inferred from one of its stages.

A run whose log gives a stage's time but not its mean response length is
matched on that stage (the anchor): the mean is the one at which the
predicted stage time equals the published one.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from costmodel._src import xla_options
from costmodel._src.ops.efficiency import Efficiency
from costmodel._src.step import algorithms
from costmodel._src.step.estimate import estimate

VERL_STAGES = algorithms.verl_log_stages(colocated=True, times_weight_sync=False)


def sum_stages(est, names) -> jnp.ndarray:
  total = jnp.zeros(())
  parts = est.time_parts_s.sum(-1)
  for n in names:
    if n in est.stage_names:
      total = total + parts[est.stage_names.index(n)]
  return total


# Compiled once per shape of the job (its number of response-length bins),
# with options that compile fast: an inference visits a few shapes and runs
# each a few times (eagerly, each new shape took 5 s; compiled, 2-3 s).
@functools.partial(jax.jit, static_argnames=("names",),
                   compiler_options=xla_options.FAST_COMPILE)
def _stages_s(job, plan, cluster, names: tuple[str, ...]) -> jnp.ndarray:
  return sum_stages(estimate(job, plan, cluster, Efficiency()), names)


def _anchor_stage(run: Run, stage: str) -> float:
  return float(_stages_s(run.job, run.plan, run.cluster, tuple(VERL_STAGES[stage])))


def infer_mean_response(build, anchor_key: str, stage: str, guess: float = 1000.0,
                        tol: float = 0.02, max_calls: int = 40) -> float:
  """The mean response length at which ``anchor_key``'s ``stage`` matches, to
  the nearest token.

  The predicted stage time of the anchor run grows with the mean, nearly in
  proportion: from ``guess`` a proportional step, then secant steps (a
  bisection step when one leaves the bracket found so far; a step of at least
  ``tol / 2``, so the last one crosses the root), until the crossing is
  bracketed within ``tol`` tokens. A mean that changes the length
  distribution's number of bins changes the shape of the compiled model (2-3 s
  a shape); these steps visit two or three such shapes where bisection from
  [100, 8000] visited about ten.

  Raises:
    ValueError: when no crossing is bracketed within ``max_calls`` model calls.
  """
  published = None

  def gap(mean):
    nonlocal published
    run = next(r for r in build(mean) if r.key == anchor_key)
    published = run.stages_s[stage]
    return _anchor_stage(run, stage) - published

  lo, hi = -np.inf, np.inf  # gap(lo) <= 0 < gap(hi)
  x0, f0 = guess, gap(guess)
  x1 = guess * published / (f0 + published)
  f1 = gap(x1)
  for _ in range(max_calls - 2):
    for x, f in ((x0, f0), (x1, f1)):
      if f > 0:
        hi = min(hi, x)
      else:
        lo = max(lo, x)
    if hi - lo <= tol:
      return round(0.5 * (lo + hi))
    x = x1 - f1 * (x1 - x0) / (f1 - f0) if f1 != f0 else 0.5 * (lo + hi)
    if not lo < x < hi:
      x = 0.5 * (lo + hi)
    if abs(x - x1) < 0.5 * tol:
      x = x1 + (0.5 * tol if f1 <= 0 else -0.5 * tol)
    x0, f0, x1, f1 = x1, f1, x, gap(x)
  raise ValueError(f"infer_mean_response: {anchor_key}'s {stage} did not cross its published "
                   f"time within {max_calls} model calls (bracket [{lo:g}, {hi:g}])")
