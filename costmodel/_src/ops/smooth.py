"""Discrete operations with smooth surrogates.

Every discrete step of the cost model (a maximum, a ceiling, a clamp) goes
through one of these functions. ``tau`` is the temperature: ``tau == 0`` gives
the exact operation, ``tau > 0`` a smooth surrogate whose gradient is finite
everywhere and which tends to the exact operation as ``tau -> 0``. The exact and
the relaxed model are therefore the same code; only ``tau`` differs.

``tau`` is relative: surrogates act on the logarithm of positive quantities, so
one temperature serves seconds and bytes alike.

Each function computes the branch ``tau`` selects. When ``tau``'s sign is
known while tracing (a Python number or a concrete array, or a traced ``tau``
inside :func:`positive_tau`) only that branch is traced; otherwise both are,
and ``jnp.where`` selects. The values are the same either way; the traced
graph of the exact model (``tau = 0``) and of the search's relaxed loop is
about half the size, which halves its compilation.
"""

from __future__ import annotations

import contextlib
import contextvars

import jax
import jax.numpy as jnp
import numpy as np

_TINY = 1e-30

_POSITIVE = contextvars.ContextVar("positive_tau", default=False)


@contextlib.contextmanager
def positive_tau():
  """Within this context a traced ``tau`` is taken to be > 0.

  For code that traces the relaxed model at temperatures it knows to be
  positive (the search's annealed ``tau``): the smooth surrogates are traced
  without their exact branch, which they would not select. Enter it inside
  the function that is traced (``jax.jit`` caches a trace by function and
  arguments, not by this context); it holds for the calling thread. A traced
  ``tau`` of 0 inside the context gets the surrogates' values at a
  temperature of 0 (NaN).

  >>> import jax
  >>> from costmodel import internal as cmi
  >>> def relaxed_max(t):
  ...   with cmi.positive_tau():
  ...     return smax(1.0, 2.0, t)
  >>> round(float(jax.jit(relaxed_max)(0.01)), 4)
  2.0
  """
  token = _POSITIVE.set(True)
  try:
    yield
  finally:
    _POSITIVE.reset(token)


def known_positive(tau) -> bool | None:
  """Whether ``tau > 0`` is known while tracing.

  Returns:
    True or False for a concrete scalar ``tau``, True for a traced scalar
    ``tau`` inside :func:`positive_tau`, else None (both branches are traced
    and ``jnp.where`` selects; that also keeps the shape a ``tau`` array
    broadcasts to).
  """
  if np.ndim(tau) != 0:
    return None
  if isinstance(tau, jax.core.Tracer):
    return True if _POSITIVE.get() else None
  return bool(np.asarray(tau) > 0)


def _t_safe(tau, dtype):
  """``tau`` where positive, else 1 (a harmless temperature for the branch
  that is not selected)."""
  t = jnp.asarray(tau, dtype=dtype)
  return t if known_positive(tau) else jnp.where(t > 0, t, 1.0)


def _width(tau, scale, dtype):
  """The surrogate's width ``tau * scale`` (1 where tau is not positive), at
  least tiny."""
  w = jnp.asarray(tau, dtype) * jnp.asarray(scale, dtype)
  if not known_positive(tau):
    w = jnp.where(jnp.asarray(tau) > 0, w, 1.0)
  return jnp.maximum(w, _TINY)


def _select(tau, soft, hard):
  """``where(tau > 0, soft(), hard())``, tracing only the known branch.

  A traced scalar ``tau`` of unknown sign runs the branch it selects
  (``lax.cond``), never both: a ``jnp.where`` over both branches gave NaN
  gradients once XLA's algebraic simplifier had rewritten the branch not
  taken (the relaxed step's gradient with a traced ``tau``,
  tests/test_jax_properties.py). A ``tau`` array selects element-wise.
  """
  on = known_positive(tau)
  if on is None:
    if np.ndim(tau) == 0:
      return jax.lax.cond(jnp.asarray(tau) > 0, soft, hard)
    return jnp.where(jnp.asarray(tau) > 0, soft(), hard())
  return soft() if on else hard()


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

  def soft():
    t_safe = _t_safe(tau, a.dtype)
    la = safe_log(a) / t_safe
    lb = safe_log(b) / t_safe
    return jnp.exp(t_safe * jnp.logaddexp(la, lb))

  return _select(tau, soft, lambda: jnp.maximum(a, b))


