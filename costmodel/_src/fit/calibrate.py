"""Calibration: fit the efficiency parameters to measured times with optax.

The measurements are :class:`~costmodel._src.fit.validation.cases.Case` objects:
a published or measured value and a function that predicts it from an
:class:`Efficiency` through the same cost model the estimate uses. The fit
minimises the mean squared log error over the fitted cases plus a prior that
keeps each parameter near its default:

    loss = mean_i (log pred_i - log meas_i)^2 + prior * sum_j (z_j - z0_j)^2

where ``z`` is the unconstrained parameter: ``logit`` of a fraction (so no
efficiency leaves (0, 1)) and ``log`` of a positive quantity (so no overhead
turns negative). Held-out cases are predicted before and after the fit.
"""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from costmodel._src.fit.validation.cases import Case
from costmodel._src.fit.validation.report import relative_error
from costmodel._src.ops.efficiency import Efficiency

FRACTIONS = ("attention_efficiency", "link_efficiency", "host_efficiency", "dp_overlap",
             "train_efficiency")
DEFAULT_FIT = ("matmul_half_rows", "attention_efficiency", "memory_half_time_s",
               "link_efficiency", "dp_overlap", "decode_step_overhead_s",
               "generate_overhead_s", "infer_overhead_s", "train_overhead_s",
               "sync_overhead_s", "sync_per_tensor_s", "switch_overhead_s", "train_efficiency",
               "cpu_optimizer_params_per_s", "decode_seq_overhead_s", "decode_rank_overhead_s",
               "eager_layer_overhead_s", "cross_node_step_overhead_s", "sync_per_bucket_s",
               "sync_export_bytes_per_s", "batch_transfer_bytes_per_s", "train_call_overhead_s")


def _to_z(name: str, v):
  v = jnp.asarray(v, float)
  if name in FRACTIONS:
    v = jnp.clip(v, 1e-4, 1 - 1e-4)
    return jnp.log(v) - jnp.log1p(-v)
  return jnp.log(jnp.maximum(v, 1e-12))


def _from_z(name: str, z):
  return jax.nn.sigmoid(z) if name in FRACTIONS else jnp.exp(z)


class CaseError(NamedTuple):
  row_id: str
  group: str
  label: str
  published: float
  before: float
  after: float
  fitted: bool

  @property
  def error_before(self) -> float:
    return relative_error(self.before, self.published)

  @property
  def error_after(self) -> float:
    return relative_error(self.after, self.published)


@dataclasses.dataclass(frozen=True)
class CalibrationResult:
  """Fitted parameters and the error report.

  Attributes:
    efficiency: The fitted :class:`Efficiency`.
    initial: The starting parameters.
    rows: Per-case errors before and after, fitted or held out.
    loss_history: The loss at each optimisation step.
  """

  efficiency: Efficiency
  initial: Efficiency
  rows: tuple[CaseError, ...]
  loss_history: np.ndarray

  def summary_table(self) -> list[dict]:
    """Median and worst absolute error per (part, group), before and after."""
    out = []
    for part in ("fit", "held-out"):
      sel = [r for r in self.rows if r.fitted == (part == "fit")]
      for group in sorted({r.group for r in sel}):
        g = [r for r in sel if r.group == group]
        b = np.abs([r.error_before for r in g])
        a = np.abs([r.error_after for r in g])
        out.append({"part": part, "group": group, "n": len(g),
                    "median_before": float(np.median(b)), "worst_before": float(b.max()),
                    "median_after": float(np.median(a)), "worst_after": float(a.max())})
    return out

  def __str__(self) -> str:
    lines = [f"{'part':<9}{'group':<12}{'n':>3}{'median before':>15}{'worst before':>14}"
             f"{'median after':>14}{'worst after':>13}"]
    for s in self.summary_table():
      lines.append(f"{s['part']:<9}{s['group']:<12}{s['n']:>3}{s['median_before']:>15.1%}"
                   f"{s['worst_before']:>14.1%}{s['median_after']:>14.1%}"
                   f"{s['worst_after']:>13.1%}")
    return "\n".join(lines)


