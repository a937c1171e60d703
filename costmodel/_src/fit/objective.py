"""The calibration objective: weighted robust log errors, batched over parameter sets.

Unconstrained parameters ``z``: ``logit`` of a fraction (so no efficiency
leaves (0, 1)) and ``log`` of a positive quantity (so no overhead turns
negative). One jitted program per source row, vmapped over a batch of
parameter sets that each carry their own case weights, prior weight and Huber
delta, so that the folds and prior weights of a cross-validation are fitted
side by side in one optimisation loop.
"""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from costmodel._src import xla_options
from costmodel._src.fit.validation.cases import Case
from costmodel._src.ops.efficiency import Efficiency

WEIGHTINGS = ("case", "group", "row")
FRACTIONS = ("attention_efficiency", "link_efficiency", "host_efficiency", "dp_overlap",
             "train_efficiency")
# Predictions are floored here before the log; a case whose prediction is not
# finite contributes neither loss nor gradient in that step.
_MIN_PREDICTION = 1e-12


def _to_z(name: str, v):
  v = jnp.asarray(v, float)
  if name in FRACTIONS:
    v = jnp.clip(v, 1e-4, 1 - 1e-4)
    return jnp.log(v) - jnp.log1p(-v)
  return jnp.log(jnp.maximum(v, 1e-12))


def _from_z(name: str, z):
  return jax.nn.sigmoid(z) if name in FRACTIONS else jnp.exp(z)


def _make(eff0: Efficiency, fields: tuple[str, ...], z) -> Efficiency:
  return dataclasses.replace(eff0, **{f: _from_z(f, z[f]) for f in fields})


def _row_program(row: tuple[Case, ...], eff0: Efficiency, fields: tuple[str, ...]):
  """The jitted program of one source row's cases: ``(z, w, delta)`` batched
  over parameter sets to the row's masked loss, gradient and log errors.

  Kept per ``(row, eff0, fields)`` (:func:`_kept_row_program`), so objectives
  over different case lists that share a row (a fit and a check of that
  row, the folds of a validation) trace and compile it once.
  """
  try:
    return _kept_row_program(row, eff0, fields)
  except TypeError:  # an unhashable case or Efficiency (traced fields): not kept
    return _build_row_program(row, eff0, fields)


def _build_row_program(row, eff0, fields):
  log_meas = np.log(np.asarray([c.published for c in row], float))

  def row_loss(z, w, delta):
    eff = _make(eff0, fields, z)
    preds = jnp.stack([jnp.asarray(c.predict(eff), float) for c in row])
    err = jnp.log(jnp.maximum(preds, _MIN_PREDICTION)) - log_meas
    return jnp.sum(w * robust_loss(err, delta)), err

  def row_terms(z, w, delta):
    # A case whose prediction or slope is not finite for one parameter set
    # (an infinite slope where a smooth surrogate meets a hard bound) must
    # not poison the others: its row adds nothing to that set this step.
    (loss, err), grad = jax.value_and_grad(row_loss, has_aux=True)(z, w, delta)
    ok = jnp.isfinite(loss)
    for f in fields:
      ok = ok & jnp.isfinite(grad[f])
    return (jnp.where(ok, loss, 0.0), {f: jnp.where(ok, g, 0.0) for f, g in grad.items()},
            err)

  # A fit runs each program some tens of times on a few parameter sets:
  # compilation dominates, so the options that compile fast. Each program
  # returns its row's masked terms, which are summed on the host: the fit
  # calls the programs hundreds of times, where eager array operations
  # between them took most of its time.
  return jax.jit(jax.vmap(row_terms), compiler_options=xla_options.FAST_COMPILE)


# Bounded: a few hundred source rows, each one small compiled program.
_kept_row_program = functools.lru_cache(maxsize=512)(_build_row_program)