def smax_n(xs: jax.Array, tau: jax.Array | float = 0.0, axis: int = -1) -> jax.Array:
  """Maximum over ``axis`` of non-negative values; p-norm surrogate when tau > 0."""
  xs = jnp.asarray(xs, dtype=jnp.result_type(xs, float))

  def soft():
    t_safe = _t_safe(tau, xs.dtype)
    return jnp.exp(t_safe * jax.nn.logsumexp(safe_log(xs) / t_safe, axis=axis))

  return _select(tau, soft, lambda: jnp.max(xs, axis=axis))


def smin(a: jax.Array, b: jax.Array, tau: jax.Array | float = 0.0) -> jax.Array:
  """Minimum of two positive quantities; harmonic p-norm surrogate when tau > 0."""
  a = jnp.asarray(a, dtype=jnp.result_type(a, b, float))
  b = jnp.asarray(b, dtype=a.dtype)

  def soft():
    t_safe = _t_safe(tau, a.dtype)
    la = -safe_log(a) / t_safe
    lb = -safe_log(b) / t_safe
    return jnp.exp(-t_safe * jnp.logaddexp(la, lb))

  return _select(tau, soft, lambda: jnp.minimum(a, b))


def relu(x: jax.Array, scale: jax.Array | float, tau: jax.Array | float = 0.0) -> jax.Array:
  """``max(x, 0)``; softplus with width ``tau * scale`` when tau > 0."""
  x = jnp.asarray(x, dtype=jnp.result_type(x, float))

  def soft():
    # Double where: at tau == 0 the unused branch gets a harmless width, so
    # its gradient (with respect to x or scale) cannot turn into NaN.
    w = _width(tau, scale, x.dtype)
    xs = x if known_positive(tau) else jnp.where(jnp.asarray(tau) > 0, x, 0.0)
    return w * jax.nn.softplus(xs / w)

  return _select(tau, soft, lambda: jnp.maximum(x, 0.0))


def relu_flat(x: jax.Array, scale: jax.Array | float, tau: jax.Array | float = 0.0) -> jax.Array:
  """``max(x, 0)``; when tau > 0 a surrogate that stays exactly 0 for x <= 0.

  For a penalty that must vanish where its constraint holds (a plan that fits
  has no memory excess at any temperature): ``x^2 / (2 w)`` up to the width
  ``w = tau * scale``, then ``x - w / 2``. Value and gradient are continuous,
  the gradient finite everywhere.
  """
  x = jnp.asarray(x, dtype=jnp.result_type(x, float))
  pos = jnp.maximum(x, 0.0)

  def soft():
    w = _width(tau, scale, x.dtype)
    return jnp.where(pos < w, 0.5 * pos**2 / w, pos - 0.5 * w)

  return _select(tau, soft, lambda: pos)


def ceil(x: jax.Array, tau: jax.Array | float = 0.0) -> jax.Array:
  """``ceil(x)`` for x > 0; in relaxed mode ``max(x, 1)`` smoothed.

  The relaxed surrogate keeps the continuous value: rounding up is left to the
  rounding step of the search, which evaluates the exact model.
  """
  x = jnp.asarray(x, dtype=jnp.result_type(x, float))
  return _select(tau, lambda: smax(x, jnp.ones_like(x), tau), lambda: jnp.ceil(x - 1e-9))


def at_least_one(x: jax.Array, tau: jax.Array | float = 0.0) -> jax.Array:
  """``max(x, 1)`` with the smooth surrogate when tau > 0."""
  return smax(x, jnp.ones_like(jnp.asarray(x, dtype=jnp.result_type(x, float))), tau)