def split_cases(cases: Sequence[Case], holdout_fraction: float = 0.3, seed: int = 0):
  """A seeded split into (fit, held_out), stratified by group."""
  if not 0.0 <= holdout_fraction < 1.0:
    raise ValueError(f"holdout_fraction={holdout_fraction} must lie in [0, 1)")
  rng = np.random.default_rng(seed)
  fit, held = [], []
  for group in sorted({c.group for c in cases}):
    g = [c for c in cases if c.group == group]
    idx = rng.permutation(len(g))
    n_held = int(round(holdout_fraction * len(g)))
    if len(g) - n_held < 1:
      n_held = len(g) - 1
    held += [g[i] for i in idx[:n_held]]
    fit += [g[i] for i in idx[n_held:]]
  return fit, held


def calibrate(fit: Sequence[Case], held_out: Sequence[Case] = (),
              efficiency: Efficiency | None = None, fields: Sequence[str] = DEFAULT_FIT,
              steps: int = 300, learning_rate: float = 0.05,
              prior: float = 0.01) -> CalibrationResult:
  """Fits ``fields`` of the efficiency parameters to the ``fit`` cases.

  Args:
    fit: Cases to fit.
    held_out: Cases only reported, before and after.
    efficiency: Starting parameters (defaults if None).
    fields: Names of the :class:`Efficiency` fields to fit.
    steps: Adam steps.
    learning_rate: Adam learning rate (on the unconstrained parameters).
    prior: Weight of the pull towards the starting values.

  Returns:
    A :class:`CalibrationResult`.

  Raises:
    ValueError: for no fit cases, an unknown field, or a non-positive
      published value.
  """
  if not fit:
    raise ValueError("calibrate: fit must hold at least one case")
  eff0 = efficiency if efficiency is not None else Efficiency()
  known = {f.name for f in dataclasses.fields(Efficiency)}
  for f in fields:
    if f not in known:
      raise ValueError(f"calibrate: field={f!r} is not an Efficiency field ({sorted(known)})")
  for c in list(fit) + list(held_out):
    if not np.isfinite(c.published) or c.published <= 0:
      raise ValueError(f"calibrate: case {c.row_id} published={c.published} must be > 0")
  fields = tuple(fields)
  z0 = {f: _to_z(f, getattr(eff0, f)) for f in fields}
  targets = jnp.log(jnp.asarray([c.published for c in fit], float))

  def make(z):
    return dataclasses.replace(eff0, **{f: _from_z(f, z[f]) for f in fields})

  # One jitted loss per source row (the cases of one run share its estimate),
  # summed in Python: many small programs compile far faster than one huge one.
  groups: dict[str, list[int]] = {}
  for i, c in enumerate(fit):
    groups.setdefault(c.row_id, []).append(i)
  n_fit = float(len(fit))

  def group_loss(z, idx):
    eff = make(z)
    preds = jnp.stack([jnp.asarray(fit[i].predict(eff), float) for i in idx])
    err = jnp.log(jnp.maximum(preds, 1e-12)) - targets[jnp.asarray(idx)]
    return jnp.sum(err**2) / n_fit

  group_fns = [jax.jit(jax.value_and_grad(lambda z, idx=tuple(idx): group_loss(z, list(idx))))
               for idx in groups.values()]
  prior_fn = jax.jit(jax.value_and_grad(
      lambda z: prior * sum(jnp.sum((z[f] - z0[f]) ** 2) for f in fields)))

  opt = optax.chain(optax.zero_nans(), optax.clip_by_global_norm(1.0),
                    optax.adam(learning_rate))

  def step(z, state):
    loss, grad = prior_fn(z)
    for fn in group_fns:
      l_g, g_g = fn(z)
      loss = loss + l_g
      grad = jax.tree_util.tree_map(jnp.add, grad, g_g)
    # A non-finite gradient of one case (an infinite slope where a smooth
    # surrogate meets a hard bound) must not poison the others' update.
    grad = jax.tree_util.tree_map(lambda g: jnp.where(jnp.isfinite(g), g, 0.0), grad)
    updates, state = opt.update(grad, state, z)
    return optax.apply_updates(z, updates), state, loss

  z = dict(z0)
  state = opt.init(z)
  history = []
  for _ in range(steps):
    z, state, loss = step(z, state)
    history.append(float(loss))
  fitted = make(z)
  rows = []
  for c, is_fit in [(c, True) for c in fit] + [(c, False) for c in held_out]:
    rows.append(CaseError(c.row_id, c.group, c.label, float(c.published),
                          float(c.predict(eff0)), float(c.predict(fitted)), is_fit))
  fitted = dataclasses.replace(fitted, **{f: float(getattr(fitted, f)) for f in fields})
  return CalibrationResult(fitted, eff0, tuple(rows), np.asarray(history))