def case_weights(cases: Sequence[Case], weighting: str = "case") -> np.ndarray:
  """Weights of the cases in the loss, summing to one.

  Args:
    cases: The fit cases.
    weighting: ``case`` (every case alike), ``group`` (every group the same
      total, shared by its cases) or ``row`` (every source row the same total).

  Returns:
    A float array, one weight per case.

  Raises:
    ValueError: for an unknown weighting or no cases.
  """
  if weighting not in WEIGHTINGS:
    raise ValueError(f"calibrate: weighting={weighting!r} must be one of {WEIGHTINGS}")
  if not cases:
    raise ValueError("calibrate: fit must hold at least one case")
  if weighting == "case":
    keys = list(range(len(cases)))
  else:
    keys = [c.group if weighting == "group" else c.row_id for c in cases]
  count: dict = {}
  for k in keys:
    count[k] = count.get(k, 0) + 1
  w = np.asarray([1.0 / count[k] for k in keys])
  return w / w.sum()


def robust_loss(err, huber_delta):
  """``err**2`` up to ``|err| = huber_delta``, then ``2 delta |err| - delta**2``.

  Written without a ``where`` so that neither branch's gradient can turn into
  NaN; a large ``huber_delta`` gives the squared error.
  """
  a = jnp.abs(err)
  inner = jnp.minimum(a, huber_delta)
  return inner**2 + 2.0 * huber_delta * (a - inner)


class Objective:
  """The weighted case losses, one jitted and batched program per source row.

  The cases of one run share its estimate, so they form one program; many small
  programs compile far faster than one huge one. Every program is vmapped over
  a batch of parameter sets, each with its own case weights and Huber delta, so
  that the folds and prior weights of a cross-validation run side by side.
  """

  def __init__(self, cases: Sequence[Case], eff0: Efficiency, fields: tuple[str, ...]):
    self.cases, self.eff0, self.fields = list(cases), eff0, fields
    rows: dict[str, list[int]] = {}
    for i, c in enumerate(self.cases):
      rows.setdefault(c.row_id, []).append(i)
    self.index = [np.asarray(idx) for idx in rows.values()]
    self.fns = [_row_program(tuple(self.cases[i] for i in idx), eff0, tuple(fields))
                for idx in self.index]

  def make(self, z) -> Efficiency:
    return _make(self.eff0, self.fields, z)

  def __call__(self, z, weights: np.ndarray, deltas: np.ndarray, with_errors: bool = False):
    """Loss (B,), gradient and log errors (B, cases) of a batch ``z`` (dict of (B,)
    arrays); the log errors of the rows no set weighs are NaN."""
    dtype = jnp.asarray(0.0, float).dtype  # float64 where the fit enables it
    loss = np.zeros(weights.shape[0], dtype)
    grad = {f: np.zeros(np.shape(z[f]), dtype) for f in self.fields}
    errors = np.full(weights.shape, np.nan)
    for fn, idx in zip(self.fns, self.index, strict=True):
      w = weights[:, idx]
      if not w.any():
        continue
      l_r, g_r, err = fn(z, np.asarray(w, dtype), np.asarray(deltas, dtype))
      if with_errors:
        errors[:, idx] = np.asarray(err)
      loss = loss + np.asarray(l_r)
      grad = {f: grad[f] + np.asarray(g_r[f]) for f in self.fields}
    return loss, grad, errors


def fit_batch(objective: Objective, weights: np.ndarray, priors: np.ndarray,
              deltas: np.ndarray, steps: int, learning_rate: float):
  """Adam on B parameter sets at once, each with its own weights and prior.

  Returns:
    ``(z, history)``: the fitted unconstrained parameters (dict of (B,)
    arrays) and the loss of every set at every step, shape (steps, B).
  """
  fields = objective.fields
  n_batch = weights.shape[0]
  z0 = {f: jnp.full((n_batch,), _to_z(f, getattr(objective.eff0, f))) for f in fields}
  priors = jnp.asarray(priors, float)
  opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(learning_rate))
  state = jax.vmap(opt.init)(z0)
  update = jax.jit(jax.vmap(opt.update))

  @jax.jit
  def add_prior(z, loss, grad):
    loss = loss + priors * sum((z[f] - z0[f]) ** 2 for f in fields)
    grad = {f: grad[f] + 2.0 * priors * (z[f] - z0[f]) for f in fields}
    return loss, grad

  z, history = dict(z0), []
  for _ in range(steps):
    loss, grad, _ = objective(z, weights, deltas)
    loss, grad = add_prior(z, loss, grad)
    updates, state = update(grad, state, z)
    z = optax.apply_updates(z, updates)
    history.append(np.asarray(loss))
  return z, np.stack(history) if history else np.zeros((0, n_batch))


