"""The relaxed parameters of a family: bounds, random starts, the map onto
continuous values, and rounding back onto the options."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from search._src.space_options import CAT
from search._src.space_options import FRAC
from search._src.space_options import LAYOUT_ROLES
from search._src.space_options import LOG2
from search._src.space_options import POOL
from search._src.space_options import nearest_option


class FamilyRelaxed:
  """Relaxed variables of a :class:`search._src.space.FamilySpace` (its
  ``structure``, ``vars``, ``cluster`` and ``index``)."""

  def relaxed_bounds(self, cats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Box bounds of the relaxed parameters for starts whose categorical
    values are ``cats`` ([starts, V], only categorical columns read)."""
    s = cats.shape[0]
    lo = np.zeros((s, len(self.vars)))
    hi = np.zeros((s, len(self.vars)))
    for j, var in enumerate(self.vars):
      if var.kind == LOG2:
        lo[:, j], hi[:, j] = np.log2(var.options[0]), np.log2(var.options[-1])
      elif var.kind == FRAC:
        if len(var.options) > 1:
          lo[:, j], hi[:, j] = -4.0, 4.0
      elif var.kind == POOL:
        if len(self.structure.pools) > 1:
          lo[:, j], hi[:, j] = -8.0, 8.0
      else:
        lo[:, j] = hi[:, j] = cats[:, j]
    for role in LAYOUT_ROLES:
      if role in self.structure.roles:
        zero3 = cats[:, self.index(f"{role}.zero")] == 3
        for d in ("tp", "pp", "ep"):
          hi[zero3, self.index(f"{role}.{d}")] = 0.0
    return lo, hi

  def init_relaxed(self, rng: np.random.Generator, starts: int) -> tuple[np.ndarray, ...]:
    """Random starts: relaxed parameters ``x0`` and their bounds ``lo, hi``.

    Log2 variables are uniform in their range, pool shares Dirichlet(1), the
    memory fraction uniform in logit space and categorical values uniform over
    their options.
    """
    v = len(self.vars)
    cats = np.zeros((starts, v))
    for j, var in enumerate(self.vars):
      if var.kind == CAT:
        cats[:, j] = rng.choice(var.options, size=starts)
    lo, hi = self.relaxed_bounds(cats)
    x0 = lo + (hi - lo) * rng.uniform(size=(starts, v))
    pool_idx = [self.index(f"pool.{p}") for p in self.structure.pools]
    if len(pool_idx) > 1:
      shares = rng.dirichlet(np.ones(len(pool_idx)), size=starts)
      x0[:, pool_idx] = np.log(np.maximum(shares, 1e-3))
    for j, var in enumerate(self.vars):
      if var.kind == FRAC and len(var.options) > 1:
        x0[:, j] = rng.uniform(-2.0, 2.0, size=starts)
      elif var.kind == CAT:
        x0[:, j] = cats[:, j]
    return x0, lo, hi

  def relaxed_values(self, x: jax.Array, cluster_gpus) -> jax.Array:
    """Relaxed parameters [V] -> continuous values [V] (traceable), the pools
    sharing the cluster's ``cluster_gpus`` (a number or a traced scalar)."""
    out = []
    pool_idx = [self.index(f"pool.{p}") for p in self.structure.pools]
    # Every pool holds at least one GPU; the softmax shares the rest.
    n_pools = len(pool_idx)
    shares = 1.0 + jax.nn.softmax(x[jnp.asarray(pool_idx)]) * (
        jnp.asarray(cluster_gpus, x.dtype) - n_pools)
    for j, var in enumerate(self.vars):
      if var.kind == LOG2:
        out.append(jnp.exp2(x[j]))
      elif var.kind == FRAC:
        a, b = float(var.options[0]), float(var.options[-1])
        out.append(a + (b - a) * jax.nn.sigmoid(x[j]) if b > a else jnp.full((), a, x.dtype))
      elif var.kind == POOL:
        out.append(shares[pool_idx.index(j)])
      else:
        out.append(x[j])
    return jnp.stack(out)

  def nearest(self, values: np.ndarray) -> np.ndarray:
    """Each value rounded to its nearest option (log scale for degrees)."""
    out = np.empty_like(values, dtype=np.float64)
    for j, var in enumerate(self.vars):
      out[..., j] = nearest_option(values[..., j], var)
    return out

  def bracket(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Neighbouring options below and above each value, and the weight of the
    upper one (linear in log2 for degrees and pools)."""
    lo = np.empty_like(values, dtype=np.float64)
    hi = np.empty_like(values, dtype=np.float64)
    w = np.zeros_like(values, dtype=np.float64)
    for j, var in enumerate(self.vars):
      opts = var.options
      x = values[..., j]
      log = var.kind in (LOG2, POOL)
      ox = np.log2(opts) if log else opts
      xx = np.log2(np.maximum(x, 1e-9)) if log else x
      k = np.clip(np.searchsorted(ox, xx, side="right") - 1, 0, len(opts) - 1)
      k2 = np.minimum(k + 1, len(opts) - 1)
      lo[..., j], hi[..., j] = opts[k], opts[k2]
      span = ox[k2] - ox[k]
      w[..., j] = np.where(span > 0, np.clip((xx - ox[k]) / np.where(span > 0, span, 1), 0, 1),
                           0.0)
    return lo, hi, w
