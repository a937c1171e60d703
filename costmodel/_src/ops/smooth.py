"""Discrete operations with smooth surrogates.

Every discrete step of the cost model (a maximum, a ceiling, a clamp) goes
through one of these functions. ``tau`` is the temperature: ``tau == 0`` gives
the exact operation, ``tau > 0`` a smooth surrogate whose gradient is finite
everywhere and which tends to the exact operation as ``tau -> 0``. The exact and
the relaxed model are therefore the same code; only ``tau`` differs.

``tau`` is relative: surrogates act on the logarithm of positive quantities, so
one temperature serves seconds and bytes alike.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

_TINY = 1e-30


def safe_div(num: jax.Array, den: jax.Array) -> jax.Array:
  """``num / den`` with 0 where ``den == 0`` and finite gradients (double where)."""
  ok = den != 0
  safe_den = jnp.where(ok, den, 1.0)
  return jnp.where(ok, num / safe_den, 0.0)


def safe_log(x: jax.Array) -> jax.Array:
  """``log(max(x, tiny))`` whose gradient stays finite at 0."""
  return jnp.log(jnp.maximum(x, _TINY))


def smax(a: jax.Array, b: jax.Array, tau: jax.Array | float = 0.0) -> jax.Array:
  """Maximum of two non-negative quantities; log-sum-exp in log space when tau > 0.

  The surrogate is ``(a^(1/tau) + b^(1/tau))^tau``, a p-norm with p = 1/tau,
  which is >= max(a, b) and at most 2^tau times larger.
  """
  a = jnp.asarray(a, dtype=jnp.result_type(a, b, float))
  b = jnp.asarray(b, dtype=a.dtype)
  hard = jnp.maximum(a, b)
  t = jnp.asarray(tau, dtype=a.dtype)
  t_safe = jnp.where(t > 0, t, 1.0)
  la = safe_log(a) / t_safe
  lb = safe_log(b) / t_safe
  soft = jnp.exp(t_safe * jnp.logaddexp(la, lb))
  return jnp.where(t > 0, soft, hard)


def smax_n(xs: jax.Array, tau: jax.Array | float = 0.0, axis: int = -1) -> jax.Array:
  """Maximum over ``axis`` of non-negative values; p-norm surrogate when tau > 0."""
  xs = jnp.asarray(xs, dtype=jnp.result_type(xs, float))
  hard = jnp.max(xs, axis=axis)
  t = jnp.asarray(tau, dtype=xs.dtype)
  t_safe = jnp.where(t > 0, t, 1.0)
  soft = jnp.exp(t_safe * jax.nn.logsumexp(safe_log(xs) / t_safe, axis=axis))
  return jnp.where(t > 0, soft, hard)


def smin(a: jax.Array, b: jax.Array, tau: jax.Array | float = 0.0) -> jax.Array:
  """Minimum of two positive quantities; harmonic p-norm surrogate when tau > 0."""
  a = jnp.asarray(a, dtype=jnp.result_type(a, b, float))
  b = jnp.asarray(b, dtype=a.dtype)
  hard = jnp.minimum(a, b)
  t = jnp.asarray(tau, dtype=a.dtype)
  t_safe = jnp.where(t > 0, t, 1.0)
  la = -safe_log(a) / t_safe
  lb = -safe_log(b) / t_safe
  soft = jnp.exp(-t_safe * jnp.logaddexp(la, lb))
  return jnp.where(t > 0, soft, hard)


def _width(x, scale, tau):
  """``(x as a float array, tau > 0, the surrogate's width tau * scale)``.

  Double where: at tau == 0 the unused branch gets a harmless width, so its
  gradient (with respect to x or scale) cannot turn into NaN.
  """
  x = jnp.asarray(x, dtype=jnp.result_type(x, float))
  on = jnp.asarray(tau) > 0
  w = jnp.where(on, jnp.asarray(tau, x.dtype) * jnp.asarray(scale, x.dtype), 1.0)
  return x, on, jnp.maximum(w, _TINY)


def relu(x: jax.Array, scale: jax.Array | float, tau: jax.Array | float = 0.0) -> jax.Array:
  """``max(x, 0)``; softplus with width ``tau * scale`` when tau > 0."""
  x, on, w = _width(x, scale, tau)
  soft = w * jax.nn.softplus(jnp.where(on, x, 0.0) / w)
  return jnp.where(on, soft, jnp.maximum(x, 0.0))


def relu_flat(x: jax.Array, scale: jax.Array | float, tau: jax.Array | float = 0.0) -> jax.Array:
  """``max(x, 0)``; when tau > 0 a surrogate that stays exactly 0 for x <= 0.

  For a penalty that must vanish where its constraint holds (a plan that fits
  has no memory excess at any temperature): ``x^2 / (2 w)`` up to the width
  ``w = tau * scale``, then ``x - w / 2``. Value and gradient are continuous,
  the gradient finite everywhere.
  """
  x, on, w = _width(x, scale, tau)
  pos = jnp.maximum(x, 0.0)
  soft = jnp.where(pos < w, 0.5 * pos**2 / w, pos - 0.5 * w)
  return jnp.where(on, soft, pos)


def ceil(x: jax.Array, tau: jax.Array | float = 0.0) -> jax.Array:
  """``ceil(x)`` for x > 0; in relaxed mode ``max(x, 1)`` smoothed.

  The relaxed surrogate keeps the continuous value: rounding up is left to the
  rounding step of the search, which evaluates the exact model.
  """
  x = jnp.asarray(x, dtype=jnp.result_type(x, float))
  soft = smax(x, jnp.ones_like(x), tau)
  return jnp.where(jnp.asarray(tau) > 0, soft, jnp.ceil(x - 1e-9))


def at_least_one(x: jax.Array, tau: jax.Array | float = 0.0) -> jax.Array:
  """``max(x, 1)`` with the smooth surrogate when tau > 0."""
  return smax(x, jnp.ones_like(jnp.asarray(x, dtype=jnp.result_type(x, float))), tau)
